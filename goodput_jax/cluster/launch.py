"""Launching a job's processes on Ray so that they outlive the controller.

A launch is one **detached** placement group (``gj-JOB-ATTEMPT``) with one
bundle per allocated node (``{gj_accel: k}``, pinned to that node by Ray's own
node id: ``bundle_label_selector=[{"ray.io/node-id": ID}]``) and one
**named, detached** actor per bundle (``gj-JOB-ATTEMPT-rRANK`` in the runtime's
namespace, :data:`NAMESPACE`): :class:`ReplicaActor`. Neither is owned by the
controller, so a controller that dies (and is restarted by Ray) leaves running
jobs alone and finds them again by name (:meth:`RayLauncher.attach`).

Each actor is its own fresh process (JAX starts with the launch's device count,
set through ``XLA_FLAGS`` in its runtime environment) and runs the entry point
(:func:`goodput_jax.cluster.runner.run_replica`) on a thread, so that
``poll`` (finished, stopped, crashed) and ``log_tail`` answer while it trains.
In a multi-node launch, rank 0 reserves the ``jax.distributed`` coordinator's
port on its own node (a socket bound with ``SO_REUSEPORT`` and held until the
coordinator has bound it too) and the other ranks ask rank 0 for it.

Why detached actors and not Ray's Jobs API (``JobSubmissionClient``): a
multi-node JAX job is one process per node, each with its own device count and
rank, placed on a given node; the Jobs API runs one driver command per job on
one node (its entrypoint resources place that driver only), so the driver
would still have to create these per-node processes itself, and it needs the
dashboard's job agent on the head (not started by the sandboxed local cluster,
and one more process on the controller's critical path). The actors give the
same independence from the controller, with the per-rank placement, a direct
``poll`` and logs over Ray.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from goodput_jax.cluster.plan import ACCEL, NODE_ID_LABEL, NodeRecord
from goodput_jax.cluster.record import Placement
from goodput_jax.cluster.spec import JobSpec

logger = logging.getLogger(__name__)

__all__ = ["NAMESPACE", "PG_PREFIX", "PRELOAD", "RayLauncher", "ReplicaActor", "actor_name",
           "pg_name"]

#: The Ray namespace of the runtime's controller and launches.
NAMESPACE = "goodput_jax"
#: Name prefix of the runtime's placement groups and launch actors.
PG_PREFIX = "gj-"


def pg_name(job: str, attempt: int) -> str:
    """The placement group of one launch.

    Example:
        >>> pg_name("j1", 3), actor_name("j1", 3, 0)
        ('gj-j1-3', 'gj-j1-3-r0')
    """
    return f"{PG_PREFIX}{job}-{attempt}"


def actor_name(job: str, attempt: int, rank: int) -> str:
    """The actor of one process of one launch."""
    return f"{pg_name(job, attempt)}-r{rank}"


#: What a spare process imports while it waits (the example jobs' heavy imports).
PRELOAD = ("jax", "flax.linen", "optax", "orbax.checkpoint", "goodput_jax.adaptive",
           "goodput_jax.adaptive.checkpoint", "goodput_jax.integrations.hooks")
#: Name prefix of the spare processes (``gj-spare-K-LABEL``).
SPARE_PREFIX = f"{PG_PREFIX}spare-"


def _import_all(modules: tuple[str, ...]) -> None:
    import importlib

    for m in modules:
        try:
            importlib.import_module(m)
        except Exception as e:  # noqa: BLE001 - a missing extra: the job imports what it needs
            logger.debug("preload %s: %s", m, e)


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "error")[:300]


class ReplicaActor:
    """One process of one launch (a detached Ray actor; see the module doc).

    Args:
        context: the process's :class:`~goodput_jax.cluster.context.JobContext` as JSON;
            in a multi-node launch its ``coordinator`` is ``HOST:0`` (rank 0 picks and
            reserves the port) and ``rank0`` names rank 0's actor (the other ranks ask it).
        entry_point: the spec's entry point.
        log_path: where the process's output goes.
        rank0: the actor name of rank 0 (multi-node launches).
    """

    def __init__(self, context: dict | None = None, entry_point: str | None = None,
                 log_path: str | None = None, rank0: str | None = None,
                 preload: tuple[str, ...] = ()):
        self._result: tuple[str, Any] | None = None
        self._coordinator: str | None = None
        self._reserved: socket.socket | None = None
        self._log_path = log_path
        self._started = False
        self._preload = threading.Thread(target=_import_all, args=(tuple(preload),),
                                         name="gj-preload", daemon=True)
        self._preload.start()
        if context is not None:
            if entry_point is None or log_path is None:
                raise ValueError(f"entry_point ({entry_point!r}) and log_path ({log_path!r}) "
                                 "are needed with a context")
            self.start(context, entry_point, log_path, rank0)

    def ready(self) -> bool:
        """Whether the preloaded modules are imported (a spare is warm)."""
        return not self._preload.is_alive()

    def is_free(self) -> bool:
        """Whether no launch runs here yet (a spare that can be given one)."""
        return not self._started

    def start(self, context: dict, entry_point: str, log_path: str, rank0: str | None = None,
              env: dict | None = None, reserved: Any = None) -> bool:
        """Run one process of a launch in this process (a spare is started this way;
        ``env`` is applied first: the device count, before JAX starts its backend;
        ``reserved`` is the launch's placement group being ready, resolved by Ray)."""
        if self._started:
            raise RuntimeError("this process already runs a launch")
        self._started = True
        self._log_path = log_path
        os.environ.update(env or {})
        ctx = dict(context)
        if ctx["num_processes"] > 1 and ctx["rank"] == 0:
            host = str(ctx["coordinator"]).rsplit(":", 1)[0]
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind((host, 0))
            self._reserved = s
            self._coordinator = f"{host}:{s.getsockname()[1]}"
            ctx["coordinator"] = self._coordinator
        self._thread = threading.Thread(target=self._run, args=(ctx, entry_point, log_path, rank0),
                                        name="gj-replica", daemon=True)
        self._thread.start()
        return True

    def _run(self, ctx: dict, entry_point: str, log_path: str, rank0: str | None) -> None:
        from goodput_jax.cluster.runner import run_replica

        self._preload.join()
        try:
            if ctx["num_processes"] > 1 and ctx["rank"] > 0:
                import ray

                if rank0 is None:
                    raise ValueError("rank0 (None): a rank > 0 needs rank 0's actor name")

                peer = wait_for_actor(rank0, timeout=120)
                deadline = time.monotonic() + 120
                coord = None
                while coord is None:  # rank 0 may not have started yet (a spare waits
                    coord = ray.get(peer.coordinator.remote(), timeout=120)  # for its group)
                    if coord is None:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"rank 0 ({rank0}) gave no coordinator")
                        time.sleep(0.1)
                ctx["coordinator"] = coord
            self._result = ("ok", run_replica(ctx, entry_point, log_path,
                                              on_distributed=self._release_port))
        except BaseException as e:  # noqa: BLE001 - reported to the controller by poll
            self._result = ("error", f"{type(e).__name__}: {e}")
        finally:
            self._release_port()

    def _release_port(self) -> None:
        s, self._reserved = self._reserved, None
        if s is not None:
            s.close()

    def coordinator(self) -> str | None:
        """``host:port`` of the coordinator (rank 0 of a multi-node launch)."""
        return self._coordinator

    def poll(self) -> tuple[str, Any] | None:
        """None while running; ``("ok", result)`` or ``("error", message)``."""
        return self._result

    def log_tail(self, chars: int = 100_000) -> str:
        """The end of this process's log (read on its own node)."""
        if self._log_path is None:
            return ""
        try:
            with open(self._log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - chars))
                return fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def pid(self) -> int:
        return os.getpid()


