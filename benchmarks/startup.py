"""Start-up of the command line: `autotune --help`, and `autotune fusion` on a program with 2 fusible
edges until its search starts (report.json budget_split.startup_s, with its breakdown), each the
median of N fresh processes.

    python -m benchmarks.startup [--runs 5] [--json OUT.json] [--md OUT.md]

Goals (issue 35, quiet 2-core machine): `--help` < 0.5 s; `fusion` searching within 2 s. The load
average is recorded beside the figures: on a busy machine they are not the goal's.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
TWO_EDGES = """HloModule two_edges

ENTRY main {
  p = f32[256,256] parameter(0)
  a = f32[256,256] exponential(p)
  b = f32[256,256] negate(a)
  ROOT c = f32[256,256] multiply(b, p)
}
"""


def _autotune(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def measure(runs: int, budget: str = "10s") -> dict:
    """Medians over `runs` fresh processes of each command (the first fusion run fills the per-machine
    caches, e.g. the plot cost, and is not counted); ``budget``: each fusion run's --budget."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        program = work / "two_edges.hlo"
        program.write_text(TWO_EDGES)
        helps, walls, startups, breakdowns = [], [], [], []
        _autotune("fusion", str(program), "--budget", budget, "--out", str(work / "warm"), "--no-progress", cwd=work)
        for i in range(runs):
            t0 = time.perf_counter()
            r = _autotune("--help", cwd=work)
            helps.append(time.perf_counter() - t0)
            if r.returncode != 0:
                raise RuntimeError(f"autotune --help failed: {r.stderr.strip()[-200:]}")
            out = work / f"run{i}"
            t0 = time.perf_counter()
            r = _autotune("fusion", str(program), "--budget", budget, "--out", str(out), "--no-progress", cwd=work)
            walls.append(time.perf_counter() - t0)
            if r.returncode != 0:
                raise RuntimeError(f"autotune fusion failed: {r.stderr.strip()[-200:]}")
            split = json.loads((out / "report.json").read_text())["budget_split"]
            startups.append(split["startup_s"])
            breakdowns.append(split.get("startup_breakdown", {}))
    steps = sorted({k for b in breakdowns for k in b})
    return {"runs": runs, "help_s": helps, "fusion_wall_s": walls, "fusion_startup_s": startups,
            "median": {"help_s": statistics.median(helps), "fusion_startup_s": statistics.median(startups),
                       "fusion_wall_s": statistics.median(walls),
                       "startup_breakdown": {k: statistics.median(b.get(k, 0.0) for b in breakdowns) for k in steps}},
            "load_average": os.getloadavg(), "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                                                        f"Python {platform.python_version()}",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def table(res: dict) -> list[str]:
    m = res["median"]
    lines = [f"Medians of {res['runs']} fresh processes, {res['machine']}, load average "
             f"{', '.join(f'{x:.2f}' for x in res['load_average'])}, {res['date']}:", "",
             "| measure | median | goal |", "|---|---:|---:|",
             f"| `autotune --help` wall | {m['help_s']:.3f} s | < 0.5 s |",
             f"| `autotune fusion` (2 fusible edges): start-up until the search | {m['fusion_startup_s']:.3f} s | <= 2 s |",
             f"| `autotune fusion --budget 10s` whole command | {m['fusion_wall_s']:.3f} s | |", "",
             "| start-up step | median s |", "|---|---:|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in m["startup_breakdown"].items()]
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    a = ap.parse_args(argv)
    res = measure(a.runs)
    lines = table(res)
    print("\n".join(lines))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    if a.md:
        a.md.write_text("\n".join(["`python -m benchmarks.startup --runs %d`" % a.runs, ""] + lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
