"""goodput_jax.measure."""
