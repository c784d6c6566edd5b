"""Stragglers: per step, the host that held it back and by how much (hand-computed timelines).

Definitions in goodput_jax/measure/stragglers.py (docs/semantics.md, rule 26): a host's
lateness at a step is its mark (arrival = STEP_START, finish = device end else STEP_END)
minus the median of the other hosts' marks; the step's straggler is the host with the largest
lateness, the step's lag that lateness; a host's lost time sums its steps' lags.
"""

from __future__ import annotations

import numpy as np
import pytest

from goodput_jax.measure.stragglers import ARRIVAL, FINISH, step_stragglers
from goodput_jax.report.text import format_report
from tests.measure._timeline import K, calc_for, events, new_store


def _calc(*streams, now=1e3):
    store = new_store()
    evs = []
    for run, host, spec in streams:
        evs += events("job", run, spec, host=host)
    store.append(sorted(evs, key=lambda e: e.timestamp))  # interleaved, as hosts write
    return calc_for(store, "job", now=now)


def _steps(t0, period, n, late=0.0):
    return [(K.STEP_START, t0 + period * i + late, i) for i in range(n)]


def test_two_hosts_one_arrives_late_every_step():
    # both meet at a barrier every 1 s; host 1 loads its batch 0.3 s longer, so it starts
    # each of 5 steps 0.3 s after host 0: lag 0.3 per step, host 1 lost 1.5 s of 5.3 s
    calc = _calc(("r", 0, [(K.JOB_START, 0), *_steps(0, 1, 5), (K.JOB_END, 5.3)]),
                 ("r", 1, [(K.JOB_START, 0), *_steps(0, 1, 5, late=0.3), (K.JOB_END, 5.3)]))
    st = calc.get_step_stragglers()
    assert st.num_hosts == 2 and st.steps.tolist() == [0, 1, 2, 3, 4]
    assert st.last_host.tolist() == [1] * 5 and st.where.tolist() == [ARRIVAL] * 5
    np.testing.assert_allclose(st.lag, 0.3)
    (h,) = st.hosts
    assert (h.host, h.steps_last) == (1, 5)
    assert h.lost_time == pytest.approx(1.5) and h.share == pytest.approx(1.0)
    assert h.job_share == pytest.approx(1.5 / 5.3)
    assert st.step_lag[("r", 2)] == (1, pytest.approx(0.3))
    assert st.as_dict()["slowest"][0]["host"] == 1
    text = format_report(calc)
    assert "stragglers (2 hosts, 5 steps compared" in text
    assert "host 1: last in 5 of 5 steps, lost 1.500 s (100.0 % of straggler time, 28.3 % of job" \
        in " ".join(text.split())


def test_median_of_the_others_with_three_hosts_and_finish_marks():
    # step 0: arrivals 0, 0.1, 1.0 -> host 2 late by 1.0 - median(0, 0.1) = 0.95 (arrival).
    # step 1: all arrive at 2; device ends 3.0 (h0), 3.2 (h1), 3.5 (h2) -> host 2 by
    # 3.5 - median(3.0, 3.2) = 0.4 (finish); host 1's host-side STEP_END at 2.05 (dispatch)
    # is ignored: its device end wins. step 2: arrivals 4, 4.6, 4 -> host 1 by 0.6.
    spec = {0: [(K.STEP_START, 0, 0), (K.STEP_START, 2, 1), (K.STEP_DEVICE_END, 3.0, 1),
                (K.STEP_START, 4, 2)],
            1: [(K.STEP_START, 0.1, 0), (K.STEP_START, 2, 1), (K.STEP_END, 2.05, 1),
                (K.STEP_DEVICE_END, 3.2, 1), (K.STEP_START, 4.6, 2)],
            2: [(K.STEP_START, 1.0, 0), (K.STEP_START, 2, 1), (K.STEP_DEVICE_END, 3.5, 1),
                (K.STEP_START, 4, 2)]}
    calc = _calc(*[("r", h, [(K.JOB_START, 0), *s, (K.JOB_END, 6)]) for h, s in spec.items()])
    st = calc.get_step_stragglers()
    assert st.num_hosts == 3 and st.hosts_compared.tolist() == [3, 3, 3]
    assert st.last_host.tolist() == [2, 2, 1]
    assert st.where.tolist() == [ARRIVAL, FINISH, ARRIVAL]
    np.testing.assert_allclose(st.lag, [0.95, 0.4, 0.6])
    assert [(h.host, h.steps_last) for h in st.hosts] == [(2, 2), (1, 1)]
    assert st.hosts[0].lost_time == pytest.approx(1.35)
    assert st.hosts[0].share == pytest.approx(1.35 / 1.95)
    assert st.total_lost == pytest.approx(1.95)
    assert [h.host for h in st.slowest(1)] == [2]


