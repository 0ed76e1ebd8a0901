"""XGBoost baseline cost model on kernel-level features (AutoTVM-style, Kaufman et al. section 6).

Feature vector of a (kernel, tile) item (`kernel_vector`), in groups (`FEATURE_GROUPS`):
  opcodes     opcode histogram over `OPCODE_VOCAB` (counts of nodes per opcode, parameters included)
  kernel      kernel-level features (`KERNEL_FEATURE_NAMES`: static metrics, sizes, fusion kind, ...)
  geo_*       the kernel's tile geometry and analytical time terms at its default tile
              (`GEOMETRY_GROUPS` of costmodels.features: shape, tile, inputs, output, dot, work, analytical)
  cpu_*       on cpu-kind targets the same columns hold XLA:CPU's view of the kernel
              (`costmodels.cpu_geometry.CPU_GEOMETRY_GROUPS`: loop, inputs, work, reduce, dot, conv, memory)
  nodes       column-wise mean and max of the raw node features (shapes, layouts, windows, ...)
  tile        tile features (`TILE_FEATURE_NAMES`; zero for the fusion task).
`drop_groups` zeroes whole groups (the ablation of benchmarks/learned_features.py).
Tasks: "fusion" uses reg:squarederror on standardized log runtime (predicts seconds), optionally on
kernels >= `min_runtime_s` only (the paper's metric keeps kernels >= 5 us); "tile" uses rank:pairwise
with one query group per kernel (predicts scores, lower = faster).
A saved model records its target's feature layout (`feature_version`); a file from another layout is refused.
"""
from __future__ import annotations

import base64
import json
import lzma
import os
from typing import Any, Optional, Sequence

import numpy as np

from costmodels.features import (CPU_GEOMETRY_COLUMNS, CPU_GEOMETRY_GROUPS, GEOMETRY_DIM, GEOMETRY_GROUPS, KERNEL_FEATURE_NAMES, NODE_DIM,
                               NUM_OPCODES, STATIC_COLUMNS, TILE_DIM, KernelGraph, feature_version, kernel_graphs, tile_features)

from costmodels.base import CostModel, NotFittedError, OldFittedName, check_model_scope, register_cost_model

__all__ = ["XgbCostModel", "kernel_vector", "kernel_static_vector", "KERNEL_VECTOR_DIM", "KERNEL_STATIC_DIM",
           "FORMAT_VERSION", "FEATURE_GROUPS"]

FORMAT_VERSION = 2
_KDIM = len(KERNEL_FEATURE_NAMES)
_GEO0 = NUM_OPCODES + _KDIM          # first geometry column
_NODE0 = _GEO0 + GEOMETRY_DIM        # first node-mean column
KERNEL_VECTOR_DIM = _NODE0 + 2 * NODE_DIM + TILE_DIM
KERNEL_STATIC_DIM = KERNEL_VECTOR_DIM - TILE_DIM   # the kernel's part, without the tile's


def _feature_groups() -> dict:
    groups = {"opcodes": list(range(NUM_OPCODES)), "kernel": list(range(NUM_OPCODES, _GEO0))}
    j = _GEO0
    for name, cols in GEOMETRY_GROUPS.items():
        groups["geo_" + name] = list(range(j, j + len(cols)))
        j += len(cols)
    for name, cols in CPU_GEOMETRY_GROUPS.items():  # the same block's columns on cpu-kind targets
        groups["cpu_" + name] = [_GEO0 + CPU_GEOMETRY_COLUMNS[c] for c in cols]
    groups["nodes"] = list(range(_NODE0, _NODE0 + 2 * NODE_DIM))
    groups["tile"] = list(range(KERNEL_VECTOR_DIM - TILE_DIM, KERNEL_VECTOR_DIM))
    return groups


FEATURE_GROUPS: dict = _feature_groups()  # group name -> column indices of `kernel_vector`
# Columns zeroed by static_features=False: static metrics of the kernel and its nodes, and the
# geometry groups derived from them (work and the analytical model's time terms).
_STATIC_VECTOR_COLUMNS = (list(range(NUM_OPCODES, NUM_OPCODES + 5))
                          + [_NODE0 + c for c in STATIC_COLUMNS] + [_NODE0 + NODE_DIM + c for c in STATIC_COLUMNS]
                          + FEATURE_GROUPS["geo_work"] + FEATURE_GROUPS["geo_analytical"])

_STATIC_CACHE: dict = {}


