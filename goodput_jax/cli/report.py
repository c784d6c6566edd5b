"""``goodput-jax report``: a job's goodput / badput table, and optionally an HTML or PNG page.

Example:
    $ goodput-jax report --job demo --store sqlite:///goodput-demo/goodput.db --html r.html
"""

from __future__ import annotations

import argparse

from goodput_jax.cli._common import (
    HelpFormatter,
    check_output_file,
    open_store_for_reading,
    positive_float,
    positive_int,
    require_extra,
    resolve_job,
    store_url,
)

HELP = "print a job's goodput / badput table (optionally an HTML or PNG report)"

DESCRIPTION = """\
Print the measured goodput of a job (productive step time / total job time, %)
and its badput broken down by cause, read from an existing store. The store is
only read: a missing SQLite file is an error, never created.

--html / --png also draw the job timeline, the badput breakdown and, when the
training hooks published model hints, the modelled goodput curves (needs the
'report' extra: pip install "goodput-jax[report]")."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``report`` on the top-level parser's subparsers."""
    p = subparsers.add_parser("report", help=HELP, description=DESCRIPTION,
                              formatter_class=HelpFormatter)
    p.add_argument("--job", default=None,
                   help="job name (default: the store's only job; an unknown name lists the "
                        "jobs in the store)")
    p.add_argument("--store", default=None, type=store_url,
                   help="store URL: sqlite:///PATH or gcl://PROJECT/LOGGER (default: "
                        "$GOODPUT_JAX_STORE, else sqlite:///goodput.db)")
    p.add_argument("--html", default=None, metavar="FILE",
                   help="also write a self-contained HTML report to FILE")
    p.add_argument("--png", default=None, metavar="FILE",
                   help="also write the report's plots as one PNG image to FILE")
    p.add_argument("--ideal-step-time", type=positive_float, default=None, metavar="SECONDS",
                   help="configured ideal step time for the step-time statistics "
                        "(default: estimated from the steps)")
    p.add_argument("--target-step", type=positive_int, default=None, metavar="STEP",
                   help="the step the job trains to: forecast when it gets there at today's "
                        "rates, with the badput expected on the way")
    p.add_argument("--mtbf", type=positive_float, default=None, metavar="SECONDS",
                   help="mean time between failures for the checkpoint-interval advice "
                        "(default: observed from the job's disruptions)")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Adapter: the parsed arguments -> :func:`report`."""
    return report(job=args.job, store=args.store, html=args.html, png=args.png,
                  ideal_step_time=args.ideal_step_time, target_step=args.target_step,
                  mtbf=args.mtbf)


def report(*, job: str | None, store: str | None, html: str | None = None,
           png: str | None = None, ideal_step_time: float | None = None,
           target_step: int | None = None, mtbf: float | None = None) -> int:
    """Print the report of ``job`` in ``store``; write the HTML / PNG pages if asked.

    Args:
        job: job name, or None for the store's only job.
        store: store URL, or None for ``$GOODPUT_JAX_STORE`` / ``sqlite:///goodput.db``.
        html: path of an HTML report to write, or None.
        png: path of a PNG report to write, or None.
        ideal_step_time: configured ideal step time (s), or None to estimate it.
        target_step: the step the job trains to (the finish forecast), or None.
        mtbf: mean time between failures (s) for the checkpoint advice, or None (observed).

    Returns:
        The exit code (0).

    Example:
        >>> report(job="demo", store="sqlite:///goodput-demo/goodput.db")  # doctest: +SKIP
        0
    """
    for flag, path in (("--html", html), ("--png", png)):
        if path is not None:  # before the table is printed or anything is written
            check_output_file(flag, path)
    if html or png:
        require_extra("report", ("matplotlib", "jax"), "goodput-jax report --html/--png")
    from goodput_jax.measure.calculator import GoodputCalculator
    from goodput_jax.report.text import format_report

    event_store = open_store_for_reading(store)
    try:
        name = resolve_job(event_store, job)
        calc = GoodputCalculator(name, None, store=event_store,
                                 configured_ideal_step_time=ideal_step_time)
        text = format_report(calc, target_step=target_step, mtbf_s=mtbf)
        print(text)
        if html or png:
            from goodput_jax.report.render import render_reports

            done = render_reports(calc, html, png, text_report=text, target_step=target_step,
                                  mtbf_s=mtbf)
            if html:
                print(f"wrote HTML report: {html}")
            if png:
                print(f"wrote PNG report: {png}")
            if not done["has_model"]:
                print("note: the job has no model hints (GoodputHooks publishes them), "
                      "so the report shows the measurement plots only")
    finally:
        event_store.close()
    return 0
