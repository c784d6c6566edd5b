"""The report page as a new user reads it: explanations, units, extrapolation, layout.

A small synthetic job (two runs, a crash, a recompilation, hints from a 2-replica
profile) rendered to HTML and PNG in-process; no browser (the screenshots at
1400 and 700 px are a manual check, see docs/quickstart.md).
"""

from __future__ import annotations

import base64
import dataclasses
import re
from html.parser import HTMLParser

import pytest

from goodput_jax.measure.events import Event
from goodput_jax.model.hints import Hints
from goodput_jax.report import labels
from goodput_jax.report.curves import model_curves
from goodput_jax.report.text import format_report
from goodput_jax.report.timeline import CATEGORY_NAMES
from tests.measure._timeline import K, calc_for, events, new_store

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from goodput_jax.report import figures, render

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HINTS = {
    "perfParams": {"alpha_c": 0.121, "beta_c": 0.00568, "alpha_n": 0.0236, "beta_n": 0.00634,
                   "alpha_r": 0.0118, "beta_r": 0.00317, "gamma": 1.14},
    "gradParams": {"norm": 0.00136, "var": 0.05},
    "initBatchSize": 64, "maxBatchSize": 1024, "localBszBounds": [16, 256],
    "gradientAccumulation": True, "maxProfiledReplicas": 2, "numNodes": 1, "numReplicas": 2,
    "atomicBsz": 32, "accumSteps": 0, "suggestedBatchSize": 332, "suggestedAtomicBsz": 166,
    "suggestedAccumSteps": 0, "predictedSpeedup": 1.35,
}
NOW = 60.0


