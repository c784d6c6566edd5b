"""goodput-jax cluster: the cluster runtime on Ray (needs the 'cluster' extra).

Subcommands:

    up          start a local cluster (a head + worker raylets, in a loopback-only
                network and PID namespace) or attach to --address, and run the
                controller until 'down' (or Ctrl-C)
    down        ask a cluster started by 'up' to stop
    submit      submit a job (a JSON spec file, or --name/--entry-point ...)
    status      jobs and their allocations, restarts, errors
    cancel      stop a job
    reallocate  move a job to given nodes (it checkpoints and restarts there)
    logs        one process's output of a job's launch
    report      an HTML page of the cluster's history (allocations over time,
                queueing, restarts and their cost, JCT, goodput, rounds)
    demo        a local two-type cluster, small real Flax jobs arriving under Sia

submit, status, cancel, reallocate and logs reach the cluster either by its
address (--address ray://HEAD:10001 or HOST:PORT: over Ray, no shared files) or
by its state directory (--state-dir: files only, no Ray connection).

Example:
    $ goodput-jax cluster up --state-dir /tmp/gjc --nodes a:2,a:2,b:2 &
    $ goodput-jax cluster submit --state-dir /tmp/gjc --name j1 \\
          --entry-point goodput_jax.cluster.examples:regression --max-replicas 4
    $ goodput-jax cluster status --state-dir /tmp/gjc
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

from goodput_jax.cli._common import (
    HelpFormatter,
    UserError,
    nonnegative_float,
    positive_float,
    positive_int,
)

if TYPE_CHECKING:  # (the cluster extra is imported when a subcommand runs)
    from goodput_jax.cluster.api import ClusterClient

HELP = "run jobs on a Ray cluster scheduled by goodput (Pollux / Sia; 'cluster' extra)"


def _state(p: argparse.ArgumentParser, address: bool = False) -> None:
    p.add_argument("--state-dir", required=not address, default=None,
                   help="the cluster's state directory (jobs, logs, checkpoints, controller state)")
    if address:
        p.add_argument("--address", default=None,
                       help="the cluster's Ray address (ray://HOST:10001 or HOST:PORT) instead "
                            "of --state-dir")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``cluster`` and its subcommands."""
    p = subparsers.add_parser("cluster", help=HELP, description=__doc__.split("Example:")[0],
                              formatter_class=HelpFormatter)
    sub = p.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")

    up = sub.add_parser("up", help="start a local cluster (or attach) and run the controller",
                        formatter_class=HelpFormatter)
    _state(up)
    up.add_argument("--nodes", default="a:2,a:2,b:2",
                    help="local worker nodes, TYPE:DEVICES,... (fake CPU devices)")
    up.add_argument("--address", default=None,
                    help="an existing Ray cluster to attach to instead of a local one")
    up.add_argument("--policy", choices=("auto", "sia", "pollux"), default="auto",
                    help="auto: Pollux on one accelerator type, Sia on several")
    up.add_argument("--interval", type=positive_float, default=60.0,
                    help="seconds between scheduling rounds")
    up.add_argument("--autoscale", action="store_true",
                    help="ask Ray's autoscaler for the policy's desired size every round "
                         "(request_resources; with --address, a cluster that autoscales)")
    up.add_argument("--max-capacity", default=None, metavar="TYPE=NODESxDEVICES,...",
                    help="with --autoscale: the largest the cluster can grow to, e.g. "
                         "v5e=4x4,a100=2x8; a submitted job is checked against it "
                         "instead of the nodes live now")
    up.add_argument("--lease", type=nonnegative_float, default=30.0, metavar="SECONDS",
                    help="a launch that cannot reach its node's raylet or the head for this "
                         "long stops its step loop itself (0: never); see docs/cluster.md")
    up.add_argument("--node-mtbf", type=positive_float, default=None, metavar="SECONDS",
                    help="a node's mean time between failures, for the advised checkpoint "
                         "interval (default: the cluster's observed time between node losses)")
    up.add_argument("--in-sandbox", action="store_true", help=argparse.SUPPRESS)
    up.set_defaults(run=run_up)

    down = sub.add_parser("down", help="stop a cluster started by 'up'",
                          formatter_class=HelpFormatter)
    _state(down)
    down.set_defaults(run=run_down)

    s = sub.add_parser("submit", help="submit a job", formatter_class=HelpFormatter)
    _state(s, address=True)
    s.add_argument("--spec", default=None, help="a JSON job spec file (instead of the options)")
    s.add_argument("--name", help="job name")
    s.add_argument("--entry-point", help="'module:function' or a script.py")
    s.add_argument("--min-replicas", type=positive_int, default=1, help="fewest devices")
    s.add_argument("--max-replicas", type=positive_int, default=1, help="most devices")
    s.add_argument("--accelerator-types", default="",
                   help="comma-separated types it may run on (empty: any)")
    s.add_argument("--not-preemptible", action="store_true", help="never move it once running")
    s.add_argument("--max-retries", type=int, default=2, help="crashes retried before 'failed'")
    s.add_argument("--hooks", default=None,
                   help="JSON keyword arguments of its GoodputHooks, "
                        'e.g. \'{"init_batch_size": 32}\'')
    s.add_argument("--adaptive", default=None,
                   help="JSON keyword arguments of its AdaptiveBatchSize")
    s.add_argument("--stop-timeout", type=positive_float, default=60.0,
                   help="seconds a cooperative stop may take before it is forced")
    s.add_argument("args", nargs=argparse.REMAINDER, help="after --: the job's arguments")
    s.set_defaults(run=run_submit)

    st = sub.add_parser("status", help="jobs and allocations", formatter_class=HelpFormatter)
    _state(st, address=True)
    st.add_argument("job", nargs="?", default=None, help="one job (default: all)")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(run=run_status)

    c = sub.add_parser("cancel", help="stop a job", formatter_class=HelpFormatter)
    _state(c, address=True)
    c.add_argument("job")
    c.set_defaults(run=run_cancel)

    r = sub.add_parser("reallocate", help="move a job to given nodes",
                       formatter_class=HelpFormatter)
    _state(r, address=True)
    r.add_argument("job")
    r.add_argument("--to", required=True,
                   help="node labels, one per replica: n0,n1 or n0:2 (two replicas on n0)")
    r.set_defaults(run=run_reallocate)

    lg = sub.add_parser("logs", help="a job process's output", formatter_class=HelpFormatter)
    _state(lg, address=True)
    lg.add_argument("job")
    lg.add_argument("--attempt", type=int, default=None, help="launch number (default: latest)")
    lg.add_argument("--rank", type=int, default=0, help="process rank")
    lg.set_defaults(run=run_logs)

    rp = sub.add_parser("report", help="an HTML page of the cluster's history",
                        formatter_class=HelpFormatter)
    rp.add_argument("--state-dir", required=True,
                    help="the cluster's state directory (read only; no Ray connection)")
    rp.add_argument("--html", required=True, help="the page to write")
    rp.set_defaults(run=run_report)

    d = sub.add_parser("demo", help="local two-type cluster, real Flax jobs under Sia",
                       formatter_class=HelpFormatter)
    d.add_argument("--out", default="goodput-cluster-demo",
                   help="directory for the state, checkpoints, logs and report")
    d.add_argument("--in-sandbox", action="store_true", help=argparse.SUPPRESS)
    d.set_defaults(run=run_demo)
    return p


