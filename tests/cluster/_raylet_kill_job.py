"""The job of tests/cluster/test_raylet_kill.py: a step loop without JAX (cheap on 2 cores).

    entry point: tests/cluster/_raylet_kill_job.py BEATS_DIR

Every step it logs a progress record (``ctx.log_progress``: fenced, a superseded launch
logs none), and appends an unfenced heartbeat ``{"attempt", "pid", "t", "step"}`` to
``BEATS_DIR/beats.jsonl``: the heartbeats tell when a launch's process really ran, the
fence notwithstanding. Like a job with data-loader workers it starts a child process
(which idles until it is killed or its parent ends the job). It writes
``BEATS_DIR/pid-ATTEMPT`` (``{"pid", "child"}``) once, and returns (finished) once
``BEATS_DIR/done`` exists.
"""

import json
import os
import subprocess
import sys
import time

from goodput_jax.cluster import job_context

ctx = job_context()
beats = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.5)"])
with open(os.path.join(beats, f"pid-{ctx.attempt}"), "w") as fh:
    json.dump({"pid": os.getpid(), "child": child.pid}, fh)
step = 0
while not os.path.exists(os.path.join(beats, "done")):
    ctx.log_progress(event="step", step=step, pid=os.getpid())
    with open(os.path.join(beats, "beats.jsonl"), "a") as fh:
        fh.write(json.dumps({"attempt": ctx.attempt, "pid": os.getpid(), "t": time.time(),
                             "step": step}) + "\n")
    step += 1
    time.sleep(0.05)
child.kill()
child.wait()
print(f"done after {step} steps", flush=True)
