"""XGBoost baseline on the TpuGraphs layout task: one feature row per layout configuration of a program.

Row of a configuration (`layout_config_matrix`), from the layout GNN's per-node configuration
features (costmodels.gnn.layout.config_node_features: per tensor the one-hot minor and second-minor
dims, their log2 sizes, the (8, 128) tile padding factor, row-major or not):
  mean        their mean over the program's configurable nodes,
  per kind    for convolutions, dots and reshapes apart: the count of nodes, the summed log2 padding
              factor of each tensor (output, operand 0, operand 1) and the fraction of row-major tensors,
  analytical  the analytical model's price of the whole rewritten program split by kernel class
              (`analytical_term_ratios`: copies, convolutions, dots, reduces, elementwise, other), over
              the default configuration's price, and the log ratio of the whole (`analytical_log_ratio`);
              zeros for a record without them.
Trained with rank:pairwise, one query group per program (relevance: dense rank of speed within the
program), so only differences inside a program matter; scores are lower = faster. Defaults (depth 3,
eta 0.1, 300 rounds, no early stopping) are the best validation-split tau of a small grid (depth 3/6, eta
0.05/0.1/0.3, early stopping on validation NDCG or none) on the examples/hlo layout dataset.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from autotune.compiler.layouts import KERNEL_CLASSES
from costmodels.base import LayoutModel, NotFittedError, OldFittedName, check_model_scope
from costmodels.features import opcode_id
from costmodels.gnn.layout import LAYOUT_INPUT_DIM, LayoutGraph
from costmodels.xgb import doc_booster, known_params, read_model_doc, write_model_doc

__all__ = ["LayoutXgbModel", "layout_config_matrix", "LAYOUT_XGB_DIM"]

LAYOUT_XGB_FORMAT_VERSION = 1
_KINDS = ("convolution", "dot", "reshape")
_KIND_IDS = tuple(opcode_id(k) for k in _KINDS)
_PER_TENSOR = (LAYOUT_INPUT_DIM - 1) // 3
_PAD_COLS = [1 + t * _PER_TENSOR + _PER_TENSOR - 2 for t in range(3)]   # log2 padding factor per tensor
_ROW_MAJOR_COLS = [1 + t * _PER_TENSOR + _PER_TENSOR - 1 for t in range(3)]
LAYOUT_XGB_DIM = LAYOUT_INPUT_DIM + len(_KINDS) * (1 + 3 + 1) + len(KERNEL_CLASSES) + 1


def layout_config_matrix(g: LayoutGraph) -> np.ndarray:
    """[configs, LAYOUT_XGB_DIM] feature rows of a prepared program's configurations (module docstring)."""
    cfg = g.cfg                                                     # [c, nc, LAYOUT_INPUT_DIM]
    c = cfg.shape[0]
    parts = [cfg.mean(axis=1) if cfg.shape[1] else np.zeros((c, LAYOUT_INPUT_DIM), np.float32)]
    kinds = g.opcode[g.ids]
    for kid in _KIND_IDS:
        sel = cfg[:, kinds == kid]                                  # [c, n_kind, D]
        n = sel.shape[1]
        parts.append(np.full((c, 1), n, np.float32))
        parts.append(sel[..., _PAD_COLS].sum(axis=1) if n else np.zeros((c, 3), np.float32))
        parts.append(sel[..., _ROW_MAJOR_COLS].mean(axis=(1, 2))[:, None] if n else np.zeros((c, 1), np.float32))
    ratio = g.analytical_ratio if g.analytical_ratio is not None else np.zeros(c)
    terms = g.analytical_terms if g.analytical_terms is not None else np.zeros((c, len(KERNEL_CLASSES)))
    parts.append(np.asarray(terms, np.float32))
    parts.append(np.asarray(ratio, np.float32)[:, None])
    return np.concatenate(parts, axis=1).astype(np.float32)


