"""Program goodput on CPU (issue 35, Build 1): XLA's cost analysis of the compiled step,
the measured peak, and MFU from device-true step times against a profiler trace.

Device truth is not goodput_jax's: each step's execution time is the XLA runtime's busy
interval in a ``jax.profiler`` trace of the run (``tests.runtime._helpers.device_busy``;
the loop waits for each step and then does a little host work, so steps show as separate
intervals). The MFU that ``GoodputCalculator.get_program_goodput`` computes from the
device-true step times must be within 5 % of ``flops / (median execution time x peak)``
with the same measured peak.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from goodput_jax import goodput, runtime
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.productivity import DevicePeak, lookup_peak
from goodput_jax.measure.stores.sqlite import SQLiteStore
from goodput_jax.runtime.program import device_peak, measured_peak, program_cost
from tests.runtime._helpers import device_busy, step_executions, traced_job

N = 1280  # ~50-100 ms a step on 2 CPU cores: the host wake-up (~1 ms under load) stays < 2 %
STEPS = 14
ATTEMPTS = 3


@jax.jit
def _matmul(a, b):
    return a @ b, jnp.sum(a)


@pytest.fixture(autouse=True, scope="module")
def _peak_cache_in_tmp(tmp_path_factory):
    """The measured peak's cache file in a tmp dir (one probe for the module)."""
    import os

    from goodput_jax.runtime.peak import CACHE_ENV

    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("peak-cache"))
    yield
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


def runtime_sources() -> list:
    """The runtime's modules that call the peak's API (not the ones that define it)."""
    import pathlib

    here = pathlib.Path(runtime.__file__).parent
    return [p for p in here.glob("*.py") if p.name not in ("peak.py", "program.py")]


def _arrays():
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((N, N)), jnp.float32)
    return a, a * 0.5


def test_cost_analysis_flops_match_the_formula_and_add_no_compile():
    a, b = _arrays()
    jax.block_until_ready(_matmul(a, b))
    seen = []
    rec = goodput.GoodputRecorder("pc", "l", True, store="sqlite:///:memory:")
    att = runtime.attach(rec)  # holds the recorder weakly: this test keeps it alive
    try:
        before = att.compilations
        t = time.perf_counter()
        cost = program_cost(_matmul, a, b)
        took = time.perf_counter() - t
        seen.append(att.compilations - before)
    finally:
        rec.close()
        att.detach()
    # 2 n^3 for the matmul plus n^2 - 1 adds of the sum: within 1 % of 2 n^3
    assert abs(cost.flops - 2 * N ** 3) <= 0.01 * 2 * N ** 3, cost
    assert seen == [0], "reading the cost analysis compiled"
    assert cost.device_kind == jax.devices()[0].device_kind and cost.num_devices == 1
    assert cost.bytes_accessed >= 3 * N * N * 4  # two inputs and the output, float32
    assert took < 0.5  # generous: the benchmark measures it (well under 1 ms)
    with pytest.raises(TypeError, match="fn"):
        program_cost(lambda x: x, a)


def test_peak_table_and_measured_peak():
    assert lookup_peak("TPU v5 lite").device_kind == "TPU v5e"
    assert lookup_peak("NVIDIA H100 PCIe").flops_per_s == 756e12
    assert lookup_peak("NVIDIA H200").bytes_per_s == 4.8e12
    mine = DevicePeak("cpu", 1e12, 1e11, "user")
    assert lookup_peak("cpu", {"cpu": mine}) is mine
    assert device_peak("TPU v4").source == "table"
    p = measured_peak()
    assert p.source == "measured" and p.device_kind == jax.devices()[0].device_kind
    assert measured_peak() is p  # cached per process
    assert p.flops_per_s > 1e8 and p.bytes_per_s > 1e7


M = 640  # the held-out shapes (issue 44, item 7): 2-3 GFLOP a step, like N's matmul


@jax.jit
def _mlp_train(ws, x):
    """A 2-layer tanh MLP's training step, its backward pass included: 5 matrix products."""
    def loss(ws, x):
        h = x
        for w in ws:
            h = jnp.tanh(h @ w)
        return jnp.mean(h)

    value, grads = jax.value_and_grad(loss)(ws, x)
    return tuple(w - 1e-3 * g for w, g in zip(ws, grads, strict=True)), value


