"""JobInfo / NodeInfo validation and SpeedupFunction semantics against the real goodput model."""

from datetime import datetime, timedelta

import numpy as np
import pytest

from goodput_jax.model.goodput import GoodputFunction
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.sched.speedup import SpeedupFunction, speedup_tables
from goodput_jax.sched.types import JobInfo, NodeInfo, timestamp_seconds

PERF = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)
GRAD = GradParams(sqr=0.00136, var=0.000502)


class CountingGoodput(GoodputFunction):
    """The real goodput model, counting optimize calls (to observe memoisation)."""

    calls = 0

    def optimize(self, *args, **kwargs):
        type(self).calls += 1
        return super().optimize(*args, **kwargs)


@pytest.fixture(scope="module")
def speedup():
    return SpeedupFunction(GoodputFunction(PERF, GRAD, 128), max_batch_size=1280,
                           atomic_bsz_range=(64, 256))


def test_jobinfo_fields_and_tuple_timestamp():
    now = datetime(2024, 5, 1, 12, 0, 0)
    job = JobInfo({"gpu": 1, "pods": 1}, lambda n, r: r, (now + timedelta(minutes=1),), 0, 8)
    assert job.creation_timestamp == now + timedelta(minutes=1)
    assert job.creation_time == pytest.approx((now + timedelta(minutes=1)).timestamp())
    assert (job.min_replicas, job.max_replicas, job.preemptible) == (0, 8, True)
    assert timestamp_seconds(3.5) == 3.5
    node = NodeInfo({"gpu": 4}, preemptible=True)
    assert node.preemptible and node.resources == {"gpu": 4}


@pytest.mark.parametrize("kwargs, match", [
    ({"min_replicas": 3, "max_replicas": 2}, "max_replicas \\(2\\) < min_replicas \\(3\\)"),
    ({"min_replicas": 0, "max_replicas": 0}, "max_replicas must be >= 1"),
    ({"min_replicas": -1, "max_replicas": 2}, "min_replicas must be >= 0"),
])
def test_jobinfo_rejects_bad_replicas(kwargs, match):
    with pytest.raises(ValueError, match=match):
        JobInfo({"gpu": 1}, lambda n, r: r, 0.0, **kwargs)


def test_bad_resources_and_callables_named():
    with pytest.raises(ValueError, match="resources\\['gpu'\\]"):
        NodeInfo({"gpu": -1}, preemptible=False)
    with pytest.raises(TypeError, match="resources\\['cpu'\\]"):
        JobInfo({"cpu": "lots"}, lambda n, r: r, 0.0, 0, 1)
    with pytest.raises(TypeError, match="speedup_fn must be callable"):
        JobInfo({"gpu": 1}, 3, 0.0, 0, 1)
    with pytest.raises(TypeError, match="creation_timestamp"):
        JobInfo({"gpu": 1}, lambda n, r: r, "yesterday", 0, 1)


def test_speedup_base_and_scalar_types(speedup):
    assert speedup(1, 1) == 1.0 and isinstance(speedup(1, 1), float)
    assert speedup(0, 0) == 0.0 and isinstance(speedup(0, 0), float)
    assert speedup[1, 1] == 1.0


def test_speedup_matches_goodput_ratio(speedup):
    fn = GoodputFunction(PERF, GRAD, 128)
    base, _, _ = fn.optimize(1, 1, max_batch_size=1280, atomic_bsz_range=(64, 256))
    nodes = np.array([1, 1, 2, 2, 4, 3])
    replicas = np.array([2, 4, 4, 8, 8, 12])
    goodput, _, _ = fn.optimize(nodes, replicas, max_batch_size=1280, atomic_bsz_range=(64, 256))
    out = speedup(nodes, replicas)
    assert isinstance(out, np.ndarray) and out.shape == (6,)
    np.testing.assert_allclose(out, goodput / base, rtol=1e-5)
    # More replicas on one node help here, with diminishing returns.
    assert 1.0 < speedup(1, 2) < speedup(1, 4) < 4.0


def test_speedup_broadcast_and_zero_entries(speedup):
    out = speedup(np.array([[0], [1]]), np.array([[0, 0], [1, 2]])[..., :1] * np.ones((1, 3), int))
    assert out.shape == (2, 3)
    assert np.all(out[0] == 0.0) and np.allclose(out[1], 1.0)


@pytest.mark.parametrize("nodes, replicas, match", [
    (3, 2, "num_nodes \\(3\\) > num_replicas \\(2\\)"),
    (0, 2, "both be zero or both positive"),
    (-1, 2, ">= 0"),
    (1.5, 2, "whole numbers"),
])
def test_speedup_rejects_bad_allocations(speedup, nodes, replicas, match):
    with pytest.raises(ValueError, match=match):
        speedup(nodes, replicas)


def test_speedup_memoised():
    CountingGoodput.calls = 0
    fn = SpeedupFunction(CountingGoodput(PERF, GRAD, 128), max_batch_size=1280,
                         atomic_bsz_range=(64, 256))
    first = CountingGoodput.calls  # the (1, 1) base
    values = fn(np.array([1, 2, 2]), np.array([3, 4, 8]))
    after_table = CountingGoodput.calls
    assert after_table == first + 1  # one vectorised call builds the whole table
    np.testing.assert_array_equal(fn(np.array([1, 2, 2]), np.array([3, 4, 8])), values)
    fn(4, 8), fn.table(4, 8)
    assert CountingGoodput.calls == after_table
    # Beyond the dense-table limits, pairs are memoised individually.
    fn(200, 600), fn(200, 600)
    assert CountingGoodput.calls == after_table + 1