def test_runs_are_compared_separately_and_redone_steps_use_the_latest_marks():
    # run a: hosts 0 and 1; host 1 starts step 1 at 1.5, then the run rolls back and
    # redoes step 1 at 3.0 (host 0: 3.0): the latest marks count, lag 0.
    # run b: host 0 only (a later launch where only process 0 records): nothing to compare.
    calc = _calc(
        ("a", 0, [(K.JOB_START, 0), (K.STEP_START, 0, 0), (K.STEP_START, 1, 1),
                  (K.STEP_START, 2, 2), (K.STEP_START, 3, 1), (K.JOB_END, 4)]),
        ("a", 1, [(K.JOB_START, 0), (K.STEP_START, 0.2, 0), (K.STEP_START, 1.5, 1),
                  (K.STEP_START, 2, 2), (K.STEP_START, 3, 1), (K.JOB_END, 4)]),
        ("b", 0, [(K.JOB_START, 10), (K.STEP_START, 10, 2), (K.JOB_END, 11)]))
    st = calc.get_step_stragglers()
    assert st.run_ids == ("a", "b") and st.num_hosts == 2
    assert st.steps.tolist() == [0, 1, 2] and st.runs.tolist() == [0, 0, 0]
    np.testing.assert_allclose(st.lag, [0.2, 0.0, 0.0])
    assert [(h.host, h.steps_last) for h in st.hosts] == [(1, 1)]


def test_one_host_has_no_stragglers_and_no_report_section():
    calc = _calc(("r", 0, [(K.JOB_START, 0), *_steps(0, 1, 4), (K.JOB_END, 4)]))
    st = calc.get_step_stragglers()
    assert (st.num_hosts, st.steps.size, st.hosts, st.total_lost) == (1, 0, (), 0.0)
    assert "stragglers" not in format_report(calc)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match=r"host \(shape \(1,\)\)"):
        step_stragglers([2, 2], [0, 0], [0], [0.0, 1.0], [0, 0])
    with pytest.raises(ValueError, match=r"job_time \(-1.0\)"):
        step_stragglers([2], [0], [0], [0.0], [0], job_time=-1.0)
    st = step_stragglers([2], [0], [0], [0.0], [0])
    with pytest.raises(ValueError, match=r"n \(-1\)"):
        st.slowest(-1)


def test_drop_in_calculator_gives_the_same_stragglers():
    from goodput_jax import goodput

    spec = [(K.JOB_START, 0), *_steps(0, 1, 3), (K.JOB_END, 3.1)]
    late = [(K.JOB_START, 0), *_steps(0, 1, 3, late=0.1), (K.JOB_END, 3.1)]
    base = _calc(("r", 0, spec), ("r", 1, late))
    drop = goodput.GoodputCalculator("job", "log", store=base.store, clock=lambda: 1e3)
    a, b = base.get_step_stragglers(), drop.get_step_stragglers()
    assert a.as_dict() == b.as_dict() and a.hosts[0].lost_time == pytest.approx(0.3)


def test_incremental_equals_from_scratch_and_since_limits_the_window():
    store = new_store()
    h0 = events("job", "r", [(K.JOB_START, 0), *_steps(0, 1, 6)], host=0)
    h1 = events("job", "r", [(K.JOB_START, 0), *[(K.STEP_START, i + (0.5 if i >= 3 else 0.1), i)
                                                   for i in range(6)]], host=1)
    evs = sorted(h0 + h1, key=lambda e: e.timestamp)
    calc = calc_for(store, "job", now=10.0)
    for a in range(0, len(evs), 3):  # query after every append
        store.append(evs[a:a + 3])
        inc = calc.get_step_stragglers()
        fresh = calc_for(store, "job", now=10.0).get_step_stragglers()
        assert inc.as_dict() == fresh.as_dict()
        np.testing.assert_array_equal(inc.lag, fresh.lag)
    assert inc.hosts[0].lost_time == pytest.approx(3 * 0.1 + 3 * 0.5)
    late = calc.get_step_stragglers(since=3.0)  # steps 3-5 only
    assert late.steps.tolist() == [3, 4, 5] and late.hosts[0].lost_time == pytest.approx(1.5)
    with pytest.raises(ValueError, match=r"since \(nan\)"):
        calc.get_step_stragglers(since=float("nan"))
