"""Evaluator interface: where kernel runtimes come from, under a wall-clock Budget.

An Evaluator measures kernels (optionally with a tile each) and returns one Measurement per item.
Failures (compile error, crash, timeout) are values, never exceptions. Results are written to an
optional measurement store as soon as they exist (an evaluator that measures one item at a time
reports each with `Evaluator._report`), and repeated requests are answered from it.
"""
from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

from autotune.plugins import Registry, UnknownPluginError


class BudgetError(ValueError):
    """A budget string that cannot be parsed, or an impossible budget."""


_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "ms": 1e-3}


def parse_duration(text: "str | float | int | None") -> Optional[float]:
    """Parse "30s", "5m", "1h", "1h30m", "90" (seconds) or a number into seconds; None -> None."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = str(text).strip().lower()
        if s in ("inf", "none", "unlimited"):
            return None
        parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|sec|min|s|m|h)?", s)
        if not parts or re.sub(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|sec|min|s|m|h)?|\s", "", s):
            raise BudgetError(f"cannot parse duration {text!r} (use e.g. 30s, 5m, 1h)")
        value = sum(float(n) * _UNITS[u] for n, u in parts)
    if value < 0:
        raise BudgetError(f"duration must be >= 0, got {text!r}")
    return value


class Budget:
    """Wall-clock time budget, started at construction (or at `start()`), checked before each batch.

    `Budget(None)` is unlimited. `Budget(0)` is exhausted from the start.
    """

    def __init__(self, seconds: "str | float | None" = None, clock=time.monotonic):
        self.seconds = parse_duration(seconds)
        self._clock = clock
        self._start = clock()

    def start(self) -> "Budget":
        self._start = self._clock()
        return self

    def now(self) -> float:
        """The budget's clock (to time steps against it)."""
        return self._clock()

    @property
    def elapsed(self) -> float:
        return self._clock() - self._start

    @property
    def remaining(self) -> float:
        if self.seconds is None:
            return float("inf")
        return max(0.0, self.seconds - self.elapsed)

    @property
    def exhausted(self) -> bool:
        return self.seconds is not None and self.elapsed >= self.seconds

    def __repr__(self) -> str:
        return f"Budget({self.seconds!r}s, remaining={self.remaining:.1f}s)"


OK = "ok"
# Failure statuses that say nothing about the kernel (an exception in the evaluator's own code):
# returned, but never written to the measurement store, so a fixed bug does not keep failing.
INVALID = "invalid"
EVALUATOR_ERROR = "evaluator_error"
NOT_STORED = (INVALID + ":", EVALUATOR_ERROR + ":")


@dataclass(frozen=True)
class Measurement:
    """One kernel runtime in seconds, or a failure with its reason.

    status is "ok", or a reason such as "compile_error: ...", "crash: ...", "timeout",
    "budget_exhausted".
    """

    seconds: Optional[float]
    status: str = OK
    cached: bool = False
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == OK and self.seconds is not None

    @classmethod
    def failure(cls, reason: str) -> "Measurement":
        return cls(None, reason)


@runtime_checkable
class KernelLike(Protocol):
    """What an evaluator needs of a kernel: a canonical hash and standalone HLO text."""

    hash: str

    def to_hlo_module(self) -> str: ...


def tile_key(tile: Any) -> str:
    """Stable string form of a tile for store keys ("" for no tile)."""
    if tile is None:
        return ""
    key = getattr(tile, "key", None)
    if callable(key):
        return key()
    if isinstance(tile, (tuple, list)):
        return "x".join(str(int(t)) for t in tile)
    return str(tile)


