"""autotune: an autotuner for XLA programs with pluggable cost models (README.md)."""


def load(run_dir, fn=None):
    """The callable of a tuned run folder (`autotune.jax.load`): needs jax."""
    from autotune.jax import load as load_run
    return load_run(run_dir, fn=fn)


_LAZY = {"tune": "autotune.run", "RunOptions": "autotune.run", "RunResult": "autotune.run"}


def __getattr__(name: str):
    """`autotune.tune`, `RunOptions`, `RunResult` (autotune/run/), imported on first use: `import autotune`
    stays fast."""
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
