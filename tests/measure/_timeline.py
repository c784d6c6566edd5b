"""Helpers to build hand-made event timelines in a real (in-memory) SQLite store."""

from __future__ import annotations

from goodput_jax.measure.calculator import GoodputCalculator
from goodput_jax.measure.events import Event, EventKind
from goodput_jax.measure.stores.sqlite import SQLiteStore

K = EventKind


def events(job: str, run: str, spec, host: int = 0) -> list[Event]:
    """spec: iterable of (kind, t) / (kind, t, step) / (kind, t, None, label)."""
    out = []
    for item in spec:
        kind, t = item[0], item[1]
        step = item[2] if len(item) > 2 else None
        label = item[3] if len(item) > 3 else None
        out.append(Event(kind, job, run, host, float(t), step=step, label=label))
    return out


def calc_for(store, job: str = "job", now: float = 1e6, **kw) -> GoodputCalculator:
    return GoodputCalculator(job, "logger", store=store, clock=lambda: now, **kw)


def new_store() -> SQLiteStore:
    return SQLiteStore(":memory:")
