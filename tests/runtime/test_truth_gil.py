"""A device end the watcher sees while the training thread holds the GIL (issue 44 item 6).

The watcher thread waits on a step's outputs with the GIL released; to record the end it
must take the GIL back, which a training thread running pure Python (a Python-heavy
loader) hands over only after the interpreter's switch interval. ``StepRecorder(
switch_interval=...)`` bounds that wait while the watcher runs. The tests make the
interval the user set long (2 s), so the bound shows beyond any load: without the option
the end is recorded after the 1 s of Python at the earliest.
"""

from __future__ import annotations

import sys
import time

import pytest

from goodput_jax import goodput, runtime
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.runtime._helpers import py_load, queued_step


@pytest.fixture
def long_switch():
    old = sys.getswitchinterval()
    sys.setswitchinterval(2.0)  # the user's interval: a GIL hand-over every 2 s at most
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _device_end(db, step: int) -> float:
    store = SQLiteStore(str(db), create=False)
    try:
        evs, _ = store.read_events("gil")
        return next(e.timestamp for e in evs
                    if e.kind.value == "step_device_end" and e.step == step)
    finally:
        store.close()


def _closed_with_the_end_in_the_python(db, rec, steps, t0: float, t1: float) -> None:
    """Close both: the user's interval (2 s) is back, and step 1's device end was recorded
    within the 1 s of Python from ``t0`` to ``t1`` (0.5 s of margin for a loaded machine;
    a watcher kept from the GIL records it after the Python, >= 1 s)."""
    steps.close()
    rec.close()
    assert sys.getswitchinterval() == 2.0
    end = _device_end(db, 1)
    assert t1 - t0 >= 1.0
    assert end - t0 < 0.5, (end - t0, steps.hook_claims, steps.span_claims)


def _no_profile(frame, event, arg) -> None:
    """A profile function that does nothing (the user's profiler, to the recorder)."""


def _first_step_waited(tmp_path, name: str, size: int, depth: int, **options):
    """A StepRecorder on a SQLite recorder, its step (``queued_step(size, depth)``) wrapped,
    the first step run and waited for: ``(db, rec, steps, recorded, w, x)``."""
    step_fn, w, x = queued_step(size=size, depth=depth)
    db = tmp_path / f"{name}.db"
    rec = goodput.GoodputRecorder("gil", "gil", logging_enabled=True, store=f"sqlite:///{db}")
    steps = runtime.StepRecorder(rec, compile_times=False, **options)
    recorded = steps.wrap(step_fn)
    w, m = recorded(0, w, x)
    float(m)  # the first step, waited for
    return db, rec, steps, recorded, w, x


def test_device_end_seen_while_the_training_thread_runs_python(tmp_path, long_switch):
    """A step (tens of ms of device work, queued: nothing waits for it) ends while the
    training thread runs 1 s of pure Python holding the GIL: with ``switch_interval=1e-3``
    the watcher records it within the Python, 0.5 s of margin for a loaded machine (the old
    recorder: after the Python, >= 1 s, since the user's interval is 2 s)."""
    db, rec, steps, recorded, w, x = _first_step_waited(tmp_path, "gil", 512, 6,
                                                        switch_interval=1e-3)
    w, m = recorded(1, w, x)
    t0 = time.time()
    py_load(1.0)  # the loader: 1 s of Python holding the GIL
    t1 = time.time()
    assert sys.getswitchinterval() == pytest.approx(1e-3)  # while the watcher runs
    steps.close()
    rec.close()
    assert sys.getswitchinterval() == 2.0  # the user's, put back
    end = _device_end(db, 1)
    assert t1 - t0 >= 1.0
    assert end - t0 < 0.5, (end - t0, steps.hook_claims, steps.span_claims)



