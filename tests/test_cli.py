"""`goodput-jax`: help text, --version, and every user error as one line with exit code 2.

Each error path asserts: exit code 2, exactly one line on stderr that starts with
``goodput-jax <command>: error:``, no traceback, and no file created by a command that was
only asked to read. Missing extras are simulated in one subprocess whose import system
refuses the optional modules (the shared test venv has them all installed); CI also runs
the light-core checks in a venv without them (.ci/run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from goodput_jax.cli import build_parser, main
from goodput_jax.measure.stores.sqlite import SQLiteStore
from tests.measure._timeline import K, events

COMMANDS = ("demo", "report", "monitor", "simulate")


def _one_error_line(capsys, command: str) -> str:
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    assert len(lines) == 1, cap.err
    assert lines[0].startswith(f"goodput-jax {command}: error: "), lines[0]
    assert "Traceback" not in cap.err + cap.out
    return lines[0]


@pytest.fixture
def two_jobs(tmp_path):
    path = str(tmp_path / "two.db")
    s = SQLiteStore(path)
    s.append(events("train", "A", [(K.JOB_START, 0), (K.STEP_START, 1, 0), (K.JOB_END, 3)]))
    s.append(events("eval", "B", [(K.JOB_START, 0), (K.JOB_END, 1)]))
    s.close()
    return path


# ------------------------------------------------------------------------ help and version
def test_help_describes_every_command_without_rest_markup(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out
    assert "measured goodput" in out and "modelled goodput" in out
    for command in COMMANDS:
        assert f"    {command}  " in out or f"    {command} " in out, command
    for command in COMMANDS:
        assert main([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert "``" not in text
        parser = build_parser()._subparsers._group_actions[0].choices[command]
        for action in parser._actions:
            assert action.help, (command, action.dest)  # every option explains itself
    assert main(["monitor", "--help"]) == 0
    assert "(default: 30.0)" in capsys.readouterr().out
    assert main(["demo", "--help"]) == 0
    assert "(default: goodput-demo)" in capsys.readouterr().out


def test_version(capsys):
    from goodput_jax import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"goodput-jax {__version__}"


# ------------------------------------------------------------------------ argument errors
@pytest.mark.parametrize("argv, command, words", [
    (["monitor", "--job", "j", "--tensorboard-dir", "tb", "--interval", "x"], "monitor",
     ["--interval", "'x'"]),
    (["monitor", "--job", "j", "--tensorboard-dir", "tb", "--interval", "0"], "monitor",
     ["--interval", "> 0"]),
    (["monitor", "--job", "j", "--tensorboard-dir", "tb", "--duration", "-1"], "monitor",
     ["--duration", "> 0"]),
    (["monitor", "--job", "j", "--tensorboard-dir", "tb", "--duration", "0"], "monitor",
     ["--duration", "> 0"]),
    (["monitor", "--job", "j"], "monitor", ["--tensorboard-dir"]),
    (["demo", "--devices", "0"], "demo", ["--devices", "from 1 to 32"]),
    (["demo", "--devices", "100000"], "demo", ["--devices", "from 1 to 32"]),
    (["report", "--store", ""], "report", ["--store", "empty"]),
    (["report", "--ideal-step-time", "-2"], "report", ["--ideal-step-time"]),
    (["report", "--bogus"], None, ["--bogus"]),
    (["nosuchcommand"], None, ["nosuchcommand"]),
    ([], None, ["COMMAND"]),
])
def test_bad_arguments_are_one_line(argv, command, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in cap.err, cap.err
    prefix = "goodput-jax" + (f" {command}" if command else "")
    assert lines[0].startswith(prefix) and ": error: " in lines[0], lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------ store errors
@pytest.mark.parametrize("command", ["report", "monitor"])
def test_missing_sqlite_file_is_an_error_and_is_not_created(command, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "missing.db"
    argv = [command, "--job", "j", "--store", f"sqlite:///{missing}"]
    if command == "monitor":
        argv += ["--tensorboard-dir", str(tmp_path / "tb"), "--once"]
    assert main(argv) == 2
    line = _one_error_line(capsys, command)
    assert "missing.db" in line and "does not exist" in line
    assert os.listdir(tmp_path) == []  # no store file, no -wal/-shm, no TensorBoard dir
    # the default store (./goodput.db) is not created either
    monkeypatch.delenv("GOODPUT_JAX_STORE", raising=False)
    assert main(argv[:3] + argv[5:]) == 2
    assert "goodput.db" in _one_error_line(capsys, command)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", ["report", "monitor"])
def test_corrupt_database_is_one_line(command, tmp_path, capsys):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"garbage" * 1000)
    argv = [command, "--job", "j", "--store", f"sqlite:///{junk}"]
    if command == "monitor":
        argv += ["--tensorboard-dir", str(tmp_path / "tb"), "--once"]
    assert main(argv) == 2
    assert "not a readable SQLite file" in _one_error_line(capsys, command)
    assert junk.read_bytes() == b"garbage" * 1000
    assert sorted(os.listdir(tmp_path)) == ["junk.db"]


@pytest.mark.parametrize("command", ["report", "monitor"])
def test_unknown_job_lists_the_jobs_in_the_store(command, two_jobs, tmp_path, capsys):
    argv = [command, "--job", "nosuchjob", "--store", f"sqlite:///{two_jobs}"]
    if command == "monitor":
        argv += ["--tensorboard-dir", str(tmp_path / "tb"), "--once"]
    assert main(argv) == 2
    line = _one_error_line(capsys, command)
    assert "'nosuchjob'" in line and "two.db" in line
    assert "jobs in the store: 'eval', 'train'" in line
    assert not (tmp_path / "tb").exists()


def test_report_without_job_on_a_store_of_two_jobs(two_jobs, capsys):
    assert main(["report", "--store", f"sqlite:///{two_jobs}"]) == 2
    line = _one_error_line(capsys, "report")
    assert "--job is required" in line and "2 jobs: 'eval', 'train'" in line


def test_report_output_in_a_missing_directory(two_jobs, tmp_path, capsys):
    target = tmp_path / "no" / "such" / "r.html"
    assert main(["report", "--job", "train", "--store", f"sqlite:///{two_jobs}",
                 "--html", str(target)]) == 2
    line = _one_error_line(capsys, "report")
    assert "--html" in line and "does not exist" in line
    assert not (tmp_path / "no").exists()


def test_unknown_store_scheme(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--store", "s3://bucket/x"]) == 2
    assert "unknown scheme" in _one_error_line(capsys, "report")
    assert os.listdir(tmp_path) == []


def test_report_reads_and_creates_nothing(two_jobs, tmp_path, capsys):
    before = sorted(os.listdir(tmp_path))
    assert main(["report", "--job", "train", "--store", f"sqlite:///{two_jobs}"]) == 0
    assert "Goodput report for job 'train'" in capsys.readouterr().out
    assert sorted(f for f in os.listdir(tmp_path) if not f.endswith(("-wal", "-shm"))) == before


# ------------------------------------------------------------------------ missing extras
_BLOCKED_RUNNER = textwrap.dedent("""
    import contextlib, io, json, sys

    BLOCKED = ("flax", "matplotlib", "scipy", "google", "jax", "jaxlib", "optax")

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]
    sys.meta_path.insert(0, Block())

    from goodput_jax.cli import main
    light = [m for m in ("jax", "numpy", "matplotlib") if m in sys.modules]
    results = []
    for argv in json.loads(sys.argv[1]):
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(argv)
        results.append({"argv": argv, "rc": rc, "err": err.getvalue(), "out": out.getvalue()})
    print(json.dumps({"imported_by_cli": light, "results": results}))