class LayoutXgbModel(LayoutModel):
    """Layout-configuration ranking model: XGBoost rank:pairwise on `layout_config_matrix` rows. Fitted state
    (costmodels.base.Estimator): `booster_`, `best_iteration_` (early stopping's, or None)."""

    name = "xgboost"
    task = "layout"
    predicts_absolute = False
    score_scale = 1.0
    residual = False
    requires_fit = True
    booster = OldFittedName("booster_")  # the names before the fitted-state convention
    best_iteration = OldFittedName("best_iteration_")

    def __init__(self, target: str = "tpu", n_estimators: int = 300, max_depth: int = 3,
                 learning_rate: float = 0.1, seed: int = 0, nthread: Optional[int] = 1,
                 early_stopping_rounds: int = 0):
        self.target = target
        self.n_estimators, self.max_depth, self.learning_rate = n_estimators, max_depth, learning_rate
        self.seed, self.nthread, self.early_stopping_rounds = seed, nthread, early_stopping_rounds

    @property
    def params(self) -> dict:
        """The training parameters, typed (what a saved model records as "params")."""
        return {"n_estimators": int(self.n_estimators), "max_depth": int(self.max_depth),
                "learning_rate": float(self.learning_rate), "seed": int(self.seed),
                "early_stopping_rounds": int(self.early_stopping_rounds)}

    def prepare(self, name: str, family: str, arrays: dict, analytical_reference_s: Optional[float] = None) -> LayoutGraph:
        return LayoutGraph(name, family, arrays, None, 1, analytical_reference_s)

    def _dmatrix(self, graphs: list):
        import xgboost as xgb
        from scipy.stats import rankdata
        X, rel, qid = [], [], []
        for q, g in enumerate(graphs):
            X.append(layout_config_matrix(g))
            rel.append(rankdata(-g.runtime, method="dense") - 1)    # faster = more relevant
            qid.append(np.full(g.num_configs, q))
        return xgb.DMatrix(np.concatenate(X), label=np.concatenate(rel), qid=np.concatenate(qid),
                           nthread=self.nthread or -1)

    def fit(self, dataset: Any, **_ignored: Any) -> "LayoutXgbModel":
        """Train on a layout `Dataset`'s train split; with `early_stopping_rounds` its validation split
        (NDCG) stops the boosting early."""
        import xgboost as xgb
        if dataset.task != "layout":
            raise ValueError(f"dataset is for task {dataset.task!r}, the model for 'layout'")
        train = [self.prepare(n, f, r.arrays) for n, f, r in dataset.iter_layouts("train")]
        train = [g for g in train if g.num_configs >= 2]
        if not train:
            raise ValueError(f"dataset {dataset.root} has no program with two configurations in the train split")
        val = [g for g in (self.prepare(n, f, r.arrays) for n, f, r in dataset.iter_layouts("validation"))
               if g.num_configs >= 2]
        p = self.params
        params = {"max_depth": p["max_depth"], "eta": p["learning_rate"], "seed": p["seed"],
                  "objective": "rank:pairwise", "eval_metric": "ndcg", "ndcg_exp_gain": False,
                  "tree_method": "hist", "verbosity": 0}
        if self.nthread:
            params["nthread"] = self.nthread
        kw: dict = {}
        if val and p["early_stopping_rounds"] > 0:
            kw = {"evals": [(self._dmatrix(val), "validation")], "early_stopping_rounds": p["early_stopping_rounds"],
                  "verbose_eval": False}
        booster = xgb.train(params, self._dmatrix(train), num_boost_round=p["n_estimators"], **kw)
        self.booster_ = booster
        self.best_iteration_ = getattr(booster, "best_iteration", None) if kw else None
        return self

    def scores(self, g: LayoutGraph) -> np.ndarray:
        """Scores (lower = faster) of a prepared program's configurations."""
        import xgboost as xgb
        self.check_is_fitted("layout XGBoost model")
        kw = {"iteration_range": (0, int(self.best_iteration_) + 1)} if self.best_iteration_ is not None else {}
        X = layout_config_matrix(g)
        return -self.booster_.predict(xgb.DMatrix(X, nthread=self.nthread or -1), **kw).astype(np.float64)

    def predict_layouts(self, name: str, family: str, arrays: dict) -> np.ndarray:
        """Scores of every configuration of one layout record's arrays."""
        return self.scores(self.prepare(name, family, arrays))

    # ---- persistence
    def save(self, path: str) -> None:
        if not self.is_fitted():
            raise NotFittedError("cannot save an untrained layout XGBoost model (fit or load it first)")
        write_model_doc(path, {"format": "autotune-xgb", "version": LAYOUT_XGB_FORMAT_VERSION, "task": "layout",
                               "target": self.target, "params": self.params, "best_iteration": self.best_iteration_,
                               "feature_dim": LAYOUT_XGB_DIM}, self.booster_)

    @classmethod
    def load(cls, path: str, target: Optional[str] = None) -> "LayoutXgbModel":
        doc = read_model_doc(path)
        check_model_scope(path, "XGBoost", doc.get("task"), doc.get("target"), "layout", target)
        if doc.get("version") != LAYOUT_XGB_FORMAT_VERSION or doc.get("feature_dim") != LAYOUT_XGB_DIM:
            raise ValueError(f"{path}: layout XGBoost model of another feature layout; retrain it")
        m = cls(doc["target"], **known_params(cls, doc["params"]))
        m.booster_ = doc_booster(path, doc)
        m.best_iteration_ = doc.get("best_iteration")
        return m
