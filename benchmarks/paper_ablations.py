"""The learned-cost-model paper's ablations (Kaufman et al., MLSys 2021, Tables 3 and 4) on our data:
one GNN per variant, trained on a dataset's train split (validation split for checkpoint selection)
and scored on its test split with `autotune evaluate`'s metrics.

Variants, each one change from the project's default GNN for the task (the baseline): the other
reductions (per-node, column-wise, LSTM, Transformer), GAT instead of GraphSAGE, no GNN layers, the
other loss (pairwise rank / MSE on log runtime), no static performance features, and GraphSAGE
aggregation over in-edges only / out-edges only. The baseline and the other-loss variant are trained
again with other seeds (once in quick mode, twice in full mode) so that the table shows how large a
difference seed noise makes, and the loss (the paper's opposite choice for the two tasks) is judged on
every seed of both losses.

    python -m benchmarks.paper_ablations --fusion-data DS/fusion --tile-data DS/tile [--quick]
        [--out docs/results] [--seed 0] [--json OUT] [--only baseline reduction=lstm ...]
        [--epochs N] [--steps-per-epoch N]   (override the mode's training length, both tasks)

Datasets come from `autotune dataset build --task fusion|tile`. Quick mode (~3 min on 2 loaded
cores) trains each variant for a few hundred steps on a seeded subsample of kernels per program; full
mode trains about as long as the shipped models (see QUICK and FULL): training and scoring on 2 cores
(2026-11-23/24) took 26-861 s per fusion variant, 2,205 s in all, and 15-136 s per tile variant, 926 s
in all. Fusion metrics are computed on kernels >= 5 us as in the paper (plus every kernel, for
comparison with docs/lab-notes/2026-11-23-learned-cost-models.md).
"""

import argparse
import json
import math
import os
import platform
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

from costmodels.metrics import FUSION_MIN_RUNTIME_S  # kernels >= 5 us, as the paper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = ["run", "Settings", "Variant", "QUICK", "FULL", "variants", "SubsetDataset", "run_task", "main"]


# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """How much data and training one ablation run uses (per task). Caps count kernels (fusion: one
    sample each; tile: all their measured tiles, at most `tiles_per_kernel`); None: no cap."""

    epochs: int
    steps_per_epoch: Optional[int] = None        # None: one pass over the (capped) train samples
    max_train_programs: Optional[int] = None
    train_kernels_per_program: Optional[int] = None
    val_kernels_per_program: Optional[int] = None
    test_kernels_per_program: Optional[int] = None
    tiles_per_kernel: Optional[int] = None       # tile task, every split (the kernel's default tile is kept)
    batch_size: int = 64
    lr: float = 1e-3
    hidden: Optional[int] = None                 # None: the GNN's default
    time_limit_s: Optional[float] = None         # per variant, a guard only (epochs_run shows if it hit)
    seed_repeats: int = 1                        # extra baseline runs with seeds seed+1.. (the noise band)
    fusion_min_runtime_s: float = FUSION_MIN_RUNTIME_S


# Quick: ~3 min for both tasks on 2 loaded cores (an optimizer step takes ~8-12 ms, 2-7x that for the
# LSTM and Transformer reductions); full: about the shipped models' training (20 x 300 fusion steps,
# 4 x 1500 tile steps; measured times in the module docstring). Both are bounded by steps, whatever the dataset's size.
# Tile kernels keep at most `tiles_per_kernel` tiles (so tile-size APE is the regret among those).
QUICK = {
    "fusion": Settings(epochs=2, steps_per_epoch=200, train_kernels_per_program=150, val_kernels_per_program=60,
                       test_kernels_per_program=150),
    "tile": Settings(epochs=2, steps_per_epoch=300, train_kernels_per_program=60, val_kernels_per_program=20,
                     test_kernels_per_program=40, tiles_per_kernel=16),
}
FULL = {
    "fusion": Settings(epochs=20, steps_per_epoch=300, val_kernels_per_program=300, time_limit_s=900,
                       seed_repeats=2),
    "tile": Settings(epochs=4, steps_per_epoch=1500, train_kernels_per_program=250, val_kernels_per_program=100,
                     test_kernels_per_program=300, tiles_per_kernel=32, time_limit_s=900, seed_repeats=2),
}


@dataclass(frozen=True)
class Variant:
    """One row of an ablation table: GNN options that differ from the task's defaults."""

    key: str
    label: str
    group: str                                   # baseline, reduction, encoder, loss, static, edges
    opts: dict = field(default_factory=dict)
    seed_offset: int = 0


