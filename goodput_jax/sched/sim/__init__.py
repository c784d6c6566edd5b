"""goodput_jax.sched.sim."""