def _static_part(g: KernelGraph) -> np.ndarray:
    key = g.hash or id(g)
    v = _STATIC_CACHE.get(key)
    if v is None:
        hist = np.bincount(g.opcode, minlength=NUM_OPCODES)[:NUM_OPCODES].astype(np.float32)
        nf = g.node_feat
        mean = nf.mean(axis=0) if len(nf) else np.zeros(NODE_DIM, np.float32)
        mx = nf.max(axis=0) if len(nf) else np.zeros(NODE_DIM, np.float32)
        v = np.concatenate([hist, g.kernel_feat.astype(np.float32), g.geom_feat.astype(np.float32), mean,
                            mx]).astype(np.float32)
        if len(_STATIC_CACHE) > 200_000:
            _STATIC_CACHE.clear()
        _STATIC_CACHE[key] = v
    return v


def kernel_static_vector(g: KernelGraph) -> np.ndarray:
    """The kernel's part of `kernel_vector` (`KERNEL_STATIC_DIM` float32): what does not depend on
    the tile, nor on the program the kernel came from (stored as measurement history)."""
    return _static_part(g)


def kernel_vector(g: KernelGraph, tile_feat: Optional[np.ndarray] = None) -> np.ndarray:
    """The `KERNEL_VECTOR_DIM` feature vector of one kernel graph and raw tile features."""
    tf = np.zeros(TILE_DIM, np.float32) if tile_feat is None else np.asarray(tile_feat, np.float32)
    return np.concatenate([_static_part(g), tf])


def _matrix(graphs: Sequence[KernelGraph], tile_feat: Optional[np.ndarray], static: bool,
            drop: Sequence[str] = ()) -> np.ndarray:
    X = np.zeros((len(graphs), KERNEL_VECTOR_DIM), np.float32)
    for i, g in enumerate(graphs):
        X[i, :KERNEL_STATIC_DIM] = _static_part(g)
    if tile_feat is not None and len(graphs):
        X[:, KERNEL_STATIC_DIM:] = tile_feat
    return _masked(X, static, drop)


def _masked(X: np.ndarray, static: bool, drop: Sequence[str] = ()) -> np.ndarray:
    """Zero the columns that `static_features=False` and `drop_groups` leave out (in place)."""
    if not static:
        X[:, _STATIC_VECTOR_COLUMNS] = 0.0
    for name in drop:
        X[:, FEATURE_GROUPS[name]] = 0.0
    return X


