"""``goodput-jax simulate``: the trace-driven cluster simulator (Pollux and baselines).

The options and the command itself belong to the simulator
(:mod:`goodput_jax.sched.sim.cli`); this module only mounts them.

Example:
    $ goodput-jax simulate 6 --policy tiresias --no-progress
"""

from __future__ import annotations

import argparse

from goodput_jax.cli._common import HelpFormatter, require_extra
from goodput_jax.sched.sim import cli as sim_cli

HELP = "trace-driven cluster simulation of Pollux and baseline policies (needs the 'sim' extra)"

DESCRIPTION = f"""\
Replay a workload of training jobs on a simulated 64-GPU cluster under a
scheduling policy ({", ".join(sim_cli.POLICIES)}; with --cluster, a heterogeneous
cluster of the Sia paper: {", ".join(sim_cli.HETERO_POLICIES)}) and print the average
and p99 job completion time (JCT) and the makespan. Logs, a JSON summary and plots
go to --out, created only once the options are valid (see docs/simulator.md). Needs
the '{sim_cli.SIM_EXTRA}' extra: pip install "goodput-jax[{sim_cli.SIM_EXTRA}]"."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``simulate`` with the simulator's own options."""
    p = subparsers.add_parser("simulate", help=HELP, description=DESCRIPTION,
                              formatter_class=HelpFormatter)
    sim_cli.add_arguments(p)
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the simulator with its parsed options (its ``main`` takes them as they are)."""
    require_extra(sim_cli.SIM_EXTRA, sim_cli.SIM_MODULES, "goodput-jax simulate")
    return int(sim_cli.main(args) or 0)
