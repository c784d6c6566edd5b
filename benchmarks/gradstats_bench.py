"""Cost of the in-step gradient noise statistics, per collection mode.

For a Flax MLP and a small Flax transformer, each collection mode's full train
step (gradient + optimizer update, SGD with momentum or Adam) is compiled
twice, without and with the statistics, and timed side by side in interleaved
rounds; the overhead is the median over rounds of the round's stats/base time
ratio. Each configuration runs with the statistics on every step
(``every=1``) and sampled on one step in ``k`` (``--every``, default ``1,4``:
``gradient_noise_scale(every=k)`` with ``sample=sample_now(opt_state)``).
Peak memory comes from ``compiled.memory_analysis()``; the extra memory is
reported in units of the gradient size.

Modes (see ``goodput_jax.model.gradstats``):

* (a) ``shard_map`` data parallel: plain ``pmean`` step vs ``data_parallel_grads``;
* (b) microbatch accumulation in ``lax.scan``: plain scan vs ``microbatch_grads``;
* (c) accumulation across calls: ``optax.MultiSteps`` vs ``gradstats.multi_steps``
  (time per call);
* (d) plain ``jit`` with the batch sharded: ``value_and_grad`` vs ``grouped_grads``;
* (e) one device, no accumulation: ``value_and_grad`` of the whole batch vs
  ``split_grads`` (the batch in two halves on sampled steps, the unbiased one-device
  estimator that replaces the differenced one; ``--modes e``).

Targets: overhead < 3 % in (a) and (b); no extra gradient-sized buffer beyond
one (extra temp memory <= 1 gradient).

Run: ``python benchmarks/gradstats_bench.py [--quick] [--devices N] [--platform cpu|gpu]``.
Timings on a shared CPU are noisy; compare the ratios within one run only.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny shapes, few rounds (smoke test)")
    ap.add_argument("--devices", type=int, default=4, help="fake CPU devices (cpu platform)")
    ap.add_argument("--platform", default="cpu", help="jax platform (cpu, gpu, tpu)")
    ap.add_argument("--models", default="mlp,transformer", help="comma-separated subset")
    ap.add_argument("--modes", default="a,b,c,d",
                    help="comma-separated subset of a,b,c,d,e (e: split_grads, one device)")
    ap.add_argument("--opts", default="sgd,adam", help="optimizers: sgd (momentum), adam")
    ap.add_argument("--every", default="1,4",
                    help="sampling intervals to run (gradient_noise_scale(every=k) with "
                         "sample=sample_now(opt_state)); 1 = statistics on every step")
    ap.add_argument("--rounds", type=int, default=None, help="timing rounds (default 15, quick 3)")
    ap.add_argument("--iters", type=int, default=None, help="steps per round (default 8, quick 2)")
    return ap.parse_args()


ARGS = _parse() if __name__ == "__main__" else argparse.Namespace(
    quick=True, devices=4, platform="cpu", rounds=None, iters=None, models="mlp,transformer",
    modes="a,b,c,d", opts="sgd,adam", every="1")
if ARGS.platform == "cpu":
    os.environ["JAX_PLATFORMS"] = "cpu"
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (
            flags + f" --xla_force_host_platform_device_count={ARGS.devices}").strip()

import statistics
import time

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from goodput_jax.model import gradstats as gs

# ----------------------------------------------------------------------------- models


class MLP(nn.Module):
    width: int
    depth: int
    classes: int = 10

    @nn.compact
    def __call__(self, x):
        for _ in range(self.depth):
            x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(self.classes)(x)


class Block(nn.Module):
    d: int
    heads: int

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        h = nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h, mask=nn.make_causal_mask(
            jnp.ones(x.shape[:2])))
        x = x + h
        h = nn.Dense(4 * self.d)(nn.LayerNorm()(x))
        return x + nn.Dense(self.d)(nn.gelu(h))


class Transformer(nn.Module):
    vocab: int
    d: int
    heads: int
    layers: int
    seq: int

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab, self.d)(tokens)
        x = x + self.param("pos", nn.initializers.normal(0.02), (self.seq, self.d))
        for _ in range(self.layers):
            x = Block(self.d, self.heads)(x)
        return nn.Dense(self.vocab)(nn.LayerNorm()(x))


def make_problem(name: str, quick: bool, batch: int):
    key = jax.random.key(0)
    if name == "mlp":
        width, depth, din = (128, 2, 64) if quick else (1024, 3, 256)
        model = MLP(width, depth)
        x = jax.random.normal(key, (batch, din))
        y = jax.random.randint(key, (batch,), 0, 10)
        data = {"x": x, "y": y}
        params = model.init(key, x[:1])

        def loss_fn(p, b):
            logits = model.apply(p, b["x"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, b["y"]).mean()

        return params, data, loss_fn
    vocab, d, heads, layers, seq = (64, 32, 2, 1, 16) if quick else (512, 128, 4, 2, 64)
    model = Transformer(vocab, d, heads, layers, seq)
    tokens = jax.random.randint(key, (batch, seq + 1), 0, vocab)
    data = {"t": tokens}
    params = model.init(key, tokens[:1, :-1])

    def loss_fn(p, b):
        logits = model.apply(p, b["t"][:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, b["t"][:, 1:]).mean()

    return params, data, loss_fn


# ----------------------------------------------------------------------------- steps


def plain_scan_grads(loss_fn, params, batch, n):
    """Mode (b) baseline: the same scan accumulation without the norms."""
    micro = jax.tree.map(lambda x: x.reshape((n, x.shape[0] // n) + x.shape[1:]), batch)

    def body(carry, mb):
        acc, ls = carry
        loss, g = jax.value_and_grad(loss_fn)(params, mb)
        return (jax.tree.map(jnp.add, acc, g), ls + loss), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    (acc, ls), _ = jax.lax.scan(body, (zeros, jnp.float32(0)), micro)
    return ls / n, jax.tree.map(lambda a: a / n, acc)


def make_opt(name: str) -> optax.GradientTransformation:
    if name == "sgd":
        return optax.sgd(1e-3, momentum=0.9)
    if name == "adam":
        return optax.adam(1e-3)
    raise ValueError(f"optimizer ({name!r}) must be 'sgd' or 'adam'")


def build_steps(mode: str, opt: str, loss_fn, params, data, mesh, n_dev: int, n_micro: int,
                every: int = 1):
    """(baseline_step, stats_step, args_base, args_stats, calls_per_step)."""
    m0 = data[next(iter(data))].shape[0] // 4
    adam = make_opt(opt)  # the baseline optimizer (SGD+momentum or Adam)
    tx = optax.chain(gs.gradient_noise_scale(m0, differenced=False, every=every), make_opt(opt))

    def sample(o):  # every=1: no conditional at all (the default sample=True)
        return True if every == 1 else gs.sample_now(o)
    rep = NamedSharding(mesh, P())

    def cp(tree):  # fresh buffers: the steps donate params and optimizer state
        return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)

    shard = NamedSharding(mesh, P("data"))
    sdata = jax.device_put(data, shard)
    rparams = jax.device_put(params, rep)

    if mode == "a":
        micro_a = 1 if n_dev > 1 else 2

        def base_inner(p, o, b):
            loss, g = jax.value_and_grad(loss_fn)(p, b)  # invariant params: psum'ed gradient
            g = jax.tree.map(lambda x: x / n_dev, g)
            u, o = adam.update(g, o, p)
            return optax.apply_updates(p, u), o, jax.lax.pmean(loss, "data")

        def stats_inner(p, o, b):
            pre = gs.auto_preconditioner(o)
            loss, g, sq = gs.data_parallel_grads(loss_fn, p, b, "data", num_microbatches=micro_a,
                                                 preconditioner=pre, sample=sample(o))
            u, o = tx.update(g, o, p, grad_sqnorms=sq)
            return optax.apply_updates(p, u), o, loss

        def wrap(f):
            return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P(), P(), P("data")),
                                         out_specs=(P(), P(), P())), donate_argnums=(0, 1))

        return (wrap(base_inner), wrap(stats_inner),
                (cp(rparams), jax.device_put(adam.init(params), rep), sdata),
                (cp(rparams), jax.device_put(tx.init(params), rep), sdata), 1)

    if mode == "b":
        def base(p, o, b):
            loss, g = plain_scan_grads(loss_fn, p, b, n_micro)
            u, o = adam.update(g, o, p)
            return optax.apply_updates(p, u), o, loss

        def stats(p, o, b):
            pre = gs.auto_preconditioner(o)
            loss, g, sq = gs.microbatch_grads(loss_fn, p, b, n_micro, preconditioner=pre,
                                              sample=sample(o))
            u, o = tx.update(g, o, p, grad_sqnorms=sq)
            return optax.apply_updates(p, u), o, loss

        jd = {"donate_argnums": (0, 1)}
        return (jax.jit(base, **jd), jax.jit(stats, **jd), (cp(params), adam.init(params), data),
                (cp(params), tx.init(params), data), 1)

    if mode == "c":
        k = n_micro
        ms = optax.MultiSteps(make_opt(opt), k)
        gms = gs.multi_steps(make_opt(opt), k, init_batch_size=m0,
                             micro_batch_size=data[next(iter(data))].shape[0] // k, every=every)
        micro = jax.tree.map(lambda x: x[: x.shape[0] // k], data)

        def make(t):
            def call(p, o, b):
                loss, g = jax.value_and_grad(loss_fn)(p, b)
                u, o = t.update(g, o, p)
                return optax.apply_updates(p, u), o, loss
            return jax.jit(call, donate_argnums=(0, 1))

        return (make(ms), make(gms), (cp(params), ms.init(params), micro),
                (cp(params), gms.init(params), micro), k)

    if mode == "d":
        def base(p, o, b):
            loss, g = jax.value_and_grad(loss_fn)(p, b)
            u, o = adam.update(g, o, p)
            return optax.apply_updates(p, u), o, loss

        def stats(p, o, b):
            pre = gs.auto_preconditioner(o)
            loss, g, sq = gs.grouped_grads(loss_fn, p, b, n_dev, preconditioner=pre,
                                           group_sharding=shard, sample=sample(o))
            u, o = tx.update(g, o, p, grad_sqnorms=sq)
            return optax.apply_updates(p, u), o, loss

        jd = {"donate_argnums": (0, 1)}
        return (jax.jit(base, **jd), jax.jit(stats, **jd),
                (cp(rparams), jax.device_put(adam.init(params), rep), sdata),
                (cp(rparams), jax.device_put(tx.init(params), rep), sdata), 1)
    if mode == "e":  # one device: the whole batch's gradient vs split_grads' two halves
        def base(p, o, b):
            loss, g = jax.value_and_grad(loss_fn)(p, b)
            u, o = adam.update(g, o, p)
            return optax.apply_updates(p, u), o, loss

        def stats(p, o, b):
            pre = gs.auto_preconditioner(o)
            loss, g, sq = gs.split_grads(loss_fn, p, b, preconditioner=pre, sample=sample(o))
            u, o = tx.update(g, o, p, grad_sqnorms=sq)
            return optax.apply_updates(p, u), o, loss

        jd = {"donate_argnums": (0, 1)}
        return (jax.jit(base, **jd), jax.jit(stats, **jd), (cp(params), adam.init(params), data),
                (cp(params), tx.init(params), data), 1)
    raise ValueError(f"mode ({mode!r}) must be one of a, b, c, d, e")


def _mem(compiled) -> tuple[int, int]:
    """(temp bytes, peak bytes ~ args + outputs + temps - aliased)."""
    m = compiled.memory_analysis()
    if m is None:
        return -1, -1
    temp = int(m.temp_size_in_bytes)
    peak = int(m.argument_size_in_bytes + m.output_size_in_bytes + temp - m.alias_size_in_bytes)
    return temp, peak


def bench(mode: str, opt: str, model: str, quick: bool, rounds: int, iters: int, mesh,
          n_dev: int, every: int = 1) -> dict:
    batch = 32 if quick else (1024 if model == "mlp" else 256)
    n_micro = 4
    params, data, loss_fn = make_problem(model, quick, batch)
    grad_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
    f_base, f_stats, a_base, a_stats, calls = build_steps(mode, opt, loss_fn, params, data, mesh,
                                                          n_dev, n_micro, every)
    c_base = f_base.lower(*a_base).compile()
    c_stats = f_stats.lower(*a_stats).compile()
    mem_base, mem_stats = _mem(c_base), _mem(c_stats)
    state = {"base": list(a_base), "stats": list(a_stats)}
    fns = {"base": c_base, "stats": c_stats}

    # On a shared CPU, wall time mostly measures the neighbours; the process CPU
    # time (all XLA threads) is the robust cost measure there. On GPU/TPU: wall.
    clock = time.process_time if jax.default_backend() == "cpu" else time.perf_counter

    def run(which: str, n: int) -> float:
        p, o, b = state[which]
        t0 = clock()
        for _ in range(n * calls):
            p, o, loss = fns[which](p, o, b)
        jax.block_until_ready((p, o, loss))
        state[which] = [p, o, b]
        return (clock() - t0) / n

    # Whole sampling periods per round, so every round holds the same share
    # of sampled steps.
    iters = -(-iters // every) * every
    run("base", every), run("stats", every)  # warm-up
    times: dict[str, list[float]] = {"base": [], "stats": []}
    for r in range(rounds):  # interleaved, alternating order
        order = ("base", "stats") if r % 2 == 0 else ("stats", "base")
        for which in order:
            times[which].append(run(which, iters))
    tb, ts = statistics.median(times["base"]), statistics.median(times["stats"])
    # Each round times both steps back to back, so the per-round ratio cancels
    # the slow drifts of a shared machine; the overhead is its median.
    ratios = [s / b for s, b in zip(times["stats"], times["base"])]
    return {
        "model": model, "mode": mode, "opt": opt, "every": every, "base_ms": tb * 1e3, "stats_ms": ts * 1e3,
        "overhead": statistics.median(ratios) - 1.0,
        "overhead_min": min(times["stats"]) / min(times["base"]) - 1.0, "grad_mib": grad_bytes / 2**20,
        "temp_base": mem_base[0], "temp_stats": mem_stats[0],
        "peak_base": mem_base[1], "peak_stats": mem_stats[1],
        "extra_grads": (mem_stats[1] - mem_base[1]) / grad_bytes,
    }


MODE_NAMES = {"a": "(a) shard_map", "b": "(b) scan microbatch", "c": "(c) multi_steps/call",
              "d": "(d) jit grouped", "e": "(e) split 1 device"}


def main() -> int:
    quick = ARGS.quick
    rounds = ARGS.rounds or (3 if quick else 15)
    iters = ARGS.iters or (2 if quick else 8)
    devices = jax.devices()
    n_dev = len(devices)
    # Auto axes: mode (d) is "plain jit with automatic sharding".
    mesh = jax.make_mesh((n_dev,), ("data",), devices=devices,
                         axis_types=(jax.sharding.AxisType.Auto,))
    print(f"# gradstats_bench: device={devices[0].device_kind} x{n_dev} "
          f"({jax.default_backend()}), jax {jax.__version__}, flax {flax.__version__}, "
          f"optax {optax.__version__}, python {platform.python_version()}, "
          f"cpus={os.cpu_count()}, quick={quick}, rounds={rounds}x{iters} steps")
    print("# times: per-step " + ("process CPU time (all threads; robust on a shared CPU)"
          if jax.default_backend() == "cpu" else "wall time") + ", interleaved rounds; overhead = median over rounds "
          "of the round's stats/base ratio, ovh(min) = ratio of the fastest rounds")
    print("# every = k: gradient_noise_scale(every=k), helpers get sample=sample_now(opt_state):"
          " the norms run on one step in k (lax.cond); every = 1: on every step, no conditional")
    print("# step = grads + optimizer update (SGD+momentum or Adam; Adam => preconditioned norms); 'extra' = (peak_stats - peak_base) / gradient size;"
          " targets: overhead < 3% in (a),(b); extra <= 1 gradient")
    hdr = (f"{'model':<12} {'mode':<21} {'opt':<5} {'every':>5} {'grad MiB':>8} {'base ms':>8} "
           f"{'stats ms':>9} {'overhead':>9} {'ovh(min)':>9} {'peak base MiB':>13} "
           f"{'peak stats MiB':>14} {'extra':>6}  target")
    print(hdr)
    print("-" * len(hdr), flush=True)
    ok_all = True
    for model in ARGS.models.split(","):
        for mode in ARGS.modes.split(","):
            for opt, every in [(o, int(e)) for o in ARGS.opts.split(",")
                               for e in ARGS.every.split(",")]:
                r = bench(mode, opt, model, quick, rounds, iters, mesh, n_dev, every)
                time_target = r["mode"] in ("a", "b")
                ok_t = (r["overhead"] < 0.03) if time_target else True
                ok_m = r["extra_grads"] <= 1.02  # one gradient, plus scalars and rounding
                ok_all &= ok_t and ok_m
                verdict = ("time " + ("ok" if ok_t else "MISSED") if time_target
                           else "time n/a") + ", mem " + ("ok" if ok_m else "MISSED")
                print(f"{r['model']:<12} {MODE_NAMES[r['mode']]:<21} {r['opt']:<5} {every:>5} "
                      f"{r['grad_mib']:>8.2f} {r['base_ms']:>8.2f} {r['stats_ms']:>9.2f} "
                      f"{100 * r['overhead']:>8.1f}% {100 * r['overhead_min']:>8.1f}% "
                      f"{r['peak_base'] / 2**20:>13.2f} {r['peak_stats'] / 2**20:>14.2f} "
                      f"{r['extra_grads']:>6.2f}  {verdict}", flush=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
