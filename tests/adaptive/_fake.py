"""An ``AdaptiveBatchSize`` on a fake clock, for tests that inject step times and statistics."""

from __future__ import annotations

import numpy as np

from goodput_jax.adaptive import AdaptiveBatchSize
from goodput_jax.integrations.hooks import GoodputHooks

SIZES = [32, 64, 128, 256, 512]


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def fake_controller(tmp_path, name, **kw):
    """``(clock, hooks, controller)``: one replica, M0 32 up to 512 (:data:`SIZES`), a check
    every 5 steps with no interval, hooks with no background thread on a SQLite store under
    ``tmp_path``; ``kw`` go to ``AdaptiveBatchSize``."""
    clock = FakeClock()
    hooks = GoodputHooks(name, init_batch_size=32, atomic_bsz=32, num_nodes=1, num_replicas=1,
                         max_batch_size=512, clock=clock, is_primary=True, refit_interval=0.5,
                         warmup_steps=1, job_warmup_steps=0, background=False,
                         store="sqlite:///" + str(tmp_path / f"{name}.db"))
    ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((1 << 16, 1), np.float32)},
                            atomic_sizes=SIZES, adapt_every=5, adapt_interval=0.0, **kw)
    return clock, hooks, ctl
