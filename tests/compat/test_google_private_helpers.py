"""Google's private calculator helpers, kept in the drop-ins for Google's tests.

ml-goodput-measurement 0.2.3's unit tests call ``_get_step_times``,
``_extract_slice_count_entries`` / ``_compute_time_weighted_efficiency`` and
``_fetch_new_entries`` / ``_get_current_productive_and_unproductive_time``. The drop-ins
keep them as adaptors over goodput_jax's own rules; here each is given a few entry lists
and must return Google's numbers: the reference package's, computed in a subprocess of its
virtual environment (``/work/venvs/ref`` or ``$GOODPUT_JAX_REF_PYTHON``; those comparisons
skip without it), and hand-computed values that need nothing.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import textwrap

import pytest

from goodput_jax import goodput, goodput_elastic, goodput_utils
from goodput_jax.measure.stores.sqlite import SQLiteStore

BT = goodput_utils.BadputType
T0 = 1_779_926_400.0  # 2026-05-28 00:00 UTC, the date of Google's elastic tests
REF_PYTHON = os.environ.get("GOODPUT_JAX_REF_PYTHON", "/work/venvs/ref/bin/python")


class ListLogger:
    """Google's ``cloud_logger`` seam over a list of entries (as its tests' mock)."""

    def __init__(self, entries=None):
        self.entries = list(entries or [])

    def write_cloud_logging_entry(self, entry):
        self.entries.append(entry)

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        return list(self.entries), None


def _step(step, t, job="job"):
    return {"job_name": job, "step_count": step, "step_start_time": T0 + t}


def _at(key, t, **extra):
    return {"job_name": "job", key: T0 + t, **extra}


def _slices(t, active, total, available, **drop):
    e = {"job_name": "job", "elastic_slice_counts_timestamp": T0 + t,
         "active_slices": active, "total_slices": total, "available_slices": available}
    for k in drop:
        e.pop(k)
    return e


# ------------------------------------------------------------------ the entry lists
STEP_CASES = {
    "consecutive": [_step(i, 3.0 * i) for i in range(5)],
    # a gap in the numbers (2 -> 5) and a restart that reruns 3 and 4
    "gap_and_restart": [_step(0, 0), _step(1, 3), _step(2, 5), _step(5, 30), _step(6, 31.5),
                        _step(3, 40), _step(4, 42), _step(5, 47)],
    # other entries between the steps do not break the pairs; no job name is still a step
    "mixed": [_at("job_start_time", 0), _step(0, 1), _at("tpu_init_start_time", 2),
              {"step_count": 1, "step_start_time": T0 + 4}, _at("job_end_time", 9),
              _step(2, 6, job="other")],
    # Google's test hands (timestamp, entry) pairs: nothing is a step entry
    "pairs": [(T0 + i, _step(i, i)) for i in range(4)],
}

SLICE_CASES = {
    # Google's test: 2/4 stepping throughout, 2/4 available for 8 h then 4/4 for 1 h
    "googles": ([_slices(0, 2, 4, 2), _slices(8 * 3600, 2, 4, 4)], [(0, 9 * 3600)]),
    # out of order, a total of 0 (read as 1), a missing count, windows before, inside,
    # across and after the records, and an empty one
    "edges": ([_slices(50, 3, 4, 4), _slices(10, 1, 2, 2), _slices(30, 2, 0, 1),
               _slices(70, 1, 4, 4, available_slices=None), _at("job_start_time", 0)],
              [(0, 100), (20, 60), (10, 50), (55, 65), (80, 90), (40, 40), (0, 5)]),
}

#: entry lists for _fetch_new_entries + _get_current_productive_and_unproductive_time
BUCKET_CASES = {
    # Google's elastic test: slice-down 10 s, scale-up 15 s, re-initialisation 20 s with the
    # TPU initialisation and training preparation inside it (so 0 s of their own)
    "elastic": [_at("job_start_time", 0),
                _at("elastic_wait_start_time", 10, elastic_wait_event_type="slice_down"),
                _at("elastic_wait_end_time", 20, elastic_wait_event_type="slice_down"),
                _at("elastic_wait_start_time", 30, elastic_wait_event_type="scale_up"),
                _at("elastic_wait_end_time", 45, elastic_wait_event_type="scale_up"),
                _at("elastic_reinit_start_time", 55), _at("elastic_reinit_end_time", 75),
                _at("tpu_init_start_time", 57), _at("tpu_init_end_time", 62),
                _at("training_prep_start_time", 65), _at("training_prep_end_time", 70),
                _step(0, 75), _step(1, 85)],
    # initialisation, a first (compiling) step, steady steps and a job end
    "finished": [_at("job_start_time", 0), _at("tpu_init_start_time", 0),
                 _at("tpu_init_end_time", 4), _at("training_prep_start_time", 4),
                 _at("training_prep_end_time", 6), _step(0, 6), _step(1, 16), _step(2, 18),
                 _step(3, 20), _at("job_end_time", 22)],
    # a running job: the last step is in flight
    "running": [_at("job_start_time", 0), _step(0, 5), _step(1, 8), _step(2, 10)],
}

_REFERENCE = textwrap.dedent("""
    import datetime, json, sys, tempfile
    from ml_goodput_measurement.src import goodput, goodput_elastic

    class Log:
        def __init__(self, entries):
            self.entries = entries
        def write_cloud_logging_entry(self, entry):
            self.entries.append(entry)
        def read_cloud_logging_entries(self, start_time=None, end_time=None,
                                       last_entry_info=None):
            return list(self.entries), None

    cases = json.load(sys.stdin)
    C = goodput_elastic.ElasticGoodputCalculator
    out = {"steps": {}, "slices": {}, "buckets": {}}
    for name, entries in cases["steps"].items():
        if name == "pairs":
            entries = [tuple(e) for e in entries]
        times = goodput.GoodputCalculator._get_step_times(None, entries)
        out["steps"][name] = {str(k): v for k, v in times.items()}
    for name, (entries, windows) in cases["slices"].items():
        records = C._extract_slice_count_entries(entries)
        out["slices"][name] = [records, [C._compute_time_weighted_efficiency(records, a, b)
                                         for a, b in windows]]
    for name, entries in cases["buckets"].items():
        calc = C("job", "log", Log(list(entries)), cache_dir=tempfile.mkdtemp())
        calc._fetch_new_entries(datetime.datetime.now(datetime.timezone.utc))
        p, u, last, recorded = calc._get_current_productive_and_unproductive_time()
        out["buckets"][name] = [p, {k.name: v for k, v in u.items()}, last, recorded]
    json.dump(out, sys.stdout)