class _StoreFailure(Exception):
    """The store failed to commit a result: raised through `_measure_batch` unchanged."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class Evaluator(ABC):
    """Measures kernels under a Budget; subclasses implement `_measure_batch`.

    The base class owns the store look-up, budget checks and committing each result.
    """

    name: str = "evaluator"
    version: str = "1"
    in_program: bool = False  # kernel times are taken inside their program (datasets measure whole configurations)
    seed: int = 0             # of the inputs it makes, where it makes any

    def __init__(self, target: str = "tpu", budget: "Budget | str | float | None" = None, store=None):
        self.target = target
        self.budget = budget if isinstance(budget, Budget) else Budget(budget)
        self.store = store
        self.measured = 0  # fresh measurements (not from the store)
        self.budget_exhausted = False
        self._on_result: Optional[Any] = None  # set by `measure` while a batch is measured

    @property
    def store_namespace(self) -> str:
        return f"{self.name}/{self.version}"

    @property
    def machine(self) -> str:
        """What measured: the host's CPU model and core count (`host_machine`); an accelerator
        evaluator names its accelerator, a machine-independent one (a simulator) says so. The
        store keys every measurement by it, so that machines sharing a store never mix timings."""
        from autotune.compiler.targets.host import host_machine
        return host_machine()

    def _report(self, index: int, m: Measurement) -> None:
        """Hand item `index` of the batch being measured to `measure` the moment it exists: it is
        counted and committed to the store at once, before later items can fail or the run be
        interrupted. Optional: items not reported are committed when `_measure_batch` returns."""
        on_result = getattr(self, "_on_result", None)
        if on_result is not None:
            on_result(index, m)

    @abstractmethod
    def _measure_batch(self, kernels: Sequence[KernelLike], tiles: Sequence[Any]) -> list[Measurement]:
        """Measure every item; never raise for a single item's failure."""

    def measure(self, kernels: Sequence[KernelLike], tiles: Optional[Sequence[Any]] = None) -> list[Measurement]:
        kernels = list(kernels)
        tiles = list(tiles) if tiles is not None else [None] * len(kernels)
        if len(tiles) != len(kernels):
            raise ValueError("tiles must have one entry per kernel")
        out: list[Optional[Measurement]] = [None] * len(kernels)
        todo: list[int] = []
        machine = self.machine if self.store is not None else ""
        for i, (k, t) in enumerate(zip(kernels, tiles)):
            hit = None
            if self.store is not None:
                hit = self.store.get(self.target, self.store_namespace, k.hash, tile_key(t), machine=machine)
            if hit is not None:
                out[i] = hit
            else:
                todo.append(i)
        if todo:
            if self.budget.exhausted:
                self.budget_exhausted = True
                for i in todo:
                    out[i] = Measurement.failure("budget_exhausted")
            else:
                # De-duplicate identical (hash, tile) requests inside the batch.
                uniq: dict[tuple[str, str], list[int]] = {}
                for i in todo:
                    uniq.setdefault((kernels[i].hash, tile_key(tiles[i])), []).append(i)
                reps = [idx[0] for idx in uniq.values()]
                results: dict[int, Measurement] = {}

                def commit(j: int, m: Measurement) -> None:  # once per item, the moment it exists
                    if j in results or not 0 <= j < len(reps):
                        return
                    results[j] = m
                    if m.status != "budget_exhausted":
                        self.measured += 1
                        if self.store is not None and not m.status.startswith(NOT_STORED):
                            try:
                                self.store.put(self.target, self.store_namespace, kernels[reps[j]].hash,
                                               tile_key(tiles[reps[j]]), m, machine=machine)
                            except Exception as exc:  # the store's own error, not an evaluator bug
                                raise _StoreFailure(exc) from exc

                self._on_result = commit
                try:
                    batch = list(self._measure_batch([kernels[i] for i in reps], [tiles[i] for i in reps]))
                except _StoreFailure as store_failure:
                    raise store_failure.error from None
                except Exception as exc:  # an evaluator bug must not lose the run
                    failure = Measurement.failure(f"{EVALUATOR_ERROR}: {type(exc).__name__}: {exc}")
                    batch = [failure] * len(reps)
                finally:
                    self._on_result = None
                if len(batch) != len(reps):  # a buggy evaluator must not leave holes (None) in the output
                    hole = Measurement.failure(f"{EVALUATOR_ERROR}: {len(batch)} results for {len(reps)} items")
                    batch = (batch + [hole] * len(reps))[:len(reps)]
                try:
                    for j, m in enumerate(batch):
                        commit(j, m)  # a no-op for items already reported
                except _StoreFailure as failure:
                    raise failure.error from None
                for j, rep in enumerate(reps):
                    for i in uniq[(kernels[rep].hash, tile_key(tiles[rep]))]:
                        out[i] = results[j]
        return [m for m in out]  # type: ignore[misc]

    def close(self) -> None:
        """Release worker processes or connections."""


