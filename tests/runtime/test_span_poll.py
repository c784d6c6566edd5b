"""The span-start poll and the readiness hook of a StepRecorder, with outputs whose
readiness the test sets.

A ``Gate`` stands in for a step's output array: ``is_ready()`` once the test marks it
ready; ``block_until_ready()`` (the watcher's wait) also waits until the test lets the
watcher go, so a watcher thread that lags behind the device (one the OS has not run on a
loaded machine, CI's failure of ``test_a_step_ready_when_loading_starts_ends_before_the_load``)
is made exactly, not hoped for.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time

import pytest

from goodput_jax import goodput, runtime
from goodput_jax.measure.stores.sqlite import SQLiteStore

#: how long the loop may take before the test calls it a deadlock (it takes milliseconds)
DEADLOCK_S = 30.0


class Gate:
    """A step output: ready once ``ready`` is set; the watcher's wait also needs ``release``."""

    def __init__(self, ready: bool = False, release: bool = False):
        self.ready, self.release, self.waited = threading.Event(), threading.Event(), threading.Event()
        if ready:
            self.ready.set()
        if release:
            self.release.set()

    def is_ready(self) -> bool:
        return self.ready.is_set()

    def block_until_ready(self) -> Gate:
        self.waited.set()
        self.release.wait()
        self.ready.wait()
        return self


class ReadyAfterFirstPoll(Gate):
    """A gate whose first ``is_ready()`` says False (the step finishes just after its call
    returned, before the readiness hook's first look)."""

    polled = False

    def is_ready(self) -> bool:
        if not self.polled:
            self.polled = True
            return False
        return super().is_ready()


def _run(tmp_path, body, *, clock=None, **rec_kw):
    """Run ``body(rec, steps)`` on a fresh thread (its own profile state, as a training
    thread has); returns the recorded events, or fails if the thread never finishes."""
    store = SQLiteStore(str(tmp_path / "gates.db"))
    kw = dict(rec_kw) if clock is None else {"clock": clock, **rec_kw}
    rec = goodput.GoodputRecorder("gates", "gates", logging_enabled=True, store=store, **kw)
    rec.record_job_start_time()
    steps = runtime.StepRecorder(rec, compile_times=False)
    out: dict = {}

    def target():
        try:
            out["result"] = body(rec, steps)
        except BaseException as e:  # noqa: BLE001 - reported below
            out["error"] = e

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(DEADLOCK_S)
    if th.is_alive():
        faulthandler.dump_traceback(all_threads=True)
    assert not th.is_alive(), f"the loop did not finish in {DEADLOCK_S}s: deadlocked"
    if "error" in out:
        raise out["error"]
    steps.close()
    rec.record_job_end_time()
    rec.close()
    evs, _ = store.read_events("gates")
    store.close()
    return out["result"], evs, steps


def _ends_and_load(evs):
    ends = {e.step: e.timestamp for e in evs if e.kind.value == "step_device_end"}
    (load,) = [e.timestamp for e in evs if e.kind.value == "data_loading_start"]
    return ends, load


def _queue(steps, gates):
    """Steps 0.. of ``gates``: start, track, and wait until the watcher waits on gate 1."""
    for i, g in enumerate(gates):
        steps.start(i)
        steps.track(i, g)
        if i == 1:
            assert g.waited.wait(DEADLOCK_S), "the watcher never took up step 1"


def _noop_profiler(frame, event, arg):
    return None


