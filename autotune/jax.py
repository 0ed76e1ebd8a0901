"""Tune a JAX function from Python: `tune(fn, *example_args)` lowers it, tunes its fusion for this
machine and returns a callable that runs the tuned program, or `jax.jit(fn)` with one warning when
nothing faster than XLA's own compile was verified.

    import autotune.jax
    fast = autotune.jax.tune(train_step, params, opt_state, batch, budget="2m")
    params, opt_state, loss = fast(params, opt_state, batch)      # same results, tuned executable

The search is the library run of `autotune fusion PROGRAM --target cpu` (`autotune.run.tune`), in this
process: XLA compiles and runs happen in the evaluator's measurement workers, where a crash stays. Its
verification compares every candidate's outputs with XLA's own compile of the original and times
them beside it (docs/verification.md). Results are cached on disk, keyed by the normalized program,
the target, the machine and the jaxlib version, under ``$AUTOTUNE_JAX_CACHE`` (default
``~/.cache/autotune/jax/``): a second `tune` of the same function on the same machine runs no search.
`load(run_dir)` gives the callable of a cached entry or of any `autotune fusion` run folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

__all__ = ["tune", "load", "TunedFunction", "cache_key", "cache_root", "CACHE_ENV", "TuningFailed"]

CACHE_ENV = "AUTOTUNE_JAX_CACHE"
_KEY_FILE = "key.json"
_PROGRAM_FILE = "program.hlo"


class TuningFailed(RuntimeError):
    """The search could not run (bad program, unusable budget): one line saying why."""


def cache_root() -> Path:
    """Where tuned functions are cached: ``$AUTOTUNE_JAX_CACHE`` or ``~/.cache/autotune/jax``."""
    from autotune.compiler.targets.host import host_cache_dir
    return Path(os.environ.get(CACHE_ENV) or host_cache_dir() / "jax")


def cache_key(hlo_text: str, target: str) -> dict:
    """What a cached result is valid for: the normalized program (parsed and printed back without
    metadata), the target, the machine and the jaxlib version; ``digest`` names the entry."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.compiler.targets.host import host_machine
    from autotune.tuning.checkpoint import program_fingerprint
    from hardware.xla import jaxlib_version
    parts = {"program": program_fingerprint(FusionSpace(Program.from_text(hlo_text), target)), "target": target,
             "machine": host_machine(), "jaxlib": jaxlib_version()}
    parts["digest"] = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return parts


@dataclass
class TunedFunction:
    """A tuned function: call it as the original (same arguments, same results). ``tuned`` is False when
    the run kept XLA's own compile of the original (then it runs ``jax.jit(fn)``)."""

    run_dir: Path
    report: dict
    tuned: bool
    arg_specs: list                      # (shape, dtype) of each flattened argument the program takes
    out_tree: Any = None                 # the outputs' pytree structure (None: a flat tuple)
    fallback: Optional[Callable] = None  # jax.jit(fn), or XLA's own compile of the original
    compile_s: float = 0.0
    _executable: Any = field(default=None, repr=False)

    @property
    def measured_speedup(self) -> Optional[float]:
        """The written program's speedup over XLA's own compile of the original (1.0 when kept)."""
        return self.report.get("measured_speedup")

    def __call__(self, *args: Any) -> Any:
        import jax
        if not self.tuned:
            return self.fallback(*args)
        leaves = jax.tree_util.tree_leaves(args)
        specs = _leaf_specs(leaves)
        if specs != self.arg_specs:
            raise ValueError(f"the tuned program takes {len(self.arg_specs)} arrays {self.arg_specs[:3]}..., got "
                             f"{len(specs)} {specs[:3]}...: call it with arguments shaped as the example ones")
        outs = self._executable.execute([jax.device_put(x) for x in leaves])
        return jax.tree_util.tree_unflatten(self.out_tree, outs) if self.out_tree is not None else tuple(outs)


def _leaf_specs(leaves: Sequence[Any]) -> list:
    """(shape, dtype) of each flattened argument: what a call must match of the example arguments."""
    return [(tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__))) for x in leaves]


def _run_search(program: Path, out: Path, budget: str, target: str, cost_model: Optional[str]) -> None:
    """The library run of `autotune fusion` (autotune.run.tune) in this process: XLA compiles and runs in
    the evaluator's measurement workers, so a crashing compile fails alone. A run refused or broken is a
    TuningFailed in one line; an interrupted search (Ctrl-C) is a KeyboardInterrupt after its outputs."""
    from autotune.run import RunOptions
    from autotune.run import tune as run_tune
    from autotune.tuning.result import TuningError
    from autotune.tuning.store import StoreError
    from hardware.xla import XlaApiError
    try:
        result = run_tune(program, target, cost_model=cost_model, budget=budget,
                          options=RunOptions(out_dir=out, progress=False))
    except (ValueError, OSError, TuningError, StoreError, XlaApiError) as e:  # refused: one line saying why
        raise TuningFailed(f"autotune fusion on {program.name} failed: {_one_line(e)}") from None
    except Exception as e:  # a bug: the line, with its traceback chained
        raise TuningFailed(f"autotune fusion on {program.name} failed: {type(e).__name__}: {_one_line(e)}") from e
    if result.interrupted:
        raise KeyboardInterrupt(f"autotune fusion on {program.name}: interrupted ({result.tuning.stopped_by})")


