"""Issue 35, Build 3 and 4 (the report's part): the text and HTML reports draw the
calculator's ML Productivity Goodput (the three factors, MFU, the roofline position) and its
advice (checkpoint interval, finish forecast), the same numbers as the typed results.

A hand-made job: two runs (a crash, a restart), a checkpoint save per run, two step
programs (A at the ridge, B memory-bound) with A run again after B.
"""

from __future__ import annotations

import re

import pytest

from goodput_jax.measure.events import Event
from goodput_jax.measure.productivity import DevicePeak, ProgramCost
from goodput_jax.report.productivity import (
    format_fraction,
    merged_programs,
    productivity_lines,
    productivity_panel,
)
from goodput_jax.report.text import format_report
from tests.measure._timeline import K, calc_for, events, new_store

PEAK = DevicePeak("chip", 1e12, 1e10, "user")  # ridge point 100 FLOP/byte
A = ProgramCost("jit(step_a)", 1e10, 0.0, 1e8, "chip", 1, PEAK)   # ideal 10 ms, compute
B = ProgramCost("jit(step_b)", 1e9, 0.0, 4e7, "chip", 1, PEAK)    # ideal 4 ms, memory
NOW = 100.0


def _cost(c: ProgramCost, run: str, step: int, t: float) -> Event:
    return Event(K.PROGRAM_COST, "j", run, 0, t, step=step, payload=c.to_payload())


def _store():
    store = new_store()
    # run 1: steps 0-9 on A (20 ms each after a 1 s first step), a save, crash in step 10
    spec = [(K.JOB_START, 0.0)]
    t = 1.0
    progs = []
    for s in range(10):
        if s == 0:
            progs.append((A, s, t))
        spec.append((K.STEP_START, t, s))
        t += 1.0 if s == 0 else 0.02
    spec += [(K.CHECKPOINT_SAVE_START, t, 9), (K.CHECKPOINT_SAVE_END, t + 0.5, 9)]
    t += 0.5
    spec.append((K.STEP_START, t, 10))
    r1 = events("j", "r1", spec)
    r1 += [_cost(c, "r1", s, tt) for c, s, tt in progs]
    # run 2 (after 5 s down): steps 10-29: B for 10-19 (8 ms after a 1 s first step), A
    # again for 20-29 (20 ms)
    t += 5.0
    spec = [(K.JOB_START, t)]
    t += 0.5
    progs = []
    for s in range(10, 30):
        if s in (10, 20):  # B's first step compiles (1 s, left out by the calculator)
            progs.append((B if s == 10 else A, s, t))
        spec.append((K.STEP_START, t, s))
        t += 1.0 if s == 10 else (0.008 if s < 20 else 0.02)
    spec += [(K.CHECKPOINT_SAVE_START, t, 29), (K.CHECKPOINT_SAVE_END, t + 0.5, 29)]
    spec.append((K.JOB_END, t + 0.5))
    r2 = events("j", "r2", spec)
    r2 += [_cost(c, "r2", s, tt) for c, s, tt in progs]
    store.append(sorted(r1, key=lambda e: e.timestamp) + sorted(r2, key=lambda e: e.timestamp))
    return store


@pytest.fixture(scope="module")
def calc():
    return calc_for(_store(), "j", now=NOW)


def test_the_text_report_shows_the_calculators_numbers(calc):
    p = calc.get_productivity_goodput()
    text = format_report(calc, target_step=1000, mtbf_s=3600.0)
    sec = text[text.index("ML Productivity Goodput (scheduling x runtime x program goodput)"):]
    for name, value in (("scheduling goodput", p.scheduling_goodput),
                        ("runtime goodput", p.runtime_goodput),
                        ("program goodput", p.program_goodput),
                        ("ML Productivity Goodput", p.ml_productivity_goodput),
                        ("ETTR", p.ettr), ("MFU", p.mfu)):
        m = re.search(rf"^  {re.escape(name)}\s+([\d.]+)%", sec, re.M)
        assert m, (name, sec)
        assert float(m.group(1)) == pytest.approx(100 * value, abs=0.006), name
    # the three factors multiply to the product shown
    f = [float(re.search(rf"^  {n}\s+([\d.]+)%", sec, re.M).group(1)) / 100
         for n in ("scheduling goodput", "runtime goodput", "program goodput")]
    assert f[0] * f[1] * f[2] == pytest.approx(p.ml_productivity_goodput, rel=2e-3)
    # the roofline position: one line per distinct program (A's two stretches merged)
    assert len(re.findall(r"^  jit\(step_a\) on chip .*near the ridge", sec, re.M)) == 1
    assert len(re.findall(r"^  jit\(step_b\) on chip .*memory-bound", sec, re.M)) == 1
    a = calc.get_checkpoint_advice(3600.0)
    assert f"checkpoint interval: every {a.interval_steps} steps" in sec
    assert f"predicted goodput {format_fraction(a.predicted_goodput)}" in sec
    fc = calc.get_finish_forecast(1000, now=NOW)
    assert "finish forecast: step 1000 in " in sec and f"{fc.steps_left} steps x" in sec


def test_the_advice_says_why_it_is_missing(calc):
    panel = productivity_panel(calc)  # one disruption observed: an MTBF; no target step
    lines = "\n".join(productivity_lines(panel))
    assert panel.advice is not None and panel.forecast is None
    assert "finish forecast: none (no target step given" in lines
    no_cost = new_store()
    no_cost.append(events("k", "r1", [(K.JOB_START, 0), (K.STEP_START, 1, 0),
                                      (K.STEP_START, 2, 1), (K.JOB_END, 3)]))
    text = "\n".join(productivity_lines(productivity_panel(calc_for(no_cost, "k", now=4.0))))
    assert "program goodput" in text and "n/a" in text
    assert "no program cost recorded" in text and "StepRecorder" in text
    assert "checkpoint interval: no advice (" in text  # no save, no disruption: says which