@jax.jit
def _scanned(ws, x):
    """Four matmul + tanh layers as one lax.scan (a loop XLA's analysis counts once)."""
    h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
    return h, jnp.sum(h)


def _step_of(kind: str):
    """(the jitted step, its arguments, its matrix products' FLOPs by the formula)."""
    if kind == "matmul":
        return _matmul, _arrays(), 2 * N ** 3
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((M, M)), jnp.float32)
    if kind == "mlp_backward":
        ws = tuple(jnp.asarray(rng.standard_normal((M, M)) / M ** 0.5, jnp.float32)
                   for _ in range(2))
        return _mlp_train, (ws, x), 5 * 2 * M ** 3
    ws = jnp.asarray(rng.standard_normal((4, M, M)) / M ** 0.5, jnp.float32)
    return _scanned, (ws, x), 4 * 2 * M ** 3


def _run(tmp_path, name: str, kind: str = "matmul") -> tuple[GoodputCalculator, list, list]:
    fn, args, _ = _step_of(kind)
    db = tmp_path / f"{name}.db"
    rec = goodput.GoodputRecorder(name, "l", True, store=f"sqlite:///{db}")
    steps = runtime.StepRecorder(rec)
    marks = []
    with traced_job(tmp_path / f"trace-{name}", rec, steps):
        for step in range(STEPS):
            t0 = time.time()
            out, s = steps(step, fn, *args)
            float(s)
            jax.block_until_ready(out)
            marks.append((t0, time.time()))
            time.sleep(0.003)  # host work between steps: the trace shows each step apart
    spans = device_busy(tmp_path / f"trace-{name}")
    calc = GoodputCalculator(name, store=SQLiteStore(str(db), create=False))
    return calc, spans, marks


@pytest.mark.parametrize("kind", ["matmul", "mlp_backward", "scan"])
def test_mfu_from_device_true_step_time_matches_profiler(tmp_path, kind):
    """Acceptance: MFU within 5 % of the profiler's, against the measured peak; on a matmul,
    and (issue 44, item 7) on a step with its backward pass and on scanned layers."""
    peak = measured_peak()
    _, _, formula = _step_of(kind)
    errs = []
    for attempt in range(ATTEMPTS):
        calc, spans, marks = _run(tmp_path, f"mfu{attempt}", kind)
        pg = calc.get_program_goodput()
        assert len(pg.programs) == 1, pg
        ps = pg.programs[0]
        # the measured peak, raised where a step beat it (then the figures are against that)
        assert (ps.peak == peak or ps.raised_from == peak) and ps.peak.source == "measured"
        # the products by the formula, and the elementwise work beside them (< 1 %)
        assert formula <= ps.cost.flops <= 1.01 * formula, (ps.cost.flops, formula)
        # the profiler's execution time of each step (after the first: its compile)
        execs = step_executions(spans, marks[1:])
        truth = min(ps.cost.flops / (float(np.median(execs)) * ps.peak.flops_per_s), 1.0)
        err = abs(ps.mfu - truth) / truth
        errs.append((ps.mfu, truth, err))
        # the rest of the record is consistent
        assert ps.ideal_step_time_s == pytest.approx(max(ps.compute_time_s, ps.memory_time_s))
        assert ps.program_goodput == pytest.approx(ps.ideal_step_time_s / ps.step_time_s)
        assert ps.bound in ("compute", "memory", "ridge") and ps.program_goodput <= 1.0
        assert pg.mfu == pytest.approx(ps.mfu)
        if err <= 0.05:
            break
    print("MFU vs profiler", kind, errs)
    assert errs[-1][2] <= 0.05, errs