_RED = {"node": "per-node", "column": "column-wise", "lstm": "LSTM", "transformer": "Transformer"}
_ENC = {"sage": "GraphSAGE", "gat": "GAT", "none": "no GNN"}
_LOSS = {"mse": "MSE (log runtime)", "rank": "pairwise rank"}


def default_config(task: str) -> dict:
    """The GNN's default configuration for a task (what `autotune train` uses without options)."""
    from costmodels.gnn.model import normalize_config
    return normalize_config({"task": task, "target": "tpu"})


def variants(task: str, seed_repeats: int = 1) -> list:
    """The baseline, its repeats with other seeds, then one change at a time (paper Tables 3/4)."""
    from costmodels.gnn import ENCODERS, REDUCTIONS
    d = default_config(task)
    base = (f"{_ENC[d['encoder']]}, {_RED[d['reduction']]}, {_LOSS[d['loss']]}, "
            f"static features {'on' if d['static_features'] else 'off'}, edges {d['edge_direction']}")
    out = [Variant("baseline", f"**baseline** (defaults: {base})", "baseline")]
    out += [Variant(f"baseline+seed{k}", f"baseline, seed +{k} (seed noise)", "baseline", seed_offset=k)
            for k in range(1, int(seed_repeats) + 1)]
    out += [Variant(f"reduction={r}", f"reduction: {_RED[r]}", "reduction", {"reduction": r})
            for r in REDUCTIONS if r != d["reduction"]]
    out += [Variant(f"encoder={e}", "encoder: none (no GNN layers)" if e == "none" else f"encoder: {_ENC[e]}",
                    "encoder", {"encoder": e}) for e in ENCODERS if e != d["encoder"]]
    other = "rank" if d["loss"] == "mse" else "mse"
    out.append(Variant(f"loss={other}", f"loss: {_LOSS[other]}", "loss", {"loss": other}))
    # the loss is the paper's opposite choice for the two tasks: seeds on both sides settle it
    out += [Variant(f"loss={other}+seed{k}", f"loss: {_LOSS[other]}, seed +{k}", "loss", {"loss": other},
                    seed_offset=k) for k in range(1, int(seed_repeats) + 1)]
    out.append(Variant("static=off", "static features off", "static", {"static_features": False}))
    out += [Variant(f"edges={e}", f"edge direction: {e} only", "edges", {"edge_direction": e})
            for e in ("in", "out") if e != d["edge_direction"]]
    return out


# --------------------------------------------------------------------------------------------------
def _pick_programs(ds: Any, split: str, n: Optional[int], seed: int) -> list:
    """At most n programs of a split, drawn round-robin over model families (seeded)."""
    names = ds.programs_in(split)
    if n is None or len(names) <= n:
        return names
    rng = np.random.default_rng([seed, 1])
    by_fam: dict = {}
    for p in names:
        by_fam.setdefault(ds.programs[p]["family"], []).append(p)
    queues = [list(rng.permutation(v)) for _, v in sorted(by_fam.items())]
    out: list = []
    while len(out) < n:
        for q in queues:
            if q and len(out) < n:
                out.append(str(q.pop()))
    return sorted(out)


