"""Top-K tile selection: rank every valid tile with a cost model, measure only the K best.

This is the tile-size task of the paper (and of XLA's tile autotuner): a kernel has a few hundred
to a few thousand valid tiles; a cost-model query costs microseconds, a hardware measurement
a compile plus runs. So all tiles are ranked by the model and only the top K are measured; the best
*measured* tile wins, which makes a rank-trained model (scores, not seconds) just as usable.

Two ways to use it:
- batch: `TopKTileSearch(cost_model=m, k=10).candidates(kernels)` -> the K best tiles per kernel
  in predicted order (one batched predict call per `max_batch` (kernel, tile) pairs), then
  `select_best_measured(kernel, tiles, evaluator)` per kernel;
- as a `Strategy` over one kernel's tile space: `TopKTileSearch(tile_space, cost_model=m, k=10)`;
  `ask(n)` hands out the predicted top K in order and `finished` turns True after K.

Tile spaces are duck-typed: anything with `.tiles()` (and `.kernel` for the Strategy use) made by
`space_factory(kernel, target)`, by default `autotune.compiler.tiles.TileSpace`.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from autotune.compiler.space import KernelSpace
from costmodels.base import Predictor
from search.base import Strategy, register_strategy


def default_tile_space(kernel: Any, target: Any = "tpu") -> Any:
    """`autotune.compiler.tiles.TileSpace(kernel, target)`, imported only when needed."""
    from autotune.compiler.tiles import TileSpace
    return TileSpace(kernel, target)


def order_by_prediction(preds: Sequence[float]) -> np.ndarray:
    """Indices sorting predictions ascending (lower is faster), stable, NaN/inf last."""
    p = np.asarray(preds, dtype=float).reshape(-1).copy()
    p[~np.isfinite(p)] = math.inf
    return np.argsort(p, kind="stable")


class TopKTileSearch(Strategy):
    """Rank all valid tiles of a kernel by a cost model; propose the K best (see module docstring).

    Parameters: `cost_model` (required; `predict(kernels, tiles) -> array`, lower is faster), `k`,
    `target` and `space_factory` (for `candidates`), `max_batch` (items per predict call).
    """

    name = "topk"

    def __init__(self, space: Any = None, seed: Optional[int] = None, cost_model: Any = None, k: int = 10,
                 target: Any = "tpu", space_factory: Optional[Callable[[Any, Any], Any]] = None,
                 max_batch: int = 65536, **params: Any):
        super().__init__(space, seed, **params)
        if not isinstance(cost_model, Predictor):
            raise ValueError("TopKTileSearch needs cost_model= (an object with predict(kernels, tiles))")
        if k < 1:
            raise ValueError("k must be >= 1")
        self.cost_model = cost_model
        self.k = int(k)
        self.target = target
        self.space_factory = space_factory or default_tile_space
        self.max_batch = max(1, int(max_batch))
        self._ranked: Optional[list] = None  # Strategy use: the space's top K, predicted order
        self._cursor = 0

    # ---- batch use
    def rank(self, kernels: Sequence[Any], spaces: Optional[Sequence[Any]] = None) -> list:
        """For each kernel, (all valid tiles sorted by prediction, their sorted predictions).

        All (kernel, tile) pairs go to the model in batches of at most `max_batch`, i.e. the
        `predict([kernel] * n, tiles)` call of each kernel, concatenated across kernels."""
        kernels = list(kernels)
        if spaces is None:
            spaces = [self.space_factory(kern, self.target) for kern in kernels]
        tile_lists = [list(sp.tiles()) for sp in spaces]
        flat_k = [kern for kern, ts in zip(kernels, tile_lists) for _ in ts]
        flat_t = [t for ts in tile_lists for t in ts]
        preds = np.empty(len(flat_t))
        for lo in range(0, len(flat_t), self.max_batch):
            hi = min(len(flat_t), lo + self.max_batch)
            out = np.asarray(self.cost_model.predict(flat_k[lo:hi], flat_t[lo:hi]), dtype=float).reshape(-1)
            if len(out) != hi - lo:
                raise ValueError(f"cost model returned {len(out)} predictions for {hi - lo} tiles")
            preds[lo:hi] = out
        result, lo = [], 0
        for ts in tile_lists:
            p = preds[lo:lo + len(ts)]
            lo += len(ts)
            order = order_by_prediction(p)
            result.append(([ts[i] for i in order], p[order]))
        return result

    def candidates(self, kernels: Sequence[Any], spaces: Optional[Sequence[Any]] = None) -> list:
        """The K best tiles of each kernel by prediction, best first (fewer when a kernel has fewer)."""
        return [tiles[:self.k] for tiles, _ in self.rank(kernels, spaces)]

    # ---- Strategy use (one kernel's tile space)
    @property
    def finished(self) -> bool:
        return self._ranked is not None and self._cursor >= len(self._ranked)

    def _ensure_ranked(self) -> list:
        if self._ranked is None:
            kernel = self.space.kernel if isinstance(self.space, KernelSpace) else None
            if kernel is None:
                raise ValueError("ask() needs a tile space with .kernel; use candidates(kernels) otherwise")
            self._ranked = self.candidates([kernel], [self.space])[0]
        return self._ranked

    def ask(self, n: int) -> list:
        ranked = self._ensure_ranked()
        out = ranked[self._cursor:self._cursor + max(1, int(n))]
        self._cursor += len(out)
        self.n_asked += len(out)
        return out

    def tell(self, configs: list, costs: Sequence[float]) -> None:
        self.observe(configs, costs)

    def state_dict(self) -> dict:
        d = super().state_dict()
        d["ranked"] = None if self._ranked is None else [self.space.encode(t) for t in self._ranked]
        d["cursor"] = self._cursor
        return d

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict(d)
        self._ranked = None if d["ranked"] is None else [self.space.decode(t) for t in d["ranked"]]
        self._cursor = int(d["cursor"])


def select_best_measured(kernel: Any, candidates: Sequence[Any], evaluator: Any) -> tuple:
    """Measure the candidate tiles of a kernel; return (best measured tile or None, measurements).

    `evaluator.measure([kernel] * K, tiles)` gives one Measurement (`.ok`, `.seconds`) per tile,
    aligned with `candidates`. Ties go to the better-predicted (earlier) candidate. None when no
    candidate measured successfully: the caller keeps the default tile then."""
    tiles = list(candidates)
    if not tiles:
        return None, []
    ms = list(evaluator.measure([kernel] * len(tiles), tiles))
    if len(ms) != len(tiles):
        raise ValueError(f"evaluator returned {len(ms)} measurements for {len(tiles)} tiles")
    best, best_s = None, math.inf
    for t, m in zip(tiles, ms):
        if m.ok and m.seconds is not None and m.seconds < best_s:
            best, best_s = t, float(m.seconds)
    return best, ms


register_strategy(TopKTileSearch.name, TopKTileSearch)

__all__ = ["TopKTileSearch", "select_best_measured", "order_by_prediction", "default_tile_space"]