@pytest.mark.parametrize("profiler", [True, False], ids=["profiler", "hook"])
def test_ready_steps_the_watcher_has_not_taken_up_end_before_the_load(tmp_path, profiler):
    """Steps 1-3 are ready when the load starts, but the watcher still waits on step 1 (the OS
    has not run it): all three device ends lie before the load. Under a profiler (no
    readiness hook) the span poll records them; otherwise step 3's hook does, oldest first,
    as soon as step 3 is seen ready. Before, both looked at one step only (the span poll at
    the step the watcher waits on, the hook at its own), and step 2 ended when the watcher
    got to it."""
    gates = [Gate(ready=True, release=True), Gate(), Gate(), Gate()]

    def body(rec, steps):
        if profiler:
            sys.setprofile(_noop_profiler)
        try:
            _queue(steps, gates)
            before = steps.hook_claims
            for g in gates[1:]:
                g.ready.set()  # the device finished them; the watcher is still held
            with rec.data_loading():
                claims = (steps.span_claims, steps.hook_claims - before)
        finally:
            sys.setprofile(None)
        for g in gates:
            g.release.set()
        return claims

    (span, hook), evs, steps = _run(tmp_path, body)
    ends, load = _ends_and_load(evs)
    assert sorted(ends) == [0, 1, 2, 3]
    assert [s for s in (1, 2, 3) if ends[s] > load] == [], (ends, load)
    assert ends[1] <= ends[2] <= ends[3], ends
    assert (span, hook) == ((3, 0) if profiler else (0, 3)), (span, hook)
    assert steps.observed == 4 and steps.unobserved == 0


def test_span_start_stops_at_the_first_step_not_ready(tmp_path):
    """A step still running ends when the device finishes it, not at the span start, and
    neither does a later one (the device runs them in order)."""
    gates = [Gate(ready=True, release=True), Gate(), Gate(), Gate()]

    def body(rec, steps):
        _queue(steps, gates)
        gates[1].ready.set()
        with rec.data_loading():
            pass
        time.sleep(0.05)
        for g in gates[2:]:
            g.ready.set()
        for g in gates:
            g.release.set()
        return steps.finish(DEADLOCK_S)

    done, evs, steps = _run(tmp_path, body)
    ends, load = _ends_and_load(evs)
    assert done and sorted(ends) == [0, 1, 2, 3]
    assert ends[1] <= load < ends[2] <= ends[3], (ends, load)
    assert steps.span_claims == 1


def test_span_poll_with_the_readiness_hook_installed_does_not_deadlock(tmp_path):
    """The readiness hook (a profile function on the training thread) fires on every function
    return, including those inside the span poll's claim, which holds the StepRecorder's
    lock: a step that became ready meanwhile was claimed again there, and the thread waited
    on its own lock (``goodput-jax demo`` hung 2 runs in 12). Here the device finishes step 3
    while the span poll records step 1 (the recorder's clock marks it ready), with step 3's
    hook installed."""
    gates = [Gate(ready=True, release=True), Gate(), Gate(), Gate()]
    armed = threading.Event()

    def clock():
        if armed.is_set():
            gates[3].ready.set()
        return time.time()

    def body(rec, steps):
        _queue(steps, gates)
        assert sys.getprofile() is not None, "step 3's readiness hook is not installed"
        gates[1].ready.set()
        gates[2].ready.set()
        armed.set()
        with rec.data_loading():
            pass
        for g in gates:
            g.release.set()
        return steps.finish(DEADLOCK_S)

    done, evs, steps = _run(tmp_path, body, clock=clock)
    ends, load = _ends_and_load(evs)
    assert done and sorted(ends) == [0, 1, 2, 3]
    assert [s for s in (1, 2, 3) if ends[s] > load] == [], (ends, load)
    assert steps.span_claims == 3, steps.span_claims  # the hook was off during the poll


