"""goodput_jax.integrations: drop-in hooks for Flax / MaxText-style training loops.

Example:
    >>> from goodput_jax.integrations import GoodputHooks  # doctest: +SKIP
"""

from goodput_jax.integrations.hooks import GoodputHooks, ProfileEntry, Suggestion

__all__ = ["GoodputHooks", "ProfileEntry", "Suggestion"]
