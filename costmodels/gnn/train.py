"""Training loop of the GNN cost model.

* Examples are drawn evenly across model families (each family equally likely per draw; within a
  family uniformly), as the paper does so that large families do not dominate; or (`draws` "kernels")
  every training example equally likely, as XGBoost sees them.
* Fusion (loss "mse"): batches of examples, MSE on standardized log runtime (with config residual: on the
  log ratio of the runtime to the tiled analytical time, `GnnCostModel.log_baseline`); kernels at least
  `min_runtime_s` slow (the paper's metric keeps kernels >= 5 us) weigh `large_weight` times more.
* Tiles (loss "rank"): batches of kernels (groups), up to `tiles_per_kernel` tiles each; pairwise
  hinge or logistic loss over the pairs of tiles of the same kernel whose runtimes differ, or the
  listwise ListMLE loss over each kernel's tiles (`rank_loss` "listmle", TpuGraphs' baselines). Fusion
  with loss "rank" (an ablation): the same, with the kernels of one program as the group.
* Learning rate: constant, or (`lr_schedule` "cosine") annealed to lr / 100 over the run's steps.
* After every epoch the validation split is scored (fusion: mean squared log error, or with `select`
  "mape" the MAPE of the validation kernels >= `min_runtime_s`, pooled per family and averaged over the
  families; tiles: 1 - ordered-pair accuracy);
  the best epoch's weights are kept (checkpoint selection) and training stops after `patience` epochs
  without improvement.

`Samples` (autotune.tuning.dataset) provides: graphs (KernelGraph list), graph (sample -> graph index),
tile_feat ([S, TILE_DIM] raw), runtime (seconds), family_of_sample (family id per sample).
"""
from __future__ import annotations

import contextlib
import copy
import math
import sys
import time
from typing import Any, Iterator, Optional

import numpy as np
import torch
import torch.nn.functional as F

from costmodels.metrics import ordered_pair_accuracy

from costmodels.gnn.layers import collate_prepared

__all__ = ["fit_gnn", "torch_seeded", "FUSION_RECIPE", "fit_layout_gnn", "segment_partials", "join_partials", "validate_layout", "pairwise_rank_loss",
           "listmle_loss", "rank_loss", "family_weights", "SELECT_METRICS", "LR_SCHEDULES", "DRAWS"]

SELECT_METRICS = ("loss", "mape")
LR_SCHEDULES = ("constant", "cosine")
DRAWS = ("families", "kernels")

# `autotune train --model gnn --task fusion` defaults (loss mse; `autotune.api.gnn_training_options`): the
# default-tile geometry before the head, a residual over the tiled analytical time, kernels >= 5 us weighted 10x,
# the epoch with the lowest validation MAPE of kernels >= 5 us kept, cosine-annealed lr 0.002 over 25 epochs and a
# 2-layer head of width 256 (docs/lab-notes/2026-11-25-gnn-accuracy-work.md and
# docs/lab-notes/2026-11-25-gnn-recipe-default.md), which also gets a piecewise-linear encoding of the geometry
# groups tile, dot and analytical on 32 quantile bins per column, with no early stop within the 25 epochs
# (patience 25: with 32 bins the validation MAPE is noisier early and a patience of 5 stopped two of three seeds
# at epochs 11 and 14) (docs/lab-notes/2026-11-27-gnn-head-piecewise-linear.md and
# docs/lab-notes/2026-11-27-gnn-head-more-bins.md).
FUSION_RECIPE: dict = {"geometry_features": True, "residual": True, "large_weight": 10.0, "select": "mape",
                       "lr_schedule": "cosine", "lr": 2e-3, "head_layers": 2, "head_hidden": 256, "epochs": 25,
                       "ple_bins": 32, "patience": 25}


