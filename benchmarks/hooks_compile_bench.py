"""What the hooks add to a job's compile time, side by side (issue 33 item 7).

Every arm runs the quickstart's complete loop (section 4: ``runtime.start_job``,
``StepRecorder``, an Adam MLP) for ``--steps`` steps in a FRESH process (compile caches are
per process), the arms interleaved in rounds:

- ``plain``: ``jax.value_and_grad`` + Adam, no statistics, no hooks;
- ``stats``: the statistics in the step (``gradient_noise_scale`` first in the chain,
  ``microbatch_grads(..., 4, preconditioner=auto_preconditioner(opt_state))``), no hooks;
- ``hooks``: the same step under ``GoodputHooks(steps=...)`` (the quickstart's loop: the
  hooks find the ``GradStatsState`` in the step's outputs and reduce it with the summary
  program, compiled once per process on a background thread);
- ``hooks+summary``: the step also returns ``gs.stats_summary(...)`` (no summary program);
- ``hooks 2nd process``: the ``hooks`` arm again, in a second fresh process on the same
  machine right after it (issue 44 item 8): the step-time fit's compiled program comes from
  its persistent cache (``integrations.fit.fit_cache_dir``; each round starts with an empty
  one, so ``hooks`` pays the fit's compile and this arm should not: goal, refit < 0.1 s);
- ``hooks@baseline`` (with ``--baseline-tree DIR``, e.g. a ``git worktree`` of an older
  commit): the ``hooks`` arm on that tree (before the background summary compile, the hooks
  compiled ``jit(_stats_summary)`` on the training thread, booked as program startup).

Compiles are counted with the repo's own compile capture (``runtime.start_job`` attaches the
recorder: every compile on the training thread is a ``compilation`` event with JAX's
measured duration), read back from the store. Per arm, medians over rounds:

- ``step compile``: ``jit(train_step)``'s compile (s);
- ``summary compile``: ``jit(_stats_summary)`` compiles on the training thread (count, s);
- ``other compiles``: every other compile on the training thread during the loop (count, s);
- ``startup``: program startup booked by the calculator (s); ``refit``: the hooks' final
  refit, booked as custom badput ``model refit`` (s); ``fit compile wait``: the end of the
  job waiting for the fit's first compile, booked apart as ``model fit compile`` (s);
- ``first 10 steps``: wall time from the first step's dispatch to the tenth step's outputs
  ready (s); ``job``: the job's total time (s).

Prints one table with the device and versions. Absolute times depend on the machine and on
other load (on a shared 2-core machine they vary 2x from run to run); compare the arms of
one run.

Usage:
    python benchmarks/hooks_compile_bench.py [--rounds R] [--steps N] [--baseline-tree DIR]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(arm: str, steps_n: int, db: str) -> dict:
    """One arm in this (fresh) process; returns its measurements."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from goodput_jax import GoodputHooks, goodput, gradient_noise_scale, runtime
    from goodput_jax.measure.calculator import BadputType, GoodputCalculator
    from goodput_jax.measure.stores.sqlite import SQLiteStore
    from goodput_jax.model import gradstats as gs

    init = runtime.init_backend()
    store = SQLiteStore(db)
    recorder = goodput.GoodputRecorder("bench", "goodput_bench", logging_enabled=True,
                                       store=store)
    runtime.start_job(recorder)
    with_stats = arm != "plain"
    tx = (optax.chain(gradient_noise_scale(256), optax.adam(1e-3)) if with_stats
          else optax.adam(1e-3))
    k = np.random.default_rng(1)
    with recorder.training_prep():
        params = {"w1": jnp.asarray(k.normal(size=(32, 256)) / 6, jnp.float32),
                  "w2": jnp.asarray(k.normal(size=(256, 256)) / 16, jnp.float32),
                  "w3": jnp.asarray(k.normal(size=(256, 1)) / 16, jnp.float32)}
        opt_state = tx.init(params)

    def loss_fn(p, batch):
        h = jnp.tanh(batch["x"] @ p["w1"])
        h = jnp.tanh(h @ p["w2"])
        return jnp.mean(((h @ p["w3"])[:, 0] - batch["y"]) ** 2)

    summary_out = arm.startswith("hooks+summary")

    @jax.jit
    def train_step(params, opt_state, batch):
        if with_stats:
            pre = gs.auto_preconditioner(opt_state)
            loss, grads, sq = gs.microbatch_grads(loss_fn, params, batch, 4, preconditioner=pre)
            updates, opt_state = tx.update(grads, opt_state, params, grad_sqnorms=sq)
        else:
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        if summary_out:
            return params, opt_state, loss, gs.stats_summary(gs.get_grad_stats(opt_state))
        return params, opt_state, loss

    rng = np.random.default_rng(0)
    w = rng.normal(size=32).astype(np.float32)
    pool = []
    for _ in range(4):
        x = rng.normal(size=(256, 32)).astype(np.float32)
        pool.append({"x": x, "y": np.sin(x @ w).astype(np.float32)})

    steps = runtime.StepRecorder(recorder)
    hooks = None
    if arm.startswith("hooks"):
        if "steps" in inspect.signature(GoodputHooks).parameters:
            hooks = GoodputHooks("bench", init_batch_size=256, max_batch_size=4096,
                                 steps=steps, recorder=recorder)
        else:  # an older tree: the demo's composition
            hooks = GoodputHooks("bench", init_batch_size=256, max_batch_size=4096,
                                 recorder=recorder, record_device_ends=False)
    t_first = t_tenth = None
    cm = hooks.job() if hooks is not None else None
    if cm is not None:
        cm.__enter__()
    out = None
    for i in range(steps_n):
        with recorder.data_loading():
            batch = pool[i % 4]
        if i == 0:
            t_first = time.perf_counter()
        if hooks is not None:
            if "steps" in inspect.signature(GoodputHooks).parameters:
                out = hooks.step(i, train_step, params, opt_state, batch)
            else:
                out = hooks.step(i, train_step, params, opt_state, batch)
                steps.track(i, out[2])
        else:
            out = steps(i, train_step, params, opt_state, batch)
        params, opt_state = out[0], out[1]
        if i == 9:
            jax.block_until_ready(out)
            t_tenth = time.perf_counter()
    if cm is not None:
        cm.__exit__(None, None, None)
    steps.close()
    recorder.record_job_end_time()
    recorder.close()
    evs, _ = store.read_events("bench")
    t_loop = min(e.timestamp for e in evs if e.kind.value == "step_start")
    comps = [(e.payload["name"], float(e.payload["duration_s"]), e.timestamp >= t_loop)
             for e in evs if e.kind.value == "compilation"]
    calc = GoodputCalculator("bench", "goodput_bench", store=store)
    det = calc.get_job_goodput_details()
    res = {
        "step_compile": sum(d for n, d, _ in comps if n == "jit(train_step)"),
        "summary_n": sum(1 for n, _, _ in comps if "stats_summary" in n),
        "summary_s": sum(d for n, d, _ in comps if "stats_summary" in n),
        "other_n": sum(1 for n, _, loop in comps
                       if loop and n != "jit(train_step)" and "stats_summary" not in n),
        "other_s": sum(d for n, d, loop in comps
                       if loop and n != "jit(train_step)" and "stats_summary" not in n),
        "startup": det["badput_time"][BadputType.PROGRAM_STARTUP],
        "refit": det["custom_badput_time"].get("model refit", 0.0),
        "fit_compile": det["custom_badput_time"].get("model fit compile", 0.0),
        "first10": (t_tenth - t_first) if t_tenth else float("nan"),
        "job": det["total_time"],
        "grad_count": None if hooks is None else hooks.grad_count,
        "platform": init.platform, "device": str(jax.devices()[0].device_kind),
        "jax": jax.__version__,
    }
    store.close()
    return res