""")


@pytest.fixture(scope="module")
def reference():
    """The reference package's answers for every case (one subprocess)."""
    if not os.path.exists(REF_PYTHON):
        pytest.skip(f"no ml-goodput-measurement 0.2.3 environment at {REF_PYTHON}")
    cases = {"steps": STEP_CASES,
             "slices": {k: [e, [(T0 + a, T0 + b) for a, b in w]]
                        for k, (e, w) in SLICE_CASES.items()},
             "buckets": BUCKET_CASES}
    proc = subprocess.run([REF_PYTHON, "-c", _REFERENCE], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=120, cwd=os.getcwd())
    if proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr:
        pytest.skip(f"{REF_PYTHON} lacks ml_goodput_measurement")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _calc(entries=(), cls=goodput_elastic.ElasticGoodputCalculator):
    return cls("job", "goodput_job", ListLogger(entries))


def _named(unproductive):
    return {k.name: v for k, v in unproductive.items()}


def _same_buckets(ours, google):
    """Every bucket either reports equal (a bucket one of them leaves out reads as 0)."""
    for name in set(ours) | set(google):
        a, b = ours.get(name, 0.0), google.get(name, 0.0)
        if isinstance(a, dict) or isinstance(b, dict):
            assert (a or {}) == pytest.approx(b or {}), name
        else:
            assert a == pytest.approx(b, abs=1e-9), name


# ------------------------------------------------------------------ _get_step_times
@pytest.mark.parametrize("name", sorted(STEP_CASES))
def test_get_step_times_is_googles(reference, name):
    ours = _calc(cls=goodput.GoodputCalculator)._get_step_times(STEP_CASES[name])
    assert {str(k): v for k, v in ours.items()} == pytest.approx(reference["steps"][name])


