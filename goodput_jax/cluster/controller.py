"""The controller: every round, hints -> policy -> the jobs whose allocation changed.

:class:`Controller` is the logic, driven by :meth:`Controller.tick` (called
every ``poll`` seconds by :class:`ControllerActor`, a named, detached Ray actor
in the runtime's namespace that Ray restarts if it dies). A tick

1. takes in submitted specs, cancel and reallocation requests (from the state
   directory; a client with the cluster's address calls :meth:`Controller.submit`,
   :meth:`~Controller.cancel` and :meth:`~Controller.reallocate` through the actor);
2. reads Ray's node table; a node that disappeared takes its jobs down: they
   are stopped and restart from their last checkpoint on what is left. The nodes
   of a launch that died of a system error are held out of rounds and launches
   until the node table drops them or ``node_grace`` passes;
3. looks at each launch: finished, stopped on request (relaunch on the new
   allocation), crashed (retry with exponential backoff, ``failed`` with the
   error after ``spec.max_retries``), or a stop past its deadline (forced);
4. runs a round (:func:`goodput_jax.cluster.plan.plan_round`) every
   ``interval`` seconds (60 by default, as Pollux and Sia) and after an
   arrival, a finish or a node change; only jobs whose allocation changed are
   touched: a running one gets a cooperative stop request (it checkpoints at its
   next step boundary) and is relaunched on its new allocation;
5. persists its state (``controller.json``, :class:`~goodput_jax.cluster.record.ClusterState`)
   when it changed. A new controller reads it and re-attaches to the launches
   still running (their processes are detached actors, not the controller's);
   only a launch that did not survive is relaunched from its checkpoint.

Each job is a :class:`~goodput_jax.cluster.record.JobRecord`; its status changes
only through the record's transition methods. Launching is delegated to a
:class:`~goodput_jax.cluster.record.Launcher` (:class:`~goodput_jax.cluster.launch.RayLauncher`).

The controller is split along its seams, and this module gathers their public
names: the ticks and the jobs' lifecycle (:class:`Controller`,
:mod:`goodput_jax.cluster.controller_core`), its rounds (the policy and its inputs,
:mod:`goodput_jax.cluster.controller_rounds`), its state on disk and its store
readers (:mod:`goodput_jax.cluster.controller_state`), and its Ray calls: the node
table and the raylet probe (:mod:`goodput_jax.cluster.controller_nodes`) and the
actor (:mod:`goodput_jax.cluster.controller_actor`).
Its options are one :class:`~goodput_jax.cluster.options.ControllerOptions`.
"""

from goodput_jax.cluster.controller_actor import (
    CONTROLLER_NAME,
    ControllerActor,
    start_controller,
    stop_controller,
)
from goodput_jax.cluster.controller_core import ACTIVE, Controller
from goodput_jax.cluster.controller_nodes import RayletWatch, ray_nodes, raylet_gone
from goodput_jax.cluster.controller_rounds import RoundPlanner, make_policy
from goodput_jax.cluster.controller_state import checkpoint_store
from goodput_jax.cluster.launch import RayLauncher
from goodput_jax.cluster.options import ControllerActorOptions, ControllerOptions, as_capacity
from goodput_jax.cluster.plan import group_allocation, parse_allocation

__all__ = ["ACTIVE", "CONTROLLER_NAME", "Controller", "ControllerActor",
           "ControllerActorOptions", "ControllerOptions", "RayLauncher", "RayletWatch",
           "RoundPlanner", "as_capacity", "checkpoint_store", "group_allocation",
           "make_policy", "parse_allocation", "ray_nodes", "raylet_gone",
           "start_controller", "stop_controller"]
