"""The goodput report: above ``measure`` and ``model``, it only draws what they return.

Rooms (each imports only the ones above it in this list, plus ``measure`` and ``model``):

* :mod:`~goodput_jax.report.labels`: the words shown (bucket and hint names, units);
* :mod:`~goodput_jax.report.productivity`: the ML Productivity Goodput panel (the three
  factors, MFU, the roofline position, the checkpoint and finish advice), from the
  calculator's typed results;
* :mod:`~goodput_jax.report.text`: the goodput / badput table as plain text;
* :mod:`~goodput_jax.report.timeline`: the job's attributed time slices, from the
  one attribution engine (:mod:`goodput_jax.measure.engine`);
* :mod:`~goodput_jax.report.curves`: the modelled goodput curves, from
  :mod:`goodput_jax.model`;
* :mod:`~goodput_jax.report.figures`: the matplotlib figures (needs the
  ``report`` extra);
* :mod:`~goodput_jax.report.render`: the HTML page and the PNG sheet.

Importing this package loads neither JAX nor matplotlib; the names below are
re-exported lazily.

Example:
    >>> from goodput_jax.report import format_report, render_reports   # doctest: +SKIP
    >>> print(format_report(calculator))                                # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "ModelCurves": "curves",
    "ProductivityPanel": "productivity",
    "Segment": "timeline",
    "Timeline": "timeline",
    "build_timeline": "timeline",
    "format_report": "text",
    "model_curves": "curves",
    "productivity_panel": "productivity",
    "render_html": "render",
    "render_png": "render",
    "render_reports": "render",
}

__all__ = [
    "ModelCurves",
    "ProductivityPanel",
    "Segment",
    "Timeline",
    "build_timeline",
    "format_report",
    "model_curves",
    "productivity_panel",
    "render_html",
    "render_png",
    "render_reports",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
