"""A local Ray cluster for the runtime, sealed in a loopback-only network and PID namespace.

* :func:`run_sandboxed` runs a Python module or script inside
  ``unshare --net --pid --fork --mount-proc --kill-child`` (root, or user
  namespaces): a network namespace with only ``lo`` (brought up here, no
  ``ip`` binary needed) and a PID namespace, so no Ray socket is reachable from
  outside the machine and no Ray process outlives the sandbox (when its first
  process exits the kernel kills the rest). It also sets ``RAY_TMPDIR``, turns
  off usage stats and shortens the health checks.
* :class:`LocalCluster` (inside the sandbox) starts a head and one worker raylet
  per node, each with the runtime's resources (``gj_accel``, ``gj_type_<T>``) and
  its name as the Ray node label ``goodput-jax/node`` (``n0``, ``n1``, ...), connects to it, and tears down only what it started
  (never ``ray stop``, which kills every Ray process of the machine).

Example:
    >>> parse_nodes("a:2,a:2,b:2")
    [('a', 2), ('a', 2), ('b', 2)]
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import MutableMapping
from typing import Any, Self

from goodput_jax.cluster.plan import ACCEL, NODE_LABEL, TYPE_PREFIX

__all__ = [
    "LocalCluster",
    "bring_up_loopback",
    "in_sandbox",
    "loopback_node_ip",
    "parse_nodes",
    "run_sandboxed",
    "sandbox_command",
    "sandbox_problem",
]

SANDBOX_ENV = "GOODPUT_JAX_SANDBOXED"
#: The address of every local node (the sandbox has only loopback).
LOOPBACK = "127.0.0.1"
_UNSHARE = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
#: Ray reads it when it is imported: "0" makes 127.0.0.1 the node IP Ray derives for a
#: local address, instead of probing 8.8.8.8 for it (a C++ warning where no route exists).
RAY_LOOPBACK_IP_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def parse_nodes(text: str) -> list[tuple[str, int]]:
    """``"TYPE:DEVICES,..."`` -> ``[(type, devices), ...]``, one per worker node.

    Example:
        >>> parse_nodes("v5e:4")
        [('v5e', 4)]
        >>> parse_nodes("a:0")
        Traceback (most recent call last):
        ...
        ValueError: nodes ('a:0'): each node is TYPE:DEVICES with DEVICES >= 1
    """
    out = []
    for part in str(text).split(","):
        t, sep, d = part.strip().partition(":")
        if not sep or not t or not d.isdigit() or int(d) < 1 or not t.replace("_", "").isalnum():
            raise ValueError(f"nodes ({text!r}): each node is TYPE:DEVICES with DEVICES >= 1")
        out.append((t, int(d)))
    return out


def bring_up_loopback() -> None:
    """Set ``lo`` up in this network namespace (ioctl SIOCSIFFLAGS)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, ifr))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1))  # SIOCSIFFLAGS, IFF_UP
    finally:
        s.close()


