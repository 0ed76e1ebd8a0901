"""Analytical cost model: the baseline of Kaufman et al. ("A Learned Performance Model for Tensor
Processing Units", MLSys 2021), as XLA's own analytical tile model.

Per kernel (no tile):   t = max(t_compute, t_transfer) + t_link + t_launch
    t_compute  = hero_flops / peak_flops          (dot / convolution / ragged-dot / scaled-dot on
                                                   the matrix units)
               + vector_flops / vector_flops_rate (everything else)
               + transcendentals / transcendental_rate
    t_transfer = (bytes_read + bytes_written) / hbm_bytes_per_s
    t_link     = interconnect bytes / interconnect_bytes_per_s + host bytes / host_link_bytes_per_s
                 (collectives and infeed/outfeed; 0 for every other kernel)
Per tile:   t = sum over tiles of max(compute per tile, transfer per tile) + t_link + t_launch
          = n_tiles * max(c_tile, x_tile) + t_link + t_launch,
    c_tile = padded MXU flops of the tile / peak + vector and transcendental work of the tile
             (padded to the (8, 128) vector registers) / their rates,
    x_tile = (input + output bytes of the tile) / hbm_bytes_per_s + (number of DMAs) * dma_setup_s,
with the tile's reads and writes from the shared tile geometry (`autotune.compiler.tiles.io_geometry`);
the tiled equations live in the compiler layer (`autotune.compiler.tiles.tiled_time_terms`, which also
picks each kernel's default tile), this model adds the per-kind scales, fitting and persistence.

Optional per-kernel-kind scale coefficients (kLoop / kInput / kOutput), fitted by least squares in
log space on (kernel, measured runtime) pairs (`fit_scales`), as the paper does for its fusion
baseline: log t_measured = log t_model + log s_kind, so s_kind = exp(mean residual).

Static inputs come from `kernel.cost` (autotune/compiler/analysis.py), re-priced for the opcodes whose XLA
figure is not a device's work by `autotune.compiler.tiles.device_work` (docs/simulator.md, section 1b), and
the target spec (autotune/compiler/targets/, get_spec). Feature rows are cached per kernel hash; predictions are vectorized.
"""
from __future__ import annotations

import json
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.targets import get_spec
from autotune.compiler.tiles import KIND_INDEX, MATMUL_OPCODES, device_work, fusion_kind_index, hero_flops, roofline_seconds

from costmodels.base import CostModel, register_cost_model

KINDS = tuple(KIND_INDEX)  # ("kLoop", "kInput", "kOutput"), in index order


_UNTILED: dict = {}
_NO_ATTR = object()


def untiled_rows(kernels: Sequence[Any]) -> np.ndarray:
    """Per kernel [hero flops, flops, transcendentals, bytes read + written, kind index, trivial,
    interconnect bytes, host-link bytes], cached by kernel hash (the same numbers `TilingInfo`
    holds, without its tile geometry; flops and transcendentals are `tiles.device_work`'s)."""
    out = np.empty((len(kernels), 8))
    for i, k in enumerate(kernels):
        # Cached by hash when the kernel already has one; never hashed just for this cache.
        h = getattr(k, "_hash", _NO_ATTR)
        if h is _NO_ATTR:
            h = k.hash
        row = _UNTILED.get(h) if h is not None else None
        if row is None:
            c = k.cost
            work = device_work(k)
            hf = 0.0
            comp = getattr(k, "computation", None)
            if comp is not None:
                for m in k.members:
                    ins = comp.instructions[m]
                    if ins.opcode in MATMUL_OPCODES:
                        hf = hero_flops(ins, [comp.instructions[o].shape for o in comp.operands[m]])
                        break
            kind = fusion_kind_index(k)
            row = (hf, work.flops, work.transcendentals,
                   max(c.bytes_read, 0.0) + max(c.bytes_written, 0.0), kind,
                   float(bool(getattr(k, "is_trivial", False))), work.interconnect_bytes, work.host_bytes)
            if h is not None:
                if len(_UNTILED) > 500_000:
                    _UNTILED.clear()
                _UNTILED[h] = row
        out[i] = row
    return out


