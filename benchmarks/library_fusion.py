"""`autotune fusion --target cpu` on every program of a corpus, as a user runs it: does each run end
with a verified result, and what does it say against XLA's own compile of the original?

For each program: the library run of `autotune fusion P --target cpu --budget B --out OUT/NAME --no-progress`
(`autotune.run.tune`, the code behind the command; XLA runs in its measurement workers); the command's exit
status and report.json (verification status, winner, keep_original, measured
speedup over XLA's own compile with its paired interval, the original's and the written program's
times, warnings) are collected into one JSON and a markdown table.

Usage: python -m benchmarks.library_fusion [--corpus examples/hlo_library] [--budget 2m]
         [--programs a,b] [--out DIR] [--json OUT.json] [--md OUT.md]
Exit status 0 when every run ends with a verified result (a tuned program, or the original kept).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_one(path: Path, budget: str, out: Path) -> dict:
    """One library run of `autotune fusion P --target cpu --budget B --out OUT --no-progress` (autotune.run.tune,
    the code behind the command): the command's exit status (0, 3 nothing verified, 130 interrupted, 2 refused)
    and its report."""
    from autotune.run import RunError, RunOptions, tune
    t0 = time.perf_counter()
    try:
        res = tune(str(path), "cpu", budget=budget, options=RunOptions(out_dir=out, progress=False))
        code, tail = (130 if res.interrupted else 3 if not res.verified else 0), list(res.report.get("warnings", []))[-3:]
    except (RunError, ValueError, OSError, RuntimeError) as e:  # refused, as the command's one-line error
        code, tail = 2, [f"autotune: error: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"]
    row = {"program": path.stem, "exit": code, "wall_s": round(time.perf_counter() - t0, 1), "stderr_tail": tail}
    report_path = out / "report.json"
    if report_path.exists():
        rep = json.loads(report_path.read_text())
        ver = rep.get("verification", {})
        paired = ver.get("paired") or {}
        row.update({"status": ver.get("status"), "winner": ver.get("winner"),
                    "keep_original": rep.get("keep_original"),
                    "measured_speedup": rep.get("measured_speedup"),
                    "measured_speedup_interval": rep.get("measured_speedup_interval"),
                    "paired_speedup": paired.get("speedup"), "paired_interval": paired.get("speedup_interval"),
                    "original_s": rep.get("measured_original_s"), "written_s": rep.get("measured_best_s"),
                    "predicted_speedup": rep.get("speedup"),
                    "failed_candidates": [v["status"] for v in rep.get("verified", []) if v.get("status") != "ok"],
                    "warnings": rep.get("warnings", [])})
    return row


def verified(row: dict) -> bool:
    return row.get("exit") == 0 and row.get("status") == "verified"


def table(rows: list[dict]) -> list[str]:
    lines = ["| program | exit | verified | written | speedup vs XLA's own compile | paired interval | "
             "failed candidates | wall s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        written = "original (keep it)" if r.get("keep_original") else r.get("winner")
        speedup = f"{r['measured_speedup']:.3f}" if r.get("measured_speedup") else "-"
        iv = r.get("paired_interval")
        interval = f"{iv[0]:.3f}-{iv[1]:.3f}" if iv else "-"
        lines.append(f"| {r['program']} | {r['exit']} | {r.get('status')} | {written} | {speedup} | {interval} | "
                     f"{len(r.get('failed_candidates', []))} | {r['wall_s']} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(ROOT / "examples" / "hlo_library"))
    ap.add_argument("--budget", default="2m")
    ap.add_argument("--programs", default="", help="comma-separated names (default: all of the corpus)")
    ap.add_argument("--out", default="", help="run folders (default: a temporary folder)")
    ap.add_argument("--json", default="")
    ap.add_argument("--md", default="")
    a = ap.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    corpus = Path(a.corpus)
    names = [m["name"] for m in json.loads((corpus / "manifest.json").read_text())]
    if a.programs:
        want = set(a.programs.split(","))
        names = [n for n in names if n in want]
    if not names:
        print("library_fusion: no programs selected", file=sys.stderr)
        return 2
    out = Path(a.out or tempfile.mkdtemp(prefix="library_fusion_"))
    rows = []
    for name in names:
        row = run_one(corpus / f"{name}.hlo", a.budget, out / name)
        rows.append(row)
        print(table([row])[-1], flush=True)
    ok = sum(verified(r) for r in rows)
    summary = f"{ok}/{len(rows)} runs ended with a verified result (budget {a.budget} each)"
    print(summary)
    if a.json:
        Path(a.json).write_text(json.dumps({"budget": a.budget, "corpus": str(corpus.relative_to(ROOT))
                                            if corpus.is_relative_to(ROOT) else str(corpus),
                                            "rows": rows}, indent=1) + "\n")
    if a.md:
        Path(a.md).write_text("\n".join(table(rows) + ["", summary]) + "\n")
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
