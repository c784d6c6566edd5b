"""The typed contracts inside the sched room hold at run time too (issue 43, item 8).

mypy checks the annotations (``goodput_jax.sched.*`` among the typed rooms); these tests
check that the values built at run time have the shape the annotations promise, and that
the room keeps no blanket ``# type: ignore``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import goodput_jax.sched as sched
from goodput_jax.sched.pollux_problem import _build_problem, _Meta
from goodput_jax.sched.pollux_search import _Arrays
from goodput_jax.sched.sia_solver import SolverInfo, solve_assignment
from goodput_jax.sched.types import JobInfo, NodeInfo


def test_the_padded_problem_has_the_typed_keys():
    jobs = {"a": JobInfo({"gpu": 1}, lambda n, r: r, 0.0, 0, 4),
            "b": JobInfo({"gpu": 2}, lambda n, r: r, 1.0, 1, 2, preemptible=False)}
    nodes = {1: NodeInfo({"gpu": 4}, False), 0: NodeInfo({"gpu": 2}, True)}
    arrays, meta = _build_problem(jobs, nodes, NodeInfo({"gpu": 4}, False), {"b": [1, 1]},
                                  restart_penalty=30.0, clock=lambda: 100.0, extra_template=2)
    # every key but "steps" (NotRequired: the policy sets it before a search)
    assert set(arrays) == set(_Arrays.__annotations__) - {"steps"}
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    assert isinstance(meta, _Meta)
    assert meta.job_keys == ["b", "a"]  # pinned first
    assert meta.node_keys == [1, 0]  # non-preemptible first
    assert (meta.n_jobs, meta.n_nodes) == (2, 2)
    assert arrays["num_nodes"].shape == () and int(arrays["num_nodes"]) == 4  # 2 + 2 template


def test_the_solver_info_is_the_typed_dict():
    g = np.array([[1.0, 3.0], [1.0, 2.5]])
    choice, info = solve_assignment(g, np.array([0, 0]), np.array([1, 2]), np.array([3.0]),
                                    return_info=True)
    assert choice.tolist() == [1, 0]
    assert set(info) == set(SolverInfo.__annotations__)
    assert all(isinstance(x, float) for x in info["start_gains"] + info["prices"])


def test_the_room_keeps_no_blanket_type_ignore():
    """A ``# type: ignore`` in sched names its error code and says why on the line."""
    root = Path(sched.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            m = re.search(r"#\s*type:\s*ignore(\[[^\]]+\])?(.*)", line)
            if m and (m.group(1) is None or not m.group(2).strip()):
                bad.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not bad, f"type: ignore without an error code and a reason: {bad}"
