"""Fusion configurations priced by the whole-program cpu model (costmodels/program_cpu.py), for the search:
``autotune fusion --target cpu --cost-model program``.

:class:`LearnedProgramCost` is a configuration-level ``Pricer`` (as ``PairedProgramCost`` is): a
configuration's cost is the default's reference time times the model's predicted ratio to the default,
``reference_s * exp(f(phi(cfg) - phi(default)))``, so costs are seconds ordered as the model ranks the
programs; ``reference_s`` is the default's kernel sum by the model's first kernel model, or by
``scale_model`` for a model that reads none (a scale, not a measurement), and the default costs it times
exp(f(0)). Each kernel's contribution
(`kernel_rows`) is computed once per kernel hash, so a configuration that shares kernels with earlier ones
costs only its new kernels and one prediction.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from autotune.tuning.pricing import Pricer, _memoize_costs
from costmodels.program_cpu import aggregate, kernel_rows, multiplicities

__all__ = ["LearnedProgramCost"]


class LearnedProgramCost(Pricer):
    """Costs of a FusionSpace's configurations by a whole-program model (module docstring). ``kernel_models``:
    name -> a kernel cost model's ``predict`` (the model's ``kernel_models``, in that order)."""

    def __init__(self, space: Any, model: Any, kernel_models: Optional[dict] = None,
                 scale_model: Optional[Callable[[Sequence[Any]], Any]] = None):
        self.space, self.model = space, model
        self.kernel_models = dict(kernel_models or {})
        self._rows: dict = {}   # kernel hash -> its kernel_rows row
        self.memo: dict = {}
        self.config_cost: dict = {}
        self.kernel_calls = 0
        self.kernels_priced = 0
        default_kernels = space.kernels(space.default())
        rows, m = self._kernel_table(default_kernels)
        self.phi_default = aggregate(rows, m)
        # the scale of the costs: the default's kernel sum by the first kernel model (its column of the rows, ns),
        # else by scale_model (seconds per kernel), else 1
        if self.kernel_models:
            self.reference_s = float(m @ rows[:, -len(self.kernel_models)]) * 1e-9
        elif scale_model is not None:
            self.reference_s = float(m @ np.asarray(scale_model(default_kernels), float))
        else:
            self.reference_s = 1.0

    def _kernel_table(self, kernels: Sequence[Any]) -> tuple:
        """The kernels' rows (each computed once per kernel hash) and multiplicities."""
        fresh = list({k.hash: k for k in kernels if k.hash not in self._rows}.values())
        if fresh:
            for k, row in zip(fresh, kernel_rows(fresh, self.kernel_models)):
                self._rows[k.hash] = row
        rows = (np.array([self._rows[k.hash] for k in kernels]) if kernels
                else kernel_rows([], self.kernel_models))
        return rows, multiplicities(kernels)

    def __call__(self, cfgs: Sequence[Any]) -> np.ndarray:
        keys = [self.space.encode(c) for c in cfgs]
        fresh = {k: c for k, c in zip(keys, cfgs) if k not in self.memo}
        if fresh:
            phi = np.array([aggregate(*self._kernel_table(self.space.kernels(c))) for c in fresh.values()])
            pred = self.model.predict(phi - self.phi_default)
            cost = self.reference_s * np.exp(np.clip(pred, -20, 20))
            _memoize_costs(self, self.memo, list(fresh), cost, "configurations")
        return np.array([self.memo[k] for k in keys], dtype=float)

    def is_priced(self, cfg: Any) -> bool:
        return self.space.encode(cfg) in self.memo
