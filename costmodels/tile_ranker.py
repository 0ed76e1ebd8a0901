"""Learned tile pickers that start from a prior default tile (XLA's) and leave it only on evidence.

* `TileRanker`: a per-kernel ranking model (XGBoost, rank:pairwise, query = kernel) over
  per-(kernel, tile) feature rows, that keeps the default tile unless its score margin says otherwise.
* `SimulatorResidual`: a regression of log(measured / simulated) time relative to the default tile
  over per-tile geometry (`tile_geometry_features`, from the shared tile model in
  autotune/compiler/tiles/), that ranks tiles by the corrected simulator time and keeps the
  default unless the corrected gain exceeds a threshold."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from costmodels.base import NotFittedError


class TileRanker:
    """sklearn-style: fit(X, y, groups, default_mask) / predict(X) / pick(X, default_mask); fitted state
    `model_` and `train_groups_` (the kernels it was fitted on) exist once fitted.

    y are measured runtimes (lower is better); groups name the kernel (the ranking query) of each row.
    `margin` is the score lead a tile needs over the default tile to be picked instead of it (fixed up
    front, never tuned on a held-out kernel)."""

    def __init__(self, n_estimators: int = 200, max_depth: int = 4, learning_rate: float = 0.1,
                 margin: float = 0.0, seed: int = 0, n_jobs: int = 1):
        self.n_estimators, self.max_depth, self.learning_rate = n_estimators, max_depth, learning_rate
        self.margin, self.seed, self.n_jobs = margin, seed, n_jobs

    def fit(self, X: np.ndarray, y: np.ndarray, groups: Sequence) -> "TileRanker":
        """Fit on rows grouped by kernel; relevance = within-kernel rank of -runtime (ties equal)."""
        import xgboost as xgb
        X, y, g = np.asarray(X, np.float32), np.asarray(y, float), np.asarray(groups)
        order = np.argsort(g, kind="stable")
        X, y, g = X[order], y[order], g[order]
        _, starts, sizes = np.unique(g, return_index=True, return_counts=True)
        sizes = sizes[np.argsort(starts)]
        rel = np.zeros(len(y))
        for s, n in zip(np.sort(starts), sizes):
            yy = y[s:s + n]
            rel[s:s + n] = np.searchsorted(np.unique(-yy), -yy)  # fastest gets the highest label
        self.model_ = xgb.XGBRanker(objective="rank:pairwise", n_estimators=self.n_estimators,
                                    max_depth=self.max_depth, learning_rate=self.learning_rate,
                                    random_state=self.seed, n_jobs=self.n_jobs, subsample=0.8,
                                    colsample_bytree=0.8, tree_method="hist")
        self.model_.fit(X, rel, group=sizes)
        self.train_groups_ = set(g.tolist())
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores (higher = predicted faster)."""
        if not hasattr(self, "model_"):
            raise NotFittedError("the TileRanker is not trained (fit it first)")
        return self.model_.predict(np.asarray(X, np.float32))

    def pick(self, X: np.ndarray, default_mask: Optional[np.ndarray] = None) -> int:
        """Index of the chosen tile of ONE kernel: the best score, unless the default is within margin."""
        s = self.predict(X)
        best = int(np.argmax(s))
        if default_mask is not None and np.any(default_mask):
            d = int(np.flatnonzero(default_mask)[0])
            if s[best] - s[d] <= self.margin:
                return d
        return best


# --------------------------------------------------------------------------------------------------
# Residual model over the simulator: learns where the simulator's within-kernel tile ordering is wrong.

RESIDUAL_FEATURE_NAMES = (
    "feature_steps",      # log2 contraction steps over the filter's input features (a split K)
    "window_steps",       # log2 contraction steps over convolution window positions
    "k_pad_factor",       # log2 padded K summed over the steps / K padded once (split-K padding waste)
    "n_tiles",            # log2 number of output tiles
    "tile_pad_factor",    # log2 padding of the tile's two minor dims to the (8, 128) vector tile
    "tile_fill",          # mean tile extent / tile extent, product over dims (< 1: a trailing partial tile)
    "tile_bytes",         # log2 bytes moved per tile (inputs + output)
    "footprint",          # double-buffered footprint / scratchpad
    "min_run",            # log2 shortest contiguous transfer run (bytes) of the tile's inputs and output
    "compute_transfer",   # log2 compute / transfer time of one tile (the analytical roofline's terms)
)


