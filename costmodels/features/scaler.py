"""`FeatureScaler` (`costmodels.features`): the min-max scaling of feature columns that a model fits
on its training set and saves with itself."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


class FeatureScaler:
    """Min-max scaling of feature columns, fitted on the training set and saved with a model."""

    def __init__(self, lo: Optional[np.ndarray] = None, hi: Optional[np.ndarray] = None):
        self.lo = None if lo is None else np.asarray(lo, np.float32)
        self.hi = None if hi is None else np.asarray(hi, np.float32)

    @property
    def fitted(self) -> bool:
        return self.lo is not None

    def fit(self, arrays: "np.ndarray | Sequence[np.ndarray]") -> "FeatureScaler":
        if isinstance(arrays, np.ndarray):
            arrays = [arrays]
        arrays = [a for a in arrays if len(a)]
        if not arrays:
            raise ValueError("FeatureScaler.fit: no rows")
        lo = np.min([a.min(axis=0) for a in arrays], axis=0)
        hi = np.max([a.max(axis=0) for a in arrays], axis=0)
        self.lo, self.hi = lo.astype(np.float32), hi.astype(np.float32)
        return self

    def partial_fit(self, a: np.ndarray) -> "FeatureScaler":
        if not len(a):
            return self
        lo, hi = a.min(axis=0).astype(np.float32), a.max(axis=0).astype(np.float32)
        if self.lo is None:
            self.lo, self.hi = lo, hi
        else:
            self.lo, self.hi = np.minimum(self.lo, lo), np.maximum(self.hi, hi)
        return self

    def transform(self, a: np.ndarray, mask: Optional[np.ndarray] = None) -> np.ndarray:
        """Scaled float32 columns; `mask` (float32, per column): times the mask. A float32 input is
        scaled in one new array (the same values as the expression below, without its temporaries)."""
        if self.lo is None:
            raise ValueError("FeatureScaler is not fitted")
        rng = self.hi - self.lo
        rng = np.where(rng > 0, rng, 1.0).astype(np.float32)
        if isinstance(a, np.ndarray) and a.dtype == np.float32 and self.lo.dtype == np.float32:
            out = np.subtract(a, self.lo)
            out /= rng
        else:
            out = ((a - self.lo) / rng).astype(np.float32)
        if mask is not None:
            out *= mask
        return out

    def state_dict(self) -> dict:
        return {"lo": None if self.lo is None else self.lo.tolist(),
                "hi": None if self.hi is None else self.hi.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> "FeatureScaler":
        lo, hi = state.get("lo"), state.get("hi")
        return cls(None if lo is None else np.array(lo, np.float32), None if hi is None else np.array(hi, np.float32))
