"""``goodput-jax cluster`` client subcommands on a state directory (no Ray needed)."""

from __future__ import annotations

import json

from goodput_jax.cli import main
from goodput_jax.cluster.state import StateDir

EX = "goodput_jax.cluster.examples:regression"


def _cluster(tmp_path):
    sd = StateDir(tmp_path / "state")
    sd.write_json(sd.cluster_path, {"capacity": {"a": [2, 2], "b": [1, 2]}})
    return str(tmp_path / "state")


def test_submit_status_cancel_logs(tmp_path, capsys):
    state = _cluster(tmp_path)
    assert main(["cluster", "submit", "--state-dir", state, "--name", "j1", "--entry-point", EX,
                 "--max-replicas", "2", "--accelerator-types", "a", "--", "--steps", "5"]) == 0
    assert capsys.readouterr().out.strip() == "j1"
    spec = json.loads((tmp_path / "state" / "inbox" / "j1.json").read_text())
    assert spec["args"] == ["--steps", "5"] and spec["accelerator_types"] == ["a"]
    assert main(["cluster", "status", "--state-dir", state]) == 0
    out = capsys.readouterr().out
    assert "j1" in out and "submitted" in out
    assert main(["cluster", "cancel", "--state-dir", state, "j1"]) == 0
    assert main(["cluster", "logs", "--state-dir", state, "j1"]) == 0


