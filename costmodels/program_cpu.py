"""A whole-program cost model for XLA:CPU: a fusion configuration's end-to-end time relative to the
default configuration's, learned from paired end-to-end measurements (issue 33, part 5).

On XLA:CPU a configuration's kernel sum is a poor guide to its program's time (thunk overheads, the
schedule, library calls, cache reuse between neighbouring kernels; docs/lab-notes/2026-11-25-xla-cpu-
inprogram-costs.md). This model prices the configuration as a whole:

    phi(cfg)[j] = log2(1 + sum_k m_k (2^{g_kj} - 1))        (each kernel k's cpu geometry row g_k, which is
                                                             log2(1 + x) of counts, sizes and flops; m_k its
                                                             multiplicity: the program's totals per column)
                  + log2(1 + kernels), log2(1 + kernel executions), log2(1 + fused dots),
                  log2(1 + small kernels), log2(1 + kernel-sum predictions of the kernel models given)
    log(t(cfg) / t(default)) ~ f(phi(cfg) - phi(default))   (f: gradient-boosted trees, ridge, or trees
                                                             ranking the configurations of each program
                                                             pairwise, then scaled to log ratios)
    or, blended: the mean of f on the other columns and of   (b_j: one least-squares slope per kernel model,
    each kernel model's sum column b_j * delta_j             through the origin, fitted on the labels)

Differences from the default cancel what is constant within a program (its size, its library calls'
own cost), so one model serves every program; trained on the paired ratio of each measured
configuration to the default timed beside it (``benchmarks.cpu_cost_models``), judged by Kendall's tau
per program on programs of families it never trained on (``benchmarks.cpu_program_model``).
"""
from __future__ import annotations

import json
from typing import Any, Optional, Sequence

import numpy as np

from costmodels.base import Estimator

__all__ = ["ProgramModel", "program_features", "kernel_rows", "multiplicities", "aggregate", "relative_costs"]

SMALL_KERNEL_BYTES = 16 * 1024  # a kernel touching less than this is mostly overhead
MAX_GEOMETRY_EXPONENT = 512.0  # 2^g saturates here: finite in float64 summed over any program's kernels


def _geometry_columns() -> tuple:
    from costmodels.features.schema import geometry_names
    names = geometry_names("cpu")
    return tuple(i for i, n in enumerate(names) if n), tuple(n for n in names if n)


def kernel_rows(kernels: Sequence[Any], kernel_models: Optional[dict] = None) -> np.ndarray:
    """Each kernel's contribution in linear units: its cpu geometry columns (2^g - 1), then 1 (a kernel),
    whether it is a fused dot, whether it is small, and each kernel model's seconds (x 1e9). One row per
    kernel, not yet weighted by multiplicity (`aggregate`); a pricer caches them by kernel hash."""
    from costmodels.features.geometry import geometry_matrix
    cols, names = _geometry_columns()
    models = dict(kernel_models or {})
    n = len(kernels)
    if n == 0:
        return np.zeros((0, len(cols) + 3 + len(models)))
    idx = {name: i for i, name in enumerate(names)}
    g = geometry_matrix(list(kernels), "cpu")[:, cols]
    with np.errstate(over="ignore"):
        raw = (np.exp2(g) - 1.0).astype(np.float64)  # in float32, as the shipped models were fitted
    # some columns are plain counts (members, inputs): a kernel of 128 members overflows float32's 2^g, and
    # xgboost refuses inf features; those entries alone are recomputed in float64, the exponent saturated
    over = ~np.isfinite(raw)
    if over.any():
        raw[over] = np.exp2(np.minimum(g[over].astype(np.float64), MAX_GEOMETRY_EXPONENT)) - 1.0
    fused_dot = (raw[:, idx["cpu_has_dot"]] > 0.5) & (raw[:, idx["cpu_n_members"]] > 1.5)
    small = raw[:, idx["cpu_bytes_touched"]] < SMALL_KERNEL_BYTES
    extra = [np.ones(n), fused_dot.astype(float), small.astype(float)]
    extra += [np.asarray(fn(list(kernels)), float) * 1e9 for fn in models.values()]
    return np.column_stack([raw, *extra])


def multiplicities(kernels: Sequence[Any]) -> np.ndarray:
    """How many times each kernel runs per execution of the program (at least once)."""
    return np.array([float(k.multiplicity or 1) for k in kernels])


def aggregate(rows: np.ndarray, multiplicities: np.ndarray) -> np.ndarray:
    """phi of one configuration from its kernels' `kernel_rows` and `multiplicities`: log2(1 + total) per
    column, weighted by multiplicity (the ones column so becomes the kernel executions), with the kernel
    count, unweighted, before it."""
    n_geo = len(_geometry_columns()[0])
    totals = (np.asarray(multiplicities, float)[:, None] * rows).sum(axis=0)
    totals = np.concatenate([totals[:n_geo], [len(rows)], totals[n_geo:]])
    return np.log2(1.0 + np.maximum(totals, 0.0))