class AnalyticalCostModel(CostModel):
    """max(compute, transfer) + launch from static metrics and a target spec (seconds)."""

    name = "analytical"
    predicts_absolute = True
    dedup_by_hash = False  # pricing a kernel costs less than its canonical hash (see ProgramCost)

    def __init__(self, target: Any = "tpu", scales: Optional[dict] = None):
        self.target = target
        self.scales = scales  # per-kind scales to start from (kinds not given: 1.0); `fit` learns `scales_`

    @property
    def spec(self) -> Any:
        """The target's hardware spec (`get_spec`, looked up once per target)."""
        cached = self.__dict__.get("_spec")
        if cached is None or cached[0] is not self.target:
            cached = self._spec = (self.target, get_spec(self.target))
        return cached[1]

    @property
    def kind_scales(self) -> dict:
        """The scale of each kernel kind in use: fitted (`scales_`), else the `scales` given, else 1.0."""
        fitted = self.__dict__.get("scales_")
        if fitted is not None:
            return fitted
        return {k: 1.0 for k in KINDS} | {k: float(v) for k, v in (self.scales or {}).items()}

    # ---- prediction
    def predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        kernels = list(kernels)
        if not kernels:
            return np.zeros(0)
        s = self.spec
        launch = s.kernel_launch_s
        scales = self.kind_scales
        sc = np.array([scales[k] for k in KINDS])
        if tiles is None:
            # Untiled (fusion task): five static numbers per kernel, no tile geometry (this is the
            # inner loop of fusion search, where most kernels are seen once).
            b = untiled_rows(kernels)
            comp = (b[:, 0] / s.peak_flops + np.maximum(b[:, 1] - b[:, 0], 0.0) / s.vector_flops
                    + b[:, 2] / s.transcendental_per_s)
            xfer = b[:, 3] / s.hbm_bytes_per_s
            link = b[:, 6] / s.interconnect_bytes_per_s + b[:, 7] / s.host_link_bytes_per_s
            t = np.maximum(comp, xfer) + link + launch
            return np.where(b[:, 5] > 0, 0.0, t * sc[b[:, 4].astype(int)])
        return roofline_seconds(kernels, tiles, s, sc)  # None entries: the default tile

    # ---- fitting
    def fit_scales(self, kernels: Sequence[Any], runtimes: Sequence[float],
                   tiles: Optional[Sequence[Any]] = None) -> dict:
        """Per-kind scale by least squares on log runtimes, set as `scales_` and returned (kinds with no data
        keep the scale in use before)."""
        kernels = list(kernels)
        y = np.asarray(runtimes, float)
        new = dict(self.kind_scales)
        unit = AnalyticalCostModel(self.target)
        unit._spec = (self.target, self.spec)
        pred = unit.predict(kernels, tiles)
        kind = untiled_rows(kernels)[:, 4].astype(int)
        ok = np.isfinite(y) & (y > 0) & np.isfinite(pred) & (pred > 0)
        for i, k in enumerate(KINDS):
            m = ok & (kind == i)
            if m.any():
                new[k] = float(np.exp(np.mean(np.log(y[m]) - np.log(pred[m]))))
        self.scales_ = new
        return new

    def fit(self, dataset: Any) -> "AnalyticalCostModel":
        """dataset: (kernels, runtimes) or (kernels, tiles, runtimes), or an object with those attrs."""
        if isinstance(dataset, tuple):
            if len(dataset) == 2:
                self.fit_scales(dataset[0], dataset[1])
            else:
                self.fit_scales(dataset[0], dataset[2], dataset[1])
        else:
            self.fit_scales(dataset.kernels, dataset.runtimes, getattr(dataset, "tiles", None))
        return self

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"model": self.name, "target": self.spec.name, "scales": self.kind_scales}, f, indent=1)

    @classmethod
    def load(cls, path: str) -> "AnalyticalCostModel":
        """A saved model; its scales are fitted state (`scales_`)."""
        with open(path) as f:
            d = json.load(f)
        m = cls(d.get("target", "tpu"))
        m.scales_ = m.kind_scales | {k: float(v) for k, v in (d.get("scales") or {}).items()}
        return m


register_cost_model("analytical", AnalyticalCostModel)