def test_cost_is_per_device_for_a_sharded_step(tmp_path):
    """Two CPU devices (a fresh process): a row-sharded matmul costs each device half."""
    import os
    import subprocess
    import sys
    import textwrap

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "sharded.py"
    script.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        from goodput_jax.runtime import program_cost
        mesh = jax.make_mesh((2,), ("d",))
        n = 256
        a = jax.device_put(jnp.ones((n, n)), NamedSharding(mesh, P("d", None)))
        b = jax.device_put(jnp.ones((n, n)), NamedSharding(mesh, P()))
        f = jax.jit(lambda a, b: a @ b)
        f(a, b)
        c = program_cost(f, a, b)
        print(c.flops / (2 * n ** 3), c.num_devices)
        """))
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=180, env=env, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0.5", "2"]


def _close_and_read_costs(steps, rec, db, job):
    """Close the step recorder and the recorder (job end recorded); the PROGRAM_COST events."""
    steps.close()
    rec.record_job_end_time()
    rec.close()
    store = SQLiteStore(str(db), create=False)
    costs = [e for e in store.read_events(job)[0] if e.kind.value == "program_cost"]
    store.close()
    return costs


def test_step_recorder_records_each_compiled_program_once(tmp_path):
    """A new batch shape compiles a new program: its cost is recorded at that step; steps
    that compile nothing record nothing (and a plain Python step records no cost)."""
    db = tmp_path / "shapes.db"
    rec = goodput.GoodputRecorder("shapes", "l", True, store=f"sqlite:///{db}")
    peak = DevicePeak("cpu", 1e11, 1e10, "user")
    steps = runtime.StepRecorder(rec, peak=peak)

    @jax.jit
    def f(x):
        return x @ x.T, jnp.sum(x)

    small, big = jnp.ones((16, 32)), jnp.ones((64, 32))
    jax.block_until_ready((small, big))
    rec.record_job_start_time()
    for step in range(8):
        out = steps(step, f, small if step < 4 else big)
        float(out[1])
    steps(8, lambda x: x + 1, 1)  # not jitted: nothing to analyse
    costs = _close_and_read_costs(steps, rec, db, "shapes")
    assert [e.step for e in costs] == [0, 4]
    # x @ x.T: 2 n^2 32 FLOPs; the sum: n 32 - 1 adds (XLA counts exactly)
    assert [e.payload["flops"] for e in costs] == [2 * n * n * 32 + n * 32 - 1 for n in (16, 64)]
    assert costs[0].payload["peak"]["source"] == "user"
    pg = GoodputCalculator("shapes", store=f"sqlite:///{db}").get_program_goodput()
    assert [(p.first_step, p.num_steps) for p in pg.programs] == [(0, 3), (4, 4)]


#: the steps.py edit of issue 44 (item 3) makes StepRecorder ask peak_or_later (the probe off
#: the training thread); until the lead applies it the first call still waits for the probe
STEPS_DEFER_THE_PROBE = any("peak_or_later(" in p.read_text() for p in runtime_sources())


@pytest.mark.xfail(not STEPS_DEFER_THE_PROBE, strict=True,
                   reason="needs the runtime/steps.py edit in issue 44's peak report")
def test_the_peak_probe_is_off_the_jobs_clock(tmp_path):
    """A fresh machine (an empty peak cache, a fresh process): the probe runs on its own
    thread, held here until the first call has returned, so that call cannot have waited
    for it. Program startup reads what a timer around the first call reads (the issue saw
    0.104 s against 0.402 s: the probe was inside the call), no bucket of the job holds the
    probe but its own ("peak probe": ``close()`` of a job shorter than the probe waits for
    it there), and the program's cost is recorded at step 0 with the measured peak."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    db = tmp_path / "probe.db"
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(f"""
        import json, threading, time
        import jax, jax.numpy as jnp
        from goodput_jax import goodput, runtime
        from goodput_jax.measure.calculator import BadputType, GoodputCalculator
        from goodput_jax.runtime import peak
        gate = threading.Event()
        real = peak._probe
        def held(dev):
            gate.wait(10)  # held past the first call (which must not wait for it)
            return real(dev)
        peak._probe = held
        f = jax.jit(lambda x: (x * 2.0, jnp.sum(x)))
        x = jnp.ones((64,))
        rec = goodput.GoodputRecorder("probe", "l", True, store="sqlite:///{db}")
        rec.record_job_start_time()
        steps = runtime.StepRecorder(rec)
        t0 = time.perf_counter()
        x, s = steps(0, f, x)
        first = time.perf_counter() - t0
        probing = not peak.start_peak_probe().done()
        gate.set()
        for i in range(1, 6):
            x, s = steps(i, f, x)
            float(s)
        steps.close()  # the probe may still run: close() waits for it, in its own bucket
        rec.record_job_end_time()
        pk = peak.start_peak_probe().result(300)
        rec.close()
        calc = GoodputCalculator("probe", store="sqlite:///{db}")
        det = calc.get_job_goodput_details()
        pg = calc.get_program_goodput()
        print(json.dumps({{"first": first, "probing": probing,
                          "startup": det["badput_time"][BadputType.PROGRAM_STARTUP],
                          "other": det["badput_time"][BadputType.OTHER],
                          "custom": det["custom_badput_time"],
                          "probe_s": peak.start_peak_probe().seconds,
                          "programs": [(p.first_step, p.peak.source, p.peak.flops_per_s)
                                       for p in pg.programs],
                          "peak": pk.flops_per_s}}))
        """))
    env = dict(os.environ, JAX_PLATFORMS="cpu", GOODPUT_JAX_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env=env, check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print(out)
    assert out["probing"], out  # the first call returned while the probe was held
    # the first call is program startup (its compile), nothing else booked around it, and
    # the job's unaccounted time does not hold the probe (its wait at close() is its own)
    assert abs(out["first"] - out["startup"]) < 0.1, out
    assert out["other"] < 0.5 * out["probe_s"], out
    assert set(out["custom"]) <= {"peak probe"}, out
    assert out["programs"] and out["programs"][0][:2] == [0, "measured"], out
    assert out["programs"][0][2] >= out["peak"]  # (raised where a step beat it)


def test_a_compile_between_steps_reads_the_cost_once_and_records_no_repeat(tmp_path, monkeypatch):
    """The attachment's compile callback flags a compile for the step call's return: steps
    that compile nothing read no cost (a count of the reads), a compile between steps (an
    evaluation's) makes the next step read its program again, and an equal cost is not
    recorded twice; a later recompile into another program is."""
    import goodput_jax.runtime.steps as steps_mod

    reads = []
    real = steps_mod.program_cost

    def counting(fn, *args, **kwargs):
        reads.append(len(reads))
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(steps_mod, "program_cost", counting)
    db = tmp_path / "between.db"
    rec = goodput.GoodputRecorder("between", "l", True, store=f"sqlite:///{db}")
    steps = runtime.StepRecorder(rec, peak=DevicePeak("cpu", 1e11, 1e10, "user"))
    recorded = steps.wrap(jax.jit(lambda x: (x * 2.0, jnp.sum(x))))
    evaluate = jax.jit(lambda x: jnp.max(x) + 1.0)
    small, big = jnp.ones((8, 4)), jnp.ones((16, 4))
    jax.block_until_ready((small, big))
    rec.record_job_start_time()
    for step in range(12):
        x = small if step < 9 else big
        _y, s = recorded(step, x)
        float(s)
        if step == 4:
            float(evaluate(x))  # compiles between steps 4 and 5
    costs = _close_and_read_costs(steps, rec, db, "between")
    assert len(reads) == 3, reads  # step 0, step 5 (after the evaluation's compile), step 9
    assert [e.step for e in costs] == [0, 9]
    # x * 2: n 4 multiplies; the sum: n 4 - 1 adds
    assert [e.payload["flops"] for e in costs] == [2 * n * 4 - 1 for n in (8, 16)]


def test_a_step_recorder_collected_without_close_leaves_the_attachments_callbacks(tmp_path):
    """A StepRecorder dropped without close(): its compile callback, at the next compile,
    removes itself from the recorder's attachment (no callback kept for a dead recorder)."""
    import gc

    rec = goodput.GoodputRecorder("gone", "l", True, store=f"sqlite:///{tmp_path / 'gone.db'}")
    steps = runtime.StepRecorder(rec, peak=DevicePeak("cpu", 1e11, 1e10, "user"))
    att = runtime.attached(rec)
    assert att is not None and len(att.compile_callbacks) == 1
    del steps
    gc.collect()
    jax.jit(lambda x: jnp.cos(x) * 7.0)(jnp.ones(3)).block_until_ready()  # a compile
    assert att.compile_callbacks == ()
    rec.close()


def test_a_scan_over_layers_counts_every_iteration():
    """XLA's cost analysis counts a loop body once; program_cost multiplies its matrix
    products by the loop's trip count (``lax.scan`` over layers, as MaxText's default)."""
    n, layers = 128, 6
    ws = jnp.ones((layers, n, n), jnp.float32) * 0.01

    @jax.jit
    def scanned(ws, x):
        h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
        return h

    x = jnp.ones((n, n), jnp.float32)
    jax.block_until_ready(scanned(ws, x))
    formula = 2 * layers * n ** 3
    xla = _first_ca(scanned.lower(ws, x).compile().cost_analysis())["flops"]
    assert xla < 0.5 * formula  # what the correction is for (one iteration counted)
    cost = program_cost(scanned, ws, x)
    assert abs(cost.flops - formula) <= 0.01 * formula, (cost.flops, formula, xla)
    # the text read without op metadata counts what the public text counts
    from goodput_jax.runtime.program import _hlo_text, matmul_counts

    compiled = scanned.lower(ws, x).compile()
    short = _hlo_text(compiled)
    assert len(short) < len(compiled.as_text())
    assert matmul_counts(short) == matmul_counts(compiled.as_text())
    assert matmul_counts(short).dot_flops_looped == formula

    @jax.jit
    def nested(ws, x):  # a scan of 3 inside a scan over the layers: 3 x layers products
        def outer(h, w):
            return jax.lax.scan(lambda g, v: (jnp.tanh(g @ v), None), h, jnp.stack([w] * 3))[0], None
        return jax.lax.scan(outer, x, ws)[0]

    jax.block_until_ready(nested(ws, x))
    assert program_cost(nested, ws, x).flops == pytest.approx(3 * formula, rel=0.01)


def _first_ca(ca):
    return ca[0] if isinstance(ca, (list, tuple)) else ca


# An excerpt of the HLO that jax 0.11.2 compiled on an H200 for ``lax.scan`` over 4 bf16
# 8192^2 matmuls: the product is a cuBLAS call inside the loop body, which XLA's cost
# analysis counted as 0 FLOPs (its figure: 1.342e8, the final sum's).
_GPU_SCAN_HLO = """\
HloModule jit_scanned, entry_computation_layout={(bf16[8192,8192]{1,0})->bf16[8192,8192]{1,0}}

%region_0.2 (arg_tuple.1: (s32[], bf16[8192,8192], bf16[4,8192,8192])) -> (s32[], bf16[8192,8192], bf16[4,8192,8192]) {
  %arg_tuple.1 = (s32[], bf16[8192,8192]{1,0}, bf16[4,8192,8192]{2,1,0}) parameter(0), metadata={scheduling_name="arg_tuple.1"}
  %get-tuple-element.7 = s32[] get-tuple-element(%arg_tuple.1), index=0
  %get-tuple-element.15 = bf16[4,8192,8192]{2,1,0} get-tuple-element(%arg_tuple.1), index=2
  %get-tuple-element.8 = bf16[8192,8192]{1,0} get-tuple-element(%arg_tuple.1), index=1
  %bitcast.6.0 = bf16[8192,8192]{1,0} bitcast(%get-tuple-element.15)
  %custom-call.1 = (bf16[8192,8192]{1,0}, s8[33554432]{0}) custom-call(%get-tuple-element.8, %bitcast.6.0), custom_call_target="__cublas$lt$matmul", metadata={op_name="jit(scanned)/while/body/dot_general"}, backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_batch_dimensions":[],"lhs_contracting_dimensions":["1"],"rhs_batch_dimensions":[],"rhs_contracting_dimensions":["0"]}}}
  %get-tuple-element.14 = bf16[8192,8192]{1,0} get-tuple-element(%custom-call.1), index=0
  ROOT %tuple.4 = (s32[], bf16[8192,8192]{1,0}, bf16[4,8192,8192]{2,1,0}) tuple(%get-tuple-element.7, %get-tuple-element.14, %get-tuple-element.15)
}

%region_1.3 (arg_tuple.3: (s32[], bf16[8192,8192], bf16[4,8192,8192])) -> pred[] {
  %arg_tuple.3 = (s32[], bf16[8192,8192]{1,0}, bf16[4,8192,8192]{2,1,0}) parameter(0)
  %get-tuple-element.9 = s32[] get-tuple-element(%arg_tuple.3), index=0
  %constant.6 = s32[] constant(4)
  ROOT %lt = pred[] compare(%get-tuple-element.9, %constant.6), direction=LT
}

%fused_dot (p0: bf16[8192,8192], p1: bf16[8192,8192]) -> bf16[8192,8192] {
  %p0 = bf16[8192,8192]{1,0} parameter(0)
  %p1 = bf16[8192,8192]{1,0} parameter(1)
  ROOT %dot.0 = bf16[8192,8192]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main.2 (ws.1: bf16[4,8192,8192], x.1: bf16[8192,8192]) -> bf16[8192,8192] {
  %ws.1 = bf16[4,8192,8192]{2,1,0} parameter(0)
  %x.1 = bf16[8192,8192]{1,0} parameter(1)
  %constant.7 = s32[] constant(0)
  %tuple = (s32[], bf16[8192,8192]{1,0}, bf16[4,8192,8192]{2,1,0}) tuple(%constant.7, %x.1, %ws.1)
  %while.5 = (s32[], bf16[8192,8192]{1,0}, bf16[4,8192,8192]{2,1,0}) while(%tuple), condition=%region_1.3, body=%region_0.2, backend_config={"known_trip_count":{"n":"4"},"known_init_step":{"init":"0","step":"1"}}
  %h = bf16[8192,8192]{1,0} get-tuple-element(%while.5), index=1
  ROOT %gemm_fusion = bf16[8192,8192]{1,0} fusion(%h, %x.1), kind=kCustom, calls=%fused_dot
}
"""


def test_matmul_counts_read_library_calls_in_loops_from_gpu_hlo():
    from goodput_jax.runtime.program import _corrected, matmul_counts

    c = matmul_counts(_GPU_SCAN_HLO)
    one = 2.0 * 8192 ** 3
    mat = 8192 * 8192 * 2.0  # one bf16 matrix's bytes
    assert c.gemm_flops == one and c.gemm_flops_looped == 4 * one  # the cuBLAS call, 4 runs
    assert c.dot_flops == one and c.dot_flops_looped == one  # the fused dot after the loop
    assert c.gemm_bytes == 3 * mat and c.dot_bytes == 3 * mat
    # XLA's figures on the H200 (the fused dot counted, the library call not at all)
    flops, nbytes = _corrected(1.342e8 + one, 2.15e9, c)
    assert flops == pytest.approx(5 * one + 1.342e8)
    assert nbytes == pytest.approx(2.15e9 + 4 * 3 * mat)
    # an XLA that counts the call once: only the 3 more iterations are added
    flops, _ = _corrected(1.342e8 + 2 * one, 2.15e9, c)
    assert flops == pytest.approx(5 * one + 1.342e8)
    assert matmul_counts("not HLO") == type(c)()


def test_program_goodput_bench_runs_and_prints_its_table(tmp_path, monkeypatch, capsys):
    """benchmarks/program_goodput_bench.py (the GPU check's script) on a small CPU step."""
    import importlib.util
    import pathlib
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = pathlib.Path(__file__).parents[2] / "benchmarks" / "program_goodput_bench.py"
    spec = importlib.util.spec_from_file_location("program_goodput_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--size", "256", "--layers", "2", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    assert "cost analysis FLOPs per step (formula)" in out and "queued (wait every 8)" in out
    flops_row = next(line for line in out.splitlines() if line.startswith("cost analysis FLOPs"))
    assert float(flops_row.split()[-1]) == pytest.approx(1.0, abs=0.01)  # the ratio column
    with pytest.raises(SystemExit, match="--steps"):
        bench.main(["--size", "256", "--steps", "2"])
    # issue 44's held-out shapes: scanned layers, and a step with its backward pass
    for kind, tol in (("scan", 0.01), ("mlp", 0.03)):
        assert bench.main(["--step", kind, "--size", "128", "--layers", "2", "--steps", "4"]) == 0
        out = capsys.readouterr().out
        flops_row = next(line for line in out.splitlines()
                         if line.startswith("cost analysis FLOPs"))
        assert float(flops_row.split()[-1]) == pytest.approx(1.0, abs=tol), (kind, flops_row)
        assert f"layers per step ({kind})" in out and "program goodput (%), verdict" in out
