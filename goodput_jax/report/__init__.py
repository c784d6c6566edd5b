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

from typing import TYPE_CHECKING

from goodput_jax._lazy import lazy_exports

#: public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    "build_timeline": "goodput_jax.report.timeline",
    "format_report": "goodput_jax.report.text",
    "model_curves": "goodput_jax.report.curves",
    "ModelCurves": "goodput_jax.report.curves",
    "productivity_panel": "goodput_jax.report.productivity",
    "ProductivityPanel": "goodput_jax.report.productivity",
    "render_html": "goodput_jax.report.render",
    "render_png": "goodput_jax.report.render",
    "render_reports": "goodput_jax.report.render",
    "Segment": "goodput_jax.report.timeline",
    "Timeline": "goodput_jax.report.timeline",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("goodput_jax.report", _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover
    from goodput_jax.report.curves import (  # noqa: F401
        ModelCurves,
        model_curves,
    )
    from goodput_jax.report.productivity import (  # noqa: F401
        ProductivityPanel,
        productivity_panel,
    )
    from goodput_jax.report.render import (  # noqa: F401
        render_html,
        render_png,
        render_reports,
    )
    from goodput_jax.report.text import (  # noqa: F401
        format_report,
    )
    from goodput_jax.report.timeline import (  # noqa: F401
        Segment,
        Timeline,
        build_timeline,
    )
