"""``goodput-jax cluster demo``: a local two-type cluster, small real Flax jobs under Sia.

Runs inside the sandbox the CLI made (:func:`goodput_jax.cluster.local.run_sandboxed`):
starts a head and three worker raylets (``n0``, ``n1``: type ``a`` with 2 fake
CPU devices each; ``n2``: type ``b`` with 2), the controller with Sia (5 s
rounds, and one after each arrival or finish), and three small Flax jobs
(:func:`goodput_jax.cluster.examples.regression`) that arrive over time. It prints
every change of a job's allocation as it happens, then a table per job (JCT,
launches, restarts, devices over time, measured goodput and the badput the
restarts caused), writes ``report.txt``/``report.json`` and each job's HTML
goodput report (with the ``report`` extra) to ``OUT``, shuts the cluster down and
leaves no process behind (the sandbox's PID namespace ends with it).
"""

from __future__ import annotations

import json
import os
import time

__all__ = ["DEMO_JOBS", "run_demo"]

EX = "goodput_jax.cluster.examples:regression"

#: (arrival s after start, name, min replicas, max replicas, types, steps)
DEMO_JOBS = (
    (0.0, "mlp-a", 1, 2, (), 150),
    (0.0, "mlp-wide", 2, 4, ("a",), 120),
    (25.0, "mlp-b", 1, 2, (), 120),
)


def _summary(client, names) -> tuple[str, dict]:
    from goodput_jax.measure.calculator import GoodputCalculator

    jobs = client.status()
    header = (f"{'job':<10} {'status':<9} {'JCT s':>7} {'launches':>8} {'restarts':>8} "
              f"{'devices over time':<20} {'goodput %':>9} {'disruption %':>12}")
    lines = [header]
    report: dict = {}
    for name in names:
        j = jobs[name]
        jct = (j["finished"] - j["submitted"]) if j.get("finished") else float("nan")
        devices = "->".join(f"{la['devices']}{la['type']}" for la in j["launches"])
        goodput = disruption = float("nan")
        try:
            calc = GoodputCalculator(name, store=j["spec"]["store"])
            goodput, badput, _ = calc.get_job_goodput(include_badput_breakdown=True)
            disruption = sum(v for k, v in badput.items() if "DISRUPTION" in str(k))
        except Exception as e:  # noqa: BLE001 - a job that never recorded
            report.setdefault("errors", {})[name] = str(e)
        lines.append(f"{name:<10} {j['status']:<9} {jct:>7.1f} {len(j['launches']):>8d} "
                     f"{j['restarts']:>8d} {devices:<20} {goodput:>9.1f} {disruption:>12.1f}")
        report[name] = {"status": j["status"], "jct_s": jct, "launches": j["launches"],
                        "restarts": j["restarts"], "goodput_pct": goodput,
                        "disruption_pct": disruption, "error": j.get("error")}
    return "\n".join(lines), report


def run_demo(out: str, *, jobs=DEMO_JOBS, interval: float = 5.0, timeout: float = 270.0) -> dict:
    """Run the demo (inside a sandbox); returns the report dict (also written to ``out``)."""
    from goodput_jax.cluster import ClusterClient, JobSpec, LocalCluster, start_controller

    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    state = os.path.join(out, "state")
    t0 = time.time()
    print("starting a local cluster: n0, n1 = type a (2 devices each), n2 = type b (2)",
          flush=True)
    # Ray's own processes write their warnings to stderr: keep them in OUT/ray.log
    ray_log = os.open(os.path.join(out, "ray.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    saved_stderr = os.dup(2)
    os.dup2(ray_log, 2)
    os.close(ray_log)
    cluster = LocalCluster([("a", 2), ("a", 2), ("b", 2)])
    try:
        import ray

        ctl = start_controller(state, policy="sia", interval=interval, poll=0.25)
        client = ClusterClient(state)
        while client.capacity() is None:
            time.sleep(0.2)
        print(f"cluster up in {time.time() - t0:.0f} s; Sia rounds every {interval:.0f} s",
              flush=True)
        pending = sorted(jobs)
        start = time.time()
        seen: dict = {}
        names = [j[1] for j in jobs]
        while True:
            now = time.time() - start
            while pending and pending[0][0] <= now:
                _, name, lo, hi, types, steps = pending.pop(0)
                client.submit(JobSpec(name, EX, args=("--steps", str(steps), "--ckpt-every",
                                                      "30", "--step-sleep", "0.05"),
                                      min_replicas=lo, max_replicas=hi, accelerator_types=types,
                                      hooks={"init_batch_size": 32, "max_batch_size": 128}))
                print(f"[{now:6.1f} s] submitted {name} ({lo}-{hi} devices, types "
                      f"{','.join(types) or 'any'})", flush=True)
            status = client.status()
            for name in names:
                j = status.get(name)
                if not j:
                    continue
                key = (j["status"], tuple(j.get("allocation") or ()))
                if seen.get(name) != key:
                    seen[name] = key
                    alloc = ",".join(j.get("allocation") or ()) or "-"
                    print(f"[{now:6.1f} s] {name:<9} {j['status']:<9} on {alloc}", flush=True)
            if not pending and all(status.get(n, {}).get("status") in
                                   ("finished", "failed", "cancelled") for n in names):
                break
            if now > timeout:
                print(f"[{now:6.1f} s] timeout: cancelling what is left", flush=True)
                for n in names:
                    if status.get(n, {}).get("status") not in ("finished", "failed"):
                        client.cancel(n)
                time.sleep(2.0)
                break
            time.sleep(0.5)
        from goodput_jax.cluster.controller import stop_controller

        stop_controller(ctl)
    finally:
        cluster.shutdown()
        os.dup2(saved_stderr, 2)
        os.close(saved_stderr)
    table, report = _summary(client, names)
    print()
    print(table)
    with open(os.path.join(out, "report.txt"), "w") as fh:
        fh.write(table + "\n")
    with open(os.path.join(out, "report.json"), "w") as fh:
        json.dump(report, fh, indent=1, default=str)
    try:
        from goodput_jax.measure.calculator import GoodputCalculator
        from goodput_jax.report import render_reports

        for name in names:
            calc = GoodputCalculator(name, store=client.status(name)["spec"]["store"])
            render_reports(calc, os.path.join(out, f"{name}.html"))
        print(f"\nreports: {out}/report.txt, report.json, " +
              ", ".join(f"{n}.html" for n in names))
    except ImportError as e:
        print(f"\nreports: {out}/report.txt, report.json (HTML needs the 'report' extra: {e})")
    print(f"demo took {time.time() - t0:.0f} s")
    return report