def test_refusals_are_one_line_errors(tmp_path, capsys):
    state = _cluster(tmp_path)
    rc = main(["cluster", "submit", "--state-dir", state, "--name", "j", "--entry-point", EX,
               "--min-replicas", "9", "--max-replicas", "9"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == "goodput-jax cluster: error: min_replicas (9) > the 6 devices of all types\n"
    rc = main(["cluster", "submit", "--state-dir", state, "--name", "j", "--entry-point", EX,
               "--accelerator-types", "h100"])
    assert rc == 2 and "unknown accelerator type 'h100'" in capsys.readouterr().err
    assert main(["cluster", "status", "--state-dir", state, "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "state" / "inbox").exists()


def test_help_lists_the_subcommands(capsys):
    assert main(["cluster", "--help"]) == 0
    out = capsys.readouterr().out
    for word in ("up", "submit", "status", "cancel", "logs", "demo", "down", "report"):
        assert word in out


def test_reallocate_through_the_state_dir_and_its_refusals(tmp_path, capsys):
    """Fails on the CLI without a 'reallocate' subcommand."""
    from goodput_jax.cluster.record import ClusterState, JobRecord
    from goodput_jax.cluster.spec import JobSpec

    sd = StateDir(tmp_path / "state")
    sd.write_json(sd.cluster_path, {"capacity": {"a": [2, 2]},
                                    "nodes": [{"label": "n0"}, {"label": "n1"}]})
    rec = JobRecord.new(JobSpec("j1", EX, max_replicas=2), now=0.0)
    rec.launch(1.0, ["n0"], "allocated", nodes=["n0"], accelerator_type="a")
    sd.write_json(sd.controller_path, ClusterState({"j1": rec}).to_json())
    state = str(tmp_path / "state")
    assert main(["cluster", "reallocate", "--state-dir", state, "j1", "--to", "n1:2"]) == 0
    assert capsys.readouterr().out.strip() == "j1: requested"
    assert json.loads(open(sd.reallocate_path("j1")).read()) == {"allocation": ["n1", "n1"]}
    import os

    os.remove(sd.reallocate_path("j1"))
    for argv, word in ((["nope", "--to", "n0"], "'nope'"), (["j1", "--to", "n7"], "'n7'"),
                       (["j1", "--to", "n0:x"], "'n0:x'")):
        assert main(["cluster", "reallocate", "--state-dir", state, *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and word in err, err
    assert not os.path.exists(sd.requests) or not os.listdir(sd.requests)


def test_bad_addresses_are_one_line_errors(capsys):
    assert main(["cluster", "status", "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'127.0.0.1:1'" in err, err
    assert main(["cluster", "status"]) == 2
    assert "--address" in capsys.readouterr().err


def test_help_has_no_restructuredtext_markup(capsys):
    """Fails on the help that printed ``goodput-jax cluster``."""
    assert main(["cluster", "--help"]) == 0
    out = capsys.readouterr().out
    assert "`" not in out and "::" not in out and "reallocate" in out


def test_report_writes_the_page_of_a_synthetic_state(tmp_path, capsys):
    """Fails on the CLI without a 'report' subcommand."""
    from goodput_jax.cluster.record import ClusterState, JobRecord
    from goodput_jax.cluster.spec import JobSpec

    sd = StateDir(tmp_path / "state")
    sd.write_json(sd.cluster_path, {"nodes": [
        {"label": "n0", "accelerator_type": "a", "devices": 2},
        {"label": "n1", "accelerator_type": "a", "devices": 2}], "capacity": {"a": [2, 2]}})
    t0 = 1_750_000_000.0
    rec = JobRecord.new(JobSpec("j1", EX, max_replicas=4,
                                store=f"sqlite:///{tmp_path}/none.db"), now=t0)
    rec.launch(t0 + 1, ["n0", "n0"], "allocated", nodes=["n0"], accelerator_type="a")
    rec.request_stop(t0 + 10, ["n0", "n0", "n1", "n1"], reason="reallocation to 4 devices")
    rec.stopped(t0 + 12, forced=False)
    rec.launch(t0 + 13, ["n0", "n0", "n1", "n1"], "reallocation", nodes=["n0", "n1"],
               accelerator_type="a")
    rec.finish(t0 + 40)
    rounds = [{"t": t0 + 1, "policy": "pollux", "changed": ["j1"],
               "allocations": {"j1": ["n0", "n0"]}},
              {"t": t0 + 10, "policy": "pollux", "changed": ["j1"],
               "allocations": {"j1": ["n0", "n0", "n1", "n1"]}}]
    sd.write_json(sd.controller_path, ClusterState({"j1": rec}, rounds).to_json())
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    state = str(tmp_path / "state")
    assert main(["cluster", "report", "--state-dir", state, "--html", str(page)]) == 0
    assert capsys.readouterr().out.strip() == str(page)
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") or "<html" in html[:200]
    assert 'data-job="j1"' in html and "n1" in html
    # bad input: one line, exit 2, nothing written
    for argv, word in (([str(tmp_path / "nowhere"), str(tmp_path / "x.html")], "nowhere"),
                       ([state, str(tmp_path / "no" / "dir" / "x.html")], "x.html")):
        assert main(["cluster", "report", "--state-dir", argv[0], "--html", argv[1]]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and word in err and err.startswith(
            "goodput-jax cluster: error:"), err
    assert not (tmp_path / "x.html").exists()


def test_autoscale_needs_an_address(tmp_path, capsys):
    """The local cluster has no autoscaler: asking it to autoscale is a one-line refusal."""
    assert main(["cluster", "up", "--state-dir", str(tmp_path / "s"), "--autoscale"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--autoscale needs --address" in err
    assert not (tmp_path / "s").exists()


def test_max_capacity_is_parsed_and_bad_values_are_one_line_errors(tmp_path, capsys):
    from goodput_jax.cli.cluster import parse_max_capacity
    from goodput_jax.cluster.controller import as_capacity

    assert parse_max_capacity("v5e=4x4, a=3x2") == {"v5e": (4, 4), "a": (3, 2)}
    assert as_capacity(parse_max_capacity("a=3x2")).by_type == {"a": (3, 2)}
    for bad in ("a=3", "a=0x2", "=2x2", "a=2x2,a=1x1", "a=twoxtwo"):
        argv = ["cluster", "up", "--state-dir", str(tmp_path / "s"), "--address",
                "127.0.0.1:1", "--autoscale", "--max-capacity", bad]
        assert main(argv) == 2, bad
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--max-capacity" in err and repr(bad) in err, err
    assert main(["cluster", "up", "--state-dir", str(tmp_path / "s"), "--max-capacity",
                 "a=2x2"]) == 2
    assert "needs --autoscale" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_every_subcommand_but_up_refuses_a_directory_without_a_cluster(tmp_path, capsys):
    """Fails on the old CLI: down created requests/down, submit queued in a new inbox,
    status printed an empty table, all with exit 0."""
    import os

    empty = tmp_path / "empty"
    empty.mkdir()
    for where in (str(tmp_path / "nonexistent"), str(empty)):
        for argv in (["down"], ["submit", "--name", "j", "--entry-point", EX], ["status"],
                     ["cancel", "j"], ["reallocate", "j", "--to", "n0"], ["logs", "j"],
                     ["report", "--html", str(tmp_path / "r.html")]):
            rc = main(["cluster", argv[0], "--state-dir", where, *argv[1:]])
            err = capsys.readouterr().err
            assert rc == 2, (argv, where)
            assert err.count("\n") == 1 and repr(where) in err, err
    assert not os.path.exists(tmp_path / "nonexistent")
    assert os.listdir(empty) == [] and not os.path.exists(tmp_path / "r.html")


def test_up_takes_the_lease_and_the_node_mtbf_and_refuses_bad_ones(tmp_path, capsys):
    for flag, value in (("--lease", "-1"), ("--node-mtbf", "0"), ("--lease", "x")):
        rc = main(["cluster", "up", "--state-dir", str(tmp_path / "s"), flag, value])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and repr(value) in err, err
    assert not (tmp_path / "s").exists()