@contextlib.contextmanager
def torch_seeded(seed: int) -> Iterator[None]:
    """torch's default generator seeded with `seed` inside the block and restored afterwards: what a model
    draws (initial weights, dropout masks) is fixed by its seed, and the caller's random state is untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def pairwise_rank_loss(scores: torch.Tensor, y: torch.Tensor, group: torch.Tensor, kind: str = "hinge",
                       margin: float = 0.1) -> torch.Tensor:
    """Pairwise loss over pairs (i, j) of the same group with y_i < y_j: the score of the faster
    item should be lower. hinge: relu(margin - (s_j - s_i)); logistic: softplus(-(s_j - s_i))."""
    same = group[:, None] == group[None, :]
    faster = y[:, None] < y[None, :]
    pair = same & faster
    if not bool(pair.any()):
        return scores.sum() * 0.0
    diff = scores[None, :] - scores[:, None]  # s_j - s_i
    d = diff[pair]
    if kind == "logistic":
        return F.softplus(-d).mean()
    return F.relu(margin - d).mean()


def listmle_loss(scores: torch.Tensor, y: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """ListMLE (Xia et al., ICML 2008), as TpuGraphs' baselines train with it: the negative
    log-likelihood of the true order of each group (fastest first) under a Plackett-Luce model whose
    utilities are the negated scores (lower score = faster), averaged over the groups of two or more
    items. Items of equal runtime keep their input order."""
    losses = []
    for g in torch.unique(group):
        idx = torch.nonzero(group == g).flatten()
        if len(idx) < 2:
            continue
        order = idx[torch.argsort(y[idx], stable=True)]
        u = -scores[order]
        # sum over positions i of logsumexp(u[i:]) - u[i]
        tail = torch.logcumsumexp(u.flip(0), dim=0).flip(0)
        losses.append((tail - u).sum())
    if not losses:
        return scores.sum() * 0.0
    return torch.stack(losses).mean()


def rank_loss(scores: torch.Tensor, y: torch.Tensor, group: torch.Tensor, kind: str = "hinge",
              margin: float = 0.1) -> torch.Tensor:
    """The ranking loss a model's `rank_loss` names: "listmle" (listwise), else pairwise hinge/logistic."""
    if kind == "listmle":
        return listmle_loss(scores, y, group)
    return pairwise_rank_loss(scores, y, group, kind, margin)


def family_weights(family: np.ndarray) -> np.ndarray:
    """Sampling probability per item so that every family is drawn equally often."""
    fam = np.asarray(family)
    if len(fam) == 0:
        return np.zeros(0)
    _, inv, counts = np.unique(fam, return_inverse=True, return_counts=True)
    w = 1.0 / counts[inv]
    return w / w.sum()


def _step(model: Any, opt: Any, loss: torch.Tensor) -> float:
    """One optimizer step on `loss` (gradients clipped to norm 5); returns the loss value."""
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.net_.parameters(), 5.0)
    opt.step()
    return float(loss.detach())


class _Checkpoints:
    """Checkpoint selection and early stopping: keeps the weights of the epoch with the lowest
    validation value, stops after `patience` epochs without improvement, and restores the best."""

    def __init__(self, model: Any, patience: int):
        self.model, self.patience = model, patience
        self.best = (float("inf"), None, -1)
        self.history: list = []
        self.bad = 0

    def after_epoch(self, rec: dict) -> bool:
        """Record an epoch ({"epoch", "val", ...}); True when training should stop."""
        self.history.append(rec)
        val = rec["val"]
        if math.isfinite(val) and val < self.best[0] - 1e-9:
            self.best = (val, copy.deepcopy(self.model.net_.state_dict()), rec["epoch"])
            self.bad = 0
            return False
        self.bad += 1
        return self.bad >= self.patience

    def finish(self) -> list:
        """Load the best weights; the model's history (epochs, then best epoch and value)."""
        if self.best[1] is not None:
            self.model.net_.load_state_dict(self.best[1])
        self.model.history_ = self.history + [{"best_epoch": self.best[2], "best_val": self.best[0]}]
        return self.model.history_


class _Prepared:
    """Scaled per-graph arrays and per-sample targets of one split."""

    def __init__(self, model: Any, samples: Any, min_runtime_s: float = 0.0, large_weight: float = 1.0):
        self.graphs = [model.prepare_graph(g) for g in samples.graphs]
        self.graph = np.asarray(samples.graph, np.int64)
        self.tile = model.scale_tiles(samples.tile_feat)
        rt = np.asarray(samples.runtime, np.float64)
        ok = np.isfinite(rt) & (rt > 0)
        self.keep = np.nonzero(ok)[0]
        self.runtime = np.where(ok, rt, np.nan)
        self.large = ok & (rt >= min_runtime_s)
        self.weight = np.where(self.large, float(large_weight), 1.0).astype(np.float32)
        # standardized log runtime over the baseline (the model's y_mu / y_sigma, fitted on the training split)
        self.log_base = model.log_baseline(samples.graphs)[self.graph] if len(self.graph) else np.zeros(0)
        self.y = (np.log(np.where(ok, rt, 1.0)) - self.log_base - model.y_mu_) / model.y_sigma_
        self.family = np.asarray(samples.family_of_sample())
        self.n = len(self.keep)
        # rank-loss pairs: tiles of one kernel (tile task); kernels of one program (fusion task, where
        # every sample is its own kernel graph, so grouping by graph would leave no pairs at all)
        self.group = np.asarray(samples.program, np.int64) if model.task == "fusion" else self.graph

    def batch(self, idx: np.ndarray):
        b = collate_prepared([self.graphs[g] for g in self.graph[idx]], self.tile[idx])
        return (b, torch.from_numpy(self.y[idx].astype(np.float32)), torch.from_numpy(self.group[idx]),
                torch.from_numpy(self.weight[idx]))