def test_switch_interval_default_none_and_changed_meanwhile(tmp_path, long_switch):
    """By default (``switch_interval=None``) a loop that marks no spans has the span
    interval (1e-5) while the watcher runs; with ``span_switch_interval=None`` too the
    interval is never touched; with a value the watcher holds it; each puts the user's
    back at ``close``, and a value the user sets while the watcher runs stays after it."""
    step_fn, w, x = queued_step(size=64, depth=1)
    for option in ("default", "untouched", 1e-3):
        rec = goodput.GoodputRecorder("gil", "gil", logging_enabled=True,
                                      store=f"sqlite:///{tmp_path / f'{option}.db'}")
        kw = {"default": {}, "untouched": {"span_switch_interval": None}}.get(
            option, {"switch_interval": option})
        steps = runtime.StepRecorder(rec, compile_times=False, **kw)
        steps(0, step_fn, w, x)
        steps(1, step_fn, w, x)
        expect = {"default": 1e-5, "untouched": 2.0}.get(option, option)
        assert sys.getswitchinterval() == pytest.approx(expect)
        if option == 1e-3:
            sys.setswitchinterval(0.25)  # the user changes it meanwhile
        steps.close()
        rec.close()
        assert sys.getswitchinterval() == (0.25 if option == 1e-3 else 2.0)
        sys.setswitchinterval(2.0)


def test_switch_interval_held_until_the_last_recorder_closes(tmp_path, long_switch):
    """Two StepRecorders with the option: the first to close leaves the interval to the one
    still watching; the last puts back the user's."""
    step_fn, w, x = queued_step(size=64, depth=1)
    recs, steps = [], []
    for k in range(2):
        recs.append(goodput.GoodputRecorder(f"gil{k}", "gil", logging_enabled=True,
                                            store=f"sqlite:///{tmp_path / f'{k}.db'}"))
        steps.append(runtime.StepRecorder(recs[k], compile_times=False,
                                          switch_interval=1e-3 * (k + 1)))
        steps[k](0, step_fn, w, x)
        steps[k](1, step_fn, w, x)
    assert sys.getswitchinterval() == pytest.approx(1e-3)
    steps[0].close()
    assert sys.getswitchinterval() == pytest.approx(1e-3)
    steps[1].close()
    assert sys.getswitchinterval() == 2.0
    for r in recs:
        r.close()


@pytest.mark.parametrize("bad", [0, -1e-3, 0.006, True, "1e-3"])
def test_switch_interval_validated(bad):
    with pytest.raises(ValueError, match=r"^switch_interval \(.*\) must be None or a number"):
        runtime.StepRecorder(goodput.GoodputRecorder("j", "l"), switch_interval=bad)


@pytest.mark.parametrize("bad", [0, 0.006, "1e-4"])
def test_span_switch_interval_validated(bad):
    with pytest.raises(ValueError, match=r"^span_switch_interval \(.*\) must be None or a"):
        runtime.StepRecorder(goodput.GoodputRecorder("j", "l"), span_switch_interval=bad)


def test_device_end_seen_while_a_loading_span_runs_python(tmp_path, long_switch):
    """The default (``span_switch_interval=1e-5``): a step (0.2-0.5 s, queued) ends while the
    training thread runs 1 s of Python inside ``with rec.data_loading():``; the interval is
    short inside that span (and before the loop's first span, as in a loop without spans;
    the user's after the next step call), and the
    watcher records the end within the Python (0.5 s of margin for a loaded machine; the
    old recorder: after the Python, >= 1 s, the user's interval being 2 s)."""
    db, rec, steps, recorded, w, x = _first_step_waited(tmp_path, "span", 1024, 8)
    w, m = recorded(1, w, x)
    assert sys.getswitchinterval() == pytest.approx(1e-5)  # no span yet: as a loop without
    with rec.data_loading():
        t0 = time.time()
        py_load(1.0)  # the loader: 1 s of Python holding the GIL
        t1 = time.time()
        assert sys.getswitchinterval() == pytest.approx(1e-5)  # in the span, a step in flight
    w, m = recorded(2, w, x)
    assert sys.getswitchinterval() == 2.0  # put back at the next step call
    float(m)
    _closed_with_the_end_in_the_python(db, rec, steps, t0, t1)



