"""The drop-in monitor writes Google's step deviations under ``step_deviation``.

ml-goodput-measurement's monitor writes ``calculator.get_step_deviation(ideal)`` per step
(|gap from a step's start to the next one's - the ideal|) under ``step_deviation``. The
drop-in's uploader wrote the engine's signed productive step times minus the ideal under
that tag, so the values differed from Google's on any uneven loop (before the monitor's
``step_deviation_points`` hook). Real TensorBoard files, read back.
"""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from goodput_jax.goodput import GoodputCalculator
from goodput_jax.measure.events import Event
from goodput_jax.measure.events import EventKind as K
from goodput_jax.measure.stores.sqlite import SQLiteStore
from goodput_jax.monitoring import GoodputMonitor

T0 = 1_700_000_000.0
GAPS = [1.0, 1.2, 0.8, 3.0, 1.0, 0.9, 1.1, 1.0, 5.0, 1.0, 1.0, 0.7]  # uneven: a stall, a save


def _events() -> list[Event]:
    out = [Event(K.JOB_START, "job", "r1", 0, T0)]
    t = T0 + 2.0
    for step, gap in enumerate(GAPS):
        out.append(Event(K.STEP_START, "job", "r1", 0, t, step=step))
        t += gap
    return out


def test_the_drop_in_monitor_writes_googles_step_deviation(tmp_path):
    store = SQLiteStore(str(tmp_path / "g.db"))
    events = _events()
    store.append(events[:7])  # steps 0-5 started: Google's gaps for 0-4
    tb = tmp_path / "tb"
    monitor = GoodputMonitor("job", "goodput_job", str(tb), 0.01, True, store=store,
                             clock=lambda: T0 + 60.0, stop_timeout=5.0)
    expected = dict(GoodputCalculator("job", "goodput_job", store=store).get_step_deviation())
    first = monitor.upload_step_deviation()
    store.append(events[7:])
    later = GoodputCalculator("job", "goodput_job", store=store).get_step_deviation()
    expected.update({s: v for s, v in later.items() if s not in expected})
    second = monitor.upload_step_deviation()
    monitor.close()
    acc = EventAccumulator(str(tb / "goodput"), size_guidance={"scalars": 0})  # Google's subdir
    acc.Reload()
    points = acc.Scalars("step_deviation")
    assert first["points"] == 5 and second["points"] == len(GAPS) - 1 - 5
    assert [p.step for p in points] == sorted(expected) == list(range(len(GAPS) - 1))
    assert [p.value for p in points] == pytest.approx([expected[s] for s in sorted(expected)],
                                                      abs=1e-5)
    assert all(p.value >= 0 for p in points)  # Google's are absolute deviations
    store.close()
