"""AdaptiveBatchSize's options objects (issue 43): validated once, one-line errors, and the
old flat keywords translated in one place."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from goodput_jax.adaptive import AdaptiveBatchSize
from goodput_jax.adaptive.options import (
    AdaptiveOptions,
    CheckSchedule,
    SearchSpace,
    SwitchPolicy,
)
from goodput_jax.integrations.hooks import GoodputHooks


def _hooks(**kw):
    return GoodputHooks("opts", init_batch_size=8, num_replicas=1, num_nodes=1,
                        is_primary=False, max_batch_size=64, **kw)


@pytest.mark.parametrize("cls,kw,msg", [
    (SwitchPolicy, {"speedup_threshold": 0.5}, "speedup_threshold (0.5) must be >= 1"),
    (SwitchPolicy, {"explore_threshold": 1.1},
     "explore_threshold (1.1) must be between 1 and speedup_threshold (1.05)"),
    (SwitchPolicy, {"patience": 0}, "patience (0) must be a positive integer"),
    (SwitchPolicy, {"min_samples": True}, "min_samples (True) must be a positive integer"),
    (SwitchPolicy, {"reprobe_steps": -1}, "reprobe_steps (-1) must be an integer >= 0"),
    (SwitchPolicy, {"immediate_gain": float("nan")}, "immediate_gain (nan) must be >= 1"),
    (SearchSpace, {"explore_factor": 1.0}, "explore_factor (1.0) must be > 1"),
    (SearchSpace, {"atomic_sizes": [8, 0]}, "atomic_sizes ([8, 0]) must be positive integers"),
    (SearchSpace, {"max_accum_steps": -1}, "max_accum_steps (-1) must be an integer >= 0"),
    (CheckSchedule, {"adapt_every": 0}, "adapt_every (0) must be a positive integer"),
    (CheckSchedule, {"adapt_interval": float("inf")},
     "adapt_interval (inf) must be a number of seconds >= 0"),
    (CheckSchedule, {"stable_ratio": 0.9}, "stable_ratio (0.9) must be >= 1"),
    (AdaptiveOptions, {"rescale_nu": 1}, "rescale_nu (1) must be True or False"),
])
def test_one_line_errors(cls, kw, msg):
    with pytest.raises(ValueError) as e:
        cls(**kw)
    assert str(e.value) == msg and "\n" not in str(e.value)


def test_frozen_and_keyword_only():
    p = SwitchPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.patience = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        SwitchPolicy(1.1)  # type: ignore[misc]
    assert SearchSpace(atomic_sizes=[16, 8]).atomic_sizes == (16, 8)
    with pytest.raises(TypeError, match="policy"):
        AdaptiveOptions(policy=CheckSchedule())  # type: ignore[arg-type]


def test_constructor_is_short():
    params = [p for p in inspect.signature(AdaptiveBatchSize.__init__).parameters
              if p != "self"]
    assert len(params) <= 10, params


def test_old_keywords_and_options_agree():
    a = AdaptiveBatchSize(_hooks(), {"x": np.arange(100.0)}, patience=3, adapt_every=4,
                          atomic_sizes=[8, 16], rescale_nu=False, speedup_threshold=1.2,
                          explore_threshold=1.1)
    b = AdaptiveBatchSize(_hooks(), {"x": np.arange(100.0)}, AdaptiveOptions(
        search=SearchSpace(atomic_sizes=(8, 16)),
        policy=SwitchPolicy(patience=3, speedup_threshold=1.2, explore_threshold=1.1),
        checks=CheckSchedule(adapt_every=4), rescale_nu=False))
    assert a.options == b.options
    for ctl in (a, b):
        assert (ctl.patience, ctl.adapt_every, ctl.atomic_sizes, ctl.rescale_nu,
                ctl.speedup_threshold) == (3, 4, [8, 16], False, 1.2)
    # keywords apply on top of the options given
    c = AdaptiveBatchSize(_hooks(), {"x": np.arange(100.0)}, b.options, patience=5)
    assert c.patience == 5 and c.adapt_every == 4


def test_bad_keywords():
    with pytest.raises(TypeError, match="unexpected keyword argument 'patiense'"):
        AdaptiveBatchSize(_hooks(), {"x": np.arange(10.0)}, patiense=3)
    with pytest.raises(ValueError, match=r"^patience \(0\) must be a positive integer$"):
        AdaptiveBatchSize(_hooks(), {"x": np.arange(10.0)}, patience=0)
    with pytest.raises(TypeError, match="options"):
        AdaptiveBatchSize(_hooks(), {"x": np.arange(10.0)}, {"patience": 3})


def test_the_docs_block_runs(tmp_path, monkeypatch):
    """docs/adaptive.md's ``<!-- adaptive-options -->`` block as it stands."""
    import pathlib
    import re

    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "adaptive.md"
    m = re.search(r"<!-- adaptive-options -->\s*```python\n(.*?)```", doc.read_text(),
                  re.DOTALL)
    assert m, "docs/adaptive.md lost its block <!-- adaptive-options -->"
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(m.group(1), "docs/adaptive.md adaptive-options", "exec"), ns)  # noqa: S102
    assert ns["adaptive"].options.policy.patience == 3


def test_old_adaptive_keyword_takes_a_truth_value():
    a = AdaptiveBatchSize(_hooks(), {"x": np.arange(10.0)}, adaptive=np.bool_(False))
    assert a.adaptive is False and a.options.adaptive is False
    with pytest.raises(ValueError, match=r"^adaptive \(1\) must be True or False$"):
        AdaptiveOptions(adaptive=1)  # type: ignore[arg-type]