def _client(args: argparse.Namespace) -> ClusterClient:
    from goodput_jax.cluster.api import ClusterClient

    address = getattr(args, "address", None)
    if address is not None and args.state_dir is not None:
        raise UserError("give --address or --state-dir, not both")
    if address is None and args.state_dir is None:
        raise UserError("give the cluster's --address or its --state-dir")
    if address is not None:
        _require()
        return ClusterClient(address=address)
    require_cluster_dir(args.state_dir)
    return ClusterClient(args.state_dir)


def require_cluster_dir(state_dir: str) -> None:
    """Refuse a state directory that holds no cluster (a typo must not create one).

    A directory holds a cluster once ``up`` (its controller) wrote ``cluster.json`` or
    ``controller.json`` there; every subcommand but ``up`` asks this first, so nothing
    is created in a directory that is not a cluster's.

    Raises:
        UserError: no such directory, or no cluster state in it (one line, exit 2).
    """
    from goodput_jax.cluster.state import StateDir

    sd = StateDir(state_dir)
    if not os.path.isdir(sd.root):
        raise UserError(f"--state-dir ({state_dir!r}) does not exist; start a cluster there "
                        f"with 'goodput-jax cluster up --state-dir {state_dir}'")
    if not (os.path.exists(sd.cluster_path) or os.path.exists(sd.controller_path)):
        raise UserError(f"--state-dir ({state_dir!r}) holds no cluster (no cluster.json or "
                        f"controller.json); start one with 'goodput-jax cluster up'")


