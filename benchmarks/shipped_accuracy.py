"""The shipped tpu cost models' accuracy on a small validation slice, recorded so that a test holds every
shipped model to it (tests/benchmarks/test_shipped_accuracy.py).

    python -m benchmarks.shipped_accuracy [--write]

The slice: two validation programs per task (bert, recommender, resnet, vae: validation families,
docs/evaluation.md), their simulator datasets built with each task's shipped recipe but
fewer configurations, scored by `autotune evaluate`. The simulator and the models are deterministic, so
the figures reproduce exactly on any machine; a change of a shipped model file or of the code that
featurizes or prices kernels moves them, and then this file is re-run (`--write`) on purpose, with the
change said in the lab note. The held-out headline figures are on docs/results.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "results" / "shipped_accuracy_reference.json"
PROGRAMS = {"fusion": ("bert_small_infer", "recommender_small_train"),
            "tile": ("bert_small_infer", "recommender_small_train"),
            "layout": ("resnet_small_infer", "vae_small_train")}
TASKS = {"fusion": ["--configs-per-program", "3"], "tile": ["--max-tiles", "16"], "layout": ["--configs-per-program", "12"]}
METRIC = {"fusion": "mape_all", "tile": "tile_ape", "layout": "kendall", "fusion-cpu": "mape_all"}
# The cpu models' labels are XLA:CPU in-program times, which are not deterministic: a slice measured once
# (3 validation programs of examples/hlo_library, 3 configurations each) is committed and re-scored.
CPU_SLICE = ROOT / "benchmarks" / "results" / "shipped_accuracy_cpu_slice"
CPU_SLICE_COMMAND = ("autotune dataset build --programs examples/hlo_library --program equinox_cnn_infer "
                     "--program flax_cnn_bn_infer --program hf_bert_infer --task fusion --evaluator xla-inprogram "
                     "--target cpu --configs-per-program 3 --store none --out " + str(CPU_SLICE.relative_to(ROOT)))


def _cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        raise RuntimeError(f"autotune {args[0]} failed: {r.stderr.strip().splitlines()[-1:]}")
    return r.stdout


def measure(tasks: tuple = tuple(TASKS) + ("fusion-cpu",)) -> dict:
    """{task: {model: figure}} on the validation slice (mean over the programs of the task's metric)."""
    out = {}
    if "fusion-cpu" in tasks:
        res = json.loads(_cli("evaluate", "--data", str(CPU_SLICE), "--split", "all", "--json"))
        out["fusion-cpu"] = {model: round(float(v["mape_all"]), 6) for model, v in res["summary"].items()
                             if v.get("mape_all") is not None}
        tasks = tuple(t for t in tasks if t != "fusion-cpu")
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            ds = Path(tmp) / task
            build = ["dataset", "build", "--programs", str(ROOT / "examples" / "hlo"), "--task", task,
                     "--evaluator", "sim", "--out", str(ds), *TASKS[task]]
            for p in PROGRAMS[task]:
                build += ["--program", p]
            _cli(*build)
            res = json.loads(_cli("evaluate", "--data", str(ds), "--split", "all", "--json"))
            out[task] = {model: round(float(v[METRIC[task]]), 6) for model, v in res["summary"].items()
                         if v.get(METRIC[task]) is not None}
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"record the figures in {REFERENCE.relative_to(ROOT)}")
    a = ap.parse_args(argv)
    figures = measure()
    print(json.dumps(figures, indent=1))
    if a.write:
        REFERENCE.write_text(json.dumps({"programs": PROGRAMS, "cpu_slice": CPU_SLICE_COMMAND, "metric": METRIC, "figures": figures},
                                        indent=1, sort_keys=True) + "\n")
        print(f"wrote {REFERENCE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
