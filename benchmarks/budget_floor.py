"""End-to-end wall time of `autotune fusion` against small budgets (issue 21): a budget that start-up and
writing the outputs use up is refused in one line naming the budget the program needs (exit 2); a larger
one runs and ends within the budget. Each run is a fresh process, timed from outside.

    python -m benchmarks.budget_floor [--programs examples/scale/transformer_L48.hlo examples/hlo/bert_small_infer.hlo]
        [--budgets 2 5 10 20 30] [--model default] [--md out.md] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.tables import emit_results

ROOT = Path(__file__).resolve().parents[1]


def run(program: str, budget: float, model: str) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "autotune.cli", "fusion", program, "--budget", f"{budget:g}s", "--evaluator", "sim",
               "--store", "none", "--no-progress", "--out", str(Path(out) / "run")]
        if model != "default":
            cmd += ["--cost-model", model]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        row = {"program": Path(program).name, "model": model, "budget_s": budget, "exit": p.returncode, "wall_s": wall,
               "wall_over_budget": wall / budget, "load": load}
        rep = Path(out) / "run" / "report.json"
        if rep.exists():
            r = json.loads(rep.read_text())
            row.update(evaluations=r.get("evaluations"), budget_split=r.get("budget_split"))
        if p.returncode:
            row["stderr"] = p.stderr.strip()
    return row


def render(rows: list) -> str:
    lines = ["| program | model | --budget | exit | wall s | wall / budget | configurations | load | message |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        msg = (r.get("stderr") or "").replace("|", "/")
        lines.append(f"| {r['program']} | {r['model']} | {r['budget_s']:g} s | {r['exit']} | {r['wall_s']:.1f} | "
                     f"{r['wall_over_budget']:.2f} | {r.get('evaluations') if r.get('evaluations') is not None else '-'} | "
                     f"{r['load']:.1f} | {msg} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="+", default=["examples/scale/transformer_L48.hlo", "examples/hlo/bert_small_infer.hlo"])
    ap.add_argument("--budgets", nargs="+", type=float, default=[2, 5, 10, 20, 30])
    ap.add_argument("--model", default="default")
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", dest="json_out", default=None)
    a = ap.parse_args(argv)
    rows = []
    for prog in a.programs:
        for b in a.budgets:
            rows.append(run(prog, b, a.model))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "budget_split"}), flush=True)
    res = {"runs": rows}
    emit_results(render(rows), res, a.md, a.json_out)
    return res


if __name__ == "__main__":
    main()