def _score_outputs(model: Any, data: _Prepared, max_items: int = 20000, seed: int = 0) -> tuple:
    """Model outputs for (a seeded sample of at most max_items of) the split's valid samples."""
    idx = data.keep
    if len(idx) > max_items:
        idx = np.sort(np.random.default_rng(seed).choice(idx, max_items, replace=False))
    # the model's own inference batching (by kernel size for the sequence reductions, which pad a
    # batch to its largest kernel: stored order made Transformer validation ~30x slower)
    return idx, model.forward_prepared([data.graphs[g] for g in data.graph[idx]], data.tile[idx])


def _validate(model: Any, data: _Prepared, select: str = "loss") -> float:
    """Lower is better: mean squared log error (mse; select "mape": MAPE of the large kernels, the mean over
    families) or 1 - ordered-pair accuracy (rank)."""
    idx, out = _score_outputs(model, data)
    if not len(idx):
        return float("nan")
    if model.config["loss"] == "mse":
        if select == "mape":
            big = data.large[idx]
            if not big.any():
                return float("nan")
            pred = model.seconds(out[big], data.log_base[idx][big])
            true = data.runtime[idx][big]
            ape = np.abs(pred - true) / true
            fam = data.family[idx][big]
            return float(np.mean([ape[fam == f].mean() for f in np.unique(fam)]))
        return float(np.mean((out - data.y[idx]) ** 2))
    acc = ordered_pair_accuracy(out, data.y[idx], groups=data.group[idx])
    return 1.0 - acc if math.isfinite(acc) else float("nan")


def _batches_fusion(data: _Prepared, batch_size: int, rng: np.random.Generator, steps: int,
                    draws: str = "families"):
    p = family_weights(data.family[data.keep]) if draws == "families" else None
    for _ in range(steps):
        yield rng.choice(data.keep, size=min(batch_size, max(data.n, 1)), replace=True, p=p)