def test_get_step_times_by_hand():
    calc = _calc(cls=goodput.GoodputCalculator)
    assert calc._get_step_times(STEP_CASES["gap_and_restart"]) == pytest.approx(
        {0: 3.0, 1: 2.0, 5: 1.5, 3: 2.0, 4: 5.0})  # 5's rerun has no step 6 after it
    assert calc._get_step_times(STEP_CASES["mixed"]) == pytest.approx({0: 3.0, 1: 2.0})
    assert calc._get_step_times(STEP_CASES["pairs"]) == {}
    assert calc._get_step_times([]) == {}


def test_get_step_times_is_the_rule_get_step_deviation_uses():
    """Google's test: the deviations of get_step_deviation() are |step time - ideal| of the
    step times _get_step_times reads from the same entries."""
    log = ListLogger()
    rec = goodput.GoodputRecorder("job", "goodput_job", True, log)
    for i, s in enumerate([0, 3, 5, 20, 22, 25]):
        rec.record_step_start_time(i, T0 + s)
    calc = goodput.GoodputCalculator("job", "goodput_job", log)
    times = calc._get_step_times(log.entries)
    assert times == pytest.approx({0: 3.0, 1: 2.0, 2: 15.0, 3: 2.0, 4: 3.0})
    ideal = goodput_utils.compute_ideal_step_time(list(times.values()))
    assert calc.get_step_deviation() == pytest.approx(
        {s: abs(t - ideal) for s, t in times.items()})


# ------------------------------------------------- slice counts and their efficiency
@pytest.mark.parametrize("name", sorted(SLICE_CASES))
def test_slice_count_records_and_efficiency_are_googles(reference, name):
    entries, windows = SLICE_CASES[name]
    C = goodput_elastic.ElasticGoodputCalculator
    records = C._extract_slice_count_entries(entries)
    google_records, google_eff = reference["slices"][name]
    assert [list(r) for r in records] == google_records
    for (a, b), want in zip(windows, google_eff, strict=True):
        assert C._compute_time_weighted_efficiency(records, T0 + a, T0 + b) == \
            pytest.approx(tuple(want)), (a, b)


def test_slice_efficiency_by_hand():
    """Google's test's numbers: stepping 1/2, available (2/4 * 8 h + 4/4 * 1 h) / 9 h."""
    calc = _calc()
    entries, _ = SLICE_CASES["googles"]
    records = calc._extract_slice_count_entries(entries)
    assert records == [(T0, 2, 2, 4), (T0 + 8 * 3600, 2, 4, 4)]
    stepping, available = calc._compute_time_weighted_efficiency(records, T0, T0 + 9 * 3600)
    assert (stepping, available) == pytest.approx((0.5, 5 / 9))
    edges = calc._extract_slice_count_entries(SLICE_CASES["edges"][0])
    assert [r[0] - T0 for r in edges] == [10, 30, 50, 70]
    assert edges[1] == (T0 + 30, 2, 1, 1) and edges[3] == (T0 + 70, 1, 0, 4)
    assert calc._compute_time_weighted_efficiency(edges, T0 + 40, T0 + 40) == (0.0, 0.0)


# ---------------------------------- _fetch_new_entries + the productive/unproductive time
@pytest.mark.parametrize("name", sorted(BUCKET_CASES))
def test_productive_and_unproductive_time_is_googles(reference, name):
    calc = _calc(BUCKET_CASES[name])
    calc._fetch_new_entries(datetime.datetime.now(datetime.UTC))
    productive, unproductive, last, recorded = \
        calc._get_current_productive_and_unproductive_time()
    g_productive, g_unproductive, g_last, g_recorded = reference["buckets"][name]
    assert productive == pytest.approx(g_productive)
    _same_buckets(_named(unproductive), g_unproductive)
    assert (last, recorded) == (g_last, g_recorded)


