"""The badput vocabulary lives in one module and everything reads it from there."""

from __future__ import annotations

import enum
import pathlib
import re

import pytest

import goodput_jax
from goodput_jax.measure import badput, calculator
from goodput_jax.measure.engine import core as engine_core
from goodput_jax.measure.badput import BadputType
from goodput_jax.measure.recorder import GoodputRecorder
from goodput_jax.measure.stores import open_store
from goodput_jax.report import labels

ROOT = pathlib.Path(goodput_jax.__file__).parent


def test_one_badput_type_everywhere():
    assert calculator.BadputType is BadputType
    assert goodput_jax.BadputType is BadputType
    assert engine_core.BUCKET_NAMES is badput.BUCKET_NAMES  # the engine's buckets: badput's
    assert labels.BUCKET_LABELS is badput.BUCKET_LABELS
    assert labels.OPTIONAL_BUCKETS is badput.OPTIONAL_BUCKETS


def test_every_bucket_has_a_member_and_a_label():
    for name in badput.BUCKET_NAMES:
        assert BadputType[name].name == name  # canonical name, not an alias
        assert badput.label(BadputType[name]) == badput.BUCKET_LABELS[name]
    assert badput.label("PRODUCTIVE") == "productive steps"
    assert badput.label(BadputType.TPU_INITIALIZATION) == "accelerator initialization"
    assert set(badput.OPTIONAL_BUCKETS) <= set(badput.BUCKET_NAMES)
    # every member except the never-badput async loading is an engine bucket
    assert {m.name for m in BadputType} - set(badput.BUCKET_NAMES) == {"DATA_LOADING_ASYNC"}


@pytest.mark.parametrize("bad", ["NOPE", BadputType.DATA_LOADING_ASYNC, 3])
def test_label_rejects_unknown_kinds(bad):
    with pytest.raises(ValueError, match="names no goodput/badput bucket"):
        badput.label(bad)


def test_no_other_module_defines_the_vocabulary():
    """No second BadputType, label table or name map, and no class-name string checks."""
    for path in ROOT.rglob("*.py"):
        if path.name == "badput.py" and path.parent.name == "measure":
            continue
        if path.name == "enums.py" and path.parent.name == "compat":
            # the drop-in's BadputType is Google's (its names and numbers, issue 35),
            # mapped onto this one by BadputType.of / .measure: a translation, not a rule
            assert "MeasureBadputType" in path.read_text()
            continue
        text = path.read_text()
        rel = path.relative_to(ROOT)
        assert "class BadputType" not in text, rel
        assert '"productive steps"' not in text, rel
        assert not re.search(r"__name__\s*[!=]=\s*['\"]BadputType", text), rel
        assert '"TPU_INITIALIZATION"' not in text, rel


class _LookAlike(enum.Enum):
    """Same class name and member names as BadputType, but a different type."""

    DATA_LOADING = 4


_LookAlike.__name__ = "BadputType"


def test_recorder_checks_the_type_not_its_name(tmp_path):
    url = f"sqlite:///{tmp_path / 'g.db'}"
    rec = GoodputRecorder("vocab-job", logging_enabled=True, store=url)
    try:
        with pytest.raises(ValueError, match="must be a string label or one of BadputType"):
            rec.badput(_LookAlike.DATA_LOADING)
        with pytest.raises(ValueError, match="derived"):
            rec.badput(BadputType.OTHER)
        # aliases are the same member, so Google's names record too
        with rec.badput(BadputType.DATA_LOADING_SYNC):
            pass
        assert rec.flush(10)
    finally:
        rec.close()
    store = open_store(url)
    try:
        events, _ = store.read_events("vocab-job")
    finally:
        store.close()
    assert [e.kind for e in events] == list(badput.RECORDABLE[BadputType.DATA_LOADING])
