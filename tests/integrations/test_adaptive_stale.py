"""AdaptiveBatchSize under a load spike: no decision rests on one stale measurement (issue 27.5).

Injected step times on the hooks' fake clock (nothing sleeps): ``0.002 + 1e-5 * b`` seconds
for a total batch ``b`` on one replica, times ``load`` on the steps of a slow phase, whatever
the batch (another job on the machine). At a noise scale of 300 the best batch is 256 (128
and 512 are 10% and 12% behind). The controller before this change (be87680) left 256
inside the phase in each of 12 such runs (docs/adaptive.md, "Load spikes") and ended at
32, 64, 128 or 512: the fit kept 256's phase time and predicted no gain, and re-probing
needed a predicted gain. The legacy case below (no confirmation, no re-probing) shows it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from goodput_jax.adaptive import AdaptiveBatchSize
from goodput_jax.integrations.hooks import GoodputHooks
from goodput_jax.model.types import GradParams
from tests.adaptive._fake import SIZES, FakeClock


def _run(tmp_path, name, steps, phase=(100, 250), load=4.0, noise_scale=300.0, start=32, **kw):
    clock = FakeClock()
    hooks = GoodputHooks(name, init_batch_size=32, atomic_bsz=start, num_nodes=1, num_replicas=1,
                         max_batch_size=512, clock=clock, is_primary=True, refit_interval=0.5,
                         warmup_steps=1, job_warmup_steps=0, background=False,
                         store="sqlite:///" + str(tmp_path / f"{name}.db"))
    hooks.update_grad_params(GradParams(sqr=1.0, var=noise_scale / 32))
    ctl = AdaptiveBatchSize(hooks, {"x": np.zeros((1 << 16, 1), np.float32)},
                            atomic_sizes=SIZES, adapt_every=5, adapt_interval=0.0, **kw)
    done = [0]

    def fake_step(params, opt_state, batch, n):
        b = batch["x"].shape[1]
        slow = load if phase[0] <= done[0] < phase[1] else 1.0
        clock.t += (0.002 + 1e-5 * b) * slow
        done[0] += 1
        return params, opt_state, 0.0

    at = []
    for i in range(steps):
        ctl.step(i, fake_step, None, None)
        at.append(ctl.batch_size)
    return ctl, np.array(at)


def test_a_load_spike_does_not_hold_the_job_below_its_best_batch(tmp_path, monkeypatch):
    # the controller: a step down from 256 inside the phase waits for a second window of
    # 256; the phase does not survive the re-measurement, and the job stays at 256
    ctl, at = _run(tmp_path, "spike", 1000)
    assert [s["batch_size"] for s in ctl.switches] == [64, 128, 256], ctl.switches
    assert (at[300:] == 256).all()
    assert ctl.hooks.profile_table()[(1, 1, 256)][1] == pytest.approx(0.00456)  # quiet time
    # the step-down it considered was turned into a re-measurement
    assert (1, 1, 256, 0) in ctl.previous_window
    assert ctl.previous_window[(1, 1, 256, 0)] == pytest.approx(4 * 0.00456)  # the spike's

    # without the confirmation, the job leaves 256 inside the phase; re-probing by age
    # (not by the fit, which still holds the phase's times) climbs back, one probe after
    # the other while each probe is kept
    monkeypatch.setattr(AdaptiveBatchSize, "confirmed", lambda self, key=None: True)
    ctl, at = _run(tmp_path, "probe", 1000)
    sizes = [s["batch_size"] for s in ctl.switches]
    assert sizes[:3] == [64, 128, 256] and sizes[3] < 256, ctl.switches
    left = ctl.switches[3]["step"]
    probes = [s for s in ctl.switches if s["probe"]]
    assert probes and probes[0]["step"] >= left + ctl.reprobe_steps
    assert probes[-1]["batch_size"] == 256 and all(p["reprobe"] for p in probes)
    assert probes[-1]["step"] - probes[0]["step"] <= 100  # a kept probe chains the next
    back = probes[-1]["step"]
    assert back < 800 and (at[back + 1:] == 256).all()

    # the controller before this change (no confirmation, re-probing only on a predicted
    # gain, which reprobe_steps=0 switches off): below 256 for good
    ctl, at = _run(tmp_path, "legacy", 1000, reprobe_steps=0)
    assert ctl.batch_size < 256 and not (at[300:] == 256).any(), ctl.switches


def test_a_probe_that_confirms_the_old_time_backs_off(tmp_path):
    """Noise scale 60: 128 is the best batch, 256 is 14% behind it and 64 6%. A job started
    at 256 steps down to 128 and re-probes 256 by age; each probe finds 256 as slow as
    before (the step down needs no second window: the previous window agrees) and doubles
    the wait for the next one."""
    ctl, at = _run(tmp_path, "backoff", 3200, phase=(0, 0), noise_scale=60.0, start=256,
                   reprobe_steps=200)
    probes = [s["step"] for s in ctl.switches if s["probe"]]
    assert len(probes) >= 3 and ctl.batch_size == 128, ctl.switches
    assert {s["batch_size"] for s in ctl.switches if s["probe"]} == {256}
    assert not any(s["confirm"] for s in ctl.switches)
    gaps = np.diff(probes)
    assert all(b >= 1.8 * a for a, b in itertools.pairwise(gaps)), probes  # doubling
    assert ctl.reprobe_backoff[(256, 0)] >= 2
    first = ctl.switches[0]["step"]
    assert np.mean(at[first:] == 128) > 0.93  # the probes cost a small share of the steps
    # the probe bookkeeping travels with the state
    import json

    st = json.loads(json.dumps(ctl.state_dict()))
    hooks = GoodputHooks("backoff2", init_batch_size=32, num_nodes=1, num_replicas=1,
                         is_primary=False, max_batch_size=512)
    c2 = AdaptiveBatchSize(hooks, {"x": np.zeros((64, 1), np.float32)}, atomic_sizes=SIZES)
    c2.load_state_dict(st)
    assert c2.reprobe_backoff == ctl.reprobe_backoff and c2.arrived_at == ctl.arrived_at
    assert c2.previous_window == ctl.previous_window and c2.left_at == ctl.left_at
