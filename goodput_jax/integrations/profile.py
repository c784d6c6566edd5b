"""The step-time profile: per-configuration step times, a small streaming accumulator.

:class:`StepProfile` follows flax's ``nnx.metrics`` shape: :meth:`StepProfile.update`
takes one timed step (a deque append on the training thread), :meth:`StepProfile.compute`
returns the per-configuration statistics the step-time fit uses, and
:meth:`StepProfile.reset` forgets a configuration (or everything). Timed steps are
folded in lazily, in batches, under a lock, by whoever reads the profile, with the
warm-up rules applied there: each configuration's first ``warmup_steps`` steps, the
process's first ``job_warmup_steps`` more and zero times are dropped.

A configuration is a profile key ``(num_nodes, num_replicas, atomic_bsz, accum_steps)``.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

import numpy as np

__all__ = ["PROFILE_WINDOW", "RAW_BATCH", "ProfileEntry", "ProfileKey", "StepProfile"]

#: Samples kept per configuration (the newest; medians are taken over them).
PROFILE_WINDOW = 64
#: Timed steps folded into the profile at once when nothing read it sooner.
RAW_BATCH = 32

#: ``(num_nodes, num_replicas, atomic_bsz, accum_steps)``.
ProfileKey = tuple[int, int, int, int]


@dataclasses.dataclass
class ProfileEntry:
    """Step times of one ``(num_nodes, num_replicas, atomic_bsz, accum_steps)``.

    Sums and counts cover every kept step; ``accum_samples`` / ``optim_samples``
    hold the newest ``window`` (default :data:`PROFILE_WINDOW`) per-step times
    for robust (quantile) statistics.

    Example:
        >>> e = ProfileEntry.empty(2)
        >>> for t in (1.0, 2.0, 3.0):
        ...     e.add_optim(t)
        >>> e.optim_count, list(e.optim_samples)
        (3, [2.0, 3.0])
    """

    accum_time: float = 0.0
    accum_count: int = 0
    optim_time: float = 0.0
    optim_count: int = 0
    accum_samples: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=PROFILE_WINDOW))
    optim_samples: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=PROFILE_WINDOW))

    @classmethod
    def empty(cls, window: int) -> ProfileEntry:
        """An entry that keeps the newest ``window`` samples."""
        return cls(accum_samples=collections.deque(maxlen=window),
                   optim_samples=collections.deque(maxlen=window))

    def add_optim(self, seconds: float) -> None:
        """One optimizer step of ``seconds``."""
        self.optim_time += seconds
        self.optim_count += 1
        self.optim_samples.append(seconds)

    def add_accum(self, seconds: float, count: int = 1) -> None:
        """``count`` accumulation micro-steps of ``seconds`` each."""
        self.accum_time += seconds * count
        self.accum_count += count
        self.accum_samples.append(seconds)

    def to_json(self) -> dict:
        """JSON-safe form (for checkpoints)."""
        return {"accum_time": self.accum_time, "accum_count": self.accum_count,
                "optim_time": self.optim_time, "optim_count": self.optim_count,
                "accum_samples": list(self.accum_samples),
                "optim_samples": list(self.optim_samples)}

    @classmethod
    def from_json(cls, d: dict, window: int = PROFILE_WINDOW) -> ProfileEntry:
        """Inverse of :meth:`to_json`, keeping the newest ``window`` samples."""
        e = cls.empty(window)
        e.accum_time, e.accum_count = float(d["accum_time"]), int(d["accum_count"])
        e.optim_time, e.optim_count = float(d["optim_time"]), int(d["optim_count"])
        e.accum_samples.extend(float(x) for x in d.get("accum_samples", ()))
        e.optim_samples.extend(float(x) for x in d.get("optim_samples", ()))
        return e


class StepProfile:
    """Per-configuration step times with warm-up drops: ``update`` / ``compute`` / ``reset``.

    Args:
        warmup_steps: steps dropped at the start of every configuration.
        job_warmup_steps: further steps dropped at the start of the process.
        window: samples kept per configuration (the newest).
        quantile: the per-configuration statistic :meth:`compute` returns.

    Attributes:
        pending: timed steps not folded in yet, ``((*key, pending_accum), seconds)``;
            the training thread appends to it (``update``), readers fold it in.
        lock: held while folding and reading the entries (any thread).

    Example:
        >>> p = StepProfile(warmup_steps=1, job_warmup_steps=0)
        >>> for t in (9.0, 0.1, 0.3, 0.2):   # the first is the configuration's warm-up
        ...     p.update((1, 1, 8, 0, 0), t)
        >>> p.fold()        # seconds dropped by the warm-up rules
        9.0
        >>> p.compute()
        {(1, 1, 8): (0.2, 0.2, 3)}
        >>> p.reset((1, 1, 8, 0)); p.compute()
        {}
    """

    def __init__(self, *, warmup_steps: int = 2, job_warmup_steps: int = 8,
                 window: int = PROFILE_WINDOW, quantile: float = 0.5):
        self.warmup_steps = int(warmup_steps)
        self.job_warmup_steps = int(job_warmup_steps)
        self.window = int(window)
        self.quantile = float(quantile)
        self.entries: dict[ProfileKey, ProfileEntry] = {}
        self.pending: collections.deque = collections.deque()
        self.seen: dict[ProfileKey, int] = {}
        self.seen_accum: dict[ProfileKey, int] = {}
        self.job_seen = 0  # optimizer steps observed by this process (job warm-up)
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ update
    def update(self, tag: tuple, seconds: float) -> None:
        """One timed optimizer step: ``tag`` is ``(*key, pending_accum)`` (cheap: an append).

        ``pending_accum``: separately timed accumulation micro-steps before it (0:
        a fused step of ``key[3] + 1`` micro-steps, split evenly when folded in).
        """
        self.pending.append((tag, seconds))

    def add_accum(self, key: ProfileKey, seconds: float) -> bool:
        """One separately timed accumulation micro-step; returns whether it was kept."""
        seen = self.seen_accum.get(key, 0)
        self.seen_accum[key] = seen + 1
        if seen < self.warmup_steps:
            return False
        with self.lock:
            self._fold_locked()
            entry = self.entries.get(key)
            if entry is None:
                entry = self.entries[key] = ProfileEntry.empty(self.window)
            entry.add_accum(seconds)
        return True

    def fold(self) -> float:
        """Fold the pending steps in (any thread); returns the seconds the warm-up dropped."""
        if not self.pending:
            return 0.0
        with self.lock:
            return self._fold_locked()

    def _fold_locked(self) -> float:
        raw, profile, seen_of = self.pending, self.entries, self.seen
        warm, job_warm = self.warmup_steps, self.warmup_steps + self.job_warmup_steps
        dropped = 0.0
        while raw:
            tag, seconds = raw.popleft()
            key, pending = tag[:4], tag[4]
            seen = seen_of.get(key, 0)
            seen_of[key] = seen + 1
            self.job_seen += 1
            if seen < warm or seconds == 0.0 or self.job_seen <= job_warm:
                dropped += seconds
                continue
            entry = profile.get(key)
            if entry is None:  # (setdefault would build an entry, two deques, every step)
                entry = profile[key] = ProfileEntry.empty(self.window)
            s = key[3]
            if s > 0 and pending == 0:
                part = seconds / (s + 1)
                entry.add_accum(part, s)
                entry.add_optim(part)
            else:
                entry.add_optim(seconds)
        return dropped

    # ------------------------------------------------------------------ compute
    def compute(self) -> dict[tuple[int, int, int], tuple[float, float, int]]:
        """Robust per-configuration statistics: ``(nodes, replicas, atomic_bsz) -> (accum, optim, n)``.

        The ``quantile`` of the kept samples of every accumulation setting of the
        configuration; ``accum`` falls back to ``optim`` when no accumulation step
        was profiled; ``n`` is the number of optimizer-step samples. The fold's
        dropped seconds are not reported here: call :meth:`fold` first for them.
        """
        groups: dict[tuple[int, int, int], list] = {}
        with self.lock:
            self._fold_locked()
            for (n, r, b, _s), e in self.entries.items():
                if not e.optim_count:
                    continue
                g = groups.setdefault((n, r, b), [[], [], 0])
                g[0].extend(e.accum_samples)
                g[1].extend(e.optim_samples)
                g[2] += e.optim_count
        out = {}
        q = self.quantile
        for k, (acc, opt, cnt) in sorted(groups.items()):
            o = float(np.quantile(opt, q))
            out[k] = (float(np.quantile(acc, q)) if acc else o, o, int(cnt))
        return out

    def samples(self, key: ProfileKey) -> list[float]:
        """The kept optimizer-step times of ``key``, oldest first (empty when none)."""
        with self.lock:
            self._fold_locked()
            e = self.entries.get(key)
            return [] if e is None else list(e.optim_samples)

    def max_replicas(self) -> int:
        """Largest replica count with an optimizer-step profile (0 when none)."""
        with self.lock:
            self._fold_locked()
            return max((k[1] for k, e in self.entries.items() if e.optim_count), default=0)

    def has_optim(self) -> bool:
        """Whether any configuration has an optimizer-step sample (after folding)."""
        with self.lock:
            self._fold_locked()
            return any(e.optim_count for e in self.entries.values())

    # ------------------------------------------------------------------ reset / state
    def reset(self, key: ProfileKey | None = None) -> None:
        """Forget configuration ``key`` (its warm-up counts again), or everything (None)."""
        with self.lock:
            if key is None:
                self.pending.clear()
                self.entries, self.seen, self.seen_accum = {}, {}, {}
                return
            self._fold_locked()
            self.entries.pop(key, None)
            self.seen.pop(key, None)
            self.seen_accum.pop(key, None)

    def replace(self, entries: dict) -> None:
        """Set the entries (pending steps are discarded)."""
        with self.lock:
            self.pending.clear()
            self.entries = dict(entries)

    def to_json(self) -> tuple[list, list]:
        """``(entries, seen)`` in JSON-safe form, every pending step folded in."""
        with self.lock:
            self._fold_locked()
            prof = [[list(k), e.to_json()] for k, e in self.entries.items()]
            seen = [[list(k), v] for k, v in self.seen.items()]
        return prof, seen

    def load_json(self, entries: Any, seen: Any = ()) -> None:
        """Inverse of :meth:`to_json`."""
        self.replace({tuple(k): ProfileEntry.from_json(e, self.window) for k, e in entries})
        self.seen = {tuple(k): int(v) for k, v in seen}
