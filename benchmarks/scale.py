"""Analysis time and memory against program size (issue 21: near-linear analysis).

Times each stage of `autotune show` / `autotune emit` on generated transformer training steps of
growing depth (examples/scale/gen_transformer.py): parse, normalize (Program.from_module), fusion
space, default configuration, kernel materialization, emission, and their sum (show end to end is
parse + normalize + space + default + state). Each size runs in a fresh process, so peak resident
memory (resource.getrusage) is per size. The slope of log(time) against log(instructions) between
consecutive sizes is the measured exponent (1 = linear, 2 = quadratic).

    python benchmarks/scale.py --layers 12 48 200 --targets tpu cpu [--md benchmarks/results/scale.md]

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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("parse", "normalize", "space", "default", "state", "kernels", "emit")


def stage_times(text: str, target: str, name: str = "<scale>") -> tuple[dict[str, float], int]:
    """Seconds per analysis stage of one program on one target, and its instruction count."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.hlo import parse_hlo
    from autotune.compiler.kernel import emit_fused_text
    from autotune.compiler.program import Program

    out: dict[str, float] = {}
    t = time.perf_counter()
    module = parse_hlo(text, name)
    out["parse"] = time.perf_counter() - t
    t = time.perf_counter()
    prog = Program.from_module(module)
    out["normalize"] = time.perf_counter() - t
    t = time.perf_counter()
    space = FusionSpace(prog, target)
    out["space"] = time.perf_counter() - t
    t = time.perf_counter()
    cfg = space.default()
    out["default"] = time.perf_counter() - t
    t = time.perf_counter()
    space.state(cfg).refs()
    out["state"] = time.perf_counter() - t
    t = time.perf_counter()
    space.kernels(cfg)
    out["kernels"] = time.perf_counter() - t
    t = time.perf_counter()
    emit_fused_text(space, cfg)
    out["emit"] = time.perf_counter() - t
    return out, module.instruction_count()


def program_path(layers: int) -> str:
    """examples/scale/transformer_L{layers}.hlo, generated (with jax) when missing."""
    path = os.path.join(ROOT, "examples", "scale", f"transformer_L{layers}.hlo")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "scale", "gen_transformer.py"),
                        str(layers), "--out", path], check=True)
    return path


def child(path: str, target: str) -> None:
    import resource
    sys.path.insert(0, ROOT)
    times, n = stage_times(open(path).read(), target, path)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"instructions": n, "times": times, "peak_mb": peak_mb}))


def measure(layers: int, target: str) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", program_path(layers), target],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def exponent(n0: int, t0: float, n1: int, t1: float) -> float:
    """Slope of log(time) against log(size) between two measurements."""
    return math.log(max(t1, 1e-6) / max(t0, 1e-6)) / math.log(n1 / n0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[12, 48, 200])
    ap.add_argument("--targets", nargs="+", default=["tpu", "cpu"])
    ap.add_argument("--md", help="also write a markdown table to this file")
    ap.add_argument("--machine", default="2-core shared CI-class VM", help="machine named in the table's title")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    lines = [f"# Analysis time against program size ({args.machine}, {time.strftime('%Y-%m-%d')}, "
             f"Python {platform.python_version()})", "",
             "Seconds per stage; instructions as parsed (before normalization); show = parse + normalize + "
             "space + default + state; peak MB = resident memory of the process.", "",
             f"`python benchmarks/scale.py --layers {' '.join(map(str, args.layers))} "
             f"--targets {' '.join(args.targets)}`", "",
             "| target | layers | instructions | " + " | ".join(STAGES) + " | show | peak MB |",
             "|---|---:|---:|" + "---:|" * (len(STAGES) + 2)]
    for target in args.targets:
        prev = None
        for layers in args.layers:
            r = measure(layers, target)
            t = r["times"]
            t["show"] = sum(t[s] for s in ("parse", "normalize", "space", "default", "state"))
            row = (f"| {target} | {layers} | {r['instructions']:,} | "
                   + " | ".join(f"{t[s]:.2f}" for s in (*STAGES, "show")) + f" | {r['peak_mb']:.0f} |")
            print(row, flush=True)
            lines.append(row)
            if prev is not None:
                n0, t0 = prev
                n1 = r["instructions"]
                slopes = " | ".join(f"{exponent(n0, t0[s], n1, t[s]):.2f}" for s in (*STAGES, "show"))
                srow = f"| {target} | exponent | {n0:,} -> {r['instructions']:,} | {slopes} | |"
                print(srow, flush=True)
                lines.append(srow)
            prev = (r["instructions"], t)
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
