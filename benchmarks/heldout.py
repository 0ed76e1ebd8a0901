"""Score the shipped cost models, once, on the held-out test families (docs/evaluation.md).

    python -m benchmarks.heldout --task fusion-tpu [--task tile-tpu ...] [--work DIR]
    python -m benchmarks.heldout --quick          # smoke run on 2 validation programs, no ledger

For each task: build its dataset on examples/hlo_heldout with the recipe of the shipped models'
training data (`autotune dataset build ... --split-file examples/hlo_heldout/split.json`), evaluate
every shipped model of the task and target and the analytical model on the test split
(`autotune evaluate --json`), and write the raw result, a table with 95% bootstrap intervals over
programs, and a ledger entry under benchmarks/results/heldout/. The ledger holds the SHA-256 of each
scored model file: a model is scored once per test set; asking again prints the recorded figures.
An entry whose run was wrong (a bug in this script, not a figure someone disliked) carries a "void"
reason and does not count; docs/lab-notes say why. The ledger's `seed_spread` list holds the other seeds of the
shipped recipes (benchmarks/heldout_seeds.py), scored by `score` the same way; a file scored there counts as scored.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

from benchmarks.tables import git_commit

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "examples" / "hlo_heldout"
# every frozen held-out test set (docs/evaluation.md); HELDOUT is the one this module's tasks score on
HELDOUT_SETS = (HELDOUT, ROOT / "examples" / "hlo_heldout2")
RESULTS = ROOT / "benchmarks" / "results" / "heldout"
LEDGER = RESULTS / "ledger.json"

# task -> (dataset task, target, evaluator, extra `dataset build` options): the shipped models' recipes
TASKS = {
    "fusion-tpu": ("fusion", "tpu", "sim", ["--configs-per-program", "8"]),
    "tile-tpu": ("tile", "tpu", "sim", ["--max-tiles", "64"]),
    "layout-tpu": ("layout", "tpu", "sim", ["--configs-per-program", "8"]),
    "fusion-cpu": ("fusion", "cpu", "xla-inprogram", ["--configs-per-program", "8", "--store", "none"]),
}
QUICK_CORPUS = ROOT / "examples" / "hlo_library"   # --quick never reads the test set: validation programs
QUICK_PROGRAMS = ("equinox_cnn_infer", "haiku_mlp_dropout_train_adafactor")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_set_digest(folder: Optional[Path] = None) -> str:
    """One digest of a frozen test set (default: HELDOUT): its manifest (which holds every file's SHA-256)."""
    return sha256_file((folder or HELDOUT) / "manifest.json")


def shipped_files(task: str, target: str) -> dict[str, Path]:
    from autotune import api
    return api.shipped_models(task, target)


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def cli(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"autotune {' '.join(args[:2])} failed (exit {proc.returncode}): {tail}")
    return proc


def bootstrap_mean(values: list[float], n: int = 2000, seed: int = 0) -> Optional[list[float]]:
    """95% bootstrap interval of the mean over programs."""
    if len(values) < 2:
        return None
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=np.float64)
    means = arr[rng.integers(0, len(arr), size=(n, len(arr)))].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def intervals(result: dict) -> dict:
    """{model: {metric: [lo, hi]}} over the per-program figures of `autotune evaluate --json`."""
    per_model: dict[str, dict[str, list[float]]] = {}
    for figures in result.get("programs", {}).values():
        for model, metrics in figures.items():
            for metric, value in metrics.items():
                if isinstance(value, (int, float)) and not metric.startswith("n_") and value is not None:
                    per_model.setdefault(model, {}).setdefault(metric, []).append(float(value))
    return {m: {k: bootstrap_mean(v) for k, v in d.items()} for m, d in per_model.items()}


def table(task: str, result: dict, ci: dict) -> list[str]:
    stats = [s for s in ("summary", "median", "pooled") if s in result]
    metrics = sorted({k for s in stats for d in result[s].values() for k in d if not k.startswith("n_")})
    lines = [f"| {task}: model | " + " | ".join(f"{m} {s if s != 'summary' else 'mean'}"
                                               for m in metrics for s in stats) + " |",
             "|---|" + "---:|" * (len(metrics) * len(stats))]
    for model in result.get("summary", {}):
        cells = []
        for m in metrics:
            for s in stats:
                v = result[s].get(model, {}).get(m)
                cell = "-" if v is None else f"{v:.3f}"
                if s == "summary" and v is not None and (ci.get(model, {}).get(m)):
                    lo, hi = ci[model][m]
                    cell += f" [{lo:.3f}, {hi:.3f}]"
                cells.append(cell)
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return lines


def read_ledger() -> dict:
    return json.loads(LEDGER.read_text()) if LEDGER.exists() else {"test_set": test_set_digest(), "scores": []}


def write_ledger(ledger: dict) -> None:
    """The ledger, as every scoring command writes it (sorted keys, one trailing newline)."""
    LEDGER.write_text(json.dumps(ledger, indent=1, sort_keys=True) + "\n")


