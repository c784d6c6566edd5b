"""GoodputHooks' options objects: validated once with one-line errors; the earlier keywords
translated into them in one place, and the same hooks either way."""

from __future__ import annotations

import dataclasses

import pytest

from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.integrations.options import (
    KEYWORDS,
    BatchLimits,
    Placement,
    ProfileOptions,
    RecordingOptions,
    RefitOptions,
    hooks_options,
)


@pytest.mark.parametrize("make, msg", [
    (lambda: BatchLimits(init=64, max=8), r"^max_batch_size \(8\) < init_batch_size \(64\)$"),
    (lambda: BatchLimits(init=0), r"^init_batch_size \(0\)"),
    (lambda: Placement(num_nodes=4, num_replicas=2), r"^num_nodes \(4\) > num_replicas \(2\)$"),
    (lambda: Placement(accum_steps=-1), r"^accum_steps \(-1\) must be a non-negative integer$"),
    (lambda: ProfileOptions(quantile=0.9), r"^profile_quantile \(0.9\) must be in \(0, 0.5\]$"),
    (lambda: ProfileOptions(window=0), r"^profile_window \(0\) must be a positive integer$"),
    (lambda: RefitOptions(interval=-1.0), r"^refit_interval \(-1.0\) must be a number >= 0$"),
    (lambda: RecordingOptions(steps=3), r"^steps \(3\) must be a goodput_jax.runtime.StepRecorder$"),
])
def test_each_option_is_checked_once_with_one_line(make, msg):
    with pytest.raises((ValueError, TypeError), match=msg) as e:
        make()
    assert "\n" not in str(e.value)


def test_options_are_frozen_and_keyword_only():
    lim = BatchLimits(init=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lim.init = 16  # type: ignore[misc]
    with pytest.raises(TypeError):
        BatchLimits(8)  # type: ignore[misc]


def test_the_keywords_and_the_objects_build_the_same_hooks():
    kw = GoodputHooks("k", init_batch_size=16, max_batch_size=256, local_bsz_bounds=(4, 64),
                      gradient_accumulation=True, num_nodes=1, num_replicas=2, atomic_bsz=4,
                      accum_steps=1, warmup_steps=1, job_warmup_steps=3,
                      profile_quantile=0.25, profile_window=64, stats_every=5,
                      refit_interval=7.0, refit_tolerance=0.1, background=False,
                      is_primary=False)
    ob = GoodputHooks("k", limits=BatchLimits(init=16, max=256, local_bounds=(4, 64),
                                              accumulation=True),
                      placement=Placement(num_nodes=1, num_replicas=2, atomic_bsz=4,
                                          accum_steps=1),
                      profile=ProfileOptions(warmup_steps=1, job_warmup_steps=3, quantile=0.25,
                                             window=64, stats_every=5),
                      refit=RefitOptions(interval=7.0, tolerance=0.1, background=False),
                      recording=RecordingOptions(is_primary=False))
    assert kw.options == dataclasses.replace(ob.options, recording=kw.options.recording)
    for name in ("init_batch_size", "max_batch_size", "local_bsz_bounds", "gradient_accumulation",
                 "num_nodes", "num_replicas", "atomic_bsz", "accum_steps", "warmup_steps",
                 "job_warmup_steps", "profile_quantile", "profile_window", "stats_every",
                 "refit_interval", "refit_tolerance", "background", "is_primary"):
        assert getattr(kw, name) == getattr(ob, name), name
    kw.close()
    ob.close()


def test_one_translation_refuses_mixes_unknowns_and_no_limits():
    assert set(KEYWORDS) >= {"init_batch_size", "steps", "recorder", "refit_interval"}
    with pytest.raises(ValueError, match=r"^refit_interval \(5.0\): give it in refit= or as a "
                                         r"keyword, not both$"):
        hooks_options({"refit_interval": 5.0}, limits=BatchLimits(init=8), refit=RefitOptions())
    with pytest.raises(TypeError, match="unexpected keyword argument 'refit_intervall'"):
        GoodputHooks("u", init_batch_size=8, refit_intervall=5.0)
    with pytest.raises(TypeError, match=r"needs its batch limits"):
        GoodputHooks("u", is_primary=False)
    with pytest.raises(TypeError, match=r"^refit \(3\) must be a RefitOptions$"):
        GoodputHooks("u", init_batch_size=8, refit=3)  # type: ignore[arg-type]