""")


def test_missing_extras_name_the_extra_in_one_line(two_jobs, tmp_path):
    gcl = "gcl://my-project/goodput_x"
    cases = {
        "report": (["report", "--job", "j", "--store", gcl], "gcp"),
        "monitor": (["monitor", "--job", "j", "--store", gcl, "--tensorboard-dir",
                     str(tmp_path / "tb"), "--once"], "gcp"),
        "report-html": (["report", "--job", "train", "--store", f"sqlite:///{two_jobs}",
                         "--html", str(tmp_path / "r.html")], "report"),
        "demo": (["demo", "--dir", str(tmp_path / "demo"), "--quick"], "demo"),
        "simulate": (["simulate", "6", "--out", str(tmp_path / "sim")], "sim"),
    }
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUNNER, json.dumps([argv for argv, _ in cases.values()])],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert "jax" not in report["imported_by_cli"]  # importing the CLI starts no JAX
    for (name, (_, extra)), res in zip(cases.items(), report["results"]):
        lines = res["err"].splitlines()
        command = res["argv"][0]
        assert res["rc"] == 2, (name, res)
        assert len(lines) == 1 and "Traceback" not in res["err"], (name, res["err"])
        assert lines[0].startswith(f"goodput-jax {command}: error: "), (name, lines[0])
        assert f"goodput-jax[{extra}]" in lines[0], (name, lines[0])
        assert res["out"] == "", (name, res["out"])
    assert sorted(os.listdir(tmp_path)) == ["two.db"]  # nothing written: no html, tb, demo, sim


def test_python_dash_m_runs_the_same_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "goodput_jax.cli", "report", "--store",
                           f"sqlite:///{tmp_path / 'none.db'}"], capture_output=True, text=True,
                          timeout=60, cwd=os.getcwd(), check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "does not exist" in proc.stderr
    assert not (tmp_path / "none.db").exists()
