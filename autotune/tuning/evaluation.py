"""Accuracy of cost models on a dataset split: the paper's Table 2 metrics per program, with mean,
median and pooled summaries, and the paper's fitted analytical baseline (per-kind scales fitted on the
train split). `autotune evaluate` prints these; the benchmarks call them directly.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from costmodels.base import CostModel

__all__ = ["evaluate_models", "fit_analytical_scales", "FittedAnalytical", "KERNEL_KINDS"]

KERNEL_KINDS = ("kLoop", "kInput", "kOutput")


def _graph_kind(g: Any) -> int:
    """Fusion kind index of a kernel graph (as the `tpu` rules: dot/conv kOutput, reduce kInput)."""
    from costmodels.features import OPCODE_INDEX
    ops = set(np.asarray(g.opcode).tolist())
    if ops & {OPCODE_INDEX.get("dot", -1), OPCODE_INDEX.get("convolution", -1)}:
        return 2
    if ops & {OPCODE_INDEX.get("reduce", -1), OPCODE_INDEX.get("reduce-window", -1)}:
        return 1
    return 0


def fit_analytical_scales(ds: Any, split: str = "train") -> dict:
    """Per-kind scales of the analytical model fitted on a split's measurements (least squares in
    log space, as the paper fits its analytical fusion baseline): {kind: scale}."""
    logs: dict = {k: [] for k in range(len(KERNEL_KINDS))}
    for _, s in ds.iter_programs(split):
        if s.analytical is None:
            continue
        for i in range(len(s)):
            y, p = float(s.runtime[i]), float(s.analytical[i])
            if math.isfinite(y) and y > 0 and math.isfinite(p) and p > 0:
                logs[_graph_kind(s.graphs[int(s.graph[i])])].append(math.log(y) - math.log(p))
    return {KERNEL_KINDS[k]: (math.exp(float(np.mean(v))) if v else 1.0) for k, v in logs.items()}


class FittedAnalytical:
    """The dataset's stored analytical predictions times per-kind scales fitted on the train split."""

    def __init__(self, scales: dict):
        self.scales = scales

    @classmethod
    def fit(cls, ds: Any, split: str = "train") -> "FittedAnalytical":
        """Scales fitted on a split of the dataset (`fit_analytical_scales`)."""
        return cls(fit_analytical_scales(ds, split))

    def apply(self, s: Any) -> np.ndarray:
        sc = np.array([self.scales[KERNEL_KINDS[_graph_kind(s.graphs[int(g)])]] for g in s.graph])
        return np.asarray(s.analytical, float) * sc


def evaluate_models(models: dict, ds: Any, split: str = "test") -> dict:
    """{"programs": {name: {model: {metric: value}}}, "summary": {model: {metric: mean}},
    "median": {model: {metric: median}}, "pooled": {model: {metric: value over every kernel of the
    split at once}} (fusion task, absolute predictions)}; `models` maps a label to a model or "analytical"."""
    from costmodels.metrics import fusion_metrics, tile_metrics
    names = ds.programs_in(split)
    if not names:
        raise ValueError(f"dataset {ds.root} has no programs in the {split} split")
    if ds.task == "layout":
        return _summarize(models, ds, split, evaluate_layout_programs(models, ds, split), {})
    per: dict = {}
    pooled_pred: dict = {label: [] for label in models}
    pooled_true: list = []
    for name, s in ds.iter_programs(split):
        ok = np.isfinite(s.runtime) & (s.runtime > 0)
        if not ok.any():
            continue
        s = s.select(np.nonzero(ok)[0])
        row: dict = {}
        for label, m in models.items():
            if isinstance(m, str) and m == "analytical":
                pred, absolute = s.analytical, True
            elif isinstance(m, FittedAnalytical):
                pred, absolute = m.apply(s), True
            else:
                pred = m.predict_graphs(s.sample_graphs(), s.tile_feat)
                absolute = not isinstance(m, CostModel) or bool(m.predicts_absolute)
            if ds.task == "fusion":
                pooled_pred[label].append(np.asarray(pred, float) if absolute else None)
                met = fusion_metrics(pred, s.runtime)
                if not absolute:
                    met.pop("mape")
                    met.pop("mape_all")
            else:
                met = tile_metrics(pred, s.runtime, s.graph, absolute=absolute)
                met.pop("pair_acc", None)
            row[label] = met
        per[name] = row
        pooled_true.append(np.asarray(s.runtime, float))
    pooled: dict = {}
    if ds.task == "fusion" and pooled_true:  # every test kernel in one pool (no per-program weighting)
        true = np.concatenate(pooled_true)
        for label, preds in pooled_pred.items():
            if preds and all(p is not None for p in preds):
                met = fusion_metrics(np.concatenate(preds), true)
                pooled[label] = {"mape": met["mape"], "kendall": met["kendall"], "n_kernels": met["n_kernels"],
                                 "mape_all": met["mape_all"], "kendall_all": met["kendall_all"]}
    return _summarize(models, ds, split, per, pooled)


def evaluate_layout_programs(models: dict, ds: Any, split: str) -> dict:
    """{program: {model: {"kendall": tau, "top1": slowdown}}} of a layout dataset's split: Kendall's tau of
    the model's configuration scores against the runtimes (TpuGraphs' layout metric) and the top-1
    slowdown; model "analytical" is the analytical prices stored in the dataset."""
    from costmodels.metrics import kendall, topk_slowdown
    per: dict = {}
    for name, family, rec in ds.iter_layouts(split):
        true = np.asarray(rec.arrays["config_runtime"], float)
        row: dict = {}
        for label, m in models.items():
            if isinstance(m, str) and m == "analytical":
                pred = np.asarray(rec.arrays["config_analytical"], float)
            else:
                pred = m.predict_layouts(name, family, rec.arrays)
            row[label] = {"kendall": kendall(pred, true),
                          "top1": topk_slowdown(pred, true, np.zeros(len(true), np.int64), 1)}
        per[name] = row
    return per


def _summarize(models: dict, ds: Any, split: str, per: dict, pooled: dict) -> dict:
    summary: dict = {}
    median: dict = {}
    for label in models:
        keys = sorted({k for r in per.values() for k in r.get(label, {})})
        summary[label], median[label] = {}, {}
        for k in keys:
            vals = np.array([r[label][k] for r in per.values() if k in r.get(label, {})], float)
            vals = vals[np.isfinite(vals)]
            summary[label][k] = float(vals.mean()) if len(vals) else float("nan")
            median[label][k] = float(np.median(vals)) if len(vals) else float("nan")
    return {"task": ds.task, "split": split, "programs": per, "summary": summary, "median": median,
            "pooled": pooled}
