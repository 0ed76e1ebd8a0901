"""Learned tile ranker: a per-kernel ranking model (XGBoost, rank:pairwise, query = kernel) over
per-(kernel, tile) feature rows, that keeps a prior default tile unless its score margin says otherwise."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


class TileRanker:
    """sklearn-style: fit(X, y, groups, default_mask) / predict(X) / pick(X, default_mask).

    y are measured runtimes (lower is better); groups name the kernel (the ranking query) of each row.
    `margin` is the score lead a tile needs over the default tile to be picked instead of it (fixed up
    front, never tuned on a held-out kernel)."""

    def __init__(self, n_estimators: int = 200, max_depth: int = 4, learning_rate: float = 0.1,
                 margin: float = 0.0, seed: int = 0, n_jobs: int = 1):
        self.n_estimators, self.max_depth, self.learning_rate = n_estimators, max_depth, learning_rate
        self.margin, self.seed, self.n_jobs = margin, seed, n_jobs
        self.model_ = None
        self.train_groups_: set = set()

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
        if self.model_ is None:
            raise RuntimeError("TileRanker.predict before fit")
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
