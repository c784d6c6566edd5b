"""The front door, tried as a new user would (issue 28): each sharp edge found there has a
test here that failed before the fix.

Every user error is exit code 2 and one line on stderr naming the option and its value,
raised before any file or directory is created. The light install (no JAX) is simulated
in a subprocess whose import system refuses the optional modules, as in tests/test_cli.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from goodput_jax.cli import main
from goodput_jax.measure.stores.sqlite import SQLiteStore
from goodput_jax.sched.sim import cli as sim_cli
from tests.measure._timeline import K, events

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _one_error_line(capsys, prog: str) -> str:
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    assert len(lines) == 1, cap.err
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    assert "Traceback" not in cap.err + cap.out
    return lines[0]


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "g.db"
    s = SQLiteStore(str(path))
    s.append(events("train", "A", [(K.JOB_START, 0), (K.STEP_START, 1, 0), (K.JOB_END, 3)]))
    s.close()
    return path


def _listing(path):
    return sorted(p for p in os.listdir(path) if not p.endswith(("-wal", "-shm")))


# ------------------------------------------------------------------- the light install
_LIGHT = textwrap.dedent("""
    import contextlib, io, json, sys

    BLOCKED = ("flax", "matplotlib", "scipy", "jax", "jaxlib", "optax")

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    out = {}
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        from goodput_jax.sched.sim.cli import run
        try:
            out["rc"] = run(["6"])
        except BaseException as e:
            out["rc"] = repr(e)
    out["err"] = err.getvalue()
    try:
        from goodput_jax import GoodputHooks  # noqa: F401
        out["hooks"] = "imported"
    except ModuleNotFoundError as e:
        out["hooks"], out["hooks_name"] = str(e), e.name
    out["jax_loaded"] = "jax" in sys.modules
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def light(tmp_path_factory):
    """What the light install does: `goodput-jax-sim 6` and `from goodput_jax import
    GoodputHooks` (one subprocess, its working directory empty)."""
    cwd = tmp_path_factory.mktemp("light")
    proc = subprocess.run([sys.executable, "-c", _LIGHT], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": ROOT},
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), cwd


def test_sim_without_jax_names_the_extra_and_creates_nothing(light):
    out, cwd = light
    lines = out["err"].splitlines()
    assert out["rc"] == 2, out
    assert len(lines) == 1 and "Traceback" not in out["err"], out["err"]
    assert lines[0].startswith("goodput-jax-sim: error: ") and "goodput-jax[sim]" in lines[0]
    assert os.listdir(cwd) == []  # no sim-out/
    assert out["jax_loaded"] is False


def test_importing_a_model_name_without_jax_names_the_extra(light):
    out, _ = light
    assert out["hooks_name"] == "jax"
    assert "goodput_jax.GoodputHooks" in out["hooks"] and "goodput-jax[model]" in out["hooks"]


# ------------------------------------------------------------------- report
@pytest.mark.parametrize("flag", ["--html", "--png"])
def test_report_output_that_is_a_directory_is_refused_before_the_table(flag, store, tmp_path,
                                                                       capsys):
    target = tmp_path / "out"
    target.mkdir()
    assert main(["report", "--store", f"sqlite:///{store}", flag, str(target)]) == 2
    cap_line = _one_error_line(capsys, "goodput-jax report")
    assert flag in cap_line and "is a directory" in cap_line
    assert os.listdir(target) == []


def test_report_on_an_empty_file_leaves_it_empty(tmp_path, capsys):
    empty = tmp_path / "empty.db"
    empty.touch()
    for argv in (["report", "--store", f"sqlite:///{empty}"],
                 ["monitor", "--job", "j", "--store", str(empty), "--tensorboard-dir",
                  str(tmp_path / "tb"), "--once"]):
        assert main(argv) == 2
        line = _one_error_line(capsys, f"goodput-jax {argv[0]}")
        assert "empty" in line and "empty.db" in line
        assert empty.stat().st_size == 0  # no schema written into it
        assert _listing(tmp_path) == ["empty.db"]


