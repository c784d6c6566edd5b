"""Stragglers: on a job that several hosts record, which host held each step back, and by how much.

When every host of a launch records with the launch's run id and its process index as
``host`` (docs/semantics.md, "Which hosts should record"), the store holds each host's own
marks of each step. The hosts of an SPMD job meet every step (the step's collectives, or a
barrier), so the last host to get there holds the others back. Per run and step ``N``,
comparing only the hosts that recorded ``N``:

* **arrival**: each host's ``STEP_START`` of ``N`` (its host-side work for the step, such as
  loading its batch, was done);
* **finish**: each host's own end of ``N``: its ``STEP_DEVICE_END`` (``goodput_jax.runtime``),
  else its host-side ``STEP_END``; only when at least two hosts recorded one (the next step's
  start is not used: it is the next step's arrival).

A host's lateness is its mark minus the **median of the other hosts'** marks (with two hosts:
the other host's). The step's straggler is the host with the largest lateness at arrival or
at finish, and the step's **lag** is that lateness (seconds, >= 0): the time the other hosts
waited for it. A host's **lost time** is the sum of the lags of the steps it was the
straggler of; its share is that over the lost time of all hosts.

Limits: the marks of different hosts are compared directly, so their clocks must agree
(NTP-synchronised hosts, as Google's library also assumes); hosts that do not meet every step
(no collective, no barrier) drift apart and their lateness accumulates; with a redone step
(a rollback inside one run) the latest marks of the step count.

Example:
    >>> import numpy as np
    >>> from goodput_jax.measure.events import KIND_CODES, EventKind as K
    >>> ss = KIND_CODES[K.STEP_START]
    >>> out = step_stragglers(kind=np.full(4, ss), run=np.zeros(4, int),
    ...                       host=np.array([0, 1, 0, 1]), ts=np.array([0.0, 0.5, 10.0, 10.0]),
    ...                       step=np.array([0, 0, 1, 1]))
    >>> out.last_host.tolist(), out.lag.tolist(), out.hosts[0].host, out.hosts[0].lost_time
    ([1, 0], [0.5, 0.0], 1, 0.5)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from goodput_jax.measure.events import KIND_CODES, EventKind

__all__ = ["HostLag", "Stragglers", "step_stragglers"]

_SS = KIND_CODES[EventKind.STEP_START]
_SE = KIND_CODES[EventKind.STEP_END]
_DE = KIND_CODES[EventKind.STEP_DEVICE_END]
#: ``Stragglers.where`` codes
ARRIVAL, FINISH = 0, 1


@dataclasses.dataclass(frozen=True)
class HostLag:
    """One host's straggling over the job.

    Attributes:
        host: the host (process) index the events carry.
        steps_last: steps this host was the straggler of (with a lag > 0).
        lost_time: seconds the other hosts waited for it (sum of those steps' lags).
        share: ``lost_time`` over the lost time of all hosts (0-1; 0 when none was lost).
        job_share: ``lost_time`` over the job's total time (0-1; NaN when not given).
    """

    host: int
    steps_last: int
    lost_time: float
    share: float
    job_share: float


@dataclasses.dataclass(frozen=True)
class Stragglers:
    """Per-step stragglers and the per-host summary (see the module docstring).

    Attributes:
        num_hosts: most hosts that recorded steps in one run (1: nothing to compare).
        run_ids: run ids, indexed by ``runs``.
        runs: run index of each compared step (int64).
        steps: step numbers (int64), in run order, then step order.
        last_host: the straggler of each step (int64).
        lag: seconds the others waited for it (float64, >= 0).
        where: ``0`` the straggler arrived last, ``1`` it finished last (int8).
        hosts_compared: hosts that recorded each step (int64).
        hosts: every host that was a straggler with a lag > 0, the slowest first.
        total_lost: sum of ``lag`` (seconds).
        job_time: the job's total time used for ``HostLag.job_share`` (NaN: not given).
    """

    num_hosts: int
    run_ids: tuple[str, ...]
    runs: np.ndarray
    steps: np.ndarray
    last_host: np.ndarray
    lag: np.ndarray
    where: np.ndarray
    hosts_compared: np.ndarray
    hosts: tuple[HostLag, ...]
    total_lost: float
    job_time: float

    def slowest(self, n: int = 3) -> tuple[HostLag, ...]:
        """The ``n`` hosts with the most lost time.

        Example:
            >>> calc.get_step_stragglers().slowest(1)[0].host  # doctest: +SKIP
            3
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n ({n!r}) must be a non-negative int")
        return self.hosts[:n]

    @property
    def step_lag(self) -> dict[tuple[str, int], tuple[int, float]]:
        """``{(run_id, step): (straggler host, lag seconds)}``."""
        return {(self.run_ids[r], s): (h, x) for r, s, h, x in zip(
            self.runs.tolist(), self.steps.tolist(), self.last_host.tolist(), self.lag.tolist())}

    def as_dict(self, top: int = 3) -> dict:
        """Summary (no per-step arrays) for JSON, TensorBoard or Cloud Monitoring.

        Example:
            >>> calc.get_step_stragglers().as_dict()["total_lost"]  # doctest: +SKIP
            1.2
        """
        return {
            "num_hosts": self.num_hosts,
            "num_steps": int(self.steps.size),
            "total_lost": self.total_lost,
            "max_lag": float(self.lag.max()) if self.lag.size else 0.0,
            "slowest": [dataclasses.asdict(h) for h in self.slowest(top)],
        }


def _median(v: Sequence[float]) -> float:
    m = len(v)
    return v[m // 2] if m % 2 else 0.5 * (v[m // 2 - 1] + v[m // 2])


def _latest(sel: np.ndarray, run: np.ndarray, step: np.ndarray, host: np.ndarray,
            ts: np.ndarray, prio: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The last mark (in input order; by ``prio`` first when given) of each (run, step, host),
    sorted by run, step, host."""
    idx = np.flatnonzero(sel)
    if idx.size == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e, e, np.empty(0)
    keys = (idx, host[idx], step[idx], run[idx]) if prio is None else (
        idx, prio[idx], host[idx], step[idx], run[idx])
    o = idx[np.lexsort(keys)]
    r, s, h, t = run[o], step[o], host[o], ts[o]
    last = np.ones(o.size, dtype=bool)
    last[:-1] = (r[1:] != r[:-1]) | (s[1:] != s[:-1]) | (h[1:] != h[:-1])
    return r[last], s[last], h[last], t[last]


def _groups(r: np.ndarray, s: np.ndarray) -> dict[tuple[int, int], tuple[int, int]]:
    """(run, step) -> [a, b) slice of rows sorted by run, step."""
    if r.size == 0:
        return {}
    cut = np.flatnonzero((r[1:] != r[:-1]) | (s[1:] != s[:-1])) + 1
    a = np.concatenate(([0], cut))
    b = np.concatenate((cut, [r.size]))
    return {(int(r[i]), int(s[i])): (int(i), int(j)) for i, j in zip(a.tolist(), b.tolist())}


def _late(h: np.ndarray, t: np.ndarray) -> tuple[int, float]:
    """(host with the latest mark, its lateness against the median of the others)."""
    vals = t.tolist()
    i = max(range(len(vals)), key=vals.__getitem__)
    others = sorted(vals[:i] + vals[i + 1:])
    return int(h[i]), vals[i] - _median(others)


def step_stragglers(kind: np.ndarray, run: np.ndarray, host: np.ndarray, ts: np.ndarray,
                    step: np.ndarray, *, run_ids: Sequence[str] | None = None,
                    job_time: float | None = None) -> Stragglers:
    """Per-step stragglers from a job's events as columns (see the module docstring).

    Args:
        kind: event kind codes (:data:`~goodput_jax.measure.events.KIND_CODES`).
        run: run index of each event (int; events of one run id share it).
        host: host (process) index of each event.
        ts: timestamps (float UTC seconds).
        step: step numbers (-1 or negative: none).
        run_ids: names of the run indices (default: their numbers as text).
        job_time: the job's total time (s), for ``HostLag.job_share``.

    Returns:
        :class:`Stragglers`.

    Raises:
        ValueError: columns of different lengths, or a negative / non-finite ``job_time``.

    Example:
        >>> import numpy as np
        >>> step_stragglers(np.array([2]), np.array([0]), np.array([0]), np.array([1.0]),
        ...                 np.array([0])).num_hosts
        1
    """
    cols = [np.asarray(c) for c in (kind, run, host, ts, step)]
    n = cols[0].size
    for name, c in zip(("kind", "run", "host", "ts", "step"), cols):
        if c.ndim != 1 or c.size != n:
            raise ValueError(f"{name} (shape {c.shape}) must be 1-D with the length of kind ({n})")
    k, r, h, t, s = (cols[0].astype(np.int64), cols[1].astype(np.int64),
                     cols[2].astype(np.int64), cols[3].astype(np.float64),
                     cols[4].astype(np.int64))
    if job_time is not None:
        job_time = float(job_time)
        if not math.isfinite(job_time) or job_time < 0:
            raise ValueError(f"job_time ({job_time!r}) must be a finite number >= 0")
    has = s >= 0
    a_r, a_s, a_h, a_t = _latest(has & (k == _SS), r, s, h, t)
    # a device end wins over a host-side step end of the same step
    f_r, f_s, f_h, f_t = _latest(has & ((k == _DE) | (k == _SE)), r, s, h, t,
                                 prio=(k == _DE).astype(np.int64))
    arr, fin = _groups(a_r, a_s), _groups(f_r, f_s)
    num_hosts = 1
    if a_r.size:
        per_run = np.unique(np.stack([a_r, a_h]), axis=1)[0]
        num_hosts = int(np.bincount(per_run).max())
    out_r, out_s, out_h, out_lag, out_w, out_n = [], [], [], [], [], []
    for (rr, ss), (i, j) in arr.items():
        if j - i < 2:
            continue
        host_l, lag = _late(a_h[i:j], a_t[i:j])
        w = ARRIVAL
        f = fin.get((rr, ss))
        if f is not None and f[1] - f[0] >= 2:
            fh, fl = _late(f_h[f[0]:f[1]], f_t[f[0]:f[1]])
            if fl > lag:
                host_l, lag, w = fh, fl, FINISH
        out_r.append(rr)
        out_s.append(ss)
        out_h.append(host_l)
        out_lag.append(max(lag, 0.0))
        out_w.append(w)
        out_n.append(j - i)
    lag_a = np.array(out_lag, dtype=np.float64)
    last_a = np.array(out_h, dtype=np.int64)
    total = float(lag_a.sum())
    hosts = []
    pos = lag_a > 0
    if pos.any():
        lost = np.bincount(last_a[pos], weights=lag_a[pos])
        cnt = np.bincount(last_a[pos])
        for hh in np.flatnonzero(cnt).tolist():
            x = float(lost[hh])
            hosts.append(HostLag(
                host=int(hh), steps_last=int(cnt[hh]), lost_time=x,
                share=x / total if total > 0 else 0.0,
                job_share=(x / job_time if job_time else 0.0) if job_time is not None
                else float("nan")))
        hosts.sort(key=lambda x: (-x.lost_time, x.host))
    nruns = int(r.max()) + 1 if r.size else 0
    names = tuple(run_ids) if run_ids is not None else tuple(str(i) for i in range(nruns))
    return Stragglers(
        num_hosts=num_hosts, run_ids=names,
        runs=np.array(out_r, dtype=np.int64), steps=np.array(out_s, dtype=np.int64),
        last_host=last_a, lag=lag_a, where=np.array(out_w, dtype=np.int8),
        hosts_compared=np.array(out_n, dtype=np.int64), hosts=tuple(hosts),
        total_lost=total, job_time=float("nan") if job_time is None else job_time)