def already_scored(ledger: dict, task: str, files: dict[str, Path], test_set: Optional[str] = None) -> list[dict]:
    """The ledger's scores of any of ``files`` for ``task`` on a test set (default: HELDOUT's digest)."""
    shas = {sha256_file(p) for p in files.values()}
    digest = test_set or test_set_digest()
    return [e for e in ledger["scores"] + ledger.get("seed_spread", []) if e["task"] == task
            and e["test_set"] == digest and shas & set(e["model_sha256"].values()) and not e.get("void")]


def recipe(task: str) -> list[str]:
    """The `dataset build` options of a task's full (non-quick) run."""
    return list(TASKS[task][3])


def shown(path: Path) -> str:
    """A path as a record shows it: relative to the repository when inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def score(task: str, work: Path, quick: bool, files: Optional[dict[str, Path]] = None) -> dict:
    """Build the task's dataset and evaluate `files` ({kind: model file}; default: the task's shipped models)
    and the analytical model on it."""
    ds_task, target, evaluator, extra = TASKS[task]
    files = files or shipped_files(ds_task, target)
    ds = work / task
    build = ["dataset", "build", "--programs", str(QUICK_CORPUS if quick else HELDOUT), "--task", ds_task,
             "--evaluator", evaluator, "--target", target, "--out", str(ds), *extra]
    if quick:
        build += [a for p in QUICK_PROGRAMS for a in ("--program", p)]
        for option, small in (("--configs-per-program", "2"), ("--max-tiles", "8")):
            if option in build:
                build[build.index(option) + 1] = small
    else:
        build += ["--split-file", str(HELDOUT / "split.json")]
    t0 = time.perf_counter()
    print(f"[{task}] building the dataset: autotune {' '.join(build)}", flush=True)
    cli(*build)
    built_s = time.perf_counter() - t0
    evaluate = ["evaluate", "--data", str(ds), "--split", "all" if quick else "test", "--json"]
    for p in files.values():
        evaluate += ["--cost-model", str(p)]
    evaluate += ["--cost-model", "analytical"]
    print(f"[{task}] evaluating: autotune {' '.join(evaluate)}", flush=True)
    result = json.loads(cli(*evaluate).stdout)
    return {"task": task, "dataset_task": ds_task, "target": target, "evaluator": evaluator,
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": git_commit(),
            "machine": machine(), "test_set": test_set_digest(), "quick": quick,
            "commands": ["autotune " + " ".join(build), "autotune " + " ".join(evaluate)],
            "model_sha256": {k: sha256_file(p) for k, p in files.items()},
            "model_files": {k: shown(p) for k, p in files.items()},
            "build_s": round(built_s, 1), "wall_s": round(time.perf_counter() - t0, 1),
            "result": result, "interval95": intervals(result)}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", action="append", choices=sorted(TASKS), help="repeatable; default: every task")
    ap.add_argument("--work", type=Path, help="where the datasets go (default: a temporary directory)")
    ap.add_argument("--quick", action="store_true", help="smoke run on 2 validation programs (never the test set); nothing recorded")
    a = ap.parse_args(argv)
    tasks = a.task or (["fusion-tpu"] if a.quick else sorted(TASKS))
    work = a.work or Path(tempfile.mkdtemp(prefix="heldout-"))
    ledger = read_ledger()
    status = 0
    for task in tasks:
        ds_task, target, _, _ = TASKS[task]
        files = shipped_files(ds_task, target)
        if not a.quick:
            done = already_scored(ledger, task, files)
            if done:
                print(f"[{task}] already scored on this test set ({done[0]['date']}, commit {done[0]['commit']}): "
                      f"a model is scored once (docs/evaluation.md); recorded in {done[0]['raw']}")
                print("\n".join(done[0]["table"]))
                continue
        try:
            run = score(task, work, a.quick)
        except RuntimeError as exc:
            print(f"[{task}] error: {exc}", file=sys.stderr)
            status = 1
            continue
        lines = table(task, run["result"], run["interval95"])
        print("\n".join(lines), flush=True)
        if a.quick:
            continue
        RESULTS.mkdir(parents=True, exist_ok=True)
        raw = RESULTS / f"{task}_{run['date'][:10]}.json"
        raw.write_text(json.dumps(run, indent=1, sort_keys=True) + "\n")
        ledger["scores"].append({k: run[k] for k in ("task", "date", "commit", "machine", "test_set",
                                                     "model_sha256", "model_files", "commands")}
                                | {"raw": str(raw.relative_to(ROOT)), "table": lines,
                                   "summary": run["result"].get("summary"), "median": run["result"].get("median"),
                                   "pooled": run["result"].get("pooled")})
        write_ledger(ledger)
        print(f"[{task}] wrote {raw.relative_to(ROOT)} and the ledger", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
