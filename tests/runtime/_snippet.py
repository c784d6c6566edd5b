"""The quickstart's runtime snippet, read from docs/quickstart.md, and a prelude that defines
what it leaves to the user (``create_train_state``, ``train_step``, ``data``, ``num_steps``)."""

from __future__ import annotations

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def quickstart_snippet() -> str:
    """The python block right after ``<!-- runtime-snippet -->`` in the quickstart."""
    text = DOC.read_text()
    m = re.search(r"<!-- runtime-snippet -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert m, "docs/quickstart.md lost its runtime snippet"
    return m.group(1)


#: A plain JAX loop's pieces. Nothing here touches the backend (no arrays are made
#: before the snippet runs). ``LOAD_S`` seconds of blocking "loading" per batch.
PRELUDE = '''
import time
import numpy as np
import jax
import jax.numpy as jnp

N = SIZE

def create_train_state(*_):
    return jnp.eye(N, dtype=jnp.float32) * 0.5

@jax.jit
def train_step(w, x):
    h = x
    for _ in range(4):
        h = jnp.tanh(h @ w)
    loss = jnp.mean(h ** 2)
    return w - 1e-3 * loss * w, {"loss": loss}

_pool = [np.random.default_rng(i).normal(size=(N, N)).astype("float32") for i in range(4)]

truth = []  # device step times measured the plain way, between chunks of the loop

def _measure_truth(x, reps=3, k=4):
    s = globals()["state"]
    jax.block_until_ready(train_step(s, x))  # waits for the steps in flight too
    for _ in range(reps):
        t = time.perf_counter()
        s2 = s
        for _ in range(k):  # k dependent steps, like training
            s2, _m = train_step(s2, x)
        jax.block_until_ready(s2)
        truth.append((time.perf_counter() - t) / k)

def _batches():
    i = 0
    while True:
        if TRUTH_EVERY and i and i % TRUTH_EVERY == 0:
            _measure_truth(_pool[0][:SHAPES(i)])
        time.sleep(LOAD_S)
        rows = SHAPES(i)
        yield _pool[i % 4][:rows]
        i += 1

data = _batches()
'''


def prelude(size: int, load_s: float, num_steps: int, shapes: str = "lambda i: N",
            truth_every: int = 0) -> str:
    """The prelude with its sizes filled in (``shapes``: rows of batch ``i``, Python source).

    With ``truth_every=k``, the loader measures the true device step time (4 dependent steps
    dispatched, ``block_until_ready``, time / 4; 3 times) before every k-th batch, into the list
    ``truth``: in the same conditions as the recorded steps around it.
    """
    return (PRELUDE.replace("SIZE", str(size)).replace("LOAD_S", repr(float(load_s)))
            .replace("SHAPES", f"({shapes})").replace("TRUTH_EVERY", str(int(truth_every)))
            + f"\nnum_steps = {num_steps}\n")
