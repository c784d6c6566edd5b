"""Google's README (ml-goodput-measurement), its calls verbatim with only the import changed.

The recorder writes in the background; a calculator of the same job and store in the same
process must still see every event recorded before its call: no ``close()`` or ``flush()``
(issue 43, item 4: "read your own writes"). Run in a fresh directory (the default store
``./goodput.db``), as a user would.
"""

from __future__ import annotations

import datetime
import logging

import jax
import numpy as np
import pytest

from goodput_jax import goodput


class _Config:
    run_name = "demo-run"
    steps = 5


def _readme_script(config) -> float:
    # -- the README's calls, in order ------------------------------------------------
    goodput_logger_name = f'goodput_{config.run_name}'
    goodput_recorder = goodput.GoodputRecorder(job_name=config.run_name, logger_name=goodput_logger_name, logging_enabled=(jax.process_index() == 0))  # noqa: E501

    def train_loop(config, state=None):
        start_step = 0
        for step in np.arange(start_step, config.steps):
            goodput_recorder.record_step_start_time(step)
            # Training step…
        return state

    goodput_recorder.record_job_start_time(datetime.datetime.now())
    train_loop(config)
    goodput_recorder.record_job_end_time(datetime.datetime.now())

    goodput_logger_name = f'goodput_{config.run_name}'  # You can choose your own logger name.
    goodput_calculator = goodput.GoodputCalculator(job_name=config.run_name, logger_name=goodput_logger_name)  # noqa: E501
    total_goodput = goodput_calculator.get_job_goodput()
    print(f"Total job goodput: {total_goodput[0]:.2f}%")
    return total_goodput


@pytest.fixture
def fresh_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("GOODPUT_JAX_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_verbatim_reads_its_own_writes(fresh_dir, capsys):
    goodput_pct, badput, last_step = _readme_script(_Config())
    assert 0.0 <= goodput_pct <= 100.0
    assert badput == {}
    assert last_step == 4
    assert "Total job goodput:" in capsys.readouterr().out
    assert (fresh_dir / "goodput.db").exists()


def test_readme_twice_in_one_directory_warns_of_the_second_run(fresh_dir, caplog):
    """An accidental rerun (same job name, same store, the first run ended cleanly) is told
    so: the default is to append the run and warn once (docs/semantics.md, "Runs of a job")."""
    _readme_script(_Config())
    with caplog.at_level(logging.WARNING):
        _readme_script(_Config())
    msgs = [r.getMessage() for r in caplog.records if "already ended" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert "demo-run" in msgs[0] and "rerun" in msgs[0]
