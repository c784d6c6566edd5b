"""The controller's and its actor's options: validated once, one-line errors, old keywords."""

from __future__ import annotations

import pytest

from goodput_jax.cluster.controller import Controller
from goodput_jax.cluster.options import ControllerActorOptions, ControllerOptions, options_from
from goodput_jax.cluster.plan import NodeRecord


@pytest.mark.parametrize("kw, error", [
    ({"interval": 0}, r"^interval \(0\) must be > 0 seconds$"),
    ({"interval": float("nan")}, r"^interval \(nan\) must be > 0 seconds$"),
    ({"node_grace": -1}, r"^node_grace \(-1\) must be >= 0 seconds$"),
    ({"probe_every": True}, r"^probe_every \(True\) must be > 0 seconds$"),
    ({"policy": "tiresias"}, r"^policy \('tiresias'\) must be 'auto', 'sia', 'pollux'"),
    ({"max_capacity": {"a": (0, 2)}}, r"^max_capacity \(\{'a': \(0, 2\)\}\): want"),
])
def test_controller_options_refuse_a_wrong_value_in_one_line(kw, error):
    with pytest.raises(ValueError, match=error) as e:
        ControllerOptions(**kw)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw, exc, error", [
    ({"poll": 0}, ValueError, r"^poll \(0\) must be > 0 seconds$"),
    ({"spares": "yes"}, TypeError, r"^spares \('yes'\) must be True or False$"),
    ({"policy": "auto", "policy_kwargs": {"restart_penalty": 2.0}}, ValueError,
     r"^policy_kwargs \(\{'restart_penalty': 2.0\}\) need policy 'sia' or 'pollux'"),
    ({"policy_kwargs": [1]}, TypeError, r"^policy_kwargs \(\[1\]\) must be a dict"),
    ({"precompile_wait": -5}, ValueError, r"^precompile_wait \(-5\) must be >= 0 seconds$"),
])
def test_actor_options_refuse_a_wrong_value_in_one_line(kw, exc, error):
    with pytest.raises(exc, match=error):
        ControllerActorOptions(**kw)


def test_options_are_frozen_and_normalised():
    o = ControllerActorOptions(policy="pollux", interval=3, max_capacity={"a": [3, 2]},
                               policy_kwargs={"restart_penalty": 2.0})
    assert o.interval == 3.0 and o.max_capacity.by_type == {"a": (3, 2)}
    with pytest.raises(AttributeError):
        o.interval = 5.0  # type: ignore[misc]
    c = o.controller()
    assert (c.policy, c.interval, c.max_capacity) == ("pollux", 3.0, o.max_capacity)


def test_old_keywords_translate_into_the_options_in_one_place(tmp_path):
    ctl = Controller(str(tmp_path), interval=5, node_grace=2.0,
                     nodes=lambda: [NodeRecord("n0", "a", 2)])
    assert ctl.options == ControllerOptions(interval=5.0, node_grace=2.0)
    assert (ctl.interval, ctl.node_grace) == (5.0, 2.0)
    with pytest.raises(TypeError, match=r"^intervall: not an option of ControllerOptions$"):
        Controller(str(tmp_path), intervall=5)
    with pytest.raises(TypeError, match="either options or keywords"):
        Controller(str(tmp_path), ControllerOptions(), interval=5)
    with pytest.raises(TypeError, match=r"options \(ControllerOptions\) must be a "
                                        r"ControllerActorOptions"):
        options_from(ControllerActorOptions, ControllerOptions(), {})