def _one_line(e: BaseException) -> str:
    """The first non-empty line of an error's message (or its type)."""
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


def tune(fn: Callable, *example_args: Any, budget: str = "2m", target: str = "cpu",
         cost_model: Optional[str] = None, cache: bool = True) -> TunedFunction:
    """Tune `fn`'s fusion for this machine on arguments shaped as `example_args` (arrays or pytrees of
    arrays; static arguments belong in `fn`'s closure). A cached result for the same program, target,
    machine and jaxlib version is reused without a search (`cache=False` searches again and replaces it)."""
    import jax
    lowered = jax.jit(fn, keep_unused=True).lower(*example_args)
    text = lowered.as_text(dialect="hlo")
    key = cache_key(text, target)
    entry = cache_root() / key["digest"][:24]
    out_tree = jax.tree_util.tree_structure(jax.eval_shape(fn, *example_args))
    specs = _leaf_specs(jax.tree_util.tree_leaves(example_args))
    if not (cache and _valid_entry(entry, key)):
        entry.mkdir(parents=True, exist_ok=True)
        (entry / _KEY_FILE).unlink(missing_ok=True)  # an interrupted search leaves no valid entry
        (entry / _PROGRAM_FILE).write_text(text)
        _run_search(entry / _PROGRAM_FILE, entry, budget, target, cost_model)
        (entry / _KEY_FILE).write_text(json.dumps({**key, "arg_specs": specs, "written": time.time()}, indent=1))
    return _load(entry, fn, out_tree, stacklevel=3)


def _valid_entry(entry: Path, key: dict) -> bool:
    try:
        stored = json.loads((entry / _KEY_FILE).read_text())
    except (OSError, ValueError):
        return False
    return all(stored.get(k) == v for k, v in key.items()) and (entry / "report.json").exists()


def load(run_dir: "str | os.PathLike[str]", fn: Optional[Callable] = None, out_tree: Any = None) -> TunedFunction:
    """The callable of a tuned run folder (a `tune` cache entry, or an `autotune fusion --target cpu` run):
    the written program compiled as it was verified; when the run kept the original, `jax.jit(fn)` (or
    XLA's own compile of the original program when `fn` is not given) with one warning. Without `out_tree`
    (a pytree structure, as `tune` passes) the outputs come as a flat tuple."""
    return _load(Path(run_dir), fn, out_tree, stacklevel=3)


def _load(run: Path, fn: Optional[Callable], out_tree: Any, stacklevel: int) -> TunedFunction:
    import jax
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS
    from hardware.xla import compile_hlo, parameter_shapes
    try:
        report = json.loads((run / "report.json").read_text())
        fused = (run / "fused.hlo").read_text()
    except (OSError, ValueError) as e:
        raise ValueError(f"{run}: not an autotune fusion run folder ({e})") from None
    stored = {}
    if (run / _KEY_FILE).exists():
        stored = json.loads((run / _KEY_FILE).read_text())
    specs = [(tuple(shape), dtype) for shape, dtype in stored.get("arg_specs", [])] or [
        (dims, str(dtype)) for dtype, dims in parameter_shapes(fused)]
    status = report.get("verification", {}).get("status")
    t0 = time.perf_counter()
    if report.get("keep_original") or status != "verified":
        why = ("XLA's own compile of it was not beaten" if report.get("keep_original")
               else f"nothing was verified ({status})")
        warnings.warn(f"autotune: keep the original: {why}; running XLA's own compile", stacklevel=stacklevel)
        if fn is not None:
            fallback = jax.jit(fn)
        else:
            original = compile_hlo((run / _PROGRAM_FILE).read_text() if (run / _PROGRAM_FILE).exists() else fused)
            fallback = lambda *a: tuple(original.execute([jax.device_put(x) for x in jax.tree_util.tree_leaves(a)]))
        return TunedFunction(run, report, False, specs, out_tree, fallback, time.perf_counter() - t0)
    # compiled exactly as verified: the compile options the run recorded (fusion as tuned, compiler options)
    executable = compile_hlo(fused, **(report.get("compile_options") or EMITTED_CPU_COMPILE_OPTIONS))
    return TunedFunction(run, report, True, specs, out_tree, None, time.perf_counter() - t0, executable)