def test_table_layout(speedup):
    table = speedup.table(4, 8)
    assert table.shape == (5, 9)
    assert table[0].sum() == 0 and table[:, 0].sum() == 0
    assert np.all(np.tril(table, -1)[1:, :] == np.tril(table, -1)[1:, :] * 0)  # n > r -> 0
    for n in range(1, 5):
        for r in range(n, 9):
            assert table[n, r] == pytest.approx(speedup(n, r))


def test_speedup_tables_batched_matches_individual():
    fns = [SpeedupFunction(GoodputFunction(PERF, GradParams(0.00136 * k, 0.000502), 128),
                           max_batch_size=1280 * k, atomic_bsz_range=(32 * k, 256))
           for k in (1, 2, 3)]
    fns.append(SpeedupFunction(GoodputFunction(PERF, GRAD, 64), accumulation=True,
                               max_batch_size=640, atomic_bsz_range=(32, 128)))
    linear = lambda n, r: r
    tables = speedup_tables(fns + [linear, fns[0]], 3, 6)
    assert tables.shape == (6, 4, 7)
    fresh = [SpeedupFunction(fn.goodput_fn, fn.max_batch_size, fn.atomic_bsz_range,
                             fn.accumulation) for fn in fns]
    for got, ref in zip(tables[:4], fresh):
        np.testing.assert_allclose(got, ref.table(3, 6), rtol=2e-5, atol=1e-6)
    n, r = np.meshgrid(np.arange(4), np.arange(7), indexing="ij")
    np.testing.assert_array_equal(tables[4], np.where((n >= 1) & (n <= r), r, 0))
    np.testing.assert_array_equal(tables[5], tables[0])


def test_speedup_constructor_errors():
    with pytest.raises(TypeError, match="optimize method"):
        SpeedupFunction(object())
    with pytest.raises(ValueError, match="atomic_bsz_range"):
        SpeedupFunction(GoodputFunction(PERF, GRAD, 128), atomic_bsz_range=(1, 2, 3))


class _SqrtGoodput:
    """AdaptDL speedup_test.py's model: goodput 32 * sqrt(replicas), counting its calls."""

    def __init__(self):
        self.calls = []

    def optimize(self, num_nodes, num_replicas, max_batch_size=None, atomic_bsz_range=None,
                 accumulation=False):
        self.calls.append((np.array(num_nodes), np.array(num_replicas)))
        return 32 * np.sqrt(num_replicas), 32, 0


@pytest.mark.parametrize("mem_size", [None, 32, 4])
def test_speedup_accepts_adaptdl_mem_size(mem_size):
    # AdaptDL's test_speedup, with the mem_size argument its constructor takes
    kwargs = {} if mem_size is None else {"mem_size": mem_size}
    speedup_fn = SpeedupFunction(_SqrtGoodput(), **kwargs)
    assert speedup_fn.mem_size == mem_size
    num_replicas = np.arange(1, 100)
    assert np.allclose(speedup_fn(1, num_replicas), np.sqrt(num_replicas))


def test_speedup_memoize_with_mem_size():
    # AdaptDL's test_memoize: never-seen, some-seen and all-seen inputs
    goodput_fn = _SqrtGoodput()
    speedup_fn = SpeedupFunction(goodput_fn, mem_size=32)
    goodput_fn.calls.clear()
    num_nodes = num_replicas = np.arange(1, 10)
    assert np.allclose(speedup_fn(num_nodes, num_replicas), np.sqrt(num_replicas))
    assert len(goodput_fn.calls) == 1
    # the first table covers num_replicas < mem_size: no new call below 32
    num_nodes = num_replicas = np.arange(1, 20)
    assert np.allclose(speedup_fn(num_nodes, num_replicas), np.sqrt(num_replicas))
    num_nodes_3 = num_replicas_3 = np.arange(5, 32)
    assert np.allclose(speedup_fn(num_nodes_3, num_replicas_3), np.sqrt(num_replicas_3))
    assert len(goodput_fn.calls) == 1
    # beyond it the table grows, once
    assert np.allclose(speedup_fn(1, np.arange(30, 40)), np.sqrt(np.arange(30, 40)))
    assert speedup_fn(2, 39) == pytest.approx(np.sqrt(39))
    assert len(goodput_fn.calls) == 2
    # without mem_size, 1..9 then 1..19 grow the table twice (values are the same)
    goodput_fn = _SqrtGoodput()
    speedup_fn = SpeedupFunction(goodput_fn)
    speedup_fn(np.arange(1, 10), np.arange(1, 10))
    speedup_fn(np.arange(1, 20), np.arange(1, 20))
    assert len(goodput_fn.calls) == 3  # the base goodput, then two growths


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "32"])
def test_speedup_rejects_bad_mem_size(bad):
    with pytest.raises(ValueError, match=f"mem_size must be a positive integer or None, "
                                         f"got {bad!r}"):
        SpeedupFunction(_SqrtGoodput(), mem_size=bad)
