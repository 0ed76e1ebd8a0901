"""Seed spread of the shipped cost models on the held-out test families (issue 34; docs/evaluation.md).

    python -m benchmarks.heldout_seeds --task fusion-tpu --model xgboost [--seed 1 --seed 2] [--jobs 2] [--work DIR]
    python -m benchmarks.heldout_seeds --quick      # smoke run: a tiny training on 2 validation programs, no ledger

A shipped model file is one seed of its recipe. For a task and model kind this trains the recipe that made the
shipped file (RECIPES: the `autotune dataset build` commands of its training data and its `autotune train`
options, from the lab note that shipped it) with other seeds (default: the two of 0, 1, 2 that are not the shipped
file's own), scores them on the held-out test split exactly as `benchmarks.heldout` scored the shipped file
(`heldout.score`: the same dataset recipe, `autotune evaluate --split test --json`, the analytical model beside
them), and reports the mean and the standard deviation (n - 1) over the shipped file and every recorded seed.

Each trained file goes to the ledger's `seed_spread` list (not `scores`: none of them is a shipped model), keyed by
its SHA-256 and by (task, model, recipe, seed): a seed is scored once; asking again prints the recorded figures
without training. Training the shipped file's own seed is a reproduction check: the file is compared with the
shipped one and nothing is scored. The analytical model's figures must equal those recorded when the shipped
file was scored (the same held-out dataset); the raw result says whether they do.

The figures are reported, never used: no model, recipe or seed is chosen from them (docs/evaluation.md).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from benchmarks import heldout
from benchmarks.tables import git_commit


@dataclass(frozen=True)
class Recipe:
    builds: tuple  # `autotune dataset build` options of the training data, one tuple per build, without --out
    train: tuple   # `autotune train` options besides --model, --task, --data, --out and --seed
    source: str    # the lab note that shipped the file with these commands


# (task, model) -> the recipe of the shipped file; paths are relative to the repository
RECIPES = {
    ("fusion-tpu", "xgboost"): Recipe(
        builds=(("--programs", "examples/hlo", "--task", "fusion", "--evaluator", "sim", "--configs-per-program", "8"),),
        train=("--n-estimators", "2000", "--max-depth", "8", "--lr", "0.05", "--threads", "1"),
        source="docs/lab-notes/2026-11-24-kernel-geometry-features.md"),
    ("fusion-tpu", "gnn"): Recipe(  # no option: costmodels.gnn.FUSION_RECIPE, the defaults of a fusion GNN
        builds=tuple(("--programs", corpus, "--task", "fusion", "--evaluator", "sim", "--configs-per-program", "8",
                      "--split-file", "benchmarks/results/fusion_split_attention.json")
                     for corpus in ("examples/hlo", "examples/hlo_attention")),
        train=(),
        source="docs/lab-notes/2026-11-27-gnn-head-more-bins.md"),
    ("tile-tpu", "xgboost"): Recipe(
        builds=(("--programs", "examples/hlo", "--task", "tile", "--evaluator", "sim", "--max-tiles", "64"),),
        train=("--threads", "1"),
        source="docs/lab-notes/2026-11-25-gnn-accuracy-work.md"),
}
# Not here: the tile GNN (gnn_tile_tpu.pt) was trained on 2026-11-23 on a dataset of simulator version 2
# (docs/lab-notes/2026-11-23-learned-cost-models.md); builds measure with version 4 now, so its recipe cannot be
# rerun and a retrained seed would be another model.
QUICK_SMALL = {"--configs-per-program": "2", "--max-tiles": "8", "--n-estimators": "5", "--epochs": "1"}


def recipe_record(recipe: Recipe) -> dict:
    return {"builds": [list(b) for b in recipe.builds], "train": list(recipe.train), "source": recipe.source}


def shipped_seed(path: Path) -> int:
    """The seed a shipped model file was trained with (its stored training options)."""
    if path.suffix == ".json":
        return int(json.loads(path.read_text())["params"]["seed"])
    import torch
    return int(torch.load(path, map_location="cpu", weights_only=False)["config"]["seed"])


def same_model(a: Path, b: Path) -> bool:
    """The same model: the same bytes, or (GNN files) the same weights, configuration, scalers and training
    history but for the seconds each epoch took."""
    if heldout.sha256_file(a) == heldout.sha256_file(b):
        return True
    if a.suffix != ".pt" or b.suffix != ".pt":
        return False
    import torch
    da, db = (torch.load(p, map_location="cpu", weights_only=False) for p in (a, b))

    def rest(d: dict) -> dict:
        return {k: v for k, v in d.items() if k not in ("state_dict", "history")}

    def hist(d: dict) -> list:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in d.get("history") or []]
    sa, sb = da.get("state_dict") or {}, db.get("state_dict") or {}
    return (rest(da) == rest(db) and hist(da) == hist(db) and sa.keys() == sb.keys()
            and all(torch.equal(sa[k], sb[k]) for k in sa))


def model_name(task: str, model: str, seed: int) -> str:
    ds_task, target, _, _ = heldout.TASKS[task]
    return f"{'xgb' if model == 'xgboost' else 'gnn'}_{ds_task}_{target}_seed{seed}{'.json' if model == 'xgboost' else '.pt'}"


def recorded_seeds(ledger: dict, task: str, model: str, recipe: Recipe) -> dict[int, dict]:
    """{seed: ledger entry} of the recipe's seeds already scored on this test set."""
    want = recipe_record(recipe)
    return {e["seed"]: e for e in ledger.get("seed_spread", [])
            if e["task"] == task and e["model"] == model and e["recipe"] == want
            and e["test_set"] == heldout.test_set_digest() and not e.get("void")}