def _store(hints=HINTS):
    store = new_store()
    r1 = events("j", "r1", [
        (K.JOB_START, 0), (K.TRAINING_PREP_START, 0), (K.TRAINING_PREP_END, 3),
        (K.STEP_START, 3, 0), (K.STEP_START, 8, 1), (K.STEP_START, 10, 2)])  # crash in step 2
    r2 = events("j", "r2", [
        (K.JOB_START, 15), (K.STEP_START, 16, 1), (K.STEP_START, 18, 2),
        (K.CUSTOM_BADPUT_START, 20, None, "eval"), (K.CUSTOM_BADPUT_END, 22, None, "eval"),
        (K.STEP_START, 22, 3), (K.JOB_END, 30)])
    r2.append(Event(K.COMPILATION, "j", "r2", 0, 25.0,
                    payload={"duration_s": 2.0, "recompile": True, "name": "step"}))
    if hints is not None:
        r2.append(Event(K.HINTS, "j", "r2", 0, 29.0, payload=hints))
    store.append(r1 + sorted(r2, key=lambda e: e.timestamp))
    return store


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The HTML and PNG of the synthetic job, rendered once for the module."""
    out = tmp_path_factory.mktemp("page")
    calc = calc_for(_store(), "j", now=NOW)
    done = render.render_reports(calc, out / "r.html", out / "r.png", now=NOW)
    return done, (out / "r.html").read_text(encoding="utf-8"), (out / "r.png").read_bytes()


class _Page(HTMLParser):
    """Visible text by element id, table cells, image sources, the CSS."""

    def __init__(self):
        super().__init__()
        self.by_id: dict[str, str] = {}
        self._open: list[str | None] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None
        self.imgs: dict[str, str] = {}
        self.css = ""
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs[a.get("id", "")] = a["src"]
            return
        if tag in ("meta", "br"):
            return
        self._open.append(a.get("id"))
        if a.get("id"):
            self.by_id.setdefault(a["id"], "")
        if tag == "td":
            self._cell = []
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if tag in ("img", "meta", "br"):
            return
        if self._open:
            self._open.pop()
        if tag == "td" and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            self._cell = None
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.css += data
            return
        for i in self._open:
            if i:
                self.by_id[i] += data
        if self._cell is not None:
            self._cell.append(data)


def _parse(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    return p


def test_page_defines_both_goodputs_and_links_the_concepts(page):
    _, text, _ = page
    p = _parse(text)
    meanings = " ".join(p.by_id["goodput-meanings"].split())
    assert "Measured goodput (%)" in meanings and "productive step time / total job time" in meanings
    assert "Modelled goodput (samples/s)" in meanings
    assert "throughput (samples/s) x statistical efficiency" in meanings
    assert re.search(r'<a href="file://[^"]*/docs/concepts\.md">docs/concepts\.md</a>', text)
    headline = " ".join(p.by_id["headline"].split())
    assert re.search(r"Measured goodput: [\d.]+% of 30\.0 s", headline), headline
    assert re.search(r"Modelled goodput now: [\d,]+ samples/s \(batch 64 on 2 replicas\); "
                     r"suggested batch 332: [\d,]+ samples/s, 1\.35x", headline), headline


def test_every_plot_is_explained_with_its_units(page):
    _, text, _ = page
    p = _parse(text)
    cap = {k: " ".join(p.by_id[f"caption-{k}"].split())
           for k in ("timeline", "breakdown", "batch", "replicas")}
    assert "seconds since the job's first event" in cap["timeline"]
    assert "one lane per run (2 here" in cap["timeline"] and "restarts" in cap["timeline"]
    assert "Seconds per bucket" in cap["breakdown"] and "% of the total job time" in cap["breakdown"]
    assert "samples/s" in cap["batch"] and "total batch size (samples, log scale)" in cap["batch"]
    assert "efficiency (0-1" in cap["batch"] and "2 replicas" in cap["batch"]
    assert "replicas (devices)" in cap["replicas"] and "samples/s" in cap["replicas"]
    for which in ("timeline", "breakdown", "batch", "replicas"):
        src = p.imgs[f"img-{which}"]
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG_MAGIC


def test_extrapolation_is_marked_in_the_text_and_the_plot(page):
    _, text, _ = page
    cap = " ".join(_parse(text).by_id["caption-replicas"].split())
    assert "profiled on up to 2 replicas" in cap and "extrapolated beyond profiled" in cap

    mc = model_curves(HINTS)
    assert mc.profiled_replicas == 2 and mc.extrapolated_replicas == list(range(3, 9))
    plt = figures._plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    figures.draw_replica_curve(ax, mc)
    legend = {t.get_text(): h for t, h in zip(ax.get_legend().get_texts(),
                                              ax.get_legend().legend_handles, strict=True)}
    shaded = [t for t in legend if t.startswith(figures.EXTRAPOLATED_LABEL)]
    assert shaded == ["extrapolated beyond profiled (> 2 replicas)"]
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and min(dashed[0].get_xdata()) == 2 and max(dashed[0].get_xdata()) == 8
    solid = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-" and len(ln.get_xdata()) > 1]
    assert max(solid[0].get_xdata()) == 2
    # the grey band starts where profiling stopped
    band = [pt for pt in ax.patches if pt.get_label().startswith(figures.EXTRAPOLATED_LABEL)]
    assert len(band) == 1 and band[0].get_x() == pytest.approx(2.0)
    plt.close(fig)

    # the curve always reaches twice the profiled count, so the marker is always there
    assert model_curves({**HINTS, "maxProfiledReplicas": 8}).extrapolated_replicas == list(
        range(9, 17))
    # a curve that stays within the profiled range has no marker
    mc_all = dataclasses.replace(mc, replicas=mc.replicas[:2],
                                 goodput_vs_replicas=mc.goodput_vs_replicas[:2])
    assert mc_all.extrapolated_replicas == []
    fig, ax = plt.subplots()
    figures.draw_replica_curve(ax, mc_all)
    assert not any(figures.EXTRAPOLATED_LABEL in t.get_text() for t in ax.get_legend().get_texts())
    plt.close(fig)


@pytest.mark.parametrize("which", ["timeline", "batch", "replicas"])
def test_legends_sit_outside_the_plotting_area(which):
    from goodput_jax.report.timeline import build_timeline

    store = _store()
    kw = {"timeline": build_timeline(store, "j", now=NOW), "curves": model_curves(HINTS)}
    fig = figures.figure(which, **kw)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    box, leg = ax.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
    assert leg.y1 <= box.y0, (which, leg, box)  # wholly below the axes: no curve under it
    figures._plt().close(fig)


def test_hints_show_human_names_and_units_not_camel_case(page):
    _, text, _ = page
    p = _parse(text)
    assert "Model hints" in p.by_id.get("hints", "")
    cells = p.cells
    row = cells.index("initial batch size (M0)")
    assert cells[row + 1:row + 3] == ["64", "samples"]
    row = cells.index("most replicas profiled")
    assert cells[row + 1:row + 3] == ["2", "devices"]
    row = cells.index("step-time model")
    assert "ms/sample" in cells[row + 1] and "overlap gamma 1.14" in cells[row + 1]
    assert cells[row + 2] == "ms (per term)"  # the values are printed in ms
    camel = re.compile(r"\b[a-z]+[A-Z][A-Za-z]*\b")
    assert [c for c in cells if camel.search(c)] == []
    # the JSON key is only a tooltip
    assert 'title="initBatchSize"' in text and 'title="maxProfiledReplicas"' in text


def test_page_is_responsive_at_700_px(page):
    _, text, _ = page
    css = " ".join(_parse(text).css.split())
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in text
    assert "img { max-width: 100%; height: auto;" in css
    assert ".scroll { overflow-x: auto;" in css
    assert "@media (max-width: 760px)" in css and ".plots figure { flex-basis: 100%; }" in css
    # every table is wrapped in a horizontally scrolling box
    assert text.count("<table") == text.count('<div class="scroll"><table') == 3
    # the figures are drawn near the width they are shown at, so their text stays legible
    for src in _parse(text).imgs.values():
        png = base64.b64decode(src.split(",", 1)[1])
        width = int.from_bytes(png[16:20], "big")
        assert 450 <= width <= 900, width


def test_html_and_png_files_are_written(page):
    done, text, png = page
    assert done["has_model"] and done["html"].endswith("r.html") and done["png"].endswith("r.png")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert png[:8] == PNG_MAGIC
    w, h = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert w >= 1000 and h >= 900  # title + timeline + breakdown + the two model curves


def test_malformed_hints_give_a_note_not_a_crash(tmp_path):
    calc = calc_for(_store({**HINTS, "initBatchSize": "big"}), "j", now=NOW)
    done = render.render_reports(calc, tmp_path / "bad.html", now=NOW)
    assert not done["has_model"]
    p = _parse((tmp_path / "bad.html").read_text(encoding="utf-8"))
    note = " ".join(p.by_id["no-model"].split())
    assert "could not be read" in note and "initBatchSize" in note


def test_table_lists_recompilation_and_sums_to_the_total():
    calc = calc_for(_store(), "j", now=NOW)
    text = format_report(calc)
    d = calc.get_job_goodput_details()
    rows = re.findall(r"^\s{2}(\S.*?)\s+([\d.]+)\s+([\d.]+)\s*$", text, re.MULTILINE)
    names = [r[0] for r in rows]
    assert "recompilation" in names and "elastic: scale up" not in names
    badput = sum(float(s) for name, s, _ in rows if name != "eval")  # eval is under custom
    assert badput + d["productive_time"] == pytest.approx(d["total_time"], abs=2e-3)


def test_labels_cover_the_engine_and_the_hints():
    assert set(labels.BUCKET_LABELS) == set(CATEGORY_NAMES)
    assert set(figures.COLORS) == set(CATEGORY_NAMES)
    assert list(labels.HINT_LABELS) != [] and set(labels.HINT_LABELS) == {
        f.name for f in dataclasses.fields(Hints)}
    assert {render.json_key(f) for f in labels.HINT_LABELS} == set(Hints().to_json())



def test_drop_in_calculator_reports_like_the_base_one(tmp_path):
    """goodput.GoodputCalculator returns Google's details shape; the report reads the base one."""
    from goodput_jax import goodput

    store = _store()
    drop_in = goodput.GoodputCalculator("j", "logger", store=store, clock=lambda: NOW)
    assert isinstance(drop_in.get_job_goodput_details()["badput_time"][
        goodput.BadputType.CUSTOM_BADPUT_EVENTS], dict)  # Google's shape: custom by type
    assert format_report(drop_in) == format_report(calc_for(store, "j", now=NOW))
    done = render.render_reports(drop_in, tmp_path / "d.html", now=NOW)
    assert done["has_model"] and "eval" in (tmp_path / "d.html").read_text(encoding="utf-8")


