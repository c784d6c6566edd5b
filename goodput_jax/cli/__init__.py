"""The ``goodput-jax`` command: one module per subcommand.

=============  ==============================================  =====================
subcommand     what it does                                    module
=============  ==============================================  =====================
``demo``       small real training job with goodput recording  :mod:`.demo`
``report``     goodput / badput table, HTML or PNG report      :mod:`.report`
``monitor``    upload goodput to TensorBoard                   :mod:`.monitor`
``simulate``   trace-driven cluster simulation                 :mod:`.simulate`
``cluster``    cluster runtime on Ray: submit, status, demo    :mod:`.cluster`
=============  ==============================================  =====================

Each subcommand module has ``add_parser(subparsers)`` (its options, with help
text) and ``run(args)``, which turns the parsed options into keyword arguments of
a plain function (e.g. :func:`goodput_jax.cli.report.report`). Heavy imports
(JAX, Flax, matplotlib) happen inside those functions, so ``--help`` is instant.
Nothing in the library imports this package.

Example:
    >>> main(["--version"])  # doctest: +SKIP
    goodput-jax 0.1.0
    0
"""

from __future__ import annotations

import sys

from goodput_jax import __version__
from goodput_jax.cli import cluster, demo, monitor, report, simulate
from goodput_jax.cli._common import HelpFormatter, Parser, run_command

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
goodput-jax: measure, model and schedule the goodput of ML training jobs.

Two numbers are called goodput (see docs/concepts.md):
  measured goodput  productive step time / total job time (%), with the lost
                    time (badput) broken down by cause: compilation, data
                    loading, checkpoints, disruptions, ...
  modelled goodput  samples/s of useful progress = throughput x statistical
                    efficiency (Pollux), and the batch size and replica count
                    that maximise it."""

EPILOG = """\
examples:
  goodput-jax demo --quick
  goodput-jax report --job demo --store sqlite:///goodput-demo/goodput.db --html report.html
  goodput-jax monitor --job demo --store sqlite:///goodput-demo/goodput.db --tensorboard-dir tb --once
  goodput-jax simulate 6 --policy pollux

Run 'goodput-jax COMMAND --help' for a command's options."""  # noqa: E501 (one example command a line)


def build_parser() -> Parser:
    """The ``goodput-jax`` argument parser with every subcommand.

    Example:
        >>> build_parser().parse_args(["report", "--job", "demo"]).job
        'demo'
    """
    parser = Parser(prog="goodput-jax", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands")
    for module in (demo, report, monitor, simulate, cluster):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``goodput-jax`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code.

    A user error prints one line, ``goodput-jax COMMAND: error: ...``, on stderr and
    returns 2; ``--help`` and ``--version`` return 0.

    Example:
        >>> main(["report", "--store", "sqlite:///no/such.db"])  # doctest: +SKIP
        goodput-jax report: error: store file 'no/such.db' does not exist
        2
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, or a one-line usage error
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return run_command(args.command, lambda: args.run(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