class XgbCostModel(CostModel):
    """Gradient-boosted trees on kernel-level features. Fitted state: `booster_`, `y_mu_` and `y_sigma_` (the
    standardization of log runtime), `best_iteration_` (early stopping's, or None)."""

    name = "xgboost"
    requires_fit = True
    # the names these attributes had before the fitted-state convention (costmodels.base.Estimator)
    booster = OldFittedName("booster_")
    y_mu = OldFittedName("y_mu_", lambda: 0.0)
    y_sigma = OldFittedName("y_sigma_", lambda: 1.0)
    best_iteration = OldFittedName("best_iteration_")

    def __init__(self, task: str = "fusion", target: str = "tpu", n_estimators: int = 300, max_depth: int = 6,
                 learning_rate: float = 0.1, subsample: float = 0.9, seed: int = 0, static_features: bool = True,
                 early_stopping_rounds: int = 30, nthread: Optional[int] = None, min_runtime_s: float = 0.0,
                 drop_groups: Sequence[str] = ()):
        self.task, self.target = task, target
        self.n_estimators, self.max_depth, self.learning_rate = n_estimators, max_depth, learning_rate
        self.subsample, self.seed, self.static_features = subsample, seed, static_features
        self.early_stopping_rounds, self.nthread = early_stopping_rounds, nthread
        self.min_runtime_s, self.drop_groups = min_runtime_s, drop_groups

    @property
    def params(self) -> dict:
        """The training parameters, checked and typed (what a saved model records as "params")."""
        return self.check_params()

    def check_params(self) -> dict:
        """`params`, or a one-line ValueError naming a bad value (scikit-learn checks values in fit)."""
        if self.task not in ("fusion", "tile"):
            raise ValueError(f"task must be fusion or tile, not {self.task!r}")
        unknown = [g for g in self.drop_groups if g not in FEATURE_GROUPS]
        if unknown:
            raise ValueError(f"unknown feature group {unknown[0]!r} (known: {', '.join(FEATURE_GROUPS)})")
        return {"n_estimators": int(self.n_estimators), "max_depth": int(self.max_depth),
                "learning_rate": float(self.learning_rate), "subsample": float(self.subsample), "seed": int(self.seed),
                "static_features": bool(self.static_features), "early_stopping_rounds": int(self.early_stopping_rounds),
                "min_runtime_s": float(self.min_runtime_s), "drop_groups": list(self.drop_groups)}

    @property
    def predicts_absolute(self) -> bool:  # type: ignore[override]
        return self.task == "fusion"

    # ---- training
    def _xy(self, samples: Any) -> tuple:
        p = self.params
        rt = np.asarray(samples.runtime, np.float64)
        keep = np.isfinite(rt) & (rt > 0)
        if self.task == "fusion" and p["min_runtime_s"] > 0:
            keep &= rt >= p["min_runtime_s"]
        ok = np.nonzero(keep)[0]
        graphs = [samples.graphs[samples.graph[i]] for i in ok]
        tf = samples.tile_feat[ok] if self.task == "tile" else None
        X = _matrix(graphs, tf, p["static_features"], p["drop_groups"])
        ly = np.log(rt[ok])
        groups = np.asarray(samples.program, np.int64)[ok] * 10_000_000 + np.asarray(samples.graph, np.int64)[ok]
        return X, ly, groups

    def _dmatrix(self, X: np.ndarray, ly: np.ndarray, groups: np.ndarray, mu: float, sigma: float):
        import xgboost as xgb
        y = (ly - mu) / sigma
        if self.task == "tile":  # integer relevance: dense rank of speed inside each kernel's group
            from scipy.stats import rankdata
            order = np.argsort(groups, kind="stable")
            g, yy = groups[order], y[order]
            rel = np.zeros(len(yy))
            starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
            for a, b in zip(starts, np.r_[starts[1:], len(g)]):
                rel[a:b] = rankdata(-yy[a:b], method="dense") - 1
            return xgb.DMatrix(X[order], label=rel, qid=g, nthread=self.nthread or -1)
        return xgb.DMatrix(X, label=y, nthread=self.nthread or -1)

    def fit(self, dataset: Any, validation: Any = None, verbose: bool = False) -> "XgbCostModel":
        if hasattr(dataset, "load") and validation is None:
            if getattr(dataset, "task", self.task) != self.task:
                raise ValueError(f"dataset is for task {dataset.task!r}, the model for {self.task!r}")
            train = dataset.load("train")
            try:
                validation = dataset.load("validation")
            except ValueError:
                validation = None
        else:
            train = dataset
        X, ly, g = self._xy(train)
        evals = None
        if validation is not None and len(validation.graph):
            Xv, lyv, gv = self._xy(validation)
            evals = (Xv, lyv, gv) if len(Xv) else None
        return self._train(X, ly, g, evals, verbose)

    def fit_matrix(self, X: np.ndarray, log_runtime: np.ndarray, groups: np.ndarray) -> "XgbCostModel":
        """Fit on `KERNEL_VECTOR_DIM` feature rows (e.g. measurement history: `kernel_static_vector`
        and tile features), their log runtimes and query groups (one per kernel for the tile task)."""
        p = self.params
        X = _masked(np.asarray(X, np.float32).copy(), p["static_features"], p["drop_groups"])
        ly = np.asarray(log_runtime, np.float64)
        keep = np.isfinite(ly)
        return self._train(X[keep], ly[keep], np.asarray(groups, np.int64)[keep], None, False)

    def _train(self, X: np.ndarray, ly: np.ndarray, g: np.ndarray, validation: Optional[tuple],
               verbose: bool) -> "XgbCostModel":
        import xgboost as xgb
        p = self.params
        if len(X) == 0:
            raise ValueError("the training split has no successful measurements")
        mu, sigma = float(ly.mean()), float(max(ly.std(), 1e-3))
        dtrain = self._dmatrix(X, ly, g, mu, sigma)
        params = {"max_depth": p["max_depth"], "eta": p["learning_rate"], "subsample": p["subsample"],
                  "seed": p["seed"], "objective": "rank:pairwise" if self.task == "tile" else "reg:squarederror",
                  "tree_method": "hist", "verbosity": 0}
        if self.task == "tile":
            params.update({"eval_metric": "ndcg", "ndcg_exp_gain": False})
        if self.nthread:
            params["nthread"] = self.nthread
        evals = [(self._dmatrix(*validation, mu, sigma), "validation")] if validation is not None else []
        kw = {}
        if evals and p["early_stopping_rounds"] > 0:
            kw["early_stopping_rounds"] = p["early_stopping_rounds"]
        booster = xgb.train(params, dtrain, num_boost_round=p["n_estimators"], evals=evals,
                            verbose_eval=verbose, **kw)
        self.booster_, self.y_mu_, self.y_sigma_ = booster, mu, sigma
        self.best_iteration_ = getattr(booster, "best_iteration", None) if kw else None
        return self

    # ---- inference
    def predict_graphs(self, graphs: Sequence[KernelGraph], tile_feat: Optional[np.ndarray] = None) -> np.ndarray:
        import xgboost as xgb
        self.check_is_fitted("XGBoost cost model")
        if not len(graphs):
            return np.zeros(0)
        p = self.params
        X = _matrix(graphs, tile_feat if self.task == "tile" else None, p["static_features"], p["drop_groups"])
        kw = {}
        if self.best_iteration_ is not None:
            kw["iteration_range"] = (0, int(self.best_iteration_) + 1)
        out = self.booster_.predict(xgb.DMatrix(X, nthread=self.nthread or -1), **kw).astype(np.float64)
        if self.task == "tile":
            return -out  # higher relevance = faster; scores: lower = faster
        return np.exp(np.clip(self.y_mu_ + self.y_sigma_ * out, -80, 20))

    def predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        kernels = list(kernels)
        if not kernels:
            return np.zeros(0)
        self.check_is_fitted("XGBoost cost model")
        graphs = kernel_graphs(kernels, self.target)
        tf = None
        if self.task == "tile":
            from autotune.compiler.tiles import default_tile
            tl = list(tiles) if tiles is not None else [None] * len(kernels)
            tf = np.stack([tile_features(g.tiled_dims, t if t is not None else default_tile(k, self.target))
                           for k, g, t in zip(kernels, graphs, tl)])
        return self.predict_graphs(graphs, tf)

    # ---- persistence
    def save(self, path: str) -> None:
        if not self.is_fitted():
            raise NotFittedError("cannot save an untrained XGBoost cost model (fit or load it first)")
        write_model_doc(path, {"format": "autotune-xgb", "version": FORMAT_VERSION, "task": self.task,
                               "target": self.target, "params": self.params, "y_mu": self.y_mu_,
                               "y_sigma": self.y_sigma_, "best_iteration": self.best_iteration_,
                               "feature_dim": KERNEL_VECTOR_DIM, "feature_version": feature_version(self.target)},
                        self.booster_)

    @classmethod
    def load(cls, path: str, task: Optional[str] = None, target: Optional[str] = None) -> "XgbCostModel":
        doc = read_model_doc(path)
        if doc.get("task") == "layout":
            check_model_scope(path, "XGBoost", "layout", doc.get("target"), task or "fusion", target)
        want = feature_version(doc.get("target") or "tpu")
        if doc.get("version") != FORMAT_VERSION or doc.get("feature_version") != want \
                or doc.get("feature_dim") != KERNEL_VECTOR_DIM:
            have = doc.get("feature_version") or f"format {doc.get('version')}"
            raise ValueError(f"{path}: XGBoost model trained with feature layout {have}, this autotune computes "
                             f"layout {want} for target {doc.get('target')}; retrain it with `autotune train --model xgboost`")
        check_model_scope(path, "XGBoost", doc.get("task"), doc.get("target"), task, target)
        m = cls(doc["task"], doc["target"], **known_params(cls, doc["params"]))
        m.check_params()
        m.booster_ = doc_booster(path, doc)
        m.y_mu_, m.y_sigma_ = float(doc["y_mu"]), float(doc["y_sigma"])
        m.best_iteration_ = doc.get("best_iteration")
        return m


