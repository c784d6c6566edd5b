"""One run of a small adaptive job (a subprocess of test_adaptive_elastic.py).

    python -m tests.integrations.adaptive_worker CKPT_DIR STEPS OUT_JSON REFIT

Device count comes from XLA_FLAGS (set by the parent). Restores the latest
checkpoint (if any) onto this run's mesh, trains STEPS steps, saves, and writes
the eval loss before/after, the per-step losses, the hints and the restored
state to OUT_JSON; the recorder's events go to ``goodput.db`` beside OUT_JSON.
"""

from __future__ import annotations

import json
import os
import sys


def main(ckpt_dir: str, steps: int, out_path: str, refit: bool) -> None:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from goodput_jax.adaptive import AdaptiveBatchSize, adaptive_optimizer, make_train_step
    from goodput_jax.adaptive import checkpoint as ckpt
    from goodput_jax.adaptive.step import progress_of
    from goodput_jax.integrations.hooks import GoodputHooks

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(nn.tanh(nn.Dense(16)(x)))[..., 0]

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 8)).astype(np.float32)
    y = (np.sin(x @ rng.normal(size=8)) + 0.3 * rng.normal(size=2048)).astype(np.float32)
    model = MLP()

    def loss_fn(p, b):
        return jnp.mean((model.apply(p, b["x"]) - b["y"]) ** 2)

    eval_loss = jax.jit(lambda p: loss_fn(p, {"x": x[:512], "y": y[:512]}))
    m0 = 32
    tx = adaptive_optimizer(optax.sgd(0.05), m0, rule="adascale")
    step_fn = make_train_step(loss_fn, tx)
    params = jax.device_put(model.init(jax.random.key(0), jnp.ones((1, 8))), step_fn.replicated)
    opt_state = jax.device_put(tx.init(params), step_fn.replicated)
    r = jax.device_count()
    # the events go next to OUT_JSON (the test's temporary directory), never ./goodput.db
    store_url = "sqlite:///" + os.path.join(os.path.dirname(os.path.abspath(out_path)),
                                            "goodput.db")
    hooks = GoodputHooks("elastic", init_batch_size=m0, num_replicas=r, num_nodes=1,
                         atomic_bsz=m0 // r, max_batch_size=256, is_primary=True,
                         background=False, refit_interval=1e9, warmup_steps=1,
                         store=store_url)
    adaptive = AdaptiveBatchSize(hooks, {"x": x, "y": y}, batch_sharding=step_fn.batch_sharding,
                                 adaptive=False)
    mngr = ckpt.manager(ckpt_dir)
    restored = ckpt.restore(mngr, params, opt_state, adaptive, step_fn.mesh)
    start = 0
    if restored is not None:
        start, params, opt_state = restored
    before = float(eval_loss(params))
    progress0 = float(progress_of(opt_state))
    losses = []
    restored_perf = None if hooks.perf_params is None else list(hooks.perf_params)
    for i in range(start, start + steps):
        params, opt_state, loss = adaptive.step(i, step_fn, params, opt_state)
        losses.append(loss)
    hooks.flush()
    if refit:  # one fit compile per test (seconds): only the first run refits
        hooks.refit()
    hooks.publish()
    losses = [float(v) for v in losses]
    after = float(eval_loss(params))
    ckpt.save(mngr, start + steps, params, opt_state, adaptive)
    with open(out_path, "w") as fh:
        json.dump({
            "devices": r, "start": start, "before": before, "after": after, "losses": losses,
            "progress_start": progress0, "progress_end": float(progress_of(opt_state)),
            "hints": hooks.last_hints, "config": [adaptive.atomic_bsz, adaptive.accum_steps],
            "batch_size": adaptive.batch_size, "traces": step_fn.traces(),
            "profile_keys": sorted(list(k) for k in hooks.profile),
            "restored_perf": restored_perf,
            "perf": None if hooks.perf_params is None else list(hooks.perf_params),
            "param_sharding": str(jax.tree.leaves(params)[0].sharding),
        }, fh)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1")
