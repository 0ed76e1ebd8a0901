"""The shipped GNN fine-tuned on a search's measurements: the model-based strategy's `model="gnn"`.

AutoTVM's local model learns a configuration's cost from its knob values alone; this one starts from
what the shipped GNN knows about kernels. Each kernel (fusion) or tile (tile space) is read out once by
the GNN's frozen encoder and reduction (`GnnNet.readout`, memoized); a configuration's predicted log
time is the log of the sum, over its kernels, of the head's time times the kernel's multiplicity (a
tile: the head's value). Every fit starts from the shipped head's weights and takes at most `steps`
Adam steps on the configurations measured so far, within `time_limit_s`, on one torch thread (a fit is
a function of the measurements, so a resumed search fits the same model). Rank objective: pairwise
logistic loss on the configurations' predicted values; "reg": squared error of the centered values in
units of the measurements' spread. A base margin (the transfer prior, `prior_margin`) is added to the
standardized prediction in the loss and in the score, AutoTVM's f_global + f_local.
"""
from __future__ import annotations

import copy
import math
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

__all__ = ["GnnFineTune", "FINETUNE_STEPS", "FINETUNE_SECONDS", "FINETUNE_LR", "MAX_READOUT_ROWS",
           "MAX_READOUT_BYTES"]

FINETUNE_STEPS = 30      # Adam steps per fit (from the shipped head each time)
FINETUNE_SECONDS = 2.0   # wall-clock limit of one fit's steps
FINETUNE_LR = 1e-3
MAX_READOUT_ROWS = 100_000  # readouts kept; beyond, a fit starts the memo afresh
MAX_READOUT_BYTES = 256 << 20  # and at most this much of them (a readout is 4 bytes x the head's input width:
                               # 5.4 kB with the recipe's 32-bin geometry encoding)


