"""docs/maxtext.md's runtime block as it stands: MaxText's wrapper with the runtime capture
records every step's start and device end and the program's cost (issue 43: MaxText's loop
alone records neither device ends nor program costs)."""

from __future__ import annotations

import pathlib
import re

from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.events import EventKind
from goodput_jax.measure.stores.sqlite import SQLiteStore

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "maxtext.md"

PRELUDE = '''
import jax
import jax.numpy as jnp
import numpy as np

@jax.jit
def p_train_step(state, batch):
    state = state - 0.01 * (batch.T @ (batch @ state))
    return state, jnp.mean(state * state)

state = jnp.ones((8, 4), jnp.float32)
data = iter([jnp.asarray(np.random.default_rng(i).normal(size=(16, 8)), jnp.float32)
             for i in range(6)])
num_steps = 6
'''


def _block() -> str:
    m = re.search(r"<!-- maxtext-runtime -->\s*```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert m, "docs/maxtext.md lost its runtime block (<!-- maxtext-runtime -->)"
    return m.group(1)


def test_maxtext_runtime_block_records_device_ends_and_program_cost(tmp_path, monkeypatch):
    db = tmp_path / "mt.db"
    monkeypatch.setenv("GOODPUT_JAX_STORE", f"sqlite:///{db}")
    ns: dict = {}
    exec(compile(PRELUDE + _block(), str(DOC), "exec"), ns)  # noqa: S102 - the doc's own code
    store = SQLiteStore(str(db), create=False)
    events, _ = store.read_events("mt-run")
    kinds = [e.kind for e in events]
    starts = sorted(e.step for e in events if e.kind == EventKind.STEP_START)
    ends = sorted(e.step for e in events if e.kind == EventKind.STEP_DEVICE_END)
    assert starts == ends == list(range(6))
    assert kinds.count(EventKind.PROGRAM_COST) == 1
    assert kinds.count(EventKind.DATA_LOADING_END) == 6
    assert kinds[0] == EventKind.JOB_START and kinds[-1] == EventKind.JOB_END
    calc = GoodputCalculator("mt-run", "goodput_mt-run", store=store)
    assert calc.get_job_goodput_details()["device_timed_runs"] == 1
    assert calc.get_program_goodput().mfu > 0
    store.close()
    assert ns["loss"] is not None
