"""goodput_jax.model."""
