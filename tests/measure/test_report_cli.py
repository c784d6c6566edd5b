"""`goodput-jax report`: the text table, job selection and clear errors."""

from __future__ import annotations

import re

import pytest

from goodput_jax.cli import main as cli_main
from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.report import format_report
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure._timeline import K, events


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
                     "--html", str(tmp_path / "r.html")]) == 2
    assert "--html/--png" in capsys.readouterr().err


def test_format_report_reusable(db):
    calc = GoodputCalculator("train", "l", store=SQLiteStore(db))
    text = format_report(calc)
    assert text.splitlines()[0] == "Goodput report for job 'train'"