def _batches_tile(data: _Prepared, batch_size: int, tiles_per_kernel: int, rng: np.random.Generator, steps: int):
    by_graph: dict = {}
    for i in data.keep:
        by_graph.setdefault(int(data.group[i]), []).append(i)
    groups = [np.asarray(v) for v in by_graph.values() if len(v) >= 2] or [np.asarray(v) for v in by_graph.values()]
    gfam = np.array([data.family[g[0]] for g in groups])
    p = family_weights(gfam)
    per = max(2, min(tiles_per_kernel, batch_size))
    n_groups = max(1, batch_size // per)
    for _ in range(steps):
        chosen = rng.choice(len(groups), size=n_groups, replace=True, p=p)
        parts = []
        for c in chosen:
            g = groups[c]
            parts.append(g if len(g) <= per else rng.choice(g, per, replace=False))
        yield np.concatenate(parts)


def fit_gnn(model: Any, train: Any, validation: Any = None, *, epochs: int = 20, batch_size: int = 64,
            lr: float = 1e-3, weight_decay: float = 0.0, patience: int = 5, steps_per_epoch: Optional[int] = None,
            tiles_per_kernel: int = 16, seed: int = 0, progress: Optional[bool] = None,
            time_limit_s: Optional[float] = None, min_runtime_s: float = 5e-6, large_weight: float = 1.0,
            select: str = "loss", lr_schedule: str = "constant", draws: str = "families", log=None) -> list:
    """Train `model` (a GnnCostModel) in place; returns the per-epoch history."""
    if len(train.graph) == 0:
        raise ValueError("the training split has no samples")
    if select not in SELECT_METRICS:
        raise ValueError(f"checkpoint selection must be one of {', '.join(SELECT_METRICS)}, not {select!r}")
    if lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"learning-rate schedule must be one of {', '.join(LR_SCHEDULES)}, not {lr_schedule!r}")
    if draws not in DRAWS:
        raise ValueError(f"draws must be one of {', '.join(DRAWS)}, not {draws!r}")
    if not large_weight > 0:
        raise ValueError(f"the weight of large kernels must be > 0, not {large_weight}")
    if getattr(model, "net_", None) is None:
        model.init_network()
    with torch_seeded(seed):  # dropout and the like draw from it: a local generator
        rng = np.random.default_rng(seed)
        model.fit_scalers(train.graphs, train.tile_feat)
        rt = np.asarray(train.runtime, np.float64)
        ok = np.isfinite(rt) & (rt > 0)
        ly = np.log(rt[ok]) - model.log_baseline(train.graphs)[np.asarray(train.graph, np.int64)[ok]]
        model.y_mu_, model.y_sigma_ = (float(ly.mean()), float(max(ly.std(), 1e-3))) if len(ly) else (0.0, 1.0)
        tr = _Prepared(model, train, min_runtime_s, large_weight)
        if tr.n == 0:
            raise ValueError("the training split has no successful measurements")
        va = (_Prepared(model, validation, min_runtime_s) if validation is not None and len(validation.graph)
              else None)
        if va is not None and va.n == 0:
            va = None
        rank = model.config["loss"] == "rank"
        if rank:
            select = "loss"
        if steps_per_epoch is None:
            steps_per_epoch = max(1, math.ceil(tr.n / batch_size))
        opt = torch.optim.Adam(model.net_.parameters(), lr=lr, weight_decay=weight_decay)
        sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, int(epochs) * steps_per_epoch),
                                                            eta_min=lr / 100) if lr_schedule == "cosine" else None)
        show = progress if progress is not None else sys.stderr.isatty()
        checkpoints = _Checkpoints(model, patience)
        t0 = time.monotonic()
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover
            tqdm = None
        for ep in range(int(epochs)):
            model.net_.train()
            it = (_batches_tile(tr, batch_size, tiles_per_kernel, rng, steps_per_epoch) if rank
                  else _batches_fusion(tr, batch_size, rng, steps_per_epoch, draws))
            if show and tqdm is not None:
                it = tqdm(it, total=steps_per_epoch, desc=f"epoch {ep + 1}/{epochs}", leave=False, file=sys.stderr)
            total = 0.0
            for idx in it:
                b, y, g, w = tr.batch(idx)
                out = model.net_(b)
                if rank:
                    loss = rank_loss(out, y, g, model.config["rank_loss"], float(model.config["margin"]))
                else:
                    loss = (w * (out - y) ** 2).sum() / w.sum()
                total += _step(model, opt, loss)
                if sched is not None:
                    sched.step()
            train_loss = total / steps_per_epoch
            val = _validate(model, va, select) if va is not None else train_loss
            rec = {"epoch": ep + 1, "train_loss": train_loss, "val": val, "seconds": time.monotonic() - t0}
            if log is not None:
                log(rec)
            if checkpoints.after_epoch(rec) or (time_limit_s is not None and time.monotonic() - t0 > time_limit_s):
                break
        return checkpoints.finish()


# --------------------------------------------------------------------------------------------------
def segment_partials(net: Any, g: Any, configs: np.ndarray, segment: int) -> tuple:
    """(column sums [m, H], column maxima [m, H]) of one segment's node embeddings per configuration."""
    b = g.batch(configs, segment)
    h = net.node_embeddings(b).view(len(configs), -1, net.inp.out_features)
    return h.sum(1), h.max(1).values


def join_partials(net: Any, sums: torch.Tensor, maxs: torch.Tensor, n: int) -> torch.Tensor:
    """Scores from the segments' partials [m, K, H] of a graph of n nodes."""
    return net.head_of_columns(sums.sum(1) / max(n, 1), maxs.max(1).values)