class SubsetDataset:
    """A read-only view of an `autotune.tuning.dataset.Dataset` with seeded per-program caps and a runtime
    floor, exposing what `GnnCostModel.fit` and `evaluate_models` use (task, target, root, programs,
    programs_in, iter_programs, load). Every variant sees exactly the same samples."""

    def __init__(self, ds: Any, settings: Settings, seed: int = 0, min_runtime_s: float = 0.0):
        self.ds, self.settings, self.seed, self.min_runtime_s = ds, settings, int(seed), float(min_runtime_s)
        self.task, self.target, self.root = ds.task, ds.target, ds.root
        self._names = {s: _pick_programs(ds, s, settings.max_train_programs if s == "train" else None, seed)
                       for s in ("train", "validation", "test")}
        self._cache: dict = {}

    @property
    def programs(self) -> dict:
        return {p: self.ds.programs[p] for v in self._names.values() for p in v}

    def programs_in(self, split: str = "all") -> list:
        if split in ("all", None):
            return sorted(self.programs)
        from autotune.tuning.dataset import split_name
        return list(self._names[split_name(split)])

    def _cap(self, split: str) -> Optional[int]:
        st = self.settings
        return {"train": st.train_kernels_per_program, "validation": st.val_kernels_per_program,
                "test": st.test_kernels_per_program}[split]

    def load_program(self, name: str, split: str) -> Any:
        """The program's samples after the caps: finite runtimes >= the floor, at most the split's
        number of kernels, at most `tiles_per_kernel` tiles per kernel (default tile kept)."""
        key = (split, name)
        if key in self._cache:
            return self._cache[key]
        s = self.ds.load_program(name)
        rng = np.random.default_rng([self.seed, zlib.crc32(f"{split}|{name}".encode())])
        rt = s.runtime
        ok = np.isfinite(rt) & (rt > 0) & (rt >= self.min_runtime_s)
        gids = np.unique(s.graph[ok])
        cap = self._cap(split)
        if cap is not None and len(gids) > cap:
            gids = np.sort(rng.choice(gids, cap, replace=False))
        keep = ok & np.isin(s.graph, gids)
        tcap = self.settings.tiles_per_kernel if self.task == "tile" else None
        if tcap is not None:
            idx = []
            dflt = s.is_default if s.is_default is not None else np.zeros(len(s), bool)
            for g in gids:
                mine = np.nonzero(keep & (s.graph == g))[0]
                if len(mine) > tcap:
                    first = mine[dflt[mine]][:1]
                    rest = np.setdiff1d(mine, first)
                    mine = np.concatenate([first, rng.choice(rest, tcap - len(first), replace=False)])
                idx.append(mine)
            sel = np.sort(np.concatenate(idx)) if idx else np.zeros(0, np.int64)
        else:
            sel = np.nonzero(keep)[0]
        out = s.select(sel).compact() if len(sel) else None
        self._cache[key] = out
        return out

    def iter_programs(self, split: str = "all") -> Iterator[tuple]:
        splits = ("train", "validation", "test") if split in ("all", None) else (split,)
        for sp in splits:
            for p in self.programs_in(sp):
                s = self.load_program(p, sp)
                if s is not None:
                    yield p, s

    def load(self, split: str = "train") -> Any:
        """All capped samples of a split (validation is scored in size-sorted batches by the model)."""
        from autotune.tuning.dataset import Samples
        key = ("load", split)
        if key in self._cache:
            return self._cache[key]
        parts = [s for _, s in self.iter_programs(split)]
        if not parts:
            raise ValueError(f"dataset {self.root} has no samples in the {split} split")
        s = Samples.concat(parts)
        s.tile_feat  # noqa: B018 - computed once here, shared by every variant
        self._cache[key] = s
        return s

    def size(self, split: str) -> dict:
        """{"programs", "kernels", "samples"} of a split after the caps."""
        parts = [s for _, s in self.iter_programs(split)]
        return {"programs": len(parts), "kernels": int(sum(len(s.graphs) for s in parts)),
                "samples": int(sum(len(s) for s in parts))}


# --------------------------------------------------------------------------------------------------
def _summary(res: dict, label: str, keys: tuple) -> dict:
    return {f"{k}_{stat}": res[stat][label].get(k, float("nan"))
            for k in keys for stat in ("summary", "median")}


def train_and_evaluate(task: str, variant: Variant, train_view: SubsetDataset, test_views: dict,
                       settings: Settings, seed: int) -> dict:
    """Train one variant (autotune.api.new_model, GnnCostModel.fit) and score it with
    `evaluate_models` on each test view; returns one JSON-ready row."""
    from autotune.api import new_model
    from autotune.tuning.evaluation import evaluate_models
    s = seed + variant.seed_offset
    opts = dict(variant.opts, seed=s, hidden=settings.hidden)
    m = new_model("gnn", task, train_view.target, **opts)
    t0 = time.perf_counter()
    m.fit(train_view, epochs=settings.epochs, steps_per_epoch=settings.steps_per_epoch,
          batch_size=settings.batch_size, lr=settings.lr, seed=s, progress=False, time_limit_s=settings.time_limit_s)
    train_s = time.perf_counter() - t0
    hist = [h for h in m.history if "epoch" in h]
    best = m.history[-1] if m.history and "best_epoch" in m.history[-1] else {}
    row: dict = {"key": variant.key, "label": variant.label, "group": variant.group, "opts": variant.opts,
                 "seed": s, "config": {k: m.config[k] for k in ("encoder", "reduction", "loss", "static_features",
                                                                "edge_direction", "hidden", "layers")},
                 "predicts_absolute": bool(m.predicts_absolute), "train_s": train_s,
                 "epochs_run": len(hist), "best_epoch": best.get("best_epoch"), "best_val": best.get("best_val"),
                 "metrics": {}, "per_program": {}}
    t1 = time.perf_counter()
    for name, view in test_views.items():
        res = evaluate_models({variant.key: m}, view, "test")
        if task == "fusion":
            # the views already apply the runtime floor (settings.fusion_min_runtime_s): score every
            # kernel of the view (`*_all`), not evaluate's own 5 us floor on top of it
            row["metrics"][name] = {k.replace("_all_", "_"): v for k, v in
                                    _summary(res, variant.key, ("mape_all", "kendall_all")).items()}
        else:
            row["metrics"][name] = _summary(res, variant.key, ("tile_ape", "kendall", "top1", "top5"))
        row["per_program"][name] = {p: r[variant.key] for p, r in res["programs"].items()}
    row["eval_s"] = time.perf_counter() - t1
    return row