def tile_geometry_features(kernel: Any, tiles: Sequence[Any], target: Any = "tpu") -> np.ndarray:
    """[len(tiles), len(RESIDUAL_FEATURE_NAMES)] per-tile geometry of one kernel from the shared tile
    model (`autotune.compiler.tiles`: batch_inputs, io_geometry, tiled_time_terms, scratchpad_fit);
    a tile that is None is the kernel's default tile."""
    from autotune.compiler.targets import get_spec
    from autotune.compiler.tiles import batch_inputs, io_geometry, scratchpad_fit, tiled_time_terms
    spec = get_spec(target)
    tiles = list(tiles)
    b, T, ks, kp, _ = batch_inputs([kernel] * len(tiles), tiles, spec)
    sub, lanes = spec.vector_shape
    g = io_geometry(b, T, sub, lanes)
    terms = tiled_time_terms(b, T, ks, kp, spec, g)
    fit = scratchpad_fit(g, b.kind, spec.scratchpad_bytes, ks)
    window = np.maximum(b.lhs_mult, 1.0)
    k_pad = np.maximum(b.K_pad, 1.0)
    runs = np.where(g["in_tile"] > 0, g["in_run"], np.inf).min(axis=1)
    runs = np.minimum(runs, g["out_run"])
    avg = b.D / g["n_j"]
    return np.column_stack([
        np.log2(np.maximum(ks / window, 1.0)), np.log2(window),
        np.where(b.is_mxu > 0, np.log2(np.maximum(kp * ks / k_pad, 1e-3)), 0.0),
        np.log2(g["n"]), np.log2(g["padfac"]), np.prod(avg / g["T"], axis=1),
        np.log2(1.0 + g["in_tile"].sum(axis=1) + g["out_tile"]), fit.footprint / spec.scratchpad_bytes,
        np.log2(np.maximum(runs, 1.0)),
        np.log2(np.maximum(terms["c_tile"], 1e-15) / np.maximum(terms["x_tile"], 1e-15)),
    ]).astype(np.float32)


def relative_rows(geometry: np.ndarray, sim_log: np.ndarray, default: int, context: Sequence[float]) -> np.ndarray:
    """The residual model's rows of one kernel: each tile's geometry minus the default tile's, the
    simulator's log time ratio to the default tile, and kernel context (e.g. is_mxu, fusion kind)."""
    geometry, sim_log = np.asarray(geometry, float), np.asarray(sim_log, float)
    ctx = np.broadcast_to(np.asarray(context, float), (len(sim_log), len(context)))
    return np.column_stack([geometry - geometry[default], sim_log - sim_log[default], ctx]).astype(np.float32)


@dataclass(frozen=True)
class KernelTiles:
    """One kernel's measured tiles as the residual model sees them: `relative_rows`, the simulator's
    log times, measured times (seconds) and the index of the default tile."""

    name: str
    rows: np.ndarray
    sim_log: np.ndarray
    measured: np.ndarray
    default: int


