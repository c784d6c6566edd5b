"""goodput_jax.integrations."""
