"""Test-wide setup: 8 fake CPU devices (before JAX starts), a temporary default store, and a
guard that the suite writes nothing in the repository root.

* ``$GOODPUT_JAX_STORE`` (the store of a recorder, hooks, calculator or CLI given none) points
  at a file in a temporary directory of this session, so a test that passes no store writes
  there and not to ``./goodput.db``; a test of the default itself ``monkeypatch.delenv``s it
  and ``chdir``s to its ``tmp_path``. Subprocesses inherit it.
* Hypothesis keeps its example database in the same temporary directory (not ``.hypothesis``).
* After each test the repository root is listed again (one ``os.listdir``, ~20 us): an entry
  that appeared during the test is noted against it, and the session ends with an error
  naming each entry and the test it appeared in. pytest's own ``.pytest_cache`` and the tools'
  caches are allowed. Another process writing in the same checkout while the suite runs
  shows up here too: the message says so.
* Under pytest-xdist (``addopts`` in pyproject.toml: ``-n auto --dist loadfile``) the suite
  runs on up to 4 workers, one per core (none when the command names a single file: that
  runs in this process, as without xdist). Each file runs whole on one worker, and the
  modules that start a sandboxed Ray cluster run one after another on one worker, first,
  while the other workers take the rest, heaviest first (:data:`RAY_CLUSTER_MODULES`,
  :data:`HEAVY_FIRST`). Every worker has its own session directory (store, caches).
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()

# No test may reach a real GCE metadata server (the drop-in monitor asks it for the project
# and zone when GCPOptions leave them empty): point Google's clients and ours at a closed
# loopback port unless a test sets its own fake server.
os.environ.setdefault("GCE_METADATA_HOST", "127.0.0.1:9")
os.environ.setdefault("GCE_METADATA_IP", "127.0.0.1:9")

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Entries tools create in the root by design (all gitignored caches).
ROOT_CACHES = frozenset({".pytest_cache", ".hypothesis", ".ruff_cache", "__pycache__"})

#: This session's scratch directory: the default store, Hypothesis's database.
SESSION_DIR = tempfile.mkdtemp(prefix="goodput-jax-tests-")
# removed at interpreter exit, after the recorders' own exit handlers (registered later, run
# earlier) have flushed into it
atexit.register(shutil.rmtree, SESSION_DIR, True)
os.environ["GOODPUT_JAX_STORE"] = "sqlite:///" + os.path.join(SESSION_DIR, "goodput.db")
# the package's per-machine caches (the step-time fit's compiled program, the measured peak)
# live in this session's directory, not in ~/.cache; subprocesses inherit it
os.environ["GOODPUT_JAX_CACHE_DIR"] = os.path.join(SESSION_DIR, "cache")
try:
    from hypothesis.configuration import set_hypothesis_home_dir
except ImportError:  # hypothesis is in the test extra; without it nothing writes .hypothesis
    pass
else:
    set_hypothesis_home_dir(os.path.join(SESSION_DIR, "hypothesis"))


def _root_entries() -> set[str]:
    try:
        return set(os.listdir(REPO_ROOT))
    except OSError:
        return set()


_AT_START = _root_entries()
#: root entry -> the test during which it appeared
_LEFT: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _nothing_written_in_the_repo_root(request):
    before = _root_entries()
    yield
    for name in sorted(_root_entries() - before - ROOT_CACHES):
        _LEFT.setdefault(name, request.node.nodeid)


@pytest.fixture(scope="session", autouse=True)
def _repo_root_unchanged_by_the_session():
    yield
    new = _root_entries() - _AT_START - ROOT_CACHES
    if new:
        where = ", ".join(f"{n!r} (during {_LEFT.get(n, 'collection or a fixture')})"
                          for n in sorted(new))
        pytest.fail(f"the tests wrote in the repository root {REPO_ROOT}: {where}; write under "
                    f"tmp_path and pass explicit stores (or another process wrote in this "
                    f"checkout meanwhile)", pytrace=False)


# ------------------------------------------------------------------- pytest-xdist layout
#: The modules that each start a sandboxed Ray cluster (a few Ray daemons per node and
#: small JAX jobs, 15-80 s each): one scope under xdist, so one worker runs them one after
#: another (never two clusters at once on a 2-core machine), and first (the longest).
RAY_CLUSTER_MODULES = (
    "tests/cluster/test_cluster.py",
    "tests/cluster/test_autoscale_ray.py",
    "tests/cluster/test_raylet_kill.py",
    "tests/cluster/test_ray_lines.py",
)
#: The next heaviest modules (measured: ``--durations``), longest first: started early so
#: that the many small modules fill the end of the run on every worker. A stale entry only
#: changes the order.
HEAVY_FIRST = (
    "tests/test_notebooks.py",
    "tests/model/test_gradstats_truth.py",
    "tests/sched/test_sim.py",
    "tests/integrations/test_adaptive_elastic.py",
    "tests/cluster/test_docs_job.py",
    "tests/sched/test_precompile.py",
    "tests/sched/test_pollux.py",
    "tests/integrations/test_quickstart_loop.py",
    "tests/integrations/test_hooks.py",
    "tests/test_demo.py",
    "tests/cluster/test_checkpointing.py",
)
#: Most workers ``-n auto`` starts (memory: each imports JAX; the Ray group needs one).
MAX_WORKERS = 4


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core (at most :data:`MAX_WORKERS`); none (this process,
    as without xdist) on one core or when the arguments name one test file."""
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if env:
        return int(env)
    files = {_module(a) for a in config.args}
    if len(files) <= 1 and all(os.path.isfile(f) for f in files):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = min(cores or 1, MAX_WORKERS)
    return n if n > 1 else 0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the Ray-cluster modules as one file, in collection order
    (which :func:`pytest_collection_modifyitems` sets on the workers), not by test count."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayClustersTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module(nodeid)
            return "ray-cluster modules" if module in RAY_CLUSTER_MODULES else module

    config.option.loadscopereorder = False
    return RayClustersTogether(config, log)


def pytest_collection_modifyitems(config, items):
    """On an xdist worker: the Ray-cluster modules first, then :data:`HEAVY_FIRST`, then
    the rest in their usual order (every worker sorts the same collection the same way).
    A run without workers keeps pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {m: i for i, m in enumerate(RAY_CLUSTER_MODULES + HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(rank)))