def shipped_entry(ledger: dict, task: str, shipped: Path) -> Optional[dict]:
    sha = heldout.sha256_file(shipped)
    done = [e for e in ledger["scores"] if e["task"] == task and e["test_set"] == heldout.test_set_digest()
            and sha in e["model_sha256"].values() and not e.get("void")]
    return done[-1] if done else None


def with_option(options: list[str], option: str, value: Optional[str]) -> list[str]:
    """`options` with `option` set to `value` (appended when absent; removed, with its value, when value is None)."""
    out = list(options)
    if option in out:
        i = out.index(option)
        del out[i:i + 2]
    return out if value is None else [*out, option, value]


def training_commands(recipe: Recipe, data: Path, quick: bool, model: str) -> tuple[list[list[str]], list[str]]:
    """The `dataset build` commands of the training data at `data` and the `train` options (without the seed and
    the output); quick: the recipe's options shrunk, on two validation programs (one train, one validation)."""
    builds = [["dataset", "build", *b, "--out", str(data)] for b in recipe.builds]
    task = builds[0][builds[0].index("--task") + 1]
    train = ["train", "--model", model, "--task", task, "--data", str(data), *recipe.train]
    if quick:
        split = data.parent / f"{data.name}_split.json"
        split.parent.mkdir(parents=True, exist_ok=True)
        split.write_text(json.dumps({"train": [heldout.QUICK_PROGRAMS[0]], "validation": [heldout.QUICK_PROGRAMS[1]],
                                     "test": []}))
        b = with_option(with_option(builds[0], "--programs", str(heldout.QUICK_CORPUS)), "--split-file", str(split))
        for option in ("--configs-per-program", "--max-tiles"):
            if option in b:
                b = with_option(b, option, QUICK_SMALL[option])
        builds = [b + [a for p in heldout.QUICK_PROGRAMS for a in ("--program", p)]]
        option = "--n-estimators" if model == "xgboost" else "--epochs"
        train = with_option(train, option, QUICK_SMALL[option])
    return builds, train


def train_seed(train: list[str], seed: int, out: Path) -> dict:
    """Train one seed into `out`; its record (the log beside the file)."""
    args = [*train, "--seed", str(seed), "--out", str(out)]
    t0 = time.perf_counter()
    proc = heldout.cli(*args)
    wall = time.perf_counter() - t0
    out.with_suffix(out.suffix + ".log").write_text(proc.stderr + proc.stdout)
    print(f"[seed {seed}] {proc.stdout.strip()} ({wall:.0f} s)", flush=True)
    return {"seed": seed, "file": heldout.shown(out), "sha256": heldout.sha256_file(out), "wall_s": round(wall, 1),
            "command": "autotune " + " ".join(args), "last_line": proc.stdout.strip()}


def spread(figures: dict[str, dict]) -> dict:
    """{"mean": {metric: value}, "sd": {metric: value}} over the seeds' figures {seed label: {metric: value}};
    the standard deviation with n - 1 (None for one seed)."""
    metrics = sorted({k for f in figures.values() for k, v in f.items()
                      if isinstance(v, (int, float)) and not k.startswith("n_")})
    mean, sd = {}, {}
    for k in metrics:
        vals = [float(f[k]) for f in figures.values() if isinstance(f.get(k), (int, float))]
        vals = [v for v in vals if not math.isnan(v)]
        mean[k] = float(np.mean(vals)) if vals else None
        sd[k] = float(np.std(vals, ddof=1)) if len(vals) >= 2 else None
    return {"mean": mean, "sd": sd, "n": len(figures)}