class RayLauncher:
    """Starts, polls, finds again and stops launches as detached actors (the module doc).

    Args:
        fake_devices: the accelerators are fake CPU devices (local clusters, CI).
        compile_cache: a directory for JAX's persistent compilation cache shared by
            every job's processes (None: off), so a relaunch loads the executables
            its previous launch compiled.
    """

    def __init__(self, fake_devices: bool = True, compile_cache: str | None = None, *,
                 spares: bool = False, state_root: str | None = None,
                 preload: tuple[str, ...] = PRELOAD, replenish_delay: float = 5.0):
        import ray

        self._ray = ray
        self.fake_devices = fake_devices
        self.compile_cache = compile_cache
        self.spares = bool(spares)
        self.preload = tuple(preload)
        self.replenish_delay = float(replenish_delay)
        self._actor = ray.remote(ReplicaActor)
        self._book = os.path.join(state_root, "launches.json") if state_root else None
        #: label -> (name, handle) of a warm spare process on that node
        self._spare: dict[str, tuple[str, Any]] = {}
        self._due: dict[str, float] = {}
        if self.spares:
            self._adopt_spares()

    # ---------------------------------------------------------------- spares
    def _adopt_spares(self) -> None:
        """Take over a previous controller's unused spares (a used one runs a launch: it
        is in the launch book, and says so itself)."""
        from goodput_jax.cluster.state import StateDir

        book = StateDir.read_json(self._book, {}) if self._book else {}
        used = {n for names in (book or {}).values() for n in names}
        for info in self._ray.util.list_named_actors(all_namespaces=True):
            name = info.get("name", "") if isinstance(info, dict) else str(info)
            ns = info.get("namespace") if isinstance(info, dict) else NAMESPACE
            if ns != NAMESPACE or not name.startswith(SPARE_PREFIX) or name in used:
                continue
            label = name[len(SPARE_PREFIX):].split("-", 1)[1]
            if label in self._spare:
                continue
            try:
                handle = self._ray.get_actor(name, namespace=NAMESPACE)
                if self._ray.get(handle.is_free.remote(), timeout=10):
                    self._spare[label] = (name, handle)
            except Exception as e:  # noqa: BLE001 - gone, or busy: not a spare
                logger.debug("spare %s: %s", name, e)

    def spare_status(self) -> dict[str, bool]:
        """``{label: warm}`` of the spare processes (warm: its imports are done)."""
        out = {}
        # a copy: the actor answers this on another thread than the ticks that warm()
        # (the benchmark's wait for a spare failed with "dictionary changed size")
        for label, (_, handle) in list(self._spare.items()):
            try:
                out[label] = bool(self._ray.get(handle.ready.remote(), timeout=2))
            except Exception:  # noqa: BLE001 - starting, or its node is gone
                out[label] = False
        return out

    def _base_env(self) -> dict:
        env = {}
        if self.compile_cache:
            env.update({"JAX_COMPILATION_CACHE_DIR": self.compile_cache,
                        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
        if self.fake_devices:
            env["JAX_PLATFORMS"] = "cpu"
        return env

    def warm(self, nodes: Sequence[NodeRecord]) -> None:
        """Keep one spare process per node of ``nodes`` (spares on): a process that has
        imported :data:`PRELOAD` and waits for a launch, so a launch on that node skips
        the process start and the imports. A used spare is replaced after
        ``replenish_delay`` seconds (not while its launch starts on the same CPUs).
        A spare is pinned to its node by Ray's node id (``NodeAffinitySchedulingStrategy``)."""
        if not self.spares:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        now = time.monotonic()
        labels = {n.label: n.node_id for n in nodes if n.node_id}
        for label in [k for k in self._spare if k not in labels]:
            name, handle = self._spare.pop(label)
            try:
                self._ray.kill(handle, no_restart=True)
            except Exception as e:  # noqa: BLE001 - its node is gone
                logger.debug("spare %s: %s", name, e)
        for label, node_id in labels.items():
            if label in self._spare or self._due.get(label, 0.0) > now:
                continue
            name = f"{SPARE_PREFIX}{int(time.time() * 1000)}-{label}"
            handle = self._actor.options(
                name=name, namespace=NAMESPACE, lifetime="detached", num_cpus=0,
                max_restarts=0, max_concurrency=4,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                runtime_env={"env_vars": self._base_env()},
            ).remote(None, None, None, None, self.preload)
            self._spare[label] = (name, handle)

    def _env(self, spec: JobSpec, devices: int) -> dict:
        env = self._base_env()
        env.update(spec.env)
        if self.fake_devices:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                                f" --xla_force_host_platform_device_count={devices}").strip()
        return env

    def _remember(self, pg: str, names: list[str] | None) -> None:
        if self._book is None:
            return
        from goodput_jax.cluster.state import StateDir

        book = StateDir.read_json(self._book, {}) or {}
        if names is None:
            book.pop(pg, None)
        else:
            book[pg] = names
        StateDir.write_json(self._book, book)

    def launch(self, spec: JobSpec, groups: Sequence[Placement], contexts: list[dict],
               log_paths: list[str]) -> dict:
        """One placement group, its bundle ``i`` pinned to ``groups[i]``'s node by Ray's
        node id, and one process per bundle (a warm spare on that node, if any)."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        groups = [Placement(*g) for g in groups]
        missing = [g.label for g in groups if not g.node_id]
        if missing:
            raise ValueError(f"groups: node {missing[0]!r} has no Ray node id to pin to")
        attempt = contexts[0]["attempt"]
        bundles = [{ACCEL: float(g.devices)} for g in groups]
        pg = placement_group(bundles, strategy="SPREAD" if len(bundles) > 1 else "PACK",
                             name=pg_name(spec.name, attempt), lifetime="detached",
                             bundle_label_selector=[{NODE_ID_LABEL: g.node_id} for g in groups])
        use = [self.spares and not spec.env and g.label in self._spare for g in groups]
        names = [self._spare[g.label][0] if u else actor_name(spec.name, attempt, i)
                 for i, (g, u) in enumerate(zip(groups, use))]
        self._remember(pg_name(spec.name, attempt), names)
        actors = []
        for i, ((label, k, _), ctx, log) in enumerate(zip(groups, contexts, log_paths)):
            if use[i]:
                _, spare = self._spare.pop(label)
                self._due[label] = time.monotonic() + self.replenish_delay
                env = {"XLA_FLAGS": self._env(spec, k)["XLA_FLAGS"]} if self.fake_devices else {}
                spare.start.remote(ctx, spec.entry_point, log, names[0], env, pg.ready())
                actors.append(spare)
                continue
            actors.append(self._actor.options(
                name=names[i], namespace=NAMESPACE, lifetime="detached", num_cpus=0,
                max_restarts=0, max_concurrency=4,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=i),
                runtime_env={"env_vars": self._env(spec, k)},
            ).remote(ctx, spec.entry_point, log, names[0]))
        return {"pg": pg, "actors": actors, "names": names,
                "pg_name": pg_name(spec.name, attempt), "spares": sum(use)}

    def attach(self, name: str, attempt: int, ranks: int) -> dict | None:
        """The handle of a launch still running (every rank's actor alive), or None."""
        from ray.util import get_placement_group

        from goodput_jax.cluster.state import StateDir

        book = StateDir.read_json(self._book, {}) if self._book else {}
        names = (book or {}).get(pg_name(name, attempt)) or \
            [actor_name(name, attempt, i) for i in range(ranks)]
        actors = []
        for n in names:
            try:
                actors.append(self._ray.get_actor(n, namespace=NAMESPACE))
            except ValueError:
                break
        try:
            pg = get_placement_group(pg_name(name, attempt))
        except ValueError:
            pg = None
        handle = {"pg": pg, "actors": actors, "names": names,
                  "pg_name": pg_name(name, attempt)}
        if len(actors) < ranks or pg is None:
            self.kill(handle)
            return None
        try:  # alive and answering
            self._ray.get([a.pid.remote() for a in actors], timeout=30)
        except Exception as e:  # noqa: BLE001 - a dead rank: the launch is gone
            logger.info("launch %s/%d not attachable: %s", name, attempt, e)
            self.kill(handle)
            return None
        return handle

    def remove_stale(self, keep: Sequence[dict] = ()) -> list[str]:
        """Remove the runtime's placement groups and launch actors that none of the
        handles ``keep`` holds (a dead controller's that nothing re-attached to; this
        launcher's spares stay); returns their names."""
        from ray.util import get_placement_group, placement_group_table

        keep_actors = {n for h in keep for n in h.get("names", [])}
        keep_actors |= {name for name, _ in self._spare.values()}
        keep_pgs = {h.get("pg_name") for h in keep}
        gone = []
        for info in self._ray.util.list_named_actors(all_namespaces=True):
            name = info.get("name", "") if isinstance(info, dict) else str(info)
            ns = info.get("namespace") if isinstance(info, dict) else NAMESPACE
            if ns == NAMESPACE and name.startswith(PG_PREFIX) and name not in keep_actors:
                try:
                    self._ray.kill(self._ray.get_actor(name, namespace=NAMESPACE),
                                   no_restart=True)
                    gone.append(name)
                except Exception as e:  # noqa: BLE001 - gone meanwhile
                    logger.debug("stale actor %s: %s", name, e)
        for info in placement_group_table().values():
            name = info.get("name") or ""
            if name.startswith(PG_PREFIX) and name not in keep_pgs and \
                    info.get("state") != "REMOVED":
                try:
                    self._ray.util.remove_placement_group(get_placement_group(name))
                    gone.append(name)
                except Exception as e:  # noqa: BLE001 - removed meanwhile
                    logger.debug("stale placement group %s: %s", name, e)
        return gone

    def poll(self, handle: dict) -> tuple[str, Any] | None:
        """None: running; ``("ok", [results])``; ``("error", (message, system))``."""
        ray = self._ray
        try:
            out = ray.get([a.poll.remote() for a in handle["actors"]], timeout=10)
        except ray.exceptions.GetTimeoutError:
            return None  # busy: next tick
        except ray.exceptions.ActorUnavailableError:
            return None
        except ray.exceptions.RayError as e:  # a process (or its node) died
            return "error", (_one_line(f"{type(e).__name__}: {e}"), True)
        for res in out:
            if res is not None and res[0] == "error":
                return "error", (_one_line(res[1]), False)
        if any(res is None for res in out):
            return None
        return "ok", [res[1] for res in out]

    def log_tail(self, handle: dict, rank: int) -> str | None:
        """A running launch's log of ``rank``, read on its node (None: not reachable)."""
        try:
            return self._ray.get(handle["actors"][rank].log_tail.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - gone
            return None

    def kill(self, handle: dict) -> None:
        for a in handle.get("actors", []):
            try:
                self._ray.kill(a, no_restart=True)
            except Exception as e:  # noqa: BLE001 - already gone or its node is gone
                logger.debug("kill: %s", e)
        self.release(handle)

    def release(self, handle: dict) -> None:
        if handle.get("pg_name"):
            self._remember(handle["pg_name"], None)
        for a in handle.get("actors", []):  # a finished process still holds its devices
            try:
                self._ray.kill(a, no_restart=True)
            except Exception as e:  # noqa: BLE001 - gone
                logger.debug("kill: %s", e)
        if handle.get("pg") is not None:
            try:
                self._ray.util.remove_placement_group(handle["pg"])
            except Exception as e:  # noqa: BLE001 - its node is gone
                logger.debug("remove_placement_group: %s", e)


def wait_for_actor(name: str, timeout: float = 60.0) -> Any:
    """The named actor of the runtime's namespace once it exists (polls)."""
    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