def test_span_switch_interval_none_and_no_step_in_flight(tmp_path, long_switch):
    """``span_switch_interval=None`` never touches the interval; nor does a span while no
    step is in flight (every step's end already recorded)."""
    step_fn, w, x = queued_step(size=64, depth=1)
    for option in (None, 1e-4):
        rec = goodput.GoodputRecorder("gil", "gil", logging_enabled=True,
                                      store=f"sqlite:///{tmp_path / f'n{option}.db'}")
        steps = runtime.StepRecorder(rec, compile_times=False, span_switch_interval=option)
        w, m = steps(0, step_fn, w, x)
        float(m)
        w, m = steps(1, step_fn, w, x)
        steps.finish()  # every end recorded: nothing in flight
        with rec.data_loading():
            assert sys.getswitchinterval() == 2.0
        steps.close()
        rec.close()
        assert sys.getswitchinterval() == 2.0


def test_a_watcher_already_waiting_for_the_gil_takes_up_the_span_interval(tmp_path, long_switch):
    """The watcher, handed a step at the step call, is already waiting for the GIL (with
    the user's long interval) when the training thread enters its loading span: shortening
    the interval there must reach that wait too (CPython reads the interval when a wait
    starts, so the waiter would sit out the 2 s it started with). The step (0.2-0.5 s,
    queued) ends inside 1 s of Python in the span: its end is recorded within the Python
    (0.5 s of margin for a loaded machine; before, after the Python, >= 1 s)."""
    # the first step, waited for: the watcher goes idle
    db, rec, steps, recorded, w, x = _first_step_waited(tmp_path, "stale", 1024, 8)
    steps.finish()  # nothing in flight: the span below holds nothing
    with rec.data_loading():  # a loop that marks spans: the interval is the user's (2 s)
        pass
    assert sys.getswitchinterval() == 2.0
    time.sleep(0.02)  # the watcher settles idle, waiting for a hand-over (the GIL free)
    # a profile function of the user's: the recorder then installs no readiness hook (the
    # hook, a profile function on this thread, would now and then see the end itself)
    sys.setprofile(_no_profile)
    try:
        w, m = recorded(1, w, x)  # handed over: the watcher wakes and wants the GIL
        py_load(0.03)  # bookkeeping before the loader: the watcher's wait starts (2 s)
        with rec.data_loading():
            t0 = time.time()
            py_load(1.0)  # the loader: 1 s of Python holding the GIL
            t1 = time.time()
    finally:
        sys.setprofile(None)
    w, m = recorded(2, w, x)
    float(m)
    steps.close()
    rec.close()
    end = _device_end(db, 1)
    assert t1 - t0 >= 1.0
    assert end - t0 < 0.5, (end - t0, steps.hook_claims, steps.span_claims)


def test_a_loop_without_spans_has_the_short_interval(tmp_path, long_switch):
    """The default in a loop that marks no spans: a step (tens of ms, queued) ends while the
    training thread runs 1 s of Python outside any span; the span interval is held while the
    watcher runs, so the end is recorded within the Python (0.5 s of margin; before: after
    the Python, >= 1 s, the user's interval being 2 s). The loop's first span lets it go."""
    db, rec, steps, recorded, w, x = _first_step_waited(tmp_path, "nospan", 512, 6)
    w, m = recorded(1, w, x)
    t0 = time.time()
    py_load(1.0)  # the loader, not marked: 1 s of Python holding the GIL
    t1 = time.time()
    assert sys.getswitchinterval() == pytest.approx(1e-5)
    w, m = recorded(2, w, x)
    steps.finish()  # every end recorded: no step in flight for the span below to hold for
    with rec.data_loading():  # a span: from now on only the spans have it
        pass
    assert sys.getswitchinterval() == 2.0
    _closed_with_the_end_in_the_python(db, rec, steps, t0, t1)
