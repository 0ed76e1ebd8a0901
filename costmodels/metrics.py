"""Accuracy metrics of cost models (Kaufman et al. 2021, section 5; TpuGraphs).

* `mape(pred, true)`: mean absolute percentage error, in percent.
* `kendall(pred, true)`: Kendall's tau-b rank correlation (scipy.stats.kendalltau); nan when fewer
  than two items or a constant input.
* `ordered_pair_accuracy(pred, true, groups=None)`: fraction of pairs with different true values that
  the prediction orders the same way (within each group when groups are given; predicted ties count
  as half).
* `fusion_metrics(pred, true)`: MAPE and Kendall over kernels >= 5 us (the paper's Table 2), and over all.
* `tile_size_ape(pred, true, groups)`: the paper's tile-size APE, in percent: over the kernels K of a
  program, 100 * sum_k |t_k(argmin pred) - min_i t_ki| / sum_k min_i t_ki, where t_ki is the true
  runtime of tile i of kernel k. Runtime-weighted, so it is the relative program slowdown caused by
  the model's tile choices.
* `topk_slowdown(pred, true, groups, k)`: TpuGraphs' tile metric: per kernel,
  min(true runtime of the model's top-k tiles) / min(true runtime) - 1, averaged over kernels
  (a fraction: 0.05 means the best of the k picks is 5% slower than the true best).
Non-finite true runtimes (failed measurements) are dropped first; non-finite predictions count as
+inf (slowest).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

__all__ = ["mape", "kendall", "ordered_pair_accuracy", "tile_size_ape", "topk_slowdown", "group_indices",
           "fusion_metrics", "tile_metrics", "FUSION_MIN_RUNTIME_S"]


def _arr(x: Sequence[float]) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).reshape(-1)


def _check(pred: np.ndarray, true: np.ndarray) -> None:
    if pred.shape != true.shape:
        raise ValueError(f"pred and true differ in length: {pred.shape[0]} vs {true.shape[0]}")


def mape(pred: Sequence[float], true: Sequence[float]) -> float:
    """Mean absolute percentage error (percent) over items with a finite, positive true value."""
    p, t = _arr(pred), _arr(true)
    _check(p, t)
    ok = np.isfinite(t) & (t > 0)
    if not ok.any():
        return float("nan")
    return float(np.mean(np.abs(p[ok] - t[ok]) / t[ok]) * 100.0)


def kendall(pred: Sequence[float], true: Sequence[float]) -> float:
    """Kendall's tau-b between predictions and true values."""
    from scipy.stats import kendalltau
    p, t = _arr(pred), _arr(true)
    _check(p, t)
    ok = np.isfinite(t)
    p, t = p[ok], t[ok]
    p = np.where(np.isfinite(p), p, np.finfo(np.float64).max)
    if len(p) < 2 or np.all(p == p[0]) or np.all(t == t[0]):
        return float("nan")
    res = kendalltau(p, t)
    return float(getattr(res, "statistic", res[0]))


def group_indices(groups: Optional[Sequence]) -> list:
    """Index arrays of the items of each group, groups in order of first appearance."""
    if groups is None:
        return []
    out: dict = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return [np.asarray(v, np.int64) for v in out.values()]


def _pairs_correct(p: np.ndarray, t: np.ndarray) -> tuple:
    dp = np.sign(p[:, None] - p[None, :])
    dt = np.sign(t[:, None] - t[None, :])
    iu = np.triu_indices(len(t), 1)
    dp, dt = dp[iu], dt[iu]
    valid = dt != 0
    score = np.where(dp == dt, 1.0, np.where(dp == 0, 0.5, 0.0))
    return float(score[valid].sum()), int(valid.sum())


