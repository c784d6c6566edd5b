"""`goodput-jax report`: the text table, job selection, clear errors, HTML and PNG output."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import pytest

from goodput_jax.cli import main as cli_main
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.events import Event
from goodput_jax.measure.stores.sqlite import SQLiteStore
from goodput_jax.report.curves import model_curves
from goodput_jax.report.text import format_report
from goodput_jax.report.timeline import build_timeline
from tests.measure._timeline import K, calc_for, events, new_store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HINTS = {
    "perfParams": {"alpha_c": 0.121, "beta_c": 0.00568, "alpha_n": 0.0236, "beta_n": 0.00634,
                   "alpha_r": 0.0118, "beta_r": 0.00317, "gamma": 1.14},
    "gradParams": {"norm": 0.00136, "var": 0.000502},
    "initBatchSize": 128, "maxBatchSize": 1280, "localBszBounds": [16, 256],
    "gradientAccumulation": True, "maxProfiledReplicas": 4, "numNodes": 1, "numReplicas": 4,
    "atomicBsz": 32, "accumSteps": 0, "suggestedBatchSize": 1024, "suggestedAtomicBsz": 256,
    "suggestedAccumSteps": 0, "predictedSpeedup": 2.0,
}


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "g.db")
    s = SQLiteStore(path)
    s.append(events("train", "A", [
        (K.JOB_START, 0), (K.TRAINING_PREP_START, 0), (K.TRAINING_PREP_END, 4),
        (K.STEP_START, 4, 0), (K.CUSTOM_BADPUT_START, 6, None, "eval"),
        (K.CUSTOM_BADPUT_END, 8, None, "eval"), (K.STEP_START, 14, 1), (K.JOB_END, 24)]))
    s.close()
    return path


def _row(text, label):
    m = re.search(rf"^\s*{re.escape(label)}\s+([\d.]+)\s+([\d.]+)\s*$", text, re.MULTILINE)
    assert m, (label, text)
    return float(m.group(1)), float(m.group(2))


def test_report_prints_exact_table(db, capsys):
    assert cli_main(["report", "--job", "train", "--store", "sqlite:///" + db]) == 0
    out = capsys.readouterr().out
    # total 24: prep 4, eval 2, steps 8 + 10 = 18
    assert _row(out, "GOODPUT (productive step time)") == (18.0, 75.0)
    assert _row(out, "training preparation") == (4.0, pytest.approx(16.67))
    assert _row(out, "custom badput events") == (2.0, pytest.approx(8.33))
    assert _row(out, "eval") == (2.0, pytest.approx(8.33))
    assert _row(out, "total job time") == (24.0, 100.0)
    assert "last productive step: 1" in out
    assert "step time: median 9.000 s" in out


def test_report_job_defaults_to_the_only_job(db, capsys):
    assert cli_main(["report", "--store", "sqlite:///" + db]) == 0
    assert "Goodput report for job 'train'" in capsys.readouterr().out


def test_report_errors(db, tmp_path, capsys):
    s = SQLiteStore(db)
    s.append(events("other", "B", [(K.JOB_START, 0), (K.JOB_END, 1)]))
    s.close()
    assert cli_main(["report", "--store", "sqlite:///" + db]) == 2
    assert "--job is required" in capsys.readouterr().err
    assert cli_main(["report", "--job", "nope", "--store", "sqlite:///" + db]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "g.db" in err
    missing = str(tmp_path / "missing.db")
    assert cli_main(["report", "--job", "x", "--store", "sqlite:///" + missing]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()
    (tmp_path / "junk.db").write_bytes(b"garbage" * 1000)
    assert cli_main(["report", "--job", "x", "--store", "sqlite:///" + str(tmp_path / "junk.db")]) == 2
    assert "not a readable SQLite file" in capsys.readouterr().err
    assert cli_main(["report", "--job", "train", "--store", "sqlite:///" + db,
                     "--html", str(tmp_path / "no" / "such" / "dir" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "--html" in err and "does not exist" in err


def test_format_report_reusable(db):
    calc = GoodputCalculator("train", "l", store=SQLiteStore(db))
    text = format_report(calc)
    assert text.splitlines()[0] == "Goodput report for job 'train'"


# ----------------------------------------------------------------------------- HTML / PNG


class _Sections(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.imgs, self.tags = set(), [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "img":
            self.imgs.append(a["src"])


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _html_sections(path):
    p = _Sections()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture
def db_with_hints(db):
    s = SQLiteStore(db)
    s.append([Event(K.HINTS, "train", "A", 0, 20.0, payload=HINTS)])
    s.close()
    return db


def test_html_and_png_without_model_hints(db, tmp_path, capsys):
    html, png = tmp_path / "r.html", tmp_path / "r.png"
    assert cli_main(["report", "--job", "train", "--store", "sqlite:///" + db,
                     "--html", str(html), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "no model hints" in out and "wrote HTML report" in out and "wrote PNG report" in out
    w, h = _png_size(png.read_bytes())
    assert w > 600 and h > 600
    sec = _html_sections(html)
    assert {"table", "timeline", "breakdown", "model", "no-model"} <= sec.ids
    assert "model-curves" not in sec.ids
    assert len(sec.imgs) == 2  # timeline + breakdown
    for src in sec.imgs:
        assert src.startswith("data:image/png;base64,")
        _png_size(base64.b64decode(src.split(",", 1)[1]))
    text = html.read_text()
    assert "GOODPUT (productive step time)" in text and "75.00" in text


def test_html_and_png_with_model_curves(db_with_hints, tmp_path, capsys):
    html, png = tmp_path / "m.html", tmp_path / "m.png"
    assert cli_main(["report", "--job", "train", "--store", "sqlite:///" + db_with_hints,
                     "--html", str(html), "--png", str(png)]) == 0
    assert "no model hints" not in capsys.readouterr().out
    _png_size(png.read_bytes())
    sec = _html_sections(html)
    assert {"table", "timeline", "breakdown", "model", "model-curves", "hints"} <= sec.ids
    assert "no-model" not in sec.ids
    assert len(sec.imgs) == 4  # timeline, breakdown, batch and replica curves
    text = html.read_text()
    assert "suggested batch size" in text and "suggestedBatchSize</td>" not in text


def test_model_curves_from_hints():
    from goodput_jax.model.goodput import GoodputFunction
    from goodput_jax.model.types import GradParams, PerfParams

    mc = model_curves(HINTS)
    assert mc is not None
    fn = GoodputFunction(PerfParams(**HINTS["perfParams"]), GradParams(0.00136, 0.000502), 128)
    # current point = the model at the running configuration
    assert mc.current[:2] == (128, 4)
    assert mc.current[2] == pytest.approx(fn.evaluate(1, 4, 32, 0), rel=1e-6)
    assert mc.suggested[:2] == (1024, 4)
    assert mc.suggested[2] == pytest.approx(fn.evaluate(1, 4, 256, 0), rel=1e-6)
    # the batch curve starts at M0 and covers the suggestion; the replica curve is the optimum
    assert min(mc.batch_sizes) >= 128 and max(mc.batch_sizes) >= 1024
    assert all(0 < e <= 1.0 + 1e-6 for e in mc.efficiency_vs_batch)
    assert max(mc.goodput_vs_batch) <= fn.optimize(1, 4, max_batch_size=1280,
                                                   atomic_bsz_range=(16, 256),
                                                   accumulation=True)[0] * (1 + 1e-4)
    g4 = mc.goodput_vs_replicas[mc.replicas.index(4)]
    assert g4 == pytest.approx(fn.optimize(1, 4, max_batch_size=1280, atomic_bsz_range=(16, 256),
                                           accumulation=True)[0], rel=1e-5)
    assert model_curves({"initBatchSize": 8}) is None
    assert model_curves({**HINTS, "perfParams": None}) is None


def test_timeline_totals_match_the_calculator():
    """Restart with rollback, crash, nested restore, custom badput, a zombie event, a live tail."""
    store = new_store()
    store.append(events("j", "r1", [
        (K.JOB_START, 0), (K.ACCELERATOR_INIT_START, 0), (K.ACCELERATOR_INIT_END, 2),
        (K.TRAINING_PREP_START, 2), (K.TRAINING_PREP_END, 5), (K.STEP_START, 5, 0),
        (K.DATA_LOADING_START, 6), (K.DATA_LOADING_END, 7), (K.STEP_START, 8, 1),
        (K.CHECKPOINT_SAVE_START, 9, 1), (K.CHECKPOINT_SAVE_END, 10, 1), (K.STEP_START, 11, 2),
        (K.STEP_START, 13, 3)]))  # crash in step 3
    store.append(events("j", "r2", [
        (K.JOB_START, 20), (K.TRAINING_PREP_START, 20), (K.CHECKPOINT_RESTORE_START, 21, 1),
        (K.CHECKPOINT_RESTORE_END, 23, 1), (K.TRAINING_PREP_END, 24), (K.STEP_START, 24, 2),
        (K.CUSTOM_BADPUT_START, 25, None, "eval"), (K.CUSTOM_BADPUT_END, 26, None, "eval"),
        (K.STEP_START, 27, 3), (K.STEP_END, 29, 3)]))
    store.append(events("j", "r1", [(K.STEP_START, 30, 4)]))  # late zombie event: ignored
    now = 40.0
    calc = calc_for(store, "j", now=now)
    d = calc.get_job_goodput_details()
    tl = build_timeline(store, "j", now=now)
    tot = tl.totals()
    assert tot["PRODUCTIVE"] == pytest.approx(d["productive_time"])
    for bt, secs in d["badput_time"].items():
        if bt.name in tot:
            assert tot[bt.name] == pytest.approx(secs), bt
    assert sum(tot.values()) == pytest.approx(d["total_time"])
    assert tot["WASTED_PROGRESS_FROM_DISRUPTION"] > 0 and tot["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] > 0
    assert tl.restarts == [(20.0, 1)] and tl.crashes == [(13.0, 0)]
    assert tl.run_ids == ["r1", "r2"]
    with pytest.raises(ValueError, match="'nope'"):
        build_timeline(store, "nope")


def test_timeline_draws_one_collection_per_run_and_category():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from goodput_jax.report.figures import draw_timeline
    from goodput_jax.report.timeline import CATEGORY_NAMES

    spec = [(K.JOB_START, 0)]
    for i in range(500):  # alternating steps and checkpoint saves: 1000 segments
        spec += [(K.STEP_START, 2 * i, i), (K.CHECKPOINT_SAVE_START, 2 * i + 1.5),
                 (K.CHECKPOINT_SAVE_END, 2 * i + 2)]
    spec.append((K.JOB_END, 1000))
    store = new_store()
    store.append(events("big", "r", spec))
    tl = build_timeline(store, "big")
    assert len(tl.segments) == 1000
    assert tl.totals()["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] == pytest.approx(250.0)
    assert tl.totals()["PRODUCTIVE"] == pytest.approx(750.0)
    fig, ax = plt.subplots()
    draw_timeline(ax, tl)
    assert len(ax.collections) <= len(CATEGORY_NAMES)
    plt.close(fig)


def test_replica_plot_marks_only_the_replica_counts_profiled():
    """Markers only where the step-time model was profiled (issue 28: 'profiled (1-4
    replicas)' with markers at 1-4 when only 2 and 4 were)."""
    from goodput_jax.report import figures

    plt = figures._plt()
    known = model_curves(HINTS)  # the hints prove 4 (the most profiled, and the running count)
    given = model_curves(HINTS, profiled_replicas=[2, 4])
    assert known.profiled_replica_counts == (4,) and given.profiled_replica_counts == (2, 4)
    with pytest.raises(ValueError, match="profiled_replicas"):
        model_curves(HINTS, profiled_replicas=[0, 4])
    for curves, marked in ((known, [4]), (given, [2, 4])):
        fig, ax = plt.subplots()
        figures.draw_replica_curve(ax, curves)
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert not any("1-" in t for t in legend), legend
        assert figures.profiled_label(tuple(marked)) in legend
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        profiled = [ln for label, ln in lines.items() if label.startswith("profiled")]
        assert len(profiled) == 1 and list(profiled[0].get_xdata()) == marked
        others = [label for label, ln in lines.items() if ln.get_marker() not in ("None", "")
                  and not label.startswith(("profiled", "current", "suggested"))]
        assert others == []  # the model lines themselves carry no markers
        plt.close(fig)


def test_the_suggestion_is_worded_as_what_it_is():
    """The suggestion is the smallest batch within the tolerance of the best, not the best
    (issue 28: 844 best, 524 suggested)."""
    from goodput_jax.report.labels import HINT_LABELS

    meaning = HINT_LABELS["suggested_batch_size"].meaning
    assert "smallest" in meaning and "5%" in meaning and "best total batch" not in meaning