def test_elastic_buckets_by_hand():
    """Google's elastic test's scenario and numbers."""
    calc = _calc(BUCKET_CASES["elastic"])
    calc._fetch_new_entries(datetime.datetime.fromtimestamp(T0 + 95, datetime.UTC))
    productive, u, last, recorded = calc._get_current_productive_and_unproductive_time()
    assert (productive, last, recorded) == (10.0, 0, 1)
    assert (u[BT.ELASTIC_SLICE_DOWN], u[BT.ELASTIC_SCALE_UP],
            u[BT.ELASTIC_REINITIALIZATION]) == (10.0, 15.0, 20.0)
    assert u[BT.TPU_INITIALIZATION] == 0.0 and u[BT.TRAINING_PREP] == 0.0
    assert BT.OTHER not in u  # Google adds OTHER afterwards, from the job's total time


def test_finished_job_by_hand_and_its_interval():
    """Init 6 s; the first step (10 s) has 8 s above the mean of the others (2 s): program
    startup; productive 2 + 2 + 2 + 2 (the last step ends at the job end)."""
    calc = _calc(BUCKET_CASES["finished"], cls=goodput.GoodputCalculator)
    productive, u, last, recorded = calc._get_current_productive_and_unproductive_time()
    assert (productive, last, recorded) == (8.0, 3, 3)
    assert (u[BT.TPU_INITIALIZATION], u[BT.TRAINING_PREP], u[BT.PROGRAM_STARTUP]) == \
        (4.0, 2.0, 8.0)
    # interval_query: the last get_job_goodput_interval window's entries
    assert calc._get_current_productive_and_unproductive_time(interval_query=True)[0] == 0.0
    calc.get_job_goodput_interval(T0 + 15, T0 + 22)  # steps 1..3 and the job end
    productive, u, last, recorded = \
        calc._get_current_productive_and_unproductive_time(interval_query=True)
    assert (productive, last, recorded) == (6.0, 3, 3)
    assert u[BT.PROGRAM_STARTUP] == 0.0 and BT.OTHER not in u


def test_no_entries_reads_as_nothing_yet():
    calc = _calc()
    assert calc._fetch_new_entries(datetime.datetime.now(datetime.UTC)) == []
    productive, u, last, recorded = calc._get_current_productive_and_unproductive_time()
    assert (productive, last, recorded) == (0.0, 0, 0)
    assert all(v in (0.0, {}) for v in u.values())


def test_fetch_new_entries_returns_googles_entries_up_to_the_query_time(tmp_path):
    """From any store: the entries recorded since the last call, up to ``query_time``, as
    Google's dicts; later ones come with a later call."""
    store = SQLiteStore(str(tmp_path / "g.db"))
    rec = goodput.GoodputRecorder("job", "goodput_job", True, store=store)
    calc = goodput.GoodputCalculator("job", "goodput_job", store=store)
    rec.record_job_start_time(T0)
    rec.record_step_start_time(0, T0 + 5)
    rec.record_step_start_time(1, T0 + 8)  # read, not flushed: read your own writes
    at = lambda s: datetime.datetime.fromtimestamp(T0 + s, datetime.UTC)  # noqa: E731
    assert calc._fetch_new_entries(at(6)) == [
        {"job_name": "job", "job_start_time": T0},
        {"job_name": "job", "step_count": 0, "step_start_time": T0 + 5}]
    rec.record_step_start_time(2, T0 + 10)
    assert calc._fetch_new_entries(at(20)) == [_step(1, 8), _step(2, 10)]
    assert calc._fetch_new_entries(at(30)) == []
    with pytest.raises(TypeError, match="query_time"):
        calc._fetch_new_entries("yesterday")
    rec.close()
    store.close()


def test_the_helpers_keep_googles_signatures():
    import inspect

    C = goodput_elastic.ElasticGoodputCalculator
    assert list(inspect.signature(C._get_step_times).parameters) == ["self", "entries"]
    assert list(inspect.signature(C._fetch_new_entries).parameters) == ["self", "query_time"]
    sig = inspect.signature(C._get_current_productive_and_unproductive_time)
    assert list(sig.parameters) == ["self", "interval_query"]
    assert sig.parameters["interval_query"].default is False
    assert isinstance(inspect.getattr_static(C, "_extract_slice_count_entries"), staticmethod)
    assert isinstance(inspect.getattr_static(C, "_compute_time_weighted_efficiency"),
                      staticmethod)
    assert list(inspect.signature(C._compute_time_weighted_efficiency).parameters) == [
        "slice_records", "interval_start_ts", "interval_end_ts"]