def run_arm(arm: str, steps_n: int, tree: str, fit_cache: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   GOODPUT_JAX_FIT_CACHE=fit_cache)
        env.pop("XLA_FLAGS", None)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                            arm.replace(" 2nd process", ""),
                            "--steps", str(steps_n), "--db", os.path.join(d, "b.db")],
                           capture_output=True, text=True, env=env, cwd=d, timeout=600,
                           check=False)
        if r.returncode != 0:
            raise RuntimeError(f"arm {arm} failed:\n{r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--baseline-tree", default=None,
                    help="a checkout of an older commit: adds the arm hooks@baseline")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--db", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        arm = a.worker.split("@")[0]
        print(json.dumps(worker(arm, a.steps, a.db)))
        return
    arms = ["plain", "stats", "hooks", "hooks+summary"]
    if a.baseline_tree:
        arms.append("hooks@baseline")
    names = list(arms)
    names.insert(names.index("hooks") + 1, "hooks 2nd process")
    results: dict[str, list[dict]] = {arm: [] for arm in names}
    for rnd in range(a.rounds):
        order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]  # interleaved, rotated
        # "hooks 2nd process" right after "hooks", on the fit cache that one filled
        order.insert(order.index("hooks") + 1, "hooks 2nd process")
        caches = []
        for arm in order:
            tree = a.baseline_tree if arm.endswith("@baseline") else ROOT
            if arm != "hooks 2nd process":  # every other arm starts with an empty fit cache
                caches.append(tempfile.mkdtemp(prefix="goodput-fit-cache-"))
            results[arm].append(run_arm(arm, a.steps, tree, caches[-1]))
            print(f"round {rnd + 1}/{a.rounds} {arm}: "
                  f"{json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in results[arm][-1].items()})}",
                  file=sys.stderr)
        for d in caches:
            shutil.rmtree(d, ignore_errors=True)
    first = results[arms[0]][0]
    print(f"hooks compile cost: {first['platform']} ({first['device']}), jax {first['jax']}, "
          f"python {platform.python_version()}, {a.steps} steps, {a.rounds} rounds (medians), "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    cols = ["step compile s", "summary compiles (n, s)", "other loop compiles (n, s)",
            "startup s", "refit s", "fit compile wait s", "first 10 steps s", "job s"]
    print(f"| arm | {' | '.join(cols)} |")
    print("|---" * (len(cols) + 1) + "|")
    for arm, rs in results.items():

        def med(key, rs=rs):
            return statistics.median(r[key] for r in rs)

        print(f"| {arm} | {med('step_compile'):.2f} | {med('summary_n'):.0f}, "
              f"{med('summary_s'):.2f} | {med('other_n'):.0f}, {med('other_s'):.2f} | "
              f"{med('startup'):.2f} | {med('refit'):.2f} | {med('fit_compile'):.2f} | "
              f"{med('first10'):.2f} | "
              f"{med('job'):.2f} |")


if __name__ == "__main__":
    main()