def run_task(task: str, data: Path, settings: Settings, seed: int = 0, only: Optional[list] = None,
             log: Callable[[str], Any] = print, done: Any = None) -> dict:
    """All variants of one task on one dataset: {"task", "settings", "sizes", "rows", ...}. `done` (a
    benchmarks/joblog.JobLog) keeps each finished variant, so that an interrupted run resumes."""
    from autotune.tuning.dataset import Dataset
    ds = Dataset.open(data)
    if ds.task != task:
        raise ValueError(f"{data} is a {ds.task} dataset, not {task}")
    t0 = time.perf_counter()
    train_view = SubsetDataset(ds, settings, seed)
    test_views = {"main": train_view}
    if task == "fusion":
        # the paper's fusion metrics count kernels >= 5 us (about 10% of ours: all of them are kept);
        # "all" scores every kernel as `autotune evaluate` does
        floor_view = SubsetDataset(ds, replace(settings, test_kernels_per_program=None), seed,
                                   settings.fusion_min_runtime_s)
        test_views = {"main": floor_view, "all": train_view}
    sizes = {"train": train_view.size("train"), "validation": train_view.size("validation"),
             "test": test_views["main"].size("test"), "test_all": train_view.size("test")}
    for split in ("train", "validation"):
        try:
            train_view.load(split)  # concatenated and featurized once, shared by every variant
        except ValueError:
            if split == "train":
                raise
    log(f"[ablations] {task}: {sizes['train']['samples']} train / {sizes['validation']['samples']} "
        f"validation / {sizes['test']['samples']} test samples (setup {time.perf_counter() - t0:.1f} s)")
    rows, resumed = [], 0
    for v in variants(task, settings.seed_repeats):
        if only is not None and v.key not in only:
            continue
        # the model as resolved now (the task's defaults may change), not only the variant's changes
        job = {"task": task, "variant": asdict(v), "model": {**default_config(task), **v.opts},
               "settings": asdict(settings), "seed": seed, "data": str(Path(data).resolve())}
        row = done.get(job) if done is not None else None
        resumed += row is not None
        if row is None:
            row = train_and_evaluate(task, v, train_view, test_views, settings, seed)
            if done is not None:
                done.put(job, row)
        rows.append(row)
        main = row["metrics"]["main"]
        shown = (f"Kendall {main['kendall_summary']:.3f} MAPE {main['mape_summary']:.1f}%" if task == "fusion"
                 else f"tile APE {main['tile_ape_summary']:.2f}% Kendall {main['kendall_summary']:.3f}")
        log(f"[ablations] {task} {v.key}: {shown}; train {row['train_s']:.1f} s ({row['epochs_run']} epochs), "
            f"eval {row['eval_s']:.1f} s")
    return {"task": task, "data": str(data), "settings": asdict(settings), "seed": seed,
            "dataset_programs": {s: len(ds.programs_in(s)) for s in ("train", "validation", "test")},
            "dataset_samples": len(ds), "sizes": sizes, "rows": rows, "seconds": time.perf_counter() - t0,
            "resumed": resumed, "variant_s": sum(r["train_s"] + r["eval_s"] for r in rows)}


# --------------------------------------------------------------------------------------------------
def _f(v: Optional[float], fmt: str, scale: float = 1.0, suffix: str = "") -> str:
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-"
    return f"{v * scale:{fmt}}{suffix}"