def test_readiness_hook_backs_off_exactly_while_the_host_runs_ahead(tmp_path):
    """A hook still installed when the next step starts means the host runs ahead of the
    device: the hook then skips 1, 2, 4, ... steps. A step seen ready at its hook's first
    function return tries again at the next step. With gates, which steps are ready is the
    test's choice, not the machine's load (the version of this check on real arrays allowed
    one unplanned ready step, and CI's stalled machine saw a second: 9 installs, not 8)."""

    def body(rec, steps):
        hooked, claims = [], []
        for i in range(5):  # ready just after track() polled it: each hook records its
            steps.start(i)  # step at its first function return and removes itself
            steps.track(i, ReadyAfterFirstPoll(ready=True, release=True))
            hooked.append(steps._hooked is not None)
            claims.append(steps.hook_claims)
        assert steps.ready_claims == 0
        steps.start(5)  # ready when track() polls it: recorded there, no hook installed
        steps.track(5, Gate(ready=True, release=True))
        # on a stalled machine the watcher can see a gate ready before its hook's first
        # return does (CI-like load saw 4 hook claims of 5): each step is claimed once
        assert steps._hooked is None and steps.ready_claims == 1 and steps.hook_claims == claims[-1]
        assert sys.getprofile() is None
        # the watcher has judged those 5 (its verdicts may reset the back-off, so they come
        # before the run-ahead part, as on a real loop's first steps)
        assert steps.finish(DEADLOCK_S)
        late = [Gate() for _ in range(40)]
        for i, g in enumerate(late, start=6):  # never ready while the loop runs ahead
            steps.start(i)
            steps.track(i, g)
            hooked.append(steps._hooked is not None)
        for g in late:
            g.ready.set()
            g.release.set()
        return hooked, claims, steps.finish(DEADLOCK_S)

    (hooked, claims, done), evs, _steps = _run(tmp_path, body)
    assert done and claims[0] <= 1 and claims[-1] >= 3, claims
    assert all(b - a in (0, 1) for a, b in zip([0] + claims, claims)), claims
    assert hooked[:5] == [False] * 5  # removed at the return from track()
    assert [i + 1 for i in range(5, 45) if hooked[i]] == [6, 8, 11, 16, 25, 42]
    ends = {e.step for e in evs if e.kind.value == "step_device_end"}
    assert ends == set(range(46))