def ordered_pair_accuracy(pred: Sequence[float], true: Sequence[float], groups: Optional[Sequence] = None,
                          max_group: int = 2000, seed: int = 0) -> float:
    """Fraction of correctly ordered pairs (pairs with equal true values are skipped). Groups larger
    than `max_group` are subsampled (O(n^2) pairs)."""
    p, t = _arr(pred), _arr(true)
    _check(p, t)
    ok = np.isfinite(t)
    p = np.where(np.isfinite(p), p, np.finfo(np.float64).max)
    idx_groups = group_indices(groups) if groups is not None else [np.arange(len(t))]
    rng = np.random.default_rng(seed)
    good = total = 0.0
    for idx in idx_groups:
        idx = idx[ok[idx]]
        if len(idx) > max_group:
            idx = rng.choice(idx, max_group, replace=False)
        if len(idx) < 2:
            continue
        g, n = _pairs_correct(p[idx], t[idx])
        good += g
        total += n
    return float(good / total) if total else float("nan")


def _per_group(pred: Sequence[float], true: Sequence[float], groups: Sequence):
    p, t = _arr(pred), _arr(true)
    _check(p, t)
    if len(groups) != len(t):
        raise ValueError("groups must have one entry per item")
    p = np.where(np.isfinite(p), p, np.inf)
    for idx in group_indices(groups):
        idx = idx[np.isfinite(t[idx])]
        if len(idx):
            yield p[idx], t[idx]


def tile_size_ape(pred: Sequence[float], true: Sequence[float], groups: Sequence) -> float:
    """Paper's tile-size APE (percent), runtime-weighted over the kernels (groups)."""
    num = den = 0.0
    for p, t in _per_group(pred, true, groups):
        best = float(t.min())
        chosen = float(t[int(np.argmin(p))])
        num += abs(chosen - best)
        den += best
    return float(100.0 * num / den) if den > 0 else float("nan")


def topk_slowdown(pred: Sequence[float], true: Sequence[float], groups: Sequence, k: int = 1) -> float:
    """TpuGraphs top-k error: mean over kernels of min(true of top-k predicted) / min(true) - 1."""
    if k < 1:
        raise ValueError("k must be >= 1")
    vals = []
    for p, t in _per_group(pred, true, groups):
        top = np.argsort(p, kind="stable")[:k]
        best = float(t.min())
        if best <= 0:
            continue
        vals.append(float(t[top].min()) / best - 1.0)
    return float(np.mean(vals)) if vals else float("nan")


FUSION_MIN_RUNTIME_S = 5e-6


def fusion_metrics(pred: Sequence[float], true: Sequence[float], min_runtime_s: float = FUSION_MIN_RUNTIME_S) -> dict:
    """The fusion-task metrics of one program: mape (percent) and kendall over the kernels whose true
    runtime is at least `min_runtime_s` (5 us, as the paper: tiny kernels barely affect a program's
    runtime), with `n_kernels` of them; `mape_all` and `kendall_all` over every kernel."""
    p, t = _arr(pred), _arr(true)
    _check(p, t)
    big = np.isfinite(t) & (t >= min_runtime_s)
    return {"mape": mape(p[big], t[big]), "kendall": kendall(p[big], t[big]), "n_kernels": int(big.sum()),
            "mape_all": mape(p, t), "kendall_all": kendall(p, t)}


def tile_metrics(pred: Sequence[float], true: Sequence[float], groups: Sequence, absolute: bool = False) -> dict:
    """The tile-task metrics of one program: tile_ape, top1/top5/top10 slowdown, kendall (mean over
    kernels), ordered-pair accuracy; plus mape when the predictions are absolute seconds."""
    taus = []
    for p, t in _per_group(pred, true, groups):
        if len(t) >= 2:
            k = kendall(p, t)
            if np.isfinite(k):
                taus.append(k)
    out = {"tile_ape": tile_size_ape(pred, true, groups),
           "top1": topk_slowdown(pred, true, groups, 1),
           "top5": topk_slowdown(pred, true, groups, 5),
           "top10": topk_slowdown(pred, true, groups, 10),
           "kendall": float(np.mean(taus)) if taus else float("nan"),
           "pair_acc": ordered_pair_accuracy(pred, true, groups)}
    if absolute:
        out["mape"] = mape(pred, true)
    return out