def spread_report(task: str, shipped: Path, shipped_fig: dict, seeds: dict[int, dict], seed0: int) -> tuple[dict, list[str]]:
    """The spread over the shipped file and the recorded seeds (entries of the ledger), per statistic (mean, median
    and pooled over programs), and its table."""
    stats = [s for s in ("summary", "median", "pooled") if s in shipped_fig]
    rows = {s: {f"seed {seed0} (shipped {shipped.name})": shipped_fig[s].get(shipped.name, {})} for s in stats}
    for seed, e in sorted(seeds.items()):
        label = next(iter(e["model_sha256"]))
        for s in stats:
            rows[s][f"seed {seed}"] = (e.get(s) or {}).get(label, {})
    out = {s: spread(rows[s]) for s in stats}
    table_in = {s: {**rows[s], f"mean of {len(rows[stats[0]])}": out[s]["mean"], "sd": out[s]["sd"]} for s in stats}
    return {"seeds": {s: rows[s] for s in stats}, "spread": out}, heldout.table(task, table_in, {})


def analytical_matches(run: dict, shipped_rec: Optional[dict]) -> Optional[bool]:
    if not shipped_rec:
        return None
    now = run["result"].get("summary", {}).get("analytical", {})
    then = (shipped_rec.get("summary") or {}).get("analytical", {})
    keys = set(now) | set(then)
    return bool(keys) and all(isinstance(now.get(k), (int, float)) and isinstance(then.get(k), (int, float))
                              and math.isclose(now[k], then[k], rel_tol=1e-9, abs_tol=1e-12) for k in keys)


