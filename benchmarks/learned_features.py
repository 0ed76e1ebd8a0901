"""Accuracy of the XGBoost fusion cost model on a dataset's family split, with seeds and a feature
ablation (issue 17).

    python -m benchmarks.learned_features --data DS/fusion [--seeds 0 1 2] [--rounds 2000] [--depth 8]
                                          [--lr 0.05] [--min-runtime-us 5] [--no-ablation]
                                          [--out benchmarks/results/learned_features.md]

DS/fusion is built with `autotune dataset build --task fusion --evaluator sim`
(docs/lab-notes/2026-11-24-kernel-geometry-features.md). Every
model is trained on the train split (early stopping on the validation split) with one thread and
scored on the test split by `autotune.cli.learn.evaluate_models`, the code behind `autotune
evaluate`: per-program mean and median MAPE and Kendall tau over kernels >= 5 us, and the pooled
MAPE and Kendall over every such test kernel at once. Rows:
* "before": the features and settings of the previous XGBoost model (no geometry groups, 300
  rounds at depth 6, every kernel in the loss), seed 0;
* "all features": the current featurizer, trained on every kernel and on kernels >= --min-runtime-us
  only, one row per seed, and their mean and spread (max - min);
* the ablation: one feature group (`costmodels.xgb.FEATURE_GROUPS`) dropped at a time, first seed,
  trained on kernels >= --min-runtime-us (the faster of the two trainings).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np



def _train_and_score(ds, *, seed: int, rounds: int, depth: int, lr: float, min_runtime_s: float,
                     drop=()) -> dict:
    from autotune.tuning.evaluation import evaluate_models
    from costmodels.xgb import XgbCostModel
    t0 = time.perf_counter()
    m = XgbCostModel("fusion", ds.target, n_estimators=rounds, max_depth=depth, learning_rate=lr, seed=seed,
                     min_runtime_s=min_runtime_s, drop_groups=drop, nthread=1, early_stopping_rounds=100)
    m.fit(ds)
    train_s = time.perf_counter() - t0
    res = evaluate_models({"m": m}, ds, "test")
    return {"mape_mean": res["summary"]["m"]["mape"], "mape_median": res["median"]["m"]["mape"],
            "mape_pooled": res["pooled"]["m"]["mape"], "kendall_mean": res["summary"]["m"]["kendall"],
            "kendall_median": res["median"]["m"]["kendall"], "kendall_pooled": res["pooled"]["m"]["kendall"],
            "mape_all_mean": res["summary"]["m"]["mape_all"], "mape_all_pooled": res["pooled"]["m"]["mape_all"],
            "best_iteration": m.best_iteration_, "train_s": train_s,
            "per_program": {p: r["m"] for p, r in res["programs"].items()}}


def _row(label: str, r: dict) -> str:
    return (f"| {label} | {r['mape_mean']:.1f}% | {r['mape_median']:.1f}% | {r['mape_pooled']:.1f}% | "
            f"{r['kendall_mean']:.3f} | {r['kendall_median']:.3f} | {r['kendall_pooled']:.3f} | "
            f"{r['mape_all_pooled']:.1f}% |")


HEADER = ("| model | MAPE mean | MAPE median | MAPE pooled | Kendall mean | Kendall median | Kendall pooled | "
          "MAPE all kernels, pooled |\n|---|---:|---:|---:|---:|---:|---:|---:|")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="fusion dataset directory (autotune dataset build)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--min-runtime-us", type=float, default=5.0)
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--groups", nargs="*", default=None, help="ablate only these groups")
    ap.add_argument("--out", default=None, help="markdown report (and .json beside it)")
    args = ap.parse_args(argv)
    from autotune.tuning.dataset import Dataset
    from costmodels.xgb import FEATURE_GROUPS
    ds = Dataset.open(args.data)
    if ds.task != "fusion":
        print(f"{args.data} is a {ds.task} dataset; this benchmark needs a fusion dataset", file=sys.stderr)
        return 2
    geo = [g for g in FEATURE_GROUPS if g.startswith("geo_")]
    kw = dict(rounds=args.rounds, depth=args.depth, lr=args.lr, min_runtime_s=args.min_runtime_us * 1e-6)
    results: dict = {}
    lines = [f"XGBoost fusion model, dataset {args.data}, test split "
             f"({', '.join(ds.programs_in('test'))}); {args.rounds} rounds at depth {args.depth}, eta {args.lr}, "
             f"1 thread; {platform.machine()}, "
             f"{time.strftime('%Y-%m-%d')}", "", HEADER]

    def run(label: str, **over) -> dict:
        r = _train_and_score(ds, **{**kw, **over})
        results[label] = r
        print(_row(label, r) + f"  ({r['train_s']:.0f} s, best iteration {r['best_iteration']})", flush=True)
        return r

    run("before: old features, 300 rounds, depth 6, all kernels", seed=0, rounds=300, depth=6, lr=0.1,
        min_runtime_s=0.0, drop=geo)
    lines.append(_row("before: old features, 300 rounds, depth 6, all kernels",
                      results["before: old features, 300 rounds, depth 6, all kernels"]))
    for train_label, floor in (("all kernels", 0.0), (f"kernels >= {args.min_runtime_us:g} us", kw["min_runtime_s"])):
        seeds = [run(f"all features, trained on {train_label}, seed {s}", seed=s, min_runtime_s=floor)
                 for s in args.seeds]
        for s, r in zip(args.seeds, seeds):
            lines.append(_row(f"all features, trained on {train_label}, seed {s}", r))
        if len(seeds) > 1:
            keys = [k for k in seeds[0] if k.startswith(("mape", "kendall"))]
            mean = {k: float(np.mean([r[k] for r in seeds])) for k in keys}
            spread = {k: float(np.max([r[k] for r in seeds]) - np.min([r[k] for r in seeds])) for k in keys}
            lines.append(_row(f"all features, trained on {train_label}, mean of {len(seeds)} seeds", mean))
            lines.append(_row(f"all features, trained on {train_label}, seed spread (max - min)", spread))
    if not args.no_ablation:
        base = results[f"all features, trained on kernels >= {args.min_runtime_us:g} us, seed {args.seeds[0]}"]
        lines += ["", f"Ablation (seed {args.seeds[0]}, trained on kernels >= {args.min_runtime_us:g} us): one feature "
                  "group dropped at a time", "", HEADER,
                  _row("none dropped", base)]
        for g in (args.groups if args.groups is not None else list(FEATURE_GROUPS)):
            if g == "tile":  # zero on the fusion task
                continue
            lines.append(_row(f"without {g} ({len(FEATURE_GROUPS[g])} columns)", run(f"without {g}", seed=args.seeds[0], drop=[g])))
        lines.append(_row("without every geo_* group", run("without geo", seed=args.seeds[0], drop=geo)))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