@pytest.mark.parametrize("command", ["report", "monitor"])
def test_an_empty_store_option_is_an_error_not_the_default(command, store, tmp_path, capsys,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.replace(store, tmp_path / "goodput.db")  # the default store exists and would be read
    argv = [command, "--store", ""] + (
        ["--job", "train", "--tensorboard-dir", "tb", "--once"] if command == "monitor" else [])
    assert main(argv) == 2
    line = _one_error_line(capsys, f"goodput-jax {command}")
    assert "--store" in line and "''" in line
    assert _listing(tmp_path) == ["goodput.db"]


# ------------------------------------------------------------------- monitor and demo
def test_monitor_duration_must_be_positive(store, tmp_path, capsys):
    for value in ("0", "-1"):
        assert main(["monitor", "--job", "train", "--store", str(store), "--tensorboard-dir",
                     str(tmp_path / "tb"), "--duration", value]) == 2
        line = _one_error_line(capsys, "goodput-jax monitor")
        assert "--duration" in line and f"'{value}'" in line
    assert not (tmp_path / "tb").exists()


def test_demo_devices_are_bounded(tmp_path, capsys):
    from goodput_jax.demo import MAX_DEVICES
    from goodput_jax.demo import main as demo_main

    for value in ("100000", str(MAX_DEVICES + 1), "0"):
        assert main(["demo", "--devices", value, "--dir", str(tmp_path / "d"), "--quick"]) == 2
        line = _one_error_line(capsys, "goodput-jax demo")
        assert "--devices" in line and f"'{value}'" in line and f"1 to {MAX_DEVICES}" in line
    with pytest.raises(ValueError, match=rf"devices \(100000\) must be an integer from 1 to "
                                         rf"{MAX_DEVICES}"):
        demo_main(directory=str(tmp_path / "d"), devices=100000, quick=True, progress=False)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------- simulate
BAD_SIM = [(["--interval", "-1"], "--interval"), (["--interval", "nan"], "--interval"),
           (["--interference", "2"], "--interference"), (["--max-jobs", "0"], "--max-jobs")]


@pytest.mark.parametrize("extra, flag", BAD_SIM)
def test_simulate_validates_before_creating_its_output(extra, flag, tmp_path, capsys,
                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out is ./sim-out
    assert main(["simulate", "6", "--no-progress", *extra]) == 2
    assert flag in _one_error_line(capsys, "goodput-jax simulate")
    assert sim_cli.run(["6", "--no-progress", *extra]) == 2
    assert flag in _one_error_line(capsys, "goodput-jax-sim")
    assert os.listdir(tmp_path) == []


def test_simulate_output_that_is_a_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "taken"
    out.write_text("x")
    assert sim_cli.run(["6", "--out", str(out), "--max-jobs", "2", "--no-progress"]) == 2
    assert "--out" in _one_error_line(capsys, "goodput-jax-sim")


def test_sim_version_and_help(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        sim_cli.run(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"goodput-jax-sim {version('goodput-jax')}"
    for run_help in (lambda: sim_cli.run(["--help"]), lambda: main(["simulate", "--help"])):
        try:
            run_help()
        except SystemExit as e:
            assert e.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert re.search(r"\(default: [^)]*\)\s*\(default:", text) is None, text
        assert text.count("(default: 60)") == 1  # --interval, said once
        assert "(default: None)" not in text and "(default: False)" not in text


def test_simulate_help_describes_every_policy_it_accepts():
    from goodput_jax.cli.simulate import DESCRIPTION

    for policy in ("pollux", "optimus", "tiresias", "sia", "pollux-typed"):
        assert re.search(rf"(?<![\w-]){re.escape(policy)}(?![\w-])", DESCRIPTION), policy


def test_the_docs_command_list_names_every_subcommand():
    """Fails while docs/index.md's command list leaves a subcommand out (it missed
    'cluster')."""
    import pathlib
    import re

    from goodput_jax.cli import build_parser

    text = (pathlib.Path(__file__).parents[2] / "docs" / "index.md").read_text()
    block = text.split("## Command line", 1)[1].split("```", 2)[1]
    listed = set(re.findall(r"^goodput-jax (\w+)", block, re.M))
    usage = build_parser().format_usage()  # "usage: goodput-jax [-h] [--version] COMMAND ..."
    helps = build_parser().format_help().split("COMMAND\n", 2)[-1]
    commands = set(re.findall(r"^    (\w+) ", helps, re.M))
    assert "COMMAND" in usage and len(commands) >= 5, helps
    assert listed == commands, (listed, commands)