def _json_arg(name: str, text: str | None) -> dict:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise UserError(f"{name} ({text!r}) is not JSON") from None
    if not isinstance(value, dict):
        raise UserError(f"{name} ({text!r}) must be a JSON object")
    return value


def run_submit(args: argparse.Namespace) -> int:
    from goodput_jax.cluster.spec import JobSpec

    if args.spec:
        try:
            with open(args.spec) as fh:
                data = json.load(fh)
        except json.JSONDecodeError as e:
            raise UserError(f"spec ({args.spec!r}) is not JSON: {e}") from None
        spec = JobSpec.from_json(data)
    else:
        if not args.name or not args.entry_point:
            raise UserError("submit needs a spec file or --name and --entry-point")
        rest = list(args.args)
        if rest and rest[0] == "--":
            rest = rest[1:]
        types = tuple(t for t in args.accelerator_types.split(",") if t)
        spec = JobSpec(args.name, args.entry_point, args=tuple(rest),
                       min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                       accelerator_types=types, preemptible=not args.not_preemptible,
                       max_retries=args.max_retries, stop_timeout=args.stop_timeout,
                       hooks=_json_arg("hooks", args.hooks),
                       adaptive=_json_arg("adaptive", args.adaptive))
    print(_client(args).submit(spec))
    return 0


def format_status(jobs: dict) -> str:
    """A table of jobs: status, devices, nodes, attempt, restarts, error."""
    lines = [(f"{'job':<16} {'status':<10} {'devices':>7} {'nodes':<14} {'attempt':>7} "
             f"{'restarts':>8}  error")]
    for name in sorted(jobs):
        j = jobs[name]
        alloc = j.get("allocation") or []
        nodes = ",".join(sorted(set(alloc))) or "-"
        lines.append(f"{name:<16} {j['status']:<10} {len(alloc):>7} {nodes:<14} "
                     f"{j.get('attempt', -1):>7} {j.get('restarts', 0):>8}  {j.get('error') or ''}")
    return "\n".join(lines)