class GnnFineTune:
    """Local model of `search.model_based.ModelBasedSearch` over configurations of one space (module
    docstring); `gnn`: a `GnnCostModel` for the space's task and target (default: the shipped one)."""

    on_configurations = True  # the strategy hands it configurations, not knob features

    def __init__(self, space: Any, gnn: Any = None, steps: int = FINETUNE_STEPS,
                 time_limit_s: float = FINETUNE_SECONDS, lr: float = FINETUNE_LR):
        from autotune.compiler.fusion import FusionSpace
        self.space = space
        self.fusion = isinstance(space, FusionSpace)
        if not self.fusion and not callable(getattr(space, "tiles", None)):
            raise ValueError(f"model gnn: no GNN readout for a {type(space).__name__} (fusion and tile spaces)")
        self.task = "fusion" if self.fusion else "tile"
        target = getattr(space, "target", "tpu")
        self.target = target if isinstance(target, str) else str(getattr(target, "name", target))
        self._kind = target if isinstance(target, str) else str(getattr(target, "kind", self.target))
        self.gnn = gnn if gnn is not None else self._shipped()
        self.gnn.check_is_fitted("GNN to fine-tune")
        if getattr(self.gnn, "members", 1) > 1:
            raise ValueError(f"model gnn: fine-tuning needs one GNN, not an ensemble of {self.gnn.members} "
                             "(its members' heads differ)")
        if self.gnn.net_.reduction == "node":
            raise ValueError("model gnn: the GNN's node reduction has no per-kernel readout to fine-tune on")
        self.absolute = bool(self.gnn.predicts_absolute)
        self.head0 = copy.deepcopy(self.gnn.net_.head.state_dict())
        self.steps, self.time_limit_s, self.lr = max(1, int(steps)), float(time_limit_s), float(lr)
        self._row_of: dict = {}          # kernel hash (fusion) / encoded tile -> row
        self._readouts: list = []        # chunks of [rows, readout width]
        self._log_base: list = []        # per row: log seconds the head's output is relative to
        self._z: Optional[torch.Tensor] = None
        self._lb: Optional[torch.Tensor] = None
        self.last_fit: dict = {}         # steps taken, seconds, final loss

    def _shipped(self) -> Any:
        from costmodels.base import shipped_file
        from costmodels.gnn.model import GnnCostModel
        for target in dict.fromkeys((self.target, self._kind)):  # e.g. tpu-v3, then its kind tpu
            path = shipped_file("gnn", self.task, target)
            if path is not None:
                return GnnCostModel.load(str(path), self.task, target)
        raise ValueError(f"model gnn: no GNN shipped for {self.task} on {self.target}")

    # ---- readouts
    def _add(self, keys: list, graphs: list, tile_feat: np.ndarray) -> None:
        from costmodels.gnn.model import torch_threads
        with torch_threads(1):
            z = self.gnn.forward_prepared(self.gnn.prepare_graphs(graphs), self.gnn.scale_tiles(tile_feat),
                                          readout=True)
        for k in keys:
            self._row_of[k] = len(self._row_of)
        self._readouts.append(z)
        self._log_base.append(self.gnn.log_baseline(graphs) if self.absolute else np.zeros(len(graphs)))

    def _max_rows(self) -> int:
        """Readouts kept: MAX_READOUT_ROWS, fewer when they are wide (MAX_READOUT_BYTES)."""
        chunk = self._readouts[0] if self._readouts else self._z
        width = int(chunk.shape[1]) if chunk is not None and len(chunk.shape) == 2 else 0
        return MAX_READOUT_ROWS if not width else max(1, min(MAX_READOUT_ROWS, MAX_READOUT_BYTES // (4 * width)))

    def _rows(self, configs: Sequence[Any]) -> tuple[list, list]:
        """Per configuration, (readout rows, weights): its kernels and multiplicities (a tile: one row)."""
        from costmodels.features import TILE_DIM, kernel_graphs, tile_features
        space = self.space
        if self.fusion:
            from autotune.compiler.emission import Kernel
            refs = [space.state(c).refs() for c in configs]
            new: dict = {}
            for rs in refs:
                for r in rs:
                    if r.hash not in self._row_of and r.hash not in new:
                        new[r.hash] = r
            if new:
                kernels = [Kernel.from_ref(space, r) for r in new.values()]
                self._add(list(new), kernel_graphs(kernels, self.target),
                          np.zeros((len(kernels), TILE_DIM), np.float32))
            mult = space.multiplicity
            return ([np.array([self._row_of[r.hash] for r in rs], np.int64) for rs in refs],
                    [np.array([mult[r.comp] for r in rs], np.float64) for rs in refs])
        keys = [space.encode(t) for t in configs]
        new = {k: t for k, t in zip(keys, configs) if k not in self._row_of}
        if new:
            g = kernel_graphs([space.kernel], self.target)[0]
            tf = np.stack([tile_features(g.tiled_dims, t) for t in new.values()]).astype(np.float32)
            self._add(list(new), [g] * len(new), tf)
        return [np.array([self._row_of[k]]) for k in keys], [np.ones(1) for _ in keys]

    def _readout_tensor(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every readout so far [rows, width] and its log baselines (new chunks appended once)."""
        if self._readouts:
            new_z = torch.from_numpy(np.concatenate(self._readouts).astype(np.float32, copy=False))
            new_lb = torch.from_numpy(np.concatenate(self._log_base).astype(np.float64))
            self._z = new_z if self._z is None else torch.cat([self._z, new_z])
            self._lb = new_lb if self._lb is None else torch.cat([self._lb, new_lb])
            self._readouts, self._log_base = [], []
        return self._z, self._lb

    def _row_values(self, head: Any, rows: "np.ndarray | torch.Tensor") -> torch.Tensor:
        """The head's log time (or score) of readout rows."""
        z, lb = self._readout_tensor()
        idx = torch.as_tensor(rows)
        raw = head(z.index_select(0, idx)).squeeze(-1).double()
        return self.gnn.y_mu_ + self.gnn.y_sigma_ * raw + lb.index_select(0, idx) if self.absolute else raw

    def _values(self, head: Any, rows: list, weights: list) -> torch.Tensor:
        """Predicted log time (or score) of each configuration, differentiable in the head."""
        used = np.unique(np.concatenate(rows)) if rows else np.zeros(0, np.int64)
        local = {int(r): i for i, r in enumerate(used)}
        v = self._row_values(head, used)
        if not self.fusion:
            return v[torch.tensor([local[int(r[0])] for r in rows])]
        shift = v.detach().max()
        ii = np.concatenate([np.full(len(r), i) for i, r in enumerate(rows)])
        jj = np.array([local[int(x)] for r in rows for x in r], np.int64)
        terms = torch.from_numpy(np.concatenate(weights)) * torch.exp(v - shift)[torch.from_numpy(jj)]
        total = torch.zeros(len(rows), dtype=terms.dtype).index_add(0, torch.from_numpy(ii), terms)
        return torch.log(total) + shift

    # ---- the local-model protocol of search.model_based
    def __call__(self, objective: str, configs: Sequence[Any], y_log: np.ndarray, seed: int,
                 base_margin: Optional[np.ndarray] = None) -> Callable[..., np.ndarray]:
        """Fine-tune a copy of the shipped head on (configurations, log cost); returns
        `score(configs, base_margin=None) -> array`, lower = predicted faster (standardized units)."""
        from costmodels.gnn.model import torch_threads
        from costmodels.gnn.train import pairwise_rank_loss, torch_seeded
        if objective not in ("rank", "reg"):
            raise ValueError(f"objective must be rank or reg, not {objective!r}")
        y = np.asarray(y_log, dtype=np.float64)
        mu, sd = float(y.mean()), float(max(y.std(), 1e-6))
        t = torch.from_numpy((y - mu) / sd)
        m = torch.from_numpy(np.asarray(base_margin, np.float64)) if base_margin is not None else torch.zeros(len(y))
        if len(self._row_of) > self._max_rows():  # a long search: forget the readouts (earlier scores go stale)
            self._row_of, self._readouts, self._log_base, self._z, self._lb = {}, [], [], None, None
        rows, weights = self._rows(configs)
        head = copy.deepcopy(self.gnn.net_.head)
        head.load_state_dict(self.head0)
        opt = torch.optim.Adam(head.parameters(), lr=self.lr)
        group = torch.zeros(len(y), dtype=torch.long)
        t0, steps, loss_value = time.monotonic(), 0, math.nan
        with torch_threads(1), torch_seeded(int(seed)):
            head.train()
            for steps in range(1, self.steps + 1):
                v = self._values(head, rows, weights)
                s = (v - v.detach().mean()) / sd + m
                if objective == "rank":
                    loss = pairwise_rank_loss(s, t, group, kind="logistic")
                else:
                    loss = torch.mean((s - s.mean() - t + t.mean()) ** 2)
                opt.zero_grad()
                loss.backward()
                opt.step()
                loss_value = float(loss.detach())
                if time.monotonic() - t0 > self.time_limit_s:
                    break
            head.eval()
            with torch.no_grad():
                center = float(self._values(head, rows, weights).mean())
        self.last_fit = {"steps": steps, "seconds": time.monotonic() - t0, "loss": loss_value}

        memo = np.zeros(0)  # the fitted head's value of every readout row so far

        def score(cfgs: Sequence[Any], base_margin: Optional[np.ndarray] = None) -> np.ndarray:
            nonlocal memo
            if not len(cfgs):
                return np.zeros(0)
            r, w = self._rows(cfgs)
            if len(memo) < len(self._row_of):  # rows read out since: the head once over them
                with torch.no_grad(), torch_threads(1):
                    new = self._row_values(head, np.arange(len(memo), len(self._row_of))).numpy()
                memo = np.concatenate([memo, new])
            if self.fusion:
                out = np.array([np.log(np.dot(wi, np.exp(memo[ri] - memo[ri].max()))) + memo[ri].max()
                                for ri, wi in zip(r, w)])
            else:
                out = memo[np.concatenate(r)]
            out = (out - center) / sd
            return out + (np.asarray(base_margin, float) if base_margin is not None else 0.0)

        return score