def _table(res: dict) -> str:
    """The GitHub-markdown table of one task (rows = variants)."""
    task = res["task"]
    lines = []
    if task == "fusion":
        lines.append("| variant | MAPE mean | MAPE median | Kendall mean | Kendall median | all kernels: MAPE "
                     "mean | all kernels: Kendall mean | epochs (best) | train s |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in res["rows"]:
            m, a = r["metrics"]["main"], r["metrics"]["all"]
            lines.append(f"| {r['label']} | {_f(m['mape_summary'], '.1f', suffix='%')} | "
                         f"{_f(m['mape_median'], '.1f', suffix='%')} | {_f(m['kendall_summary'], '.3f')} | "
                         f"{_f(m['kendall_median'], '.3f')} | {_f(a['mape_summary'], '.1f', suffix='%')} | "
                         f"{_f(a['kendall_summary'], '.3f')} | "
                         f"{r['epochs_run']} ({r['best_epoch']}) | {r['train_s']:.0f} |")
    else:
        lines.append("| variant | tile-size APE mean | tile-size APE median | Kendall within kernels | "
                     "top-1 slowdown | epochs (best) | train s |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|")
        for r in res["rows"]:
            m = r["metrics"]["main"]
            lines.append(f"| {r['label']} | {_f(m['tile_ape_summary'], '.2f', suffix='%')} | "
                         f"{_f(m['tile_ape_median'], '.2f', suffix='%')} | {_f(m['kendall_summary'], '.3f')} | "
                         f"{_f(m['top1_summary'], '.1f', 100.0, '%')} | {r['epochs_run']} ({r['best_epoch']}) | "
                         f"{r['train_s']:.0f} |")
    return "\n".join(lines)


# primary metric per task: (metric key in metrics["main"], higher is better, noise floor, unit)
_PRIMARY = {"fusion": ("kendall_summary", True, 0.03, "Kendall"), "tile": ("tile_ape_summary", False, 0.5, "pp")}


def _changes(res: dict) -> dict:
    """Every row's change of the primary metric vs the baseline (seed 0), signed so that > 0 is better."""
    key, higher, _, _ = _PRIMARY[res["task"]]
    vals = {r["key"]: r["metrics"]["main"].get(key, float("nan")) for r in res["rows"]}
    b = vals.get("baseline", float("nan"))
    return {k: (1.0 if higher else -1.0) * (v - b) for k, v in vals.items()}


def _seed_range(res: dict) -> tuple:
    """(lowest, highest) change of the primary metric among the baseline's seeds, signed as in `_effects`."""
    ds = [x for k, x in _changes(res).items() if k.startswith("baseline") and math.isfinite(x)]
    return (min(ds), max(ds)) if ds else (0.0, 0.0)


def _effects(res: dict) -> tuple:
    """(per-variant change of the primary metric vs the baseline, signed so that > 0 is better; the
    noise band: twice the spread of the baseline's seeds, at least the metric's floor)."""
    lo, hi = _seed_range(res)
    d = {k: x for k, x in _changes(res).items() if not k.startswith("baseline") and "+seed" not in k}
    return d, max(2 * (hi - lo), _PRIMARY[res["task"]][2])


def _loss_seeds(res: dict) -> dict:
    """{loss: [primary metric per seed]} for the baseline's loss and the other one (their seed repeats)."""
    key = _PRIMARY[res["task"]][0]
    base_loss = default_config(res["task"])["loss"]
    out: dict = {}
    for r in res["rows"]:
        v = r["metrics"]["main"].get(key, float("nan"))
        if not math.isfinite(v):
            continue
        if r["key"].startswith("baseline"):
            out.setdefault(base_loss, []).append(v)
        elif r["key"].split("+")[0].startswith("loss="):
            out.setdefault(r["key"].split("+")[0][len("loss="):], []).append(v)
    return out


def _seeded_verdict(good: list, bad: list, higher: bool) -> str:
    """With seeds on both sides: better/worse only when every seed of one side beats every seed of the other."""
    sign = 1.0 if higher else -1.0
    g, b = [sign * x for x in good], [sign * x for x in bad]
    return "better" if min(g) > max(b) else ("worse" if max(g) < min(b) else "same")


def _verdict(delta: Optional[float], noise: float) -> str:
    if delta is None or not math.isfinite(delta):
        return "n/a"
    return "better" if delta > noise else ("worse" if delta < -noise else "same")


def _claims(task: str, d: dict, noise: float, loss_seeds: Optional[dict] = None) -> list:
    """(claim, verdict) for the paper's findings that apply to the task; d is `_effects`' first item. The
    loss claim uses every seed of both losses where `loss_seeds` (`_loss_seeds`) has repeats of both."""
    base = default_config(task)

    def val(key: str, option: str) -> float:  # the change of a variant; 0 for the baseline's own option
        return 0.0 if base[key] == option else d.get(f"{key}={option}", float("nan"))

    def best(key: str, options: tuple) -> float:
        xs = [val(key, o) for o in options]
        xs = [x for x in xs if math.isfinite(x)]
        return max(xs) if xs else float("nan")

    out = [("column-wise/Transformer reductions beat per-node/LSTM",
            _verdict(best("reduction", ("column", "transformer")) - best("reduction", ("node", "lstm")), noise)),
           ("GraphSAGE beats GAT and no GNN", _verdict(val("encoder", "sage") - best("encoder", ("gat", "none")), noise))]
    good, bad = ("rank", "mse") if task == "tile" else ("mse", "rank")
    seeds = loss_seeds or {}
    if len(seeds.get(good, [])) > 1 and len(seeds.get(bad, [])) > 1:
        loss_verdict = _seeded_verdict(seeds[good], seeds[bad], _PRIMARY[task][1])
    else:
        loss_verdict = _verdict(val("loss", good) - val("loss", bad), noise)
    out.append((f"{'rank' if good == 'rank' else 'MSE'} loss beats {'MSE' if bad == 'mse' else 'rank'}", loss_verdict))
    if task == "fusion":
        out.append(("static features help", _verdict(-d.get("static=off", float("nan")), noise)))
    return out


def _reading(results: dict, quick: bool) -> str:
    """A few sentences read off the numbers (nothing here is hard-coded): which changes move the
    primary metric beyond the baseline's seed noise, and where that agrees with the paper."""
    out = []
    agree, disagree, unclear = [], [], []
    for task, res in results.items():
        if not res["rows"]:
            continue
        d, noise = _effects(res)
        fmt = "{:+.3f}" if task == "fusion" else "{:+.2f} pp"
        labels = {r["key"]: r["label"] for r in res["rows"]}
        beyond = sorted((k for k, x in d.items() if _verdict(x, noise) in ("better", "worse")), key=lambda k: d[k])
        worse = [f"{labels[k]} ({fmt.format(d[k] if task == 'fusion' else -d[k])})" for k in beyond if d[k] < 0]
        better = [f"{labels[k]} ({fmt.format(d[k] if task == 'fusion' else -d[k])})" for k in beyond[::-1] if d[k] > 0]
        metric = ("Kendall tau on kernels >= 5 us" if task == "fusion" else "tile-size APE")
        lo, hi = _seed_range(res)
        floor = _PRIMARY[task][2]  # beyond every seed by at least the metric's floor, so not a hair's breadth
        outside = [f"{labels[k]} ({fmt.format(d[k] if task == 'fusion' else -d[k])})" for k in sorted(d, key=d.get)
                   if k not in beyond and math.isfinite(d[k]) and (d[k] >= hi + floor or d[k] <= lo - floor)]
        out.append(f"{task.capitalize()} ({metric}; noise band ±{noise:.3g}{'' if task == 'fusion' else ' pp'}, "
                   f"twice the spread of the baseline's seeds): worse than the baseline beyond noise: "
                   f"{', '.join(worse) or 'none'}; better: {', '.join(better) or 'none'}"
                   + (f"; beyond every seed's result by at least {floor:g}{'' if task == 'fusion' else ' pp'} but inside the "
                      f"band: {', '.join(outside)}" if outside else "")
                   + ".")
        seeds = _loss_seeds(res)
        if len(seeds) == 2 and all(len(x) > 1 for x in seeds.values()):
            unit = "" if task == "fusion" else "%"
            fmt_v = "{:.3f}" if task == "fusion" else "{:.2f}"
            counts = sorted({len(x) for x in seeds.values()})
            out.append(f"Loss, {counts[0] if len(counts) == 1 else ' and '.join(map(str, counts))} seeds "
                       f"{'each ' if len(counts) == 1 else ''}"
                       f"({' vs '.join(_LOSS[k] for k in seeds)}): " + "; ".join(
                           f"{_LOSS[k]} mean {fmt_v.format(float(np.mean(x)))}{unit} (range "
                           f"{fmt_v.format(min(x))}-{fmt_v.format(max(x))}{unit})" for k, x in seeds.items())
                       + "; the loss finding counts only when every seed of one loss beats every seed of the other.")
        for claim, v in _claims(task, d, noise, seeds):
            if v != "n/a":  # n/a: a variant the claim needs was not run
                {"better": agree, "worse": disagree, "same": unclear}[v].append(f"{claim} ({task})")
    out.append("Of the paper's findings, reproduced here: " + ("; ".join(agree) or "none") + ". Contradicted: "
               + ("; ".join(disagree) or "none") + ". Not resolved (within noise): " + ("; ".join(unclear) or "none") + ".")
    if quick:
        out.append("Quick mode trains each model for a few hundred steps on a subsample, far from convergence, so "
                   "these differences say more about early training speed than about the final accuracy of a "
                   "choice; the full mode is the comparison to quote.")
    return " ".join(out)


def _plot(results: dict, path: Path) -> bool:
    """Bar chart of the primary metric per variant and task; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return False
    tasks = [t for t, r in results.items() if r["rows"]]
    if not tasks:
        return False
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        res = results[task]
        key, higher, _, _ = _PRIMARY[task]
        labels = [r["key"] for r in res["rows"]]
        vals = [r["metrics"]["main"].get(key, float("nan")) for r in res["rows"]]
        colors = ["tab:orange" if k.startswith("baseline") else "tab:blue" for k in labels]
        y = np.arange(len(labels))
        ax.barh(y, vals, color=colors)
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        if math.isfinite(vals[0]):
            ax.axvline(vals[0], color="gray", ls="--", lw=1)
        ax.set_xlabel(("Kendall tau, kernels >= 5 us (higher is better)" if task == "fusion"
                       else "tile-size APE % (lower is better)"))
        ax.set_title(f"{task} task, test split")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _json_safe(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, np.generic):
        return _json_safe(x.item())
    return x


def _task_time(res: dict) -> str:
    """The task's time; where variants were kept from an interrupted start, also their measured total."""
    text = f"{res['seconds']:.0f} s for the task"
    if res.get("resumed"):
        text += (f" ({res['resumed']} of {len(res['rows'])} variants kept from an earlier, interrupted start; "
                 f"training and scoring of all variants: {res['variant_s']:,.0f} s)")
    return text


def _shown_path(path: str) -> str:
    """A path as the text shows it: relative to the repository when inside it (the JSON keeps it whole)."""
    try:
        return str(Path(path).resolve().relative_to(Path(ROOT).resolve()))
    except ValueError:
        return str(path)


def _markdown(results: dict, quick: bool, seed: int, wall_s: float, plot: Optional[str]) -> str:
    parts = ["## Ablations (paper Tables 3 and 4)", ""]
    parts.append(f"One GNN per variant, trained on the train split with the validation split for checkpoint "
                 f"selection, scored on the held-out test families with `evaluate_models` (`autotune evaluate`'s "
                 f"metrics); {'quick' if quick else 'full'} mode, seed {seed}, {wall_s / 60:.1f} min in all"
                 + (f" (training and scoring of every variant, some of them in an earlier, interrupted start: "
                    f"{sum(r.get('variant_s', 0.0) for r in results.values()) / 60:.1f} min)"
                    if any(r.get("resumed") for r in results.values()) else "")
                 + f" on {os.cpu_count()} cores ({platform.processor() or platform.machine()}). The baseline is the "
                 f"project's default GNN for the task; every other row changes one thing. The \"seed +k\" "
                 f"rows retrain the baseline (and the other loss) with seed {seed}+k: differences of that size are noise. Everything "
                 f"ran with fixed seeds (model initialization, batches and the subsamples: seed {seed}).")
    for task, res in results.items():
        st, sz = res["settings"], res["sizes"]
        parts += ["", f"### {task.capitalize()} task", ""]
        names = {"max_train_programs": "train programs", "train_kernels_per_program": "train kernels/program",
                 "val_kernels_per_program": "validation kernels/program",
                 "test_kernels_per_program": "test kernels/program" + (" (all-kernel columns)" if task == "fusion"
                                                                      else ""),
                 "tiles_per_kernel": "tiles/kernel"}
        caps = [f"{names[k]} {v}" for k, v in st.items() if k in names and v is not None]
        steps = (f"{st['steps_per_epoch']} steps" if st["steps_per_epoch"]
                 else "one pass over the train samples")
        hidden = res["rows"][0]["config"]["hidden"] if res["rows"] else "-"
        parts.append(f"Dataset `{_shown_path(res['data'])}` ({res['dataset_samples']:,} samples; "
                     f"{res['dataset_programs']['train']}/{res['dataset_programs']['validation']}/"
                     f"{res['dataset_programs']['test']} train/validation/test programs). Used: "
                     f"{sz['train']['samples']:,} train samples ({sz['train']['kernels']:,} kernels of "
                     f"{sz['train']['programs']} programs), {sz['validation']['samples']:,} validation, "
                     f"{sz['test']['samples']:,} test samples ({sz['test']['programs']} programs)"
                     + (f"; caps: {', '.join(caps)}" if caps else "") +
                     f". At most {st['epochs']} epochs of {steps}, batch {st['batch_size']}, lr {st['lr']:g}, "
                     f"hidden {hidden}; {_task_time(res)}.")
        if task == "fusion":
            allsz = res["sizes"]["test_all"]
            parts.append(f"MAPE and Kendall tau per test program over its kernels >= "
                         f"{st['fusion_min_runtime_s'] * 1e6:g} us as in the paper ({sz['test']['samples']:,} "
                         f"kernels; programs without two such kernels have no Kendall tau), mean and median over "
                         f"programs; the \"all kernels\" columns use {allsz['samples']:,} test kernels of every "
                         f"runtime ({allsz['programs']} programs). A rank-trained model predicts scores, not "
                         f"seconds: no MAPE (-).")
        else:
            parts.append("Tile-size APE: runtime-weighted regret of the model's best tile per kernel, per test "
                         "program (mean and median over programs); Kendall tau within each kernel's tiles and "
                         "top-1 slowdown (best predicted tile vs the true best), means over programs.")
        parts += ["", _table(res)]
    parts += ["", _reading(results, quick)]
    if plot:
        parts += ["", f"![GNN ablations: main metric per variant](results/{plot})"]
    return "\n".join(parts) + "\n"


def run(out_dir: Path, quick: bool = True, seed: int = 0, fusion_data: Optional[Path] = None,
        tile_data: Optional[Path] = None, log: Callable[[str], Any] = print, only: Optional[list] = None,
        settings: Optional[dict] = None, done: Any = None) -> dict:
    """Run every ablation variant of both tasks; returns {"name", "title", "markdown", "data", "plots"}.
    `settings` ({task: Settings}) overrides QUICK/FULL; `only` restricts to these variant keys; `done`
    (a JobLog) keeps finished variants for a resumed run."""
    if fusion_data is None and tile_data is None:
        raise ValueError("pass fusion_data and/or tile_data (directories made by `autotune dataset build`)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = dict(QUICK if quick else FULL)
    chosen.update(settings or {})
    t0 = time.perf_counter()
    results: dict = {}
    for task, data in (("fusion", fusion_data), ("tile", tile_data)):
        if data is not None:
            results[task] = run_task(task, Path(data), chosen[task], seed, only, log, done)
    wall = time.perf_counter() - t0
    plots = []
    if _plot(results, out_dir / "ablations.png"):
        plots.append("ablations.png")
    md = _markdown(results, quick, seed, wall, plots[0] if plots else None)
    return {"name": "ablations", "title": "GNN ablations (paper Tables 3 and 4)", "markdown": md,
            "data": _json_safe({"quick": quick, "seed": seed, "seconds": wall, "tasks": results}), "plots": plots}


def main(argv: Optional[list] = None) -> dict:
    """Command line: run the ablations and print the markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fusion-data", type=Path, default=None, help="fusion dataset directory")
    ap.add_argument("--tile-data", type=Path, default=None, help="tile dataset directory")
    ap.add_argument("--quick", action="store_true", help="small caps and 2 epochs (a few minutes)")
    ap.add_argument("--out", type=Path, default=Path(ROOT) / "docs" / "results")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=None, help="variant keys (e.g. baseline reduction=lstm)")
    ap.add_argument("--json", dest="json_out", type=Path, default=None, help="also write the raw results here")
    ap.add_argument("--epochs", type=int, default=None, help="override the mode's epochs (both tasks)")
    ap.add_argument("--steps-per-epoch", type=int, default=None, help="override the mode's steps per epoch")
    a = ap.parse_args(argv)
    over = {k: v for k, v in (("epochs", a.epochs), ("steps_per_epoch", a.steps_per_epoch)) if v is not None}
    settings = {t: replace(st, **over) for t, st in (QUICK if a.quick else FULL).items()} if over else None
    if a.fusion_data is None and a.tile_data is None:
        ap.error("give --fusion-data and/or --tile-data")
    res = run(a.out, quick=a.quick, seed=a.seed, fusion_data=a.fusion_data, tile_data=a.tile_data,
              log=lambda s: print(s, file=sys.stderr, flush=True), only=a.only, settings=settings)
    if a.json_out:
        a.json_out.write_text(json.dumps(res["data"], indent=1))
    print(res["markdown"])
    return res


if __name__ == "__main__":
    main()
