"""goodput_jax.sched."""