def run(task: str, model: str, seeds: Optional[list[int]], work: Path, quick: bool, jobs: int) -> int:
    recipe = RECIPES[(task, model)]
    ds_task, target, _, _ = heldout.TASKS[task]
    shipped = heldout.shipped_files(ds_task, target)[model]
    seed0 = shipped_seed(shipped)
    seeds = list(dict.fromkeys(seeds if seeds else [s for s in (0, 1, 2) if s != seed0]))
    ledger = heldout.read_ledger()
    recorded = {} if quick else recorded_seeds(ledger, task, model, recipe)
    shipped_rec = None if quick else shipped_entry(ledger, task, shipped)
    if not quick and shipped_rec is None:
        print(f"[{task} {model}] the shipped file {shipped.name} is not scored yet: "
              f"python -m benchmarks.heldout --task {task} first", file=sys.stderr)
        return 1
    for s in seeds:
        if s in recorded:
            print(f"[{task} {model}] seed {s} already scored ({recorded[s]['date']}, commit {recorded[s]['commit']}; "
                  f"{recorded[s]['raw']}): a seed is scored once")
    todo = [s for s in seeds if s not in recorded]
    paths = {s: work / "models" / model_name(task, model, s) for s in todo}
    trained: list[dict] = []
    builds: list[list[str]] = []
    if todo:
        (work / "models").mkdir(parents=True, exist_ok=True)
        builds, train = training_commands(recipe, work / f"train_{task}_{model}", quick, model)
        try:
            for b in builds:
                print(f"[{task} {model}] training data: autotune {' '.join(b)}", flush=True)
                heldout.cli(*b)
            print(f"[{task} {model}] training seeds {todo}, {jobs} at a time: autotune {' '.join(train)} --seed S",
                  flush=True)
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                trained = list(pool.map(lambda s: train_seed(train, s, paths[s]), todo))
        except RuntimeError as exc:
            print(f"[{task} {model}] error: {exc}", file=sys.stderr)
            return 1
    new = []
    for t in trained:
        if t["seed"] == seed0:  # the shipped seed again: a check of the recipe, never scored
            t["reproduces_shipped"] = same_model(paths[seed0], shipped)
            print(f"[{task} {model}] seed {seed0} retrained {'reproduces' if t['reproduces_shipped'] else 'does NOT reproduce'}"
                  f" the shipped {shipped.name} (a check; not scored)", flush=True)
        elif not quick and (done := heldout.already_scored(ledger, task, {"file": paths[t["seed"]]})):
            print(f"[{task} {model}] {t['file']} (seed {t['seed']}) was scored before: {done[0]['raw']}")
        else:
            new.append(t)
    result = None
    if new:
        try:
            result = heldout.score(task, work, quick, {model_name(task, model, t["seed"]): paths[t["seed"]] for t in new})
        except RuntimeError as exc:
            print(f"[{task} {model}] error: {exc}", file=sys.stderr)
            return 1
        print("\n".join(heldout.table(task, result["result"], result["interval95"])), flush=True)
    if quick:
        return 0
    if not trained:  # every seed asked for was scored before: its recorded figures
        print(f"[{task} {model}] over the shipped seed {seed0} and {len(recorded)} more (sd with n - 1):")
        print("\n".join(spread_report(task, shipped, shipped_rec, recorded, seed0)[1]))
        return 0
    status = 0
    date = time.strftime("%Y-%m-%d", time.gmtime())
    raw, n = heldout.RESULTS / f"{task}_{model}_seeds_{date}.json", 2
    while raw.exists():
        raw, n = heldout.RESULTS / f"{task}_{model}_seeds_{date}_{n}.json", n + 1
    doc = {"task": task, "model": model, "recipe": recipe_record(recipe),
           "shipped": {"file": heldout.shown(shipped), "seed": seed0, "sha256": heldout.sha256_file(shipped),
                       "raw": shipped_rec["raw"]},
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": git_commit(),
           "machine": heldout.machine(), "test_set": heldout.test_set_digest(),
           "training_data": ["autotune " + " ".join(b) for b in builds], "trainings": trained}
    if result is not None:
        doc |= {"commands": result["commands"], "result": result["result"], "interval95": result["interval95"],
                "analytical_matches_recorded": analytical_matches(result, shipped_rec)}
        if not doc["analytical_matches_recorded"]:
            print(f"[{task} {model}] warning: the analytical model's figures differ from those recorded with the "
                  "shipped file: the held-out dataset is not the one it was scored on", file=sys.stderr)
            status = 1
        for t in new:
            label = model_name(task, model, t["seed"])
            sub = {s: {label: result["result"][s][label]} for s in ("summary", "median", "pooled")
                   if label in result["result"].get(s, {})}  # tiles: no pooled figures but the analytical model's
            entry = {"task": task, "model": model, "seed": t["seed"], "recipe": recipe_record(recipe),
                     "date": doc["date"], "commit": doc["commit"], "machine": doc["machine"], "test_set": doc["test_set"],
                     "model_sha256": {label: t["sha256"]}, "model_files": {label: t["file"]},
                     "commands": doc["training_data"] + [t["command"]] + result["commands"], "raw": heldout.shown(raw),
                     "table": heldout.table(task, sub, {label: result["interval95"].get(label, {})}), **sub}
            ledger.setdefault("seed_spread", []).append(entry)
            recorded[t["seed"]] = entry
    doc["spread"], lines = spread_report(task, shipped, shipped_rec, recorded, seed0)
    heldout.RESULTS.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if result is not None:
        heldout.write_ledger(ledger)
    print(f"[{task} {model}] over the shipped seed {seed0} and {len(recorded)} more (sd with n - 1):")
    print("\n".join(lines))
    print(f"[{task} {model}] wrote {heldout.shown(raw)}" + (" and the ledger" if result is not None else ""), flush=True)
    return status


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=sorted({t for t, _ in RECIPES}), default="fusion-tpu")
    ap.add_argument("--model", choices=["gnn", "xgboost"], default="xgboost")
    ap.add_argument("--seed", type=int, action="append",
                    help="repeatable; default: the two of 0, 1, 2 that are not the shipped file's seed")
    ap.add_argument("--jobs", type=int, default=1, help="trainings at once (each a process)")
    ap.add_argument("--work", type=Path, help="where the datasets and trained files go (default: a temporary directory)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: the recipe shrunk, on 2 validation programs (never the test set); nothing recorded")
    a = ap.parse_args(argv)
    if (a.task, a.model) not in RECIPES:
        ap.error(f"no recipe for {a.model} on {a.task}: {', '.join(f'{m} {t}' for t, m in RECIPES)}")
    work = a.work or Path(tempfile.mkdtemp(prefix="heldout-seeds-"))
    return run(a.task, a.model, a.seed, work, a.quick, a.jobs)


if __name__ == "__main__":
    sys.exit(main())