class SimulatorResidual:
    """Learns log(measured / simulated) of a tile relative to the kernel's default tile from per-tile
    rows (`relative_rows`) of other kernels (XGBoost regression, each kernel weighted equally), and
    ranks a kernel's tiles by the corrected simulator time. It keeps the default tile unless the
    corrected prediction of the best tile is faster by more than `threshold` (a log-time gap, fixed
    before seeing the kernel; `fit(..., threshold="loko_error")` sets it to `loko_gain_error` of the
    training kernels). Fitted state: `model_`, `train_groups_` and `threshold_` (the threshold `pick` uses)."""

    def __init__(self, n_estimators: int = 300, max_depth: int = 3, learning_rate: float = 0.05,
                 threshold: float = 0.0, seed: int = 0, n_jobs: int = 1):
        self.n_estimators, self.max_depth, self.learning_rate = n_estimators, max_depth, learning_rate
        self.threshold, self.seed, self.n_jobs = threshold, seed, n_jobs

    def get_params(self) -> dict:
        """Constructor arguments (to fit a twin on other kernels)."""
        return {"n_estimators": self.n_estimators, "max_depth": self.max_depth, "learning_rate": self.learning_rate,
                "threshold": self.threshold, "seed": self.seed, "n_jobs": self.n_jobs}

    def fit(self, kernels: Sequence[KernelTiles], threshold: Optional[str] = None) -> "SimulatorResidual":
        """Fit on the training kernels; `threshold_` is the `threshold` given, or with threshold="loko_error"
        the leave-one-kernel-out gain error of the training kernels (`loko_gain_error`)."""
        import xgboost as xgb
        if not len(kernels):
            raise ValueError("SimulatorResidual.fit needs at least one kernel")
        if threshold not in (None, "loko_error"):
            raise ValueError(f"threshold must be None or 'loko_error', not {threshold!r}")
        X, target, w = [], [], []
        for k in kernels:
            res = np.log(np.asarray(k.measured, float)) - np.asarray(k.sim_log, float)
            X.append(np.asarray(k.rows, np.float32))
            target.append(res - res[k.default])
            w.append(np.full(len(res), 1.0 / len(res)))
        w = np.concatenate(w)
        self.model_ = xgb.XGBRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth,
                                       learning_rate=self.learning_rate, subsample=0.8, colsample_bytree=0.8,
                                       random_state=self.seed, n_jobs=self.n_jobs, tree_method="hist")
        self.model_.fit(np.concatenate(X), np.concatenate(target), sample_weight=w * len(w) / w.sum())
        self.train_groups_ = {k.name for k in kernels}
        self.threshold_ = loko_gain_error(kernels, **self.get_params()) if threshold == "loko_error" else self.threshold
        return self

    def predict(self, rows: np.ndarray, sim_log: np.ndarray, default: int) -> np.ndarray:
        """Corrected log time of each tile relative to the default tile (lower = predicted faster)."""
        if not hasattr(self, "model_"):
            raise NotFittedError("the SimulatorResidual is not trained (fit it first)")
        r = self.model_.predict(np.asarray(rows, np.float32)).astype(float)
        s = np.asarray(sim_log, float)
        return (s - s[default]) + (r - r[default])

    def pick(self, rows: np.ndarray, sim_log: np.ndarray, default: int) -> int:
        """Index of the chosen tile: the best corrected time, unless it beats the default by <= threshold."""
        return pick_with_threshold(self.predict(rows, sim_log, default), default, self.threshold_)


def pick_with_threshold(corrected: np.ndarray, default: int, threshold: float) -> int:
    """The tile with the lowest corrected log time relative to the default, or the default when that
    tile's predicted gain is not above `threshold`."""
    best = int(np.argmin(corrected))
    return best if -float(corrected[best]) > threshold else default


def loko_corrected(kernels: Sequence[KernelTiles], **params: Any) -> dict:
    """Leave-one-kernel-out corrected predictions: name -> `SimulatorResidual.predict` of each kernel
    with >= 2 tiles by a model fitted on all the other kernels."""
    out = {}
    for k in kernels:
        if len(k.measured) < 2:
            continue
        m = SimulatorResidual(**params).fit([q for q in kernels if q.name != k.name])
        out[k.name] = m.predict(k.rows, k.sim_log, k.default)
    return out


def loko_gain_error(kernels: Sequence[KernelTiles], corrected: Optional[dict] = None, **params: Any) -> float:
    """Mean over kernels of |predicted - measured| log gain of the best-predicted tile over the
    default tile, leave-one-kernel-out (`loko_corrected`, or `corrected` when already computed)."""
    corrected = loko_corrected(kernels, **params) if corrected is None else corrected
    errs = []
    for k in kernels:
        c = corrected.get(k.name)
        if c is None:
            continue
        b = int(np.argmin(c))
        errs.append(abs(float(c[b]) - float(np.log(k.measured[b]) - np.log(k.measured[k.default]))))
    if not errs:
        raise ValueError("loko_gain_error needs at least two kernels with >= 2 tiles")
    return float(np.mean(errs))
