"""A short script that uses GoodputHooks exits cleanly (issue 27, part 4).

The hooks compile the step-time fit in the background and may refit on a worker
thread. An interpreter that exits while XLA compiles on a daemon thread aborts
("terminate called after throwing an instance of ''", status 134 or 139), so each
case runs a real script in a fresh process and checks its exit status and that
its stderr is empty. On the code before the fix the ``idle`` script aborted in 3
of 3 runs (it ends 0.3 s after the hooks start, inside the ~2 s compile) and the
``refit`` one in 1 of 3. Each run costs a process start (~1 s of imports) and the
rest of the compile (~2 s) that the exit now waits for.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_HEAD = """
import time
import warnings
# these steps hand over no gradient statistics, which the hooks say once (on stderr)
warnings.filterwarnings("ignore", message=".*no gradient statistics")
import jax
import jax.numpy as jnp
from goodput_jax.integrations.hooks import GoodputHooks
"""

SCRIPTS = {
    # ten lines as a user writes them: a jitted step, a few steps, some other work, exit
    "idle": _HEAD + """
hooks = GoodputHooks("short", init_batch_size=8, store=STORE)
step = jax.jit(lambda x: x * 2.0 + 1.0)
x = jnp.ones(16)
for i in range(3):
    x = hooks.step(i, step, x)
hooks.flush()
time.sleep(0.3)  # the script's other work: the exit falls inside the fit's compile
print("ok", float(x[0]))
""",
    # a background refit (a real fit on a worker thread) still running at exit, no close()
    "refit": _HEAD + """
from goodput_jax.model.types import GradParams
hooks = GoodputHooks("short", init_batch_size=8, num_replicas=1, store=STORE,
                     refit_interval=0.0, warmup_steps=0, job_warmup_steps=0, background=True)
for b in (2 ** k for k in range(3, 20)):  # 17 configurations: a fit of a new length
    hooks.set_config(atomic_bsz=b)
    for _ in range(3):
        hooks.observe_step_time(0.01 + b * 1e-5)
hooks.update_grad_params(GradParams(1.0, 4.0))
print("ok", hooks.maybe_refit())
""",
}


def _run(tmp_path: Path, kind: str, n: int) -> subprocess.CompletedProcess:
    store = f"sqlite:///{tmp_path / f'g{n}.db'}"
    script = tmp_path / f"{kind}{n}.py"
    script.write_text(f"STORE = {store!r}\n" + textwrap.dedent(SCRIPTS[kind]))
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    env.pop("GOODPUT_JAX_STORE", None)
    return subprocess.run([sys.executable, str(script)], check=False, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("kind,n", [("idle", 0), ("idle", 1), ("refit", 0)])
def test_short_script_exits_cleanly(tmp_path: Path, kind: str, n: int) -> None:
    proc = _run(tmp_path, kind, n)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.startswith("ok"), proc.stdout
    assert proc.stderr == "", proc.stderr[-2000:]
    assert (tmp_path / f"g{n}.db").exists()  # the store it was given, not one in the cwd
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{kind}{n}.py", f"g{n}.db"])