def in_sandbox() -> bool:
    """Whether this process's network namespace has only the loopback interface."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def loopback_node_ip(env: MutableMapping[str, str] | None = None) -> bool:
    """Where this network namespace has only loopback, have Ray take 127.0.0.1 as its node IP.

    A Ray driver given a local address (``127.0.0.1:PORT``) asks which IP reaches the
    internet (a UDP ``connect`` to 8.8.8.8, no packet sent) to replace it; in a namespace
    with no route that fails and Ray's C++ core prints "Failed to determine local IP ..."
    on stderr. Loopback is then the only answer, so this sets ``RAY_LOOPBACK_IP_ENV`` to
    ``"0"`` in ``env`` (default ``os.environ``; a value already there is kept). Ray reads
    it once, when it is first imported: call this before ``import ray``.

    Returns:
        Whether the namespace has only loopback (the variable is then set).

    Example:
        >>> env = {}
        >>> loopback_node_ip(env) == (env.get(RAY_LOOPBACK_IP_ENV) == "0")
        True
    """
    if not in_sandbox():
        return False
    (os.environ if env is None else env).setdefault(RAY_LOOPBACK_IP_ENV, "0")
    return True


def sandbox_problem() -> str | None:
    """None when sandboxes can be made here, else why not (one line)."""
    if shutil.which("unshare") is None:
        return "the 'unshare' command (util-linux) is not installed"
    try:
        proc = subprocess.run([*_UNSHARE, "true"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare failed: {e}"
    if proc.returncode != 0:
        return f"unshare is not permitted here: {proc.stderr.strip()[:200]}"
    return None


def sandbox_env(ray_tmpdir: str, env: dict | None = None) -> dict:
    """The environment of a sandboxed Ray driver."""
    out = dict(os.environ if env is None else env)
    out.update({
        SANDBOX_ENV: "1", "RAY_TMPDIR": ray_tmpdir, "RAY_USAGE_STATS_ENABLED": "0",
        # a dead raylet is seen in ~5-10 s (default ~30 s); a busy 2-core machine still
        # answers within 2 s, so live nodes are not declared dead
        "RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
        "RAY_health_check_failure_threshold": "5", "RAY_DEDUP_LOGS": "0",
        # every node is on loopback here: Ray takes 127.0.0.1 as the node IP instead of
        # probing 8.8.8.8 for it (a warning per probe inside a namespace without a route)
        RAY_LOOPBACK_IP_ENV: "0",
    })
    return out


def sandbox_command(argv: list[str]) -> list[str]:
    """The command that runs ``python ARGV`` (``-m module ...`` or ``script ...``) sealed.

    Where util-linux's ``setpriv`` is installed, ``unshare`` runs with a parent-death signal
    (``setpriv --pdeathsig KILL``): if the caller dies (a test run killed, a ``SIGKILL``),
    ``unshare`` is killed, its ``--kill-child`` kills the namespace's first process, and
    with it every process of the PID namespace: no Ray cluster outlives its caller. The
    signal follows the *thread* that started the command: start it from a thread that
    outlives it (``run_sandboxed`` waits for it on the calling thread).
    """
    guard = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
    return [*guard, *_UNSHARE, sys.executable, "-m", "goodput_jax.cluster.local", *argv]


def run_sandboxed(argv: list[str], *, ray_tmpdir: str | None = None, env: dict | None = None,
                  timeout: float | None = None, **popen: Any) -> subprocess.CompletedProcess:
    """Run ``python ARGV`` in a fresh loopback-only network + PID namespace; wait for it.

    ``RAY_TMPDIR`` defaults to a new short directory under ``/tmp`` (Unix socket
    paths are limited to 107 bytes), removed afterwards. ``popen`` (``Any``) goes to
    :func:`subprocess.run` as it is (``stdout``, ``cwd`` ...).

    Raises:
        RuntimeError: sandboxes are not possible here (the reason).
    """
    problem = sandbox_problem()
    if problem:
        raise RuntimeError(problem)
    own = ray_tmpdir is None
    tmp = tempfile.mkdtemp(prefix="gjray", dir="/tmp") if ray_tmpdir is None else ray_tmpdir
    try:
        return subprocess.run(sandbox_command(argv), env=sandbox_env(tmp, env),
                              timeout=timeout, check=False, **popen)
    finally:
        if own:
            shutil.rmtree(tmp, ignore_errors=True)


class LocalCluster:
    """A head and one worker raylet per node, on this machine (run it in a sandbox).

    Args:
        nodes: ``[(accelerator_type, devices), ...]``; node ``i`` is labelled ``n{i}``.
        cpus_per_node: Ray CPUs of each worker (the runtime's tasks ask for none).
        object_store_memory: bytes of each raylet's object store.
        allow_network: start even outside a loopback-only namespace (not advised).

    Example:
        >>> with LocalCluster([("a", 2), ("b", 2)]) as c:  # doctest: +SKIP
        ...     c.kill_node("n1")
    """

    def __init__(self, nodes: list[tuple[str, int]], *, cpus_per_node: int = 2,
                 object_store_memory: int = 80 * 2**20, allow_network: bool = False):
        if not nodes:
            raise ValueError("nodes ([]) must list at least one (type, devices)")
        if not allow_network and not in_sandbox():
            raise RuntimeError("LocalCluster: this process can reach the network; run it "
                               "with goodput_jax.cluster.local.run_sandboxed (or pass "
                               "allow_network=True)")
        from ray.cluster_utils import Cluster

        # the node IP is given (loopback), so Ray does not probe 8.8.8.8 for it
        self._cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "resources": {"gj_head": 1},
            "object_store_memory": object_store_memory, "node_ip_address": LOOPBACK})
        self.nodes: dict[str, Any] = {}
        self._added = 0
        self._cpus = cpus_per_node
        self._osm = object_store_memory
        for t, d in nodes:
            self.add_node(t, d)
        import ray

        ray.init(address=self._cluster.address, include_dashboard=False, log_to_driver=False,
                 _node_ip_address=LOOPBACK)
        self._ray = ray

    @property
    def address(self) -> str:
        return self._cluster.address

    def add_node(self, accelerator_type: str, devices: int) -> str:
        """Start one more worker raylet; returns its label."""
        label = f"n{self._added}"
        self._added += 1
        self.nodes[label] = self._cluster.add_node(
            num_cpus=self._cpus, object_store_memory=self._osm, node_ip_address=LOOPBACK,
            resources={ACCEL: devices, f"{TYPE_PREFIX}{accelerator_type}": devices},
            labels={NODE_LABEL: label})
        return label

    def kill_node(self, label: str) -> None:
        """Kill a worker raylet and its processes (no graceful drain), as a node failure."""
        node = self.nodes.pop(label)
        self._cluster.remove_node(node, allow_graceful=False)

    def shutdown(self) -> None:
        """Disconnect and stop every process this cluster started."""
        try:
            self._ray.shutdown()
        finally:
            self._cluster.shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _main(argv: list[str]) -> int:
    """Inside the sandbox: bring up ``lo``, then run ``-m module ARGS`` or ``script ARGS``."""
    import runpy

    bring_up_loopback()
    if not argv:
        print("usage: python -m goodput_jax.cluster.local (-m MODULE | SCRIPT) [ARGS]",
              file=sys.stderr)
        return 2
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":  # pragma: no cover - the sandbox's entry
    sys.exit(_main(sys.argv[1:]))
