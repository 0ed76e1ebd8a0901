"""Analysis time and memory against program size (issue 21: near-linear analysis).

Times each stage of `autotune show` / `autotune emit` on generated training steps of growing size
in three families (examples/scale/generate.py: deep transformers, wide convnets, stacked scans):
parse, normalize (Program.from_module), fusion space, default configuration, kernel
materialization, emission, and their sum (show end to end is parse + normalize + space + default +
state). Each size runs in a fresh process, so peak resident memory (resource.getrusage) is per size.
The slope of log(time) against log(instructions) between consecutive sizes is the measured exponent
(1 = linear, 2 = quadratic); --plot draws time against size on log-log axes.

    python -m benchmarks.scale --programs transformer:12,48,200 convnet:64,256,1024 scan:10,40,160 \
        --targets tpu cpu --md benchmarks/results/scale.md --plot docs/scale.png

Needs jax to generate programs that are not already in examples/scale/.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("parse", "normalize", "space", "default", "state", "kernels", "emit")


def stage_times(text: str, target: str, name: str = "<scale>",
                clock: Callable[[], float] = time.perf_counter) -> tuple[dict[str, float], int]:
    """Seconds per analysis stage of one program on one target, and its instruction count. `clock`:
    wall time by default; the scaling test passes `time.process_time` (this process's CPU time,
    which another job on the machine does not inflate)."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.hlo import parse_hlo
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.program import Program

    out: dict[str, float] = {}
    t = clock()
    module = parse_hlo(text, name)
    out["parse"] = clock() - t
    t = clock()
    prog = Program.from_module(module)
    out["normalize"] = clock() - t
    t = clock()
    space = FusionSpace(prog, target)
    out["space"] = clock() - t
    t = clock()
    cfg = space.default()
    out["default"] = clock() - t
    t = clock()
    space.state(cfg).refs()
    out["state"] = clock() - t
    t = clock()
    space.kernels(cfg)
    out["kernels"] = clock() - t
    t = clock()
    emit_fused_text(space, cfg)
    out["emit"] = clock() - t
    return out, module.instruction_count()


DEFAULT_PROGRAMS = ("transformer:12,48,200", "convnet:64,256,1024", "scan:10,40,160")


def program_path(family: str, size: int) -> str:
    """examples/scale/<family>_<L|N><size>.hlo, generated (with jax) when missing."""
    letter = "L" if family == "transformer" else "N"
    path = os.path.join(ROOT, "examples", "scale", f"{family}_{letter}{size}.hlo")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "scale", "generate.py"),
                        family, str(size), "--out", path], check=True)
    return path


def parse_programs(specs: list[str]) -> list[tuple[str, list[int]]]:
    """["transformer:12,48"] -> [("transformer", [12, 48])]."""
    out = []
    for spec in specs:
        family, _, sizes = spec.partition(":")
        if family not in ("transformer", "convnet", "scan") or not sizes:
            raise SystemExit(f"--programs {spec!r}: expected FAMILY:SIZE[,SIZE...] with FAMILY transformer, "
                             f"convnet or scan")
        out.append((family, [int(x) for x in sizes.split(",")]))
    return out


def child(path: str, target: str) -> None:
    import resource
    times, n = stage_times(open(path).read(), target, path)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"instructions": n, "times": times, "peak_mb": peak_mb}))


def measure(family: str, size: int, target: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--child", os.path.abspath(program_path(family, size)),
                          target], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def exponent(n0: int, t0: float, n1: int, t1: float) -> float:
    """Slope of log(time) against log(size) between two measurements."""
    return math.log(max(t1, 1e-6) / max(t0, 1e-6)) / math.log(n1 / n0)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", nargs="+", default=list(DEFAULT_PROGRAMS), metavar="FAMILY:SIZES",
                    help="families and sizes, e.g. transformer:12,48,200 (sizes: layers or blocks)")
    ap.add_argument("--targets", nargs="+", default=["tpu", "cpu"])
    ap.add_argument("--md", help="also write a markdown table to this file")
    ap.add_argument("--plot", help="also draw show and emit time against instructions (log-log) to this PNG")
    ap.add_argument("--machine", default="2-core shared CI-class VM", help="machine named in the table's title")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return {}
    programs = parse_programs(args.programs)
    lines = [f"# Analysis time against program size ({args.machine}, {time.strftime('%Y-%m-%d')}, "
             f"Python {platform.python_version()})", "",
             "Seconds per stage; instructions as parsed (before normalization); show = parse + normalize + "
             "space + default + state; peak MB = resident memory of the process; exponent = slope of "
             "log(time) against log(instructions) between consecutive sizes.", "",
             f"`python -m benchmarks.scale --programs {' '.join(args.programs)} "
             f"--targets {' '.join(args.targets)}`", "",
             "| target | family | size | instructions | " + " | ".join(STAGES) + " | show | peak MB |",
             "|---|---|---:|---:|" + "---:|" * (len(STAGES) + 2)]
    series: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    for target in args.targets:
        for family, sizes in programs:
            prev = None
            for size in sizes:
                r = measure(family, size, target)
                t = r["times"]
                t["show"] = sum(t[s] for s in ("parse", "normalize", "space", "default", "state"))
                series.setdefault((target, family), []).append((r["instructions"], t))
                row = (f"| {target} | {family} | {size} | {r['instructions']:,} | "
                       + " | ".join(f"{t[s]:.2f}" for s in (*STAGES, "show")) + f" | {r['peak_mb']:.0f} |")
                print(row, flush=True)
                lines.append(row)
                if prev is not None:
                    n0, t0 = prev
                    n1 = r["instructions"]
                    slopes = " | ".join(f"{exponent(n0, t0[s], n1, t[s]):.2f}" for s in (*STAGES, "show"))
                    srow = f"| {target} | {family} | exponent | {n0:,} -> {n1:,} | {slopes} | |"
                    print(srow, flush=True)
                    lines.append(srow)
                prev = (r["instructions"], t)
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.plot:
        plot(series, args.plot, args.machine)
    return {"lines": lines, "series": {f"{t}:{f}": [(n, times) for n, times in pts] for (t, f), pts in series.items()}}


def plot(series: dict, path: str, machine: str) -> None:
    """Log-log plot of show and emit seconds against instructions, one line per (target, family)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, stage in zip(axes, ("show", "emit")):
        for (target, family), points in sorted(series.items()):
            ns = [n for n, _ in points]
            ax.plot(ns, [t[stage] for _, t in points], marker="o", label=f"{family} ({target})")
        lo = min(n for pts in series.values() for n, _ in pts)
        hi = max(n for pts in series.values() for n, _ in pts)
        ref = min(t[stage] for pts in series.values() for n, t in pts if n == lo)
        ax.plot([lo, hi], [ref, ref * hi / lo], "k--", linewidth=0.8, label="linear")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("instructions")
        ax.set_title(f"autotune {stage}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("seconds")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"Analysis time against program size ({machine})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