def test_a_multi_host_job_shows_its_stragglers(tmp_path):
    # hosts 0 and 1 of run "m"; host 1 starts each of 4 steps 0.25 s late: 1 s lost of 4.25
    store = new_store()
    evs = []
    for host, late in ((0, 0.0), (1, 0.25)):
        evs += events("m", "m", [(K.JOB_START, 0)]
                      + [(K.STEP_START, i + late, i) for i in range(4)] + [(K.JOB_END, 4.25)],
                      host=host)
    store.append(sorted(evs, key=lambda e: e.timestamp))
    calc = calc_for(store, "m", now=NOW)
    path = tmp_path / "m.html"
    render.render_html(calc, path, now=NOW)
    p = _parse(path.read_text(encoding="utf-8"))
    section = " ".join(p.by_id["stragglers"].split())
    assert section == "Stragglers (2 hosts)"
    i = p.cells.index("host 1")
    assert p.cells[i:i + 6] == ["host 1", "4 of 4", "1.000", "100.0", "23.53", "0.250"]
    # a one-host job has no such section
    one = calc_for(_store(), "j", now=NOW)
    render.render_html(one, tmp_path / "one.html", now=NOW)
    assert 'id="stragglers"' not in (tmp_path / "one.html").read_text(encoding="utf-8")
