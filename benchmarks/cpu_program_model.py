"""The whole-program cpu cost model (costmodels/program_cpu.py): validation by leaving one family out, then
one score on programs of families it never trained on.

Data: the JSON of `benchmarks.cpu_cost_models --skip-kernels` runs (per program: the default, random
and searched configurations, each timed beside the default in many short paired rounds). A
configuration's label is log of its pooled paired ratio to the default (the median of every block ratio
of every round, "local ratio"); its features are `program_features` minus the default's.

- `--validate`: for each model variant (kind: xgboost regression, ridge or pairwise-ranking trees, `-bagN`: N
  boosters with consecutive seeds averaged; with or without the kernel models' sums as features, `~blend`: or
  averaged with the prediction, `sums~blend`: that average alone), leave one training
  family out at a time: fit on the others, Kendall's tau per held-out program between the predicted and the measured ratios; beside it the kernel
  sums of the shipped kernel models (xgboost, analytical: what the search minimizes today) and the
  labels' own split-half agreement (even rounds against odd ones: what any predictor can reach).
- `--test FILES --variant V --model-out M.json`: fit V on every training program, save it, and score the
  test programs once (per-program Kendall, mean, median; the kernel sums beside it; split-half).

    python -m benchmarks.cpu_program_model --train A.json.gz B.json ... --validate [--json OUT]
    python -m benchmarks.cpu_program_model --train ... --test T.json --variant xgboost+sums --model-out M.json
    python -m benchmarks.cpu_program_model --train ... --variant rank --model-out M.json   (fit and save only)
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import statistics
from pathlib import Path
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KERNEL_MODELS = ("xgboost", "analytical")
VARIANTS = ("xgboost+sums", "xgboost", "ridge+sums", "ridge", "rank+sums", "rank", "rank-bag5+sums", "rank-bag5",
            "rank~blend", "sums~blend")
# the pairwise-ranking trees are smaller: they learn orders, not each program's scale
RANK_PARAMS = {"n_estimators": 100, "max_depth": 2}


def family(program: str) -> str:
    """bert_small_infer -> bert (the name before its size)."""
    return re.split(r"_(?:tiny|small|medium|large)_", program)[0]


def _read(path: str) -> list:
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        return [r for r in json.load(f)["programs"] if "paired" in r]


def program_rows(paths: list) -> list:
    """One entry per (file, program): its configurations' features minus the default's, labels, the
    recorded kernel sums, and the even/odd-round labels."""
    from autotune import api
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from benchmarks.cpu_cost_models import decode_config, pooled
    from costmodels.program_cpu import program_features
    models = {m: api.make_cost_model(m, "fusion", "cpu").predict for m in KERNEL_MODELS}
    out = []
    for path in paths:
        for r in _read(path):
            if "configs" not in r:  # runs before 2026-11-27 round 2 did not record the configurations
                continue
            program = r.get("path", f"examples/hlo/{r['program']}.hlo")  # relative to the repository
            space = FusionSpace(Program.from_file(str(ROOT / program)), "cpu")
            kernels = [space.kernels(decode_config(space, c)) for c in r["configs"]]
            phi_sums = program_features(kernels, models)
            rounds = r["paired"]["local_ratio_rounds"]
            y = np.log([pooled(t) for t in rounds])
            even = np.log([pooled(t, slice(0, None, 2)) for t in rounds])
            odd = np.log([pooled(t, slice(1, None, 2)) for t in rounds])
            d = r["origin"].index("default")
            ok = np.isfinite(y)
            n_sums = len(KERNEL_MODELS)
            out.append({"file": Path(path).name, "program": r["program"], "family": family(r["program"]),
                        "path": program,
                        "delta_sums": (phi_sums - phi_sums[d])[ok], "delta": (phi_sums - phi_sums[d])[ok][:, :-n_sums],
                        "y": y[ok], "even": even[ok], "odd": odd[ok],
                        # the kernel sums the search minimizes today (the shipped kernel models, priced now; the
                        # JSON's own columns came from the models of the day it was measured)
                        "kernel_sums": {(f"{m} (shipped)" if m != "analytical" else m): phi_sums[ok][:, -n_sums + j]
                                        for j, m in enumerate(KERNEL_MODELS)},
                        "origin": [o for o, k in zip(r["origin"], ok) if k]})
    return out


def _model(variant: str, seed: int = 0):
    """``KIND[-bagN][+sums|~blend]``: e.g. rank-bag5+sums, five rank models with the kernel sums as features;
    rank~blend, the rank model's prediction averaged with the kernel sums (each scaled to the labels), sums~blend
    that average alone. Seed s of a bagged variant fits seeds 5s..5s+4, so the validation's seeds are
    disjoint ensembles."""
    from costmodels.program_cpu import ProgramModel
    name, blend, _ = variant.partition("~blend")
    name, _, sums = name.partition("+")
    kind, _, bag = name.partition("-bag")
    n_bags = int(bag or 1)
    return ProgramModel(kind=kind, kernel_models=KERNEL_MODELS if (sums or blend) else (), seed=seed * n_bags,
                        n_bags=n_bags, blend=bool(blend), **(RANK_PARAMS if kind == "rank" else {}))


def fit(variant: str, rows: list, seed: int = 0):
    """The variant fitted on ``rows`` (each program measurement its own group for the rank kind)."""
    return _model(variant, seed).fit(np.vstack([_x(r, variant) for r in rows]), np.concatenate([r["y"] for r in rows]),
                               groups=np.concatenate([np.full(len(r["y"]), i) for i, r in enumerate(rows)]))


def _x(row: dict, variant: str) -> np.ndarray:
    return row["delta_sums"] if variant.endswith(("+sums", "~blend")) else row["delta"]


def score(rows: list, predict) -> dict:
    from costmodels.metrics import kendall
    per = {}
    for r in rows:
        key = f"{r['program']} ({r['file']})"
        per[key] = {"model": kendall(predict(r), r["y"]),
                    **{f"kernel sum: {k}": kendall(v, r["y"]) for k, v in r["kernel_sums"].items()},
                    "split-half (labels)": kendall(r["even"], r["odd"]), "configurations": len(r["y"])}
    cols = [c for c in next(iter(per.values())) if c != "configurations"]
    return {"programs": per, "mean": {c: float(np.mean([p[c] for p in per.values()])) for c in cols},
            "median": {c: float(statistics.median([p[c] for p in per.values()])) for c in cols}}


def validate(rows: list, variants: tuple, seeds: tuple = (0,)) -> dict:
    """Per variant: the leave-one-family-out score of the first seed, and the mean Kendall of every seed
    (the trees subsample rows: a variant's mean moves by ~0.01 from seed to seed)."""
    fams = sorted({r["family"] for r in rows})
    out = {}
    for v in variants:
        by_seed = {}
        for seed in seeds:
            preds: dict = {}
            for f in fams:
                m = fit(v, [r for r in rows if r["family"] != f], seed)
                for r in rows:
                    if r["family"] == f:
                        preds[id(r)] = m.predict(_x(r, v))
            by_seed[seed] = score(rows, lambda r: preds[id(r)])
        first = by_seed[seeds[0]]
        out[v] = {**first, "seed_means": {str(k): s["mean"]["model"] for k, s in by_seed.items()},
                  "mean_over_seeds": float(np.mean([s["mean"]["model"] for s in by_seed.values()]))}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", nargs="+", required=True, help="cpu_cost_models JSON files of the training programs")
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--seeds", nargs="*", type=int, default=[0], help="--validate: every variant with each seed")
    ap.add_argument("--test", nargs="*", default=None, help="cpu_cost_models JSON files of the test programs")
    ap.add_argument("--variant", default=None, help="the variant fitted for --test")
    ap.add_argument("--model-out", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--ledger", action="store_true",
                    help="with --test on examples/hlo_heldout programs: refuse a model file already scored there, "
                         "and record this score in benchmarks/results/heldout/ledger.json (docs/evaluation.md)")
    args = ap.parse_args(argv)
    rows = program_rows(args.train)
    result: dict = {"train": [f"{r['program']} ({r['file']})" for r in rows]}
    if args.validate:
        result["validation"] = validate(rows, tuple(args.variants), tuple(args.seeds))
        for v, s in result["validation"].items():
            print(f"{v}: " + ", ".join(f"{k} {x:.3f}" for k, x in s["mean"].items())
                  + f"; model over seeds {s['mean_over_seeds']:.3f}")
    test_set: Optional[Path] = None  # the held-out set a --ledger score is recorded on
    if args.test or (args.variant and args.model_out):
        if not args.variant:
            ap.error("--test needs --variant (chosen on validation)")
        test = program_rows(args.test) if args.test else []
        train_fams = {r["family"] for r in rows}
        leaked = sorted({r["program"] for r in test if r["family"] in train_fams})
        if leaked:
            ap.error(f"test programs of training families: {leaked}")
        m = fit(args.variant, rows)
        sha: Optional[str] = None
        if args.model_out:
            m.save(args.model_out)
            sha = hashlib.sha256(Path(args.model_out).read_bytes()).hexdigest()
            print(f"model {args.variant} fitted on {len(rows)} program measurements: {args.model_out} (sha256 {sha})")
        if test and args.ledger:
            if not args.model_out:
                ap.error("--ledger needs --model-out (the ledger keys a score by the model file's SHA-256)")
            from benchmarks import heldout
            test_set = test_set_of(test)
            if test_set is None:
                ap.error("--ledger: the test programs must all come from one held-out test set ("
                         + ", ".join(heldout.shown(f) for f in heldout.HELDOUT_SETS) + ")")
            ledger = heldout.read_ledger()
            done = heldout.already_scored(ledger, LEDGER_TASK, {Path(args.model_out).name: Path(args.model_out)},
                                          heldout.test_set_digest(test_set))
            if done:
                ap.error(f"this model file was scored on the held-out test set on {done[0]['date']} "
                         f"(commit {done[0]['commit']}; {done[0]['raw']}): a model is scored once")
        if test:
            result["test"] = {"variant": args.variant, "model_sha256": sha,
                              **score(test, lambda r: m.predict(_x(r, args.variant)))}
            print("test: " + ", ".join(f"{k} {x:.3f}" for k, x in result["test"]["mean"].items()))
            for p, s in result["test"]["programs"].items():
                print(f"  {p}: " + ", ".join(f"{k} {x:.3f}" for k, x in s.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if test_set is not None:
        record_score(result, args, test_set)
    return result


LEDGER_TASK = "program-fusion-cpu"


def test_set_of(rows: list) -> Optional[Path]:
    """The held-out test set (a folder of `heldout.HELDOUT_SETS`) every test program comes from, else None."""
    from benchmarks import heldout
    folders = {(ROOT / r["path"]).resolve().parent for r in rows}
    sets = {f.resolve() for f in heldout.HELDOUT_SETS}
    return folders.pop() if len(folders) == 1 and folders <= sets else None


def record_score(result: dict, args: argparse.Namespace, test_set: Path) -> None:
    """Append the one test score of a whole-program model file on the held-out set ``test_set`` to the ledger."""
    import datetime
    import sys

    from benchmarks import heldout
    from benchmarks.tables import git_commit
    ledger = heldout.read_ledger()
    t = result["test"]
    ledger["scores"].append({
        "task": LEDGER_TASK, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(), "machine": heldout.machine(), "test_set": heldout.test_set_digest(test_set),
        "test_set_folder": heldout.shown(test_set),
        "model_sha256": {Path(args.model_out).name: t["model_sha256"]}, "model_files": [heldout.shown(Path(args.model_out))],
        "commands": ["python -m benchmarks.cpu_program_model " + " ".join(sys.argv[1:])],
        "raw": heldout.shown(Path(args.json)) if args.json else None,
        "table": [f"{k}: " + ", ".join(f"{c} {x:.3f}" for c, x in v.items()) for k, v in t["programs"].items()],
        "summary": {"whole-program model (" + t["variant"] + ")": t["mean"]}, "median": {"model": t["median"]}})
    heldout.write_ledger(ledger)
    print(f"recorded in {heldout.shown(heldout.LEDGER)}")


if __name__ == "__main__":
    main()
