"""Issue 45, item 6 (the job report's part): every label says what the data holds.

- the replicas plot names every replica count that was profiled (the old legend said
  "profiled: 4 replicas" though 2 were profiled too), read from the recorded step programs;
- a roofline line's step count says what it counts (it and the demo's profile table showed
  611 and 169 for one configuration without saying that they count different things);
- a caption names only the markers the plot draws (it named "hollow triangles" that were not
  drawn).

The job is written through the real :class:`GoodputRecorder` into SQLite, with an injected
clock: run 1 trains steps 0-11 on 4 devices and crashes; run 2 restores step 9 and trains
10-19 on 4 devices, 20-29 on 2, 30-39 on 4 again, publishing hints (4 replicas now, at most
4 profiled) before its end.
"""

from __future__ import annotations

import re

import pytest

from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.productivity import DevicePeak, ProgramCost
from goodput_jax.model.hints import Hints
from goodput_jax.model.types import GradParams, PerfParams
from goodput_jax.report.curves import model_curves, replica_counts_run
from goodput_jax.report.productivity import STEP_COUNT_RULE, productivity_panel, roofline_lines
from goodput_jax.report.text import format_report
from tests.measure._synthetic_job import Clock, recorder

PEAK = DevicePeak("cpu", 1e11, 4e9, "user")
FOUR = ProgramCost("train_step r=4", 1e8, 0.0, 1e6, "cpu", 4, PEAK)
TWO = ProgramCost("train_step r=2", 2e8, 0.0, 2e6, "cpu", 2, PEAK)
HINTS = {
    "perfParams": {"alpha_c": 0.121, "beta_c": 0.00568, "alpha_n": 0.0236, "beta_n": 0.00634,
                   "alpha_r": 0.0118, "beta_r": 0.00317, "gamma": 1.14},
    "gradParams": {"norm": 0.00136, "var": 0.000502},
    "initBatchSize": 128, "maxBatchSize": 1280, "localBszBounds": [16, 256],
    "gradientAccumulation": True, "maxProfiledReplicas": 4, "numNodes": 1, "numReplicas": 4,
    "atomicBsz": 32, "accumSteps": 0,
}


def _job(url: str, hints: dict = HINTS, four: ProgramCost = FOUR) -> float:
    """Writes the job; returns its end time."""
    clock = Clock(0.0)
    rec = recorder(url, clock, "r1")
    rec.record_job_start_time()
    clock.t = 1.0
    for step in range(12):  # steps 10 and 11 are lost in the crash
        if step == 0:
            rec.record_program_cost(four, step=0)
        rec.record_step_start_time(step)
        clock.t += 0.5 if step == 0 else 0.01
    rec.record_step_start_time(12)  # crashes in step 12: no job end
    rec.close()
    clock.t += 2.0
    rec = recorder(url, clock, "r2")
    rec.record_job_start_time()
    clock.t += 0.5
    for step in range(10, 40):
        if step in (10, 20, 30):  # the program of the steps from here on
            rec.record_program_cost(TWO if step == 20 else four, step=step)
        rec.record_step_start_time(step)
        clock.t += 0.3 if step in (10, 20, 30) else (0.02 if 20 <= step < 30 else 0.01)
    rec.record_hints(hints)
    rec.record_job_end_time()
    rec.close()
    return clock.t


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'g.db'}"
    _job(url)
    return url


def _calc(url: str) -> GoodputCalculator:
    return GoodputCalculator("job", "logger", store=url, clock=lambda: 1e3)


def test_the_profiled_replica_counts_are_read_from_the_recorded_programs(store_url):
    calc = _calc(store_url)
    programs = calc.get_program_goodput().programs
    hints = Hints.from_json(calc.get_latest_hints())
    assert replica_counts_run(hints, programs) == (2, 4)
    # not one device per replica (the running program spans 8 devices for 4 replicas): the
    # devices are not replica counts, so only what the hints prove is shown
    eight = [p for p in programs if p.cost.num_devices == 4]
    wide = [type(p)(**{**{f: getattr(p, f) for f in p.__dataclass_fields__},
                       "cost": ProgramCost("s", 1e8, 0.0, 1e6, "cpu", 8, PEAK)}) for p in eight]
    assert replica_counts_run(hints, wide) is None
    assert replica_counts_run(hints, ()) is None and replica_counts_run(None, programs) is None


def test_the_replica_plot_and_its_caption_name_every_profiled_count(store_url, tmp_path):
    pytest.importorskip("matplotlib")
    from goodput_jax.report import figures, render

    calc = _calc(store_url)
    path = tmp_path / "r.html"
    render.render_html(calc, path, now=1e3)
    text = path.read_text(encoding="utf-8")
    cap = text[text.index('id="caption-replicas"'):]
    cap = " ".join(cap[:cap.index("</figcaption>")].split())
    assert "Dots: the replica counts profiled (2 and 4 replicas)." in cap, cap
    roof = text[text.index('id="caption-roofline"'):]
    assert f"Below, {STEP_COUNT_RULE}." in " ".join(roof[:roof.index("</figcaption>")].split())
    # the legend the page draws, from the same curves
    counts = replica_counts_run(Hints.from_json(calc.get_latest_hints()),
                                calc.get_program_goodput().programs)
    mc = model_curves(calc.get_latest_hints(), profiled_replicas=counts)
    plt = figures._plt()
    fig, ax = plt.subplots()
    figures.draw_replica_curve(ax, mc)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    assert "profiled: 2, 4 replicas" in legend, legend


