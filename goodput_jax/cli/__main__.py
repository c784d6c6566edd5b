"""``python -m goodput_jax.cli``: the same as the ``goodput-jax`` command."""

import sys

from goodput_jax.cli import main

sys.exit(main())