def program_features(kernel_lists: Sequence[Sequence[Any]],
                     kernel_models: Optional[dict] = None) -> np.ndarray:
    """phi (module docstring) of each configuration, given as its list of kernels; ``kernel_models``:
    name -> predict(kernels) -> seconds, whose multiplicity-weighted sums are features too."""
    return np.asarray([aggregate(kernel_rows(ks, kernel_models), multiplicities(ks)) for ks in kernel_lists],
                      dtype=float)


def _positive_slope(x: np.ndarray, y: np.ndarray) -> float:
    """The least-squares slope of ``y`` on ``x`` through the origin; a slope <= 0 would invert the order ``x``
    gives, so it keeps that order with a tiny scale (1e-6) instead."""
    xx = float(x @ x)
    slope = float(x @ y) / xx if xx > 0 else 0.0
    return slope if slope > 0 else 1e-6


class ProgramModel(Estimator):
    """f of the module docstring: ``predict(delta)`` is log(t(cfg) / t(default)) for feature differences
    ``delta = phi(cfg) - phi(default)``. ``kind``: "xgboost" (gradient-boosted trees on the log ratio),
    "ridge", or "rank" (trees trained pairwise on which of two configurations of one program is faster,
    XGBoost's ``rank:pairwise`` with the program as the query group; Kendall's tau is what the model is
    judged on, and a pairwise loss does not spend capacity on each program's scale; the scores are then
    mapped to log ratios by one least-squares slope through the default, ``calibration_``).
    ``kernel_models``: the kernel models whose sums are features (names as ``api.make_cost_model`` reads
    them; recorded so that a loaded model prices with the same). ``n_bags``: the trees kinds fit that many
    boosters with consecutive seeds (each subsamples rows and columns) and average their scores, which
    steadies a model fitted on few programs. ``blend``: the kernel models' sums are not the trees' features
    but averaged with their prediction, each scaled to a log ratio by ``sum_scales_`` (the module docstring);
    kind "sums" is that average without trees. Keeps the estimator conventions (`costmodels.base.Estimator`):
    fitted state in ``boosters_``/``ridge_``/``sum_scales_`` and ``n_features_``."""

    requires_fit = True

    def __init__(self, kind: str = "xgboost", n_estimators: int = 300, max_depth: int = 3,
                 learning_rate: float = 0.05, alpha: float = 1.0, kernel_models: Sequence[str] = (), seed: int = 0,
                 n_bags: int = 1, blend: bool = False):
        self.kind = kind
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.alpha = alpha
        self.kernel_models = tuple(kernel_models)
        self.seed = seed
        self.n_bags = n_bags
        self.blend = blend

    def _n_blended(self) -> int:
        """How many trailing columns (the kernel models' sums) are averaged in rather than fed to the trees."""
        return len(self.kernel_models) if self.blend else 0

    def _train(self, params: dict, data: Any) -> list:
        import xgboost as xgb
        return [xgb.train({**params, "max_depth": self.max_depth, "eta": self.learning_rate, "subsample": 0.8,
                           "colsample_bytree": 0.8, "seed": self.seed + i, "nthread": 1},
                          data, num_boost_round=self.n_estimators) for i in range(self.n_bags)]

    def _raw(self, X: np.ndarray) -> np.ndarray:
        import xgboost as xgb
        data = xgb.DMatrix(X)
        return np.mean([b.predict(data) for b in self.boosters_], axis=0)

    def fit(self, delta: np.ndarray, log_ratio: np.ndarray, groups: Optional[np.ndarray] = None) -> "ProgramModel":
        """``groups``: each row's program (any hashable ids); the "rank" kind compares configurations only
        within a group and needs them, the others ignore them."""
        X, y = np.asarray(delta, float), np.asarray(log_ratio, float)
        if self.n_bags < 1:
            raise ValueError(f"n_bags must be at least 1 (got {self.n_bags})")
        if self.kind == "sums" and not (self.blend and self.kernel_models):
            raise ValueError("the sums kind averages kernel models' sums: it needs kernel_models and blend=True")
        self.n_features_ = X.shape[1]
        nb = self._n_blended()
        if nb:
            S = X[:, -nb:]
            self.sum_scales_ = [_positive_slope(c, y) for c in S.T]
            X = X[:, :-nb]
        if self.kind == "sums":
            return self
        if self.kind == "rank":
            if groups is None or len(groups) != len(y):
                raise ValueError("the rank kind needs each row's program (groups=) to rank configurations within it")
            self._fit_rank(X, y, np.asarray(groups))
        elif self.kind == "ridge":
            mu, sd = X.mean(axis=0), X.std(axis=0)
            sd[sd < 1e-9] = 1.0
            Z = (X - mu) / sd
            w = np.linalg.solve(Z.T @ Z + self.alpha * len(y) * np.eye(Z.shape[1]), Z.T @ y)
            self.ridge_ = {"mu": mu.tolist(), "sd": sd.tolist(), "w": w.tolist()}
        elif self.kind == "xgboost":
            import xgboost as xgb
            self.boosters_ = self._train({"objective": "reg:squarederror"}, xgb.DMatrix(X, label=y))
        else:
            raise ValueError(f"unknown kind {self.kind!r} (xgboost, ridge, rank or sums)")
        return self

    def _fit_rank(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray) -> None:
        import xgboost as xgb
        _, qid = np.unique(groups, return_inverse=True)
        order = np.argsort(qid, kind="stable")  # XGBoost wants each query group's rows together
        # relevance: faster (a lower log ratio) ranks higher
        data = xgb.DMatrix(X[order], label=-y[order], qid=qid[order])
        self.boosters_ = self._train({"objective": "rank:pairwise"}, data)
        s = -self._raw(X)
        s0 = float(-self._raw(np.zeros((1, X.shape[1])))[0])
        self.calibration_ = {"offset": s0, "scale": _positive_slope(s - s0, y)}

    def predict(self, delta: np.ndarray) -> np.ndarray:
        self.check_is_fitted("whole-program model")
        X = np.asarray(delta, float)
        if X.ndim != 2 or X.shape[1] != self.n_features_:
            raise ValueError(f"expected {self.n_features_} feature differences per row, got shape {X.shape}")
        nb = self._n_blended()
        if not nb:
            return self._trees(X)
        parts = [b * X[:, -nb + j] for j, b in enumerate(self.sum_scales_)]
        if self.kind != "sums":
            parts.append(self._trees(X[:, :-nb]))
        return np.mean(parts, axis=0)

    def _trees(self, X: np.ndarray) -> np.ndarray:
        """f of the module docstring on the columns the trees (or the ridge) read."""
        if self.kind == "ridge":
            r = self.ridge_
            return ((X - np.asarray(r["mu"])) / np.asarray(r["sd"])) @ np.asarray(r["w"])
        raw = self._raw(X)
        if self.kind == "rank":
            c = self.calibration_
            return c["scale"] * (-raw - c["offset"])
        return raw

    def save(self, path: str) -> None:
        doc: dict = {"format": "autotune-program-model/1", "target": "cpu", "kind": self.kind,
                     "params": {"n_estimators": self.n_estimators, "max_depth": self.max_depth,
                                "learning_rate": self.learning_rate, "alpha": self.alpha,
                                "kernel_models": list(self.kernel_models), "seed": self.seed,
                                "n_bags": self.n_bags, "blend": self.blend},
                     "n_features": self.n_features_}
        if self.blend:
            doc["sum_scales"] = self.sum_scales_
        if self.kind == "ridge":
            doc["ridge"] = self.ridge_
        elif self.kind != "sums":
            doc["boosters"] = [json.loads(b.save_raw("json").decode()) for b in self.boosters_]
        if self.kind == "rank":
            doc["calibration"] = self.calibration_
        with open(path, "w") as f:
            json.dump(doc, f)

    @classmethod
    def load(cls, path: str) -> "ProgramModel":
        with open(path) as f:
            doc = json.load(f)
        if doc.get("format") != "autotune-program-model/1":
            raise ValueError(f"{path}: not an autotune whole-program model")
        m = cls(kind=doc["kind"], **doc["params"])
        m.n_features_ = int(doc["n_features"])
        if m.blend:
            m.sum_scales_ = [float(b) for b in doc["sum_scales"]]
        if m.kind == "ridge":
            m.ridge_ = doc["ridge"]
        elif m.kind != "sums":
            import xgboost as xgb
            m.boosters_ = []
            # files of round 2 hold one "booster"; from round 3 a list (n_bags)
            for raw in doc.get("boosters") or [doc["booster"]]:
                b = xgb.Booster()
                b.load_model(bytearray(json.dumps(raw).encode()))
                m.boosters_.append(b)
        if m.kind == "rank":
            m.calibration_ = dict(doc["calibration"])
        return m


def relative_costs(model: ProgramModel, kernel_lists: Sequence[Sequence[Any]], default_kernels: Sequence[Any],
                   kernel_models: Optional[dict] = None,
                   default_features: Optional[np.ndarray] = None) -> np.ndarray:
    """exp(f(phi - phi(default))): each configuration's predicted time as a multiple of the default's."""
    phi0 = default_features if default_features is not None else program_features([default_kernels], kernel_models)[0]
    phi = program_features(kernel_lists, kernel_models)
    return np.exp(np.clip(model.predict(phi - phi0), -20, 20))

