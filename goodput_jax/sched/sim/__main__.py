"""The simulator's own entry point: ``python -m goodput_jax.sched.sim`` or ``goodput-jax-sim``.

The same options as ``goodput-jax simulate`` (see :mod:`goodput_jax.sched.sim.cli`).

Example:
    $ python -m goodput_jax.sched.sim philly/1 --cluster sia-64 --no-progress
"""

from __future__ import annotations

import sys

from goodput_jax.sched.sim.cli import run

if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