class CountingGate(Gate):
    """A gate that counts the readiness queries made of it."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.queries = 0

    def is_ready(self) -> bool:
        self.queries += 1
        return super().is_ready()


def test_an_overdue_step_still_running_is_not_queried_at_every_start(tmp_path):
    """Steps of about 0.1 s set the usual wait; then a step runs long (the device has a
    queue of steps before it). The first start after it is overdue queries its readiness
    once; the starts right after it do not query again (each query costs 5-30 us on a
    training thread with cold caches: it had been most of the recording's cost in the
    benchmark's loop, which runs ahead, where 4-7 of 60-120 queries found the step ready).
    Once the step ends, its device end is recorded as before."""
    wait_s = 0.1
    usual = [CountingGate(release=True) for _ in range(4)]
    slow = CountingGate(release=True)

    def body(rec, steps):
        sys.setprofile(_noop_profiler)  # no readiness hook: only the overdue poll queries
        try:
            for i, g in enumerate(usual):
                steps.start(i)
                steps.track(i, g)
                assert g.waited.wait(DEADLOCK_S)
                time.sleep(wait_s)
                g.ready.set()
                deadline = time.monotonic() + DEADLOCK_S
                while steps.observed < i + 1 and time.monotonic() < deadline:
                    time.sleep(0.005)
            n = len(usual)
            steps.start(n)
            steps.track(n, slow)
            assert slow.waited.wait(DEADLOCK_S)
            time.sleep(4 * wait_s)  # overdue: more than 1.5x the usual wait
            for i in range(n + 1, n + 6):  # five starts in quick succession
                steps.start(i)
            queries = slow.queries
        finally:
            sys.setprofile(None)
        slow.ready.set()
        return queries

    queries, evs, _steps = _run(tmp_path, body)
    assert queries == 1, f"{queries} readiness queries of the overdue step in 5 starts"
    ends = {e.step for e in evs if e.kind.value == "step_device_end"}
    assert ends == {0, 1, 2, 3, 4}


def _count_puts(monkeypatch) -> list:
    """Count the events that go through ``StepSink.put`` (the per-event rule)."""
    from goodput_jax.measure.recorder import StepSink

    puts: list = []
    real = StepSink.put

    def put(self, code, t, step, label=None, payload=None):
        puts.append(code)
        return real(self, code, t, step, label, payload)

    monkeypatch.setattr(StepSink, "put", put)
    return puts


def test_starts_of_a_loop_ahead_of_the_device_go_under_grants_in_order(tmp_path, monkeypatch):
    """A loop that runs ahead of the device (no step ready while it runs: the readiness hook
    backs off) appends most step starts to the recorder's queue under the sink's grants,
    not through a put() call each: the starts stay in order with the loop's badput spans,
    and every step gets its device end once the device finishes. Before, each start was a
    put() call (198 of 200)."""
    from goodput_jax.measure.recorder import StepSink

    puts = _count_puts(monkeypatch)
    gates = [Gate(release=True) for _ in range(200)]

    def body(rec, steps):
        for i, g in enumerate(gates):
            if i % 10 == 0:
                with rec.data_loading():
                    pass
            steps.start(i)
            steps.track(i, g)
        for g in gates:
            g.ready.set()
        return steps.finish(DEADLOCK_S)

    done, evs, steps = _run(tmp_path, body)
    assert done and steps.observed == 200
    starts = sum(1 for code in puts if code == StepSink.START)
    assert starts <= 20, starts
    host = [(e.kind.value, e.step) for e in evs
            if e.kind.value in ("step_start", "data_loading_start")]
    want = []
    for i in range(200):
        want += [("data_loading_start", None)] if i % 10 == 0 else []
        want.append(("step_start", i))
    assert host == want
    ts = [e.timestamp for e in evs if e.kind.value != "step_device_end"]
    assert ts == sorted(ts)
    assert sorted(e.step for e in evs if e.kind.value == "step_device_end") == list(range(200))


def test_a_full_queue_takes_at_most_one_grant_beyond_max_queue(tmp_path):
    """With a writer that never drains during the loop (a batch of 10 000, an hour's flush
    interval), step starts under grants fill the queue to at most max_queue plus one grant
    (64); the rest are dropped and counted, and every event is either written or counted."""
    from goodput_jax.runtime.steps import _GRANT

    gates = [Gate(release=True) for _ in range(300)]
    seen: dict = {}

    def body(rec, steps):
        seen["rec"] = rec
        for i, g in enumerate(gates):
            steps.start(i)
            steps.track(i, g)
        seen["queued"] = rec.written_count + rec.dropped_count  # nothing written yet
        for g in gates:
            g.ready.set()
        return steps.finish(DEADLOCK_S)

    done, evs, _steps = _run(tmp_path, body, max_queue=30, batch_size=10_000,
                            flush_interval=3600.0)
    rec = seen["rec"]
    assert done and seen["queued"] > 0  # dropped while the loop ran
    starts = sum(1 for e in evs if e.kind.value == "step_start")
    assert 30 - 1 <= starts <= 30 + _GRANT, starts  # the job start took one place
    # job start + 300 starts + 300 device ends + job end: each written or counted
    assert rec.written_count + rec.dropped_count == 602
    assert len(evs) == rec.written_count


def _tiny() -> int:
    return 1


def test_the_readiness_hook_asks_at_most_once_per_query_interval(tmp_path):
    """While Python runs between returns, the readiness hook asks whether its step is ready
    at most once per ``_HOOK_QUERY_S`` (a query costs about a microsecond, a return event a
    fraction of it; before, it asked at every return: 300 here); the first return after
    the step became ready records it."""
    from goodput_jax.runtime.steps import _HOOK_QUERY_S

    gate = CountingGate()  # the watcher is held on it: the hook records it

    def body(rec, steps):
        steps.start(0)
        steps.track(0, Gate(ready=True, release=True))
        steps.start(1)
        steps.track(1, gate)  # not ready: the readiness hook is installed
        assert sys.getprofile() is steps._hooked is not None
        before, t0 = gate.queries, time.perf_counter()
        for _ in range(300):
            _tiny()
        elapsed = time.perf_counter() - t0
        asked = gate.queries - before
        hooked = sys.getprofile() is not None
        gate.ready.set()
        time.sleep(2 * _HOOK_QUERY_S)
        _tiny()  # the first return after the interval: asks, sees it ready, records
        claims, profile = steps.hook_claims, sys.getprofile()
        gate.release.set()
        return asked, elapsed, hooked, claims, profile

    (asked, elapsed, hooked, claims, profile), evs, _steps = _run(tmp_path, body)
    assert hooked and 1 <= asked <= elapsed / _HOOK_QUERY_S + 2, (asked, elapsed)
    assert claims == 1 and profile is None
    assert sorted(e.step for e in evs if e.kind.value == "step_device_end") == [0, 1]
