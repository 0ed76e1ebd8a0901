"""Tile tuning of a program's kernels, written once: the Tuner over each kernel's tile space.

Two ways to search a kernel's tiles, both through `Tuner` (autotune/tuning/tuner.py):
- `strategy="topk"` (the paper's and XLA's): a cost model ranks every valid tile (`TopKTileSearch`),
  the `top_k` best predicted and the default tile then race on the evaluator;
- any other strategy, e.g. `"model-based"` (AutoTVM): an online search whose costs are the
  evaluator's measurements (`trials` of them), then the best `top_k` measured tiles and the default
  race again on the evaluator.
An online search can learn from history (autotune/tuning/history.py): `transfer` (a cost model, e.g.
the global model trained on the store's other programs) becomes the model-based strategy's prior, and
`recorder` records every measured kernel's features for later runs.
The race (`autotune.tuning.verification.race_tiles`): every tile timed once, the `finalists` fastest
and the default timed `repeats` more times, interleaved; the lowest median wins, so a tile that got
one lucky timing does not.

`autotune tile` and benchmarks/paper.py use `tune_kernel_tiles` / `tune_program_tiles`, with the
search's options in a `TileTuningOptions`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from autotune.tuning.options import TunerOptions, VerifyOptions
from autotune.tuning.result import TuningResult
from autotune.tuning.tuner import Tuner

__all__ = ["KernelTiling", "TileTuningOptions", "program_kernels", "tune_kernel_tiles", "tune_program_tiles"]


@dataclass(frozen=True)
class TileTuningOptions:
    """How a kernel's tiles are searched and raced (module docstring)."""

    strategy: str = "topk"                 # "topk" (the cost model ranks every tile) or an online strategy's name
    top_k: int = 10                        # tiles raced on the evaluator with the default
    trials: int = 32                       # an online strategy's measurements per kernel
    repeats: int = 3                       # extra timings of the finalists and the default in the race
    finalists: int = 2                     # tiles timed `repeats` more times with the default
    seed: int = 0
    target: Any = "tpu"
    batch_size: int = 4                    # an online strategy's batch
    strategy_params: Optional[dict] = None  # keywords of the strategy's constructor


@dataclass
class KernelTiling:
    """The tile chosen for one kernel and what was measured to choose it."""

    kernel: Any
    space: Any
    multiplicity: float
    result: TuningResult

    @property
    def default_s(self) -> Optional[float]:
        return self.result.measured_default

    @property
    def chosen_tile(self) -> Any:
        """The race's winner; the default tile when nothing could be measured."""
        return self.result.measured_best_config if self.result.measured_best_config is not None \
            else self.space.default()

    @property
    def chosen_s(self) -> Optional[float]:
        v = self.result.measured_best
        return v if v is not None and math.isfinite(v) else None

    def row(self) -> dict:
        """One row of tiles.json."""
        k, r = self.kernel, self.result
        d_s, c_s = self.default_s, self.chosen_s
        default_entry = next((v for v in r.verified if v["rank"] == "default"), None)
        return {"hash": k.hash, "root": k.root_instruction.name, "computation": k.computation.name,
                "multiplicity": self.multiplicity, "valid_tiles": len(self.space),
                "default_tile": self.space.default().key(), "chosen_tile": self.chosen_tile.key(),
                "default_s": d_s, "chosen_s": c_s,
                "speedup": d_s / c_s if d_s is not None and c_s is not None else None,
                "searched": r.evaluations, "measured": sum(v["status"] == "ok" for v in r.verified),
                "timings": sum(v.get("timings", 0) for v in r.verified),
                "status": default_entry["status"] if default_entry is not None else r.verification.get("status")}


def program_kernels(kernels: Iterable[Any]) -> list[tuple[Any, float]]:
    """Distinct non-trivial kernels (by hash, first seen) with their summed multiplicity."""
    uniq: dict = {}
    for k in kernels:
        if getattr(k, "is_trivial", False):
            continue
        entry = uniq.setdefault(k.hash, [k, 0.0])
        entry[1] += float(getattr(k, "multiplicity", 1.0))
    return [(k, m) for k, m in uniq.values()]


def tune_kernel_tiles(kernel: Any, cost_model: Any, evaluator: Any, options: Optional[TileTuningOptions] = None, *,
                      space: Any = None, callbacks: Sequence[Any] = (), transfer: Any = None,
                      recorder: Any = None) -> TuningResult:
    """Search one kernel's tiles (module docstring); `result.measured_best_config` is the tile chosen.

    `cost_model` ranks tiles for "topk" (unused otherwise: the evaluator's measurements are the
    costs of an online strategy); `options` (TileTuningOptions) the search and the race; `transfer`
    (a cost model) is the prior of a strategy that takes one (model-based); `recorder` (a
    HistoryRecorder) records measured kernels."""
    from costmodels.base import EvaluatorCostModel
    from search.base import get_strategy
    from search.topk import TopKTileSearch

    o = options if options is not None else TileTuningOptions()
    if space is None:
        from autotune.compiler.tiles import TileSpace
        space = TileSpace(kernel, o.target)
    if str(o.strategy).lower() == "topk":
        strat: Any = TopKTileSearch(space, cost_model=cost_model, k=o.top_k, target=o.target)
        model, max_evals, batch = cost_model, None, max(1, o.top_k)
    else:
        params = dict(o.strategy_params or {})
        if transfer is not None:
            from autotune.tuning.history import transfer_prior
            params["prior"] = transfer_prior(space, transfer)
        strat = get_strategy(o.strategy)(space, seed=o.seed, **params)
        model, max_evals, batch = EvaluatorCostModel(evaluator), max(1, int(o.trials)), o.batch_size
        if recorder is not None:
            from autotune.tuning.history import RecordingCostModel
            model = RecordingCostModel(model, recorder)
    # top_k + 1 kept: the default (always raced as the baseline) must not push a candidate out
    tuner = Tuner(space, model, strat, budget=None, evaluator=evaluator,
                  options=TunerOptions(max_evaluations=max_evals, batch_size=batch, progress=False),
                  verify=VerifyOptions(hw_budget=None, top_k=o.top_k + 1, rounds=o.repeats, finalists=o.finalists),
                  callbacks=callbacks)
    return tuner.run()


def tune_program_tiles(kernels: Iterable[Any], cost_model: Any, evaluator: Any,
                       options: Optional[TileTuningOptions] = None, *,
                       on_kernel: Optional[Callable[[KernelTiling], None]] = None,
                       stop: Optional[Callable[[], bool]] = None, transfer: Any = None,
                       recorder: Any = None) -> list[KernelTiling]:
    """`tune_kernel_tiles` for every distinct kernel (`program_kernels`), in order; `on_kernel` is
    called after each (e.g. to write tiles.json), `stop()` is asked before each (e.g. a spent budget)."""
    options = options if options is not None else TileTuningOptions()
    out = []
    for kernel, mult in program_kernels(kernels):
        if stop is not None and stop():
            break
        from autotune.compiler.tiles import TileSpace
        space = TileSpace(kernel, options.target)
        tiling = KernelTiling(kernel, space, mult, tune_kernel_tiles(kernel, cost_model, evaluator, options,
                                                                     space=space, transfer=transfer,
                                                                     recorder=recorder))
        out.append(tiling)
        if on_kernel is not None:
            on_kernel(tiling)
    return out