def known_params(cls: type, saved: dict) -> dict:
    """The saved parameters that `cls` takes (a file may record one this version no longer has: it had no
    effect on the saved booster's predictions)."""
    import inspect
    names = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in saved.items() if k in names}


def write_model_doc(path: str, doc: dict, booster: Any) -> None:
    """Write an XGBoost model file: `doc` (format, task, target, parameters) plus the booster, as
    base64 of xz-compressed UBJSON (2000 deep trees: ~8 MB instead of ~50), atomically."""
    raw = lzma.compress(bytes(booster.save_raw("ubj")))
    doc = dict(doc, booster_encoding="ubj.xz", booster=base64.b64encode(raw).decode("ascii"))
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def read_model_doc(path: str) -> dict:
    """The JSON document of an XGBoost model file (`write_model_doc`); one-line ValueError otherwise."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ValueError(f"cannot read XGBoost model {path}: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{path} is not an XGBoost cost model file (corrupt or wrong format)") from None
    if not isinstance(doc, dict) or doc.get("format") != "autotune-xgb":
        raise ValueError(f"{path} is not an XGBoost cost model file")
    return doc


def doc_booster(path: str, doc: dict) -> Any:
    """The booster stored in a model document (`write_model_doc`)."""
    import xgboost as xgb
    try:
        b = xgb.Booster()
        raw = base64.b64decode(doc["booster"])
        if doc.get("booster_encoding") == "ubj.xz":
            raw = lzma.decompress(raw)
        b.load_model(bytearray(raw))
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{path}: corrupt booster ({type(e).__name__})") from None
    return b


register_cost_model("xgboost", XgbCostModel)
register_cost_model("xgb", XgbCostModel)