def test_merged_programs_sum_the_stretches(calc):
    progs = calc.get_program_goodput().programs
    assert [p.cost.name for p in progs].count("jit(step_a)") == 2  # A ran in two stretches
    merged = merged_programs(progs)
    assert [p.cost.name for p in merged] == ["jit(step_a)", "jit(step_b)"]
    a = merged[0]
    stretches = [p for p in progs if p.cost == A]
    assert a.num_steps == sum(p.num_steps for p in stretches)
    assert a.step_time_s == pytest.approx(0.02, rel=1e-6)
    assert a.mfu == pytest.approx(0.01 / 0.02) and a.program_goodput == pytest.approx(0.5)


@pytest.mark.parametrize("kw, match", [({"target_step": -1}, r"target_step \(-1\)"),
                                       ({"mtbf_s": 0.0}, r"mtbf_s \(0.0\)"),
                                       ({"target_step": True}, r"target_step \(True\)")])
def test_bad_arguments_name_themselves(calc, kw, match):
    with pytest.raises(ValueError, match=match):
        productivity_panel(calc, **kw)


def test_the_html_page_has_the_panel(tmp_path, calc):
    pytest.importorskip("matplotlib")
    from goodput_jax.report import render

    path = tmp_path / "r.html"
    render.render_html(calc, path, now=NOW, target_step=1000)
    text = path.read_text(encoding="utf-8")
    p = calc.get_productivity_goodput()
    assert '<h2 id="productivity">ML Productivity Goodput</h2>' in text
    table = text[text.index('id="productivity-table"'):]
    table = table[:table.index("</table>")]
    for name, value in (("scheduling goodput", p.scheduling_goodput),
                        ("runtime goodput", p.runtime_goodput),
                        ("program goodput", p.program_goodput),
                        ("ML Productivity Goodput", p.ml_productivity_goodput),
                        ("ETTR", p.ettr), ("MFU", p.mfu)):
        assert f"<td>{name}</td><td>{format_fraction(value)}</td>" in table, name
    assert 'id="img-roofline"' in text and 'id="caption-roofline"' in text
    assert text.count("<li>jit(step_") == 2  # one line per distinct program
    advice = text[text.index('<ul id="advice">'):]
    a = calc.get_checkpoint_advice()
    assert f"every {a.interval_steps} steps" in advice and "finish forecast: step 1000" in advice


def test_cli_report_passes_the_target_and_the_mtbf(tmp_path, capsys):
    from goodput_jax.cli import main
    from goodput_jax.measure.stores.sqlite import SQLiteStore

    db = tmp_path / "g.db"
    store = SQLiteStore(str(db))
    src = _store()
    evs, _ = src.read_events("j")
    store.append(evs)
    store.close()
    assert main(["report", "--job", "j", "--store", f"sqlite:///{db}", "--target-step", "500",
                 "--mtbf", "7200"]) == 0
    out = capsys.readouterr().out
    assert "finish forecast: step 500 in " in out
    assert "a mean time between failures of 7200 s, given)" in out


def test_a_step_above_its_roofline_raises_the_peak_and_says_so():
    """A peak below what the device reached (the demo's CPU probe on a loaded machine gave
    program goodput 138%) is raised to what the step reached: the report reads <= 100% and
    says the peak was raised, from what."""
    low = ProgramCost("jit(step)", 1e10, 0.0, 1e8, "chip", 1, DevicePeak("chip", 1e11, 1e9))
    store = new_store()
    evs = events("k", "r1", [(K.JOB_START, 0.0)] + [(K.STEP_START, 1.0 + 0.02 * s, s)
                                                    for s in range(6)] + [(K.JOB_END, 1.2)])
    evs.insert(1, _cost(low, "r1", 0, 1.0))
    store.append([Event(e.kind, "k", e.run_id, e.host, e.timestamp, step=e.step,
                        payload=e.payload) for e in evs])
    calc = calc_for(store, "k", now=2.0)
    r = calc.get_productivity_goodput()
    assert r.program_goodput <= 1.0 and r.mfu <= 1.0 and r.program.raised
    text = "\n".join(productivity_lines(productivity_panel(calc)))
    assert "note: peak raised" in text
    assert "raised from 100 GFLOP/s, 1 GB/s: a step beat it" in text
    pct = [float(x) for x in re.findall(r"(\d+\.\d+)%", text)]
    assert pct and max(pct) <= 100.0, text
    calc_ok = calc_for(_store(), "j", now=NOW)
    assert "peak raised" not in "\n".join(productivity_lines(productivity_panel(calc_ok)))


def test_the_html_report_shows_the_no_program_cost_door_as_code(tmp_path):
    """The note's `steps = runtime.StepRecorder(recorder)` reads as code in the HTML report,
    not with its backquotes (they showed literally before)."""
    from goodput_jax.report import render

    no_cost = new_store()
    no_cost.append(events("k", "r1", [(K.JOB_START, 0), (K.STEP_START, 1, 0),
                                      (K.STEP_START, 2, 1), (K.JOB_END, 3)]))
    path = tmp_path / "r.html"
    render.render_html(calc_for(no_cost, "k", now=4.0), path, now=4.0)
    note = re.search(r'<p class="note" id="no-program-cost">(.*?)</p>', path.read_text(), re.S)
    assert note is not None
    assert "<code>steps = runtime.StepRecorder(recorder)</code>" in note.group(1)
    assert "`" not in note.group(1)