# --------------------------------------------------------------------------------------------------
# Evaluators by name (autotune/plugins.py; entry-point group autotune.evaluators). A plug-in is an
class ProgramEvaluator(Evaluator):
    """An evaluator that also runs whole programs (real XLA): end-to-end times with their outputs
    checked against a reference, and paired timing beside a reference. The Tuner verifies a fusion,
    layout or tile result end to end with one of these (checked with ``isinstance``); a kernel-only
    evaluator (the simulator) is verified by kernel sums."""

    @property
    def platform(self) -> str:
        """The backend it runs on ("cpu", "cuda", ...)."""
        return self.target

    @property
    def hand_fusions(self) -> bool:
        """Whether hand-made ``fusion`` instructions compile as written (XLA:CPU: yes); where not,
        configurations cannot be timed end to end."""
        return True

    @abstractmethod
    def measure_program(self, hlo_text: str, *, reference: Optional[str] = None,
                        disable_fusion: Optional[bool] = None,
                        xla_flags: Optional[dict[str, Any]] = None) -> Measurement:
        """One whole program's end-to-end time; with ``reference``, ``extra["outputs_match"]`` and
        ``extra["output_error"]`` against that program's outputs on the same inputs."""

    @abstractmethod
    def measure_paired(self, reference_text: str, hlo_text: str, seconds: float, *,
                       disable_fusion: Optional[bool] = None, xla_flags: Optional[dict[str, Any]] = None,
                       pairs: int = 4, min_block_ms: float = 1.0,
                       reference_options: Optional[dict[str, Any]] = None) -> Measurement:
        """``hlo_text``'s time over ``reference_text``'s, timed beside it for about ``seconds``:
        ``seconds`` of the answer is the median ratio, ``extra["ratios"]`` the paired ratios."""

    def check_compile_options(self, hlo_text: str, xla_flags: dict[str, Any], *,
                              base_options: Optional[dict[str, Any]] = None,
                              reference_text: Optional[str] = None) -> Measurement:
        """The program compiled with ``base_options`` (``disable_fusion``, ``xla_flags``; default: the
        compiler's defaults) plus the compiler options ``xla_flags`` against ``reference_text`` (default: the
        same program) under the compiler's defaults, on the same inputs: status "ok" where the outputs are
        as accurate as the reference's, else a reason ("output_mismatch: ...", "compile_error: ...", ...);
        ``extra`` holds the comparison (``identical``, ``error``, ``accurate``, the second opinions' errors).
        An evaluator that can compile with options implements it (an options search needs it)."""
        raise NotImplementedError(f"the {self.name} evaluator does not check compiler options")

    def measure_in_program(self, space: Any, cfg: Any, kernels: Optional[Sequence[Any]] = None, *,
                           runs: Optional[int] = None, reference: Optional[str] = None) -> Any:
        """A fusion configuration's kernels timed inside its program (an evaluator with
        ``in_program`` true implements it)."""
        raise NotImplementedError(f"the {self.name} evaluator does not time kernels inside their program")


# Evaluator class or factory called as factory(target=..., budget=..., store=..., seed=..., **options).

def _as_evaluator_factory(obj: Any, spec: str) -> Any:
    if isinstance(obj, type) and not issubclass(obj, Evaluator):
        raise UnknownEvaluatorError(f"{spec!r} is not an Evaluator class or factory")
    if not callable(obj):
        raise UnknownEvaluatorError(f"{spec!r} is not an Evaluator class or factory")
    return obj


class UnknownEvaluatorError(UnknownPluginError):
    """An evaluator spec that names nothing loadable."""


EVALUATORS = Registry("evaluator", "autotune.evaluators", builtins={
    "sim": "hardware.simulator:TpuSimulator", "xla": "hardware.xla:XlaEvaluator",
    "xla-inprogram": "hardware.xla:XlaInProgramEvaluator",
}, aliases={"simulator": "sim"}, check=_as_evaluator_factory, error=UnknownEvaluatorError)


def create_evaluator(name: str, target: str, **options: Any) -> "Evaluator":
    """An evaluator by name (sim, xla, a plug-in) for a target, given the options its constructor names
    (target, budget, store, seed, noise, n_workers, scheduler, ...); a mismatch is one-line ValueError."""
    import inspect
    from autotune.compiler.targets import get_target
    key = EVALUATORS.canonical(name)
    factory = EVALUATORS.get(name)
    measurable_by = get_target(target).evaluators
    if key == "sim" and "sim" not in measurable_by:
        raise ValueError(f"the sim evaluator simulates a TPU; use --target tpu (got --target {target})")
    if key in ("xla", "xla-inprogram"):
        if key not in measurable_by:
            raise ValueError(f"the {key} evaluator runs kernels on this machine's XLA backend; use --target cpu")
        try:
            import jaxlib  # noqa: F401
        except ImportError:
            raise ValueError(f"the {key} evaluator needs jax/jaxlib: pip install 'autotune[xla]'") from None
    try:
        params = set(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        params = set()
    return factory(target=target, **{k: v for k, v in options.items() if k in params and k != "target"})
