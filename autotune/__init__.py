"""autotune: an autotuner for XLA programs with pluggable cost models (README.md)."""


def load(run_dir, fn=None):
    """The callable of a tuned run folder (`autotune.jax.load`): needs jax."""
    from autotune.jax import load as load_run
    return load_run(run_dir, fn=fn)