def run_status(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        jobs = client.status(args.job) if args.job else client.status()
    except KeyError as e:
        raise UserError(str(e.args[0])) from None
    if args.job:
        jobs = {args.job: jobs}
    print(json.dumps(jobs, indent=1, default=str) if args.json else format_status(jobs))
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    try:
        _client(args).cancel(args.job)
    except KeyError as e:
        raise UserError(str(e.args[0])) from None
    print(f"cancel requested: {args.job}")
    return 0


def run_reallocate(args: argparse.Namespace) -> int:
    from goodput_jax.cluster.controller import parse_allocation

    to = parse_allocation(args.to)
    try:
        did = _client(args).reallocate(args.job, to)
    except KeyError as e:
        raise UserError(str(e.args[0])) from None
    print(f"{args.job}: {did}")
    return 0


def run_logs(args: argparse.Namespace) -> int:
    try:
        sys.stdout.write(_client(args).logs(args.job, args.attempt, args.rank))
    except KeyError as e:
        raise UserError(str(e.args[0])) from None
    return 0


def run_report(args: argparse.Namespace) -> int:
    from goodput_jax.cluster.report import write_cluster_report

    require_cluster_dir(args.state_dir)
    try:
        path = write_cluster_report(args.state_dir, args.html)
    except ValueError as e:
        raise UserError(str(e)) from None
    print(path)
    return 0


def run_down(args: argparse.Namespace) -> int:
    _client(args).request_down()
    print("down requested")
    return 0


def _require() -> None:
    from goodput_jax.cli._common import require_extra

    require_extra("cluster", ("ray", "jax", "flax", "optax", "orbax"), "goodput-jax cluster")


def _reexec_sandboxed(argv: list[str]) -> int:
    from goodput_jax.cluster.local import run_sandboxed

    return run_sandboxed(["-m", "goodput_jax.cli", *argv, "--in-sandbox"]).returncode


def parse_max_capacity(text: str) -> dict[str, tuple[int, int]]:
    """``"v5e=4x4,a=3x2"`` -> ``{"v5e": (4, 4), "a": (3, 2)}`` (``--max-capacity``).

    Example:
        >>> parse_max_capacity("v5e=4x4, a=3x2")
        {'v5e': (4, 4), 'a': (3, 2)}

    Raises:
        UserError: a malformed entry (named), a repeated type, or a count below 1.
    """
    out: dict[str, tuple[int, int]] = {}
    for part in text.split(","):
        name, _, size = part.strip().partition("=")
        nodes, _, devices = size.strip().lower().partition("x")
        name = name.strip()
        if not (name and nodes.strip().isdigit() and devices.strip().isdigit()) \
                or int(nodes) < 1 or int(devices) < 1 or name in out:
            raise UserError(f"--max-capacity ({text!r}): bad entry {part.strip()!r}; want "
                            f"TYPE=NODESxDEVICES, e.g. v5e=4x4, each type once, counts >= 1")
        out[name] = (int(nodes), int(devices))
    return out


def run_up(args: argparse.Namespace) -> int:
    if args.autoscale and args.address is None:
        raise UserError("--autoscale needs --address: the local cluster has no autoscaler")
    if args.max_capacity is not None and not args.autoscale:
        raise UserError(f"--max-capacity ({args.max_capacity!r}) needs --autoscale: a cluster "
                        f"that does not grow is checked against its live nodes")
    max_capacity = None if args.max_capacity is None else parse_max_capacity(args.max_capacity)
    _require()
    from goodput_jax.cluster.local import parse_nodes

    nodes = parse_nodes(args.nodes)
    if args.address is None and not args.in_sandbox:
        argv = ["cluster", "up", "--state-dir", os.path.abspath(args.state_dir), "--nodes",
                args.nodes, "--policy", args.policy, "--interval", str(args.interval),
                "--lease", str(args.lease)]
        if args.node_mtbf is not None:
            argv += ["--node-mtbf", str(args.node_mtbf)]
        if args.autoscale:
            argv.append("--autoscale")
        return _reexec_sandboxed(argv)
    from goodput_jax.cluster.local import loopback_node_ip

    loopback_node_ip()  # before Ray is imported: no node-IP probes in a namespace sans route
    from goodput_jax.cluster.controller import start_controller, stop_controller
    from goodput_jax.cluster.launch import NAMESPACE
    from goodput_jax.cluster.state import StateDir

    sd = StateDir(args.state_dir)
    os.makedirs(sd.root, exist_ok=True)
    cluster = None
    with ray_output_to(os.path.join(sd.root, "ray.log")) as out:
        if args.address is None:
            from goodput_jax.cluster.local import LocalCluster

            cluster = LocalCluster(nodes)
            address = cluster.address
        else:
            import ray

            ray.init(address=args.address, namespace=NAMESPACE, log_to_driver=False)
            address = args.address
        if os.path.exists(sd.down_path()):
            os.remove(sd.down_path())
        actor = start_controller(args.state_dir, policy=args.policy, interval=args.interval,
                                 fake_devices=args.address is None, autoscale=args.autoscale,
                                 max_capacity=max_capacity, lease=args.lease,
                                 node_mtbf=args.node_mtbf)
        print(f"cluster up at {address}: state in {sd.root}; 'goodput-jax cluster "
              f"down --state-dir {args.state_dir}' stops it", file=out, flush=True)
        try:
            while not os.path.exists(sd.down_path()):
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
        finally:
            stop_controller(actor)
            if cluster is not None:
                cluster.shutdown()
            else:
                import ray

                ray.shutdown()
    print("cluster down", flush=True)
    return 0


@contextlib.contextmanager
def ray_output_to(path: str) -> Iterator[TextIO]:
    """Send this process's stdout and stderr (file descriptors 1 and 2) to ``path``
    (appended) for the block; yields a stream to the command's own stdout.

    Ray's own messages reach a driver's stdout and stderr, from Python (a raylet's
    "A worker died ..." when an actor's process dies, printed by the driver's error
    listener to ``sys.stdout``) and from its C++ core (glog lines, written to
    descriptor 2, also by the processes it starts); the command's own lines go to
    the yielded stream. An exception leaves the block with both descriptors restored,
    so the CLI's one-line error reaches the user.

    Example:
        >>> with ray_output_to("/tmp/gjc/ray.log") as out:  # doctest: +SKIP
        ...     print("Ray's line")
        ...     print("ours", file=out)
        ours
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)
    out = open(saved[0], "w", closefd=False)  # noqa: SIM115 - closed below
    try:
        yield out
    finally:
        for stream in (out, sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        out.close()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def run_demo(args: argparse.Namespace) -> int:
    _require()
    if not args.in_sandbox:
        return _reexec_sandboxed(["cluster", "demo", "--out", os.path.abspath(args.out)])
    from goodput_jax.cluster.demo import run_demo as demo

    demo(args.out)
    return 0


def run(args: argparse.Namespace) -> int:  # pragma: no cover - each subcommand sets its own
    return args.run(args)