def test_a_roofline_line_says_its_steps_are_every_runs_productive_steps(store_url):
    calc = _calc(store_url)
    lines = {ln.split(" on ")[0].strip(): ln for ln in
             roofline_lines(productivity_panel(calc).productivity)}
    # by hand: the 4-device program ran productive steps 0-9 (run 1; 10 and 11 were lost),
    # 10-19 and 30-39 (run 2), each stretch's first step (0, 10, 30) left out: 9 + 9 + 9;
    # the 2-device one 20-29, without step 20: 9
    four, two = lines["train_step r=4"], lines["train_step r=2"]
    assert four.endswith("over 27 productive steps (all runs)"), four
    assert two.endswith("over 9 productive steps (all runs)"), two
    text = format_report(calc)
    assert f"roofline position ({STEP_COUNT_RULE}):" in text


def test_the_demo_profile_says_its_steps_are_the_ones_timed_for_the_fit():
    from goodput_jax.demo import format_model_summary

    h = GoodputHooks("j", init_batch_size=32, is_primary=False, num_replicas=1, num_nodes=1,
                     warmup_steps=0, job_warmup_steps=0)
    h.update_grad_params(GradParams(2.0, 6.0))
    for (r, b), t in {(1, 32): 0.010, (1, 64): 0.016, (2, 32): 0.012}.items():
        h.set_config(num_replicas=r, atomic_bsz=b)
        for _ in range(3):
            h.observe_step_time(t)
    h.refit()
    text = format_model_summary(h)
    assert len(re.findall(r"\(3 steps timed for the fit\)", text)) == 3, text
    assert "the roofline counts every run's productive steps" in text


# ------------------------------------------------------------------ captions and markers
PERF = PerfParams(0.121, 0.00568, 0.0236, 0.00634, 0.0118, 0.00317, 1.14)


def _hooks(num_replicas: int, **kw) -> GoodputHooks:
    perf = kw.pop("perf", PERF)
    grad = kw.pop("grad", GradParams(0.00136, 0.05))
    h = GoodputHooks("j", init_batch_size=64, max_batch_size=kw.pop("max_batch_size", 1024),
                     is_primary=False, num_replicas=num_replicas, num_nodes=1, warmup_steps=0,
                     job_warmup_steps=0, atomic_bsz=64 // num_replicas, **kw)
    h.perf_params = perf
    h.update_grad_params(grad)
    return h


CASES = {  # no accumulation, each with the markers it gets
    "one replica": {"num_replicas": 1},
    "two replicas, wide limits": {"num_replicas": 2, "local_bsz_bounds": (8, 512)},
    "four replicas, tight limits": {
        "num_replicas": 4, "local_bsz_bounds": (8, 16), "max_batch_size": 2048,
        "perf": PerfParams(0.002, 1e-5, 0.2, 0.01, 0.1, 0.01, 1.5),
        "grad": GradParams(1e-3, 0.5)},
}


def _page(tmp_path, hints: dict) -> str:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    _job(url, hints)
    path = tmp_path / "c.html"
    from goodput_jax.report import render

    render.render_html(_calc(url), path, now=1e3)
    return path.read_text(encoding="utf-8")


def _caption(text: str, which: str) -> str:
    cap = text[text.index(f'id="caption-{which}"'):]
    return " ".join(cap[:cap.index("</figcaption>")].split())


def _hollow(ax, marker: str) -> list:
    return [ln for ln in ax.get_lines() if ln.get_marker() == marker
            and ln.get_markerfacecolor() == "none" and len(ln.get_xdata())]


@pytest.mark.parametrize("case", list(CASES))
def test_every_marker_a_caption_names_is_drawn(case, tmp_path):
    pytest.importorskip("matplotlib")
    from goodput_jax.report import figures

    hints = _hooks(**CASES[case]).hints()
    mc = model_curves(hints)
    plt = figures._plt()
    fig, (a1, a2) = plt.subplots(1, 2)
    figures.draw_batch_curve(a1, mc)
    figures.draw_replica_curve(a2, mc)
    plt.close(fig)
    text = _page(tmp_path, hints)
    batch, replicas = _caption(text, "batch"), _caption(text, "replicas")
    assert ("Hollow triangles" in replicas) == bool(_hollow(a2, "v")), (case, replicas)
    assert ("hollow star" in batch) == bool(_hollow(a1, "*")), (case, batch)
    assert "Black dot" in batch and "red star" in batch
    assert [ln for ln in a1.get_lines() if ln.get_marker() == "o"]


def test_the_cases_cover_a_caption_with_and_without_triangles():
    """The parametrised cases see both sides (else the test above proves little)."""
    drawn = {case: bool(model_curves(_hooks(**kw).hints()).own_limit_points)
             for case, kw in CASES.items()}
    assert set(drawn.values()) == {True, False}, drawn