def _layout_loss(model: Any, scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The layout model's loss over the configurations of one program (y: standardized log runtime)."""
    if model.config["loss"] == "mse":
        return F.mse_loss(scores, y)
    group = torch.zeros(len(y), dtype=torch.long)
    return rank_loss(scores, y, group, model.config["rank_loss"], float(model.config["margin"]))


def validate_layout(model: Any, graphs: list) -> float:
    """1 - mean Kendall tau over the programs' configurations (lower is better; NaN without programs)."""
    from costmodels.metrics import kendall
    taus = [kendall(model.scores(g), g.runtime) for g in graphs]
    taus = [t for t in taus if math.isfinite(t)]
    return 1.0 - float(np.mean(taus)) if taus else float("nan")


class _SegmentTable:
    """Stored, detached column partials (sum, max) of every (program, configuration, segment) for graph
    segment training, filled by one no-gradient pass over a program when it is first drawn."""

    def __init__(self) -> None:
        self.sums: dict = {}
        self.maxs: dict = {}

    def get(self, model: Any, gi: int, g: Any) -> tuple:
        if gi not in self.sums:
            allc = np.arange(g.num_configs)
            with torch.no_grad():
                parts = [segment_partials(model.net_, g, allc, k) for k in range(len(g.bounds))]
            self.sums[gi] = torch.stack([p[0] for p in parts], 1)   # [c, K, H]
            self.maxs[gi] = torch.stack([p[1] for p in parts], 1)
        return self.sums[gi], self.maxs[gi]


def fit_layout_gnn(model: Any, train: list, validation: Optional[list] = None, *, epochs: int = 20,
                   configs_per_step: int = 16, steps_per_epoch: Optional[int] = None, lr: float = 1e-3,
                   weight_decay: float = 0.0, patience: int = 5, seed: int = 0, time_limit_s: Optional[float] = None,
                   log=None, **_ignored: Any) -> list:
    """Train a `LayoutGnnModel` in place on prepared `LayoutGraph`s: each step draws a program (every
    family equally likely) and up to `configs_per_step` of its configurations and applies the model's
    loss over them. With the model's `segments` > 1 (graph segment training) the step backpropagates
    through one sampled segment and joins the other segments' stored partials (costmodels.gnn.layout).
    Validation: 1 - mean Kendall tau per program; the best epoch's weights are kept."""
    from costmodels.features import FeatureScaler
    if not train:
        raise ValueError("the training split has no programs")
    if getattr(model, "net_", None) is None:
        model.init_network()
    with torch_seeded(seed):  # torch's global random state is left as it was
        rng = np.random.default_rng(seed)
        model.scaler_ = FeatureScaler().fit([g.raw for g in train])
        for g in list(train) + list(validation or []):
            g.scale(model.scaler_)
        usable = [i for i, g in enumerate(train) if g.num_configs >= 2]
        if not usable:
            raise ValueError("no training program has two or more configurations to rank")
        p = family_weights(np.array([train[i].family for i in usable]))
        steps = steps_per_epoch or len(usable)
        opt = torch.optim.Adam(model.net_.parameters(), lr=lr, weight_decay=weight_decay)
        table = _SegmentTable()
        checkpoints = _Checkpoints(model, patience)
        t0 = time.monotonic()
        for ep in range(int(epochs)):
            total = 0.0
            for _ in range(steps):
                model.net_.train()
                gi = usable[int(rng.choice(len(usable), p=p))]
                g = train[gi]
                cfgs = np.sort(rng.choice(g.num_configs, min(configs_per_step, g.num_configs), replace=False))
                y = torch.from_numpy(g.y[cfgs])
                K = len(g.bounds)
                if K == 1:
                    s, m = segment_partials(model.net_, g, cfgs, 0)
                    scores = join_partials(model.net_, s[:, None], m[:, None], g.num_nodes) + model.offsets(g, cfgs)
                else:
                    sums, maxs = table.get(model, gi, g)
                    k = int(rng.integers(K))
                    s, m = segment_partials(model.net_, g, cfgs, k)
                    keep = torch.ones(K, dtype=torch.bool)
                    keep[k] = False
                    all_s = torch.cat([sums[cfgs][:, keep], s[:, None]], 1)
                    all_m = torch.cat([maxs[cfgs][:, keep], m[:, None]], 1)
                    scores = join_partials(model.net_, all_s, all_m, g.num_nodes) + model.offsets(g, cfgs)
                    sums[cfgs, k] = s.detach()
                    maxs[cfgs, k] = m.detach()
                loss = _layout_loss(model, scores, y)
                total += _step(model, opt, loss)
            val = validate_layout(model, validation) if validation else total / steps
            rec = {"epoch": ep + 1, "train_loss": total / steps, "val": val, "seconds": time.monotonic() - t0}
            if log is not None:
                log(rec)
            if checkpoints.after_epoch(rec) or (time_limit_s is not None and time.monotonic() - t0 > time_limit_s):
                break
        return checkpoints.finish()
