"""One process of a real 2-process JAX job (jax.distributed on 127.0.0.1, CPU) that records.

Used by tests/measure/test_multihost.py:
    python -m tests.measure._multihost_worker PID PORT STORE FIRST LAST DIE_AT [SLOW_S]

Process 0 draws the launch's run id and broadcasts it (a real cross-process collective);
every process records with it and its process index as host. Each step runs a jitted
step and a barrier (sync_global_devices). Process 1 kills itself with SIGKILL right
after recording step DIE_AT (-1: never). With SLOW_S > 0, both meet at a barrier before the
first step and process 1 is a straggler: it sleeps SLOW_S before each step's start (a slow
input pipeline), so process 0 waits for it in every step's barrier; each process then times
its own waits in the per-step barriers (perf_counter, no goodput_jax) and prints
``waited <seconds>``: process 0's waits minus process 1's are the time lost to process 1.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def main() -> None:
    pid, port, store, first, last, die_at = sys.argv[1:7]
    pid, first, last, die_at = int(pid), int(first), int(last), int(die_at)
    slow = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=pid)
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils

    from goodput_jax import goodput

    seed = int.from_bytes(os.urandom(4), "little") if pid == 0 else 0
    run = int(multihost_utils.broadcast_one_to_all(np.int64(seed)))
    # every process records (the alternative to Google's process-0-only convention)
    rec = goodput.GoodputRecorder("multihost", "goodput_multihost", True, store=store,
                                  run_id=f"launch-{run}", host=jax.process_index(),
                                  synchronous=True)
    rec.record_job_start_time()
    step_fn = jax.jit(lambda x: jnp.tanh(x) * 0.5)
    x = jnp.ones((8,))
    if slow > 0:
        x = step_fn(x).block_until_ready()  # compiled before the steps
        multihost_utils.sync_global_devices("first-step")
    waited = 0.0
    for step in range(first, last):
        if pid == 1 and slow > 0:
            time.sleep(slow)  # this host's own work for the step takes longer
        rec.record_step_start_time(step)
        x = step_fn(x).block_until_ready()
        if pid == 1 and step == die_at:
            os.kill(os.getpid(), signal.SIGKILL)  # the host really dies
        t = time.perf_counter()
        multihost_utils.sync_global_devices(f"step-{step}")
        waited += time.perf_counter() - t
    rec.record_job_end_time()
    rec.close()
    print(f"waited {waited!r}", flush=True)
    print("done", flush=True)
    os._exit(0)  # skip jax.distributed's shutdown barrier


if __name__ == "__main__":
    main()
