"""Fusion configurations priced by the whole-program cpu model (costmodels/program_cpu.py), for the search:
``autotune fusion --target cpu --cost-model program``.

:class:`LearnedProgramCost` is a configuration-level ``Pricer`` (as ``PairedProgramCost`` is): a
configuration's cost is the default's reference time times the model's predicted ratio to the default,
``reference_s * exp(f(phi(cfg) - phi(default)))``, so costs are seconds ordered as the model ranks the
programs, and the default costs exactly ``reference_s`` (the shipped kernel sum of its kernels, by the
model's first kernel model: a scale, not a measurement). Each kernel's contribution (`kernel_rows`) is
computed once per kernel hash, so a configuration that shares kernels with earlier ones costs only its
new kernels and one prediction.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from autotune.tuning.pricing import Pricer, _memoize_costs

__all__ = ["LearnedProgramCost"]


class LearnedProgramCost(Pricer):
    """Costs of a FusionSpace's configurations by a whole-program model (module docstring). ``kernel_models``:
    name -> a kernel cost model's ``predict`` (the model's ``kernel_models``, in that order)."""

    trial_cost = "whole-program model"

    def __init__(self, space: Any, model: Any, kernel_models: Optional[dict] = None):
        from costmodels.program_cpu import aggregate, kernel_rows
        self.space, self.model = space, model
        self.kernel_models = dict(kernel_models or {})
        self._rows: dict = {}
        self._kernel_rows, self._aggregate = kernel_rows, aggregate
        self.memo: dict = {}
        self.config_cost: dict = {}
        self.kernel_calls = 0
        self.kernels_priced = 0
        default = space.default()
        self.phi_default = self._phi(default)
        first = next(iter(self.kernel_models.values()), None)
        ks = space.kernels(default)
        self.reference_s = (float(np.sum(np.asarray(first(ks), float) * [k.multiplicity for k in ks]))
                            if first is not None else 1.0)

    def _phi(self, cfg: Any) -> np.ndarray:
        kernels = self.space.kernels(cfg)
        fresh = [k for k in kernels if k.hash not in self._rows]
        if fresh:
            uniq = list({k.hash: k for k in fresh}.values())
            for k, row in zip(uniq, self._kernel_rows(uniq, self.kernel_models)):
                self._rows[k.hash] = row
        rows = np.array([self._rows[k.hash] for k in kernels]) if kernels else np.zeros((0, 1))
        return self._aggregate(rows, np.array([float(k.multiplicity) for k in kernels]))

    def __call__(self, cfgs: Sequence[Any]) -> np.ndarray:
        keys = [self.space.encode(c) for c in cfgs]
        fresh = {k: c for k, c in zip(keys, cfgs) if k not in self.memo}
        if fresh:
            phi = np.array([self._phi(c) for c in fresh.values()])
            pred = self.model.predict(phi - self.phi_default)
            cost = self.reference_s * np.exp(np.clip(pred, -20, 20))
            _memoize_costs(self, self.memo, list(fresh), cost, "configurations")
        return np.array([self.memo[k] for k in keys], dtype=float)

    def is_priced(self, cfg: Any) -> bool:
        return self.space.encode(cfg) in self.memo

    def describe(self) -> dict:
        return {"trial_cost": self.trial_cost, "model_kind": getattr(self.model, "kind", None),
                "kernel_models": list(self.kernel_models), "kernels_cached": len(self._rows),
                "reference_s": self.reference_s if math.isfinite(self.reference_s) else None}
