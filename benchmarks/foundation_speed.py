"""Speed of the foundation on the largest corpus program (one core, pure Python).

Measures (1) parse + normalize + static analysis, (2) fusion-space set-up and the default kernel set,
(3) neighbor updates per second: `space.neighbor(cfg)` + the incremental kernel-set update
(`space.state`), chained as a search would; and the same with the canonical hash of every changed
kernel computed too (hashes are lazy: a search computes them only for the kernels a hash-memoizing
cost model prices).

    python -m benchmarks.foundation_speed [--program examples/hlo/resnet_large_train.hlo] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

from autotune.compiler.analysis import module_cost
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.hlo import parse_hlo
from autotune.compiler.program import Program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def largest_program() -> str:
    manifest = json.load(open(os.path.join(ROOT, "examples", "hlo", "manifest.json")))
    best = max(manifest, key=lambda e: e["instructions"])
    return os.path.join(ROOT, "examples", "hlo", best["file"])


def time_load(path: str, repeats: int) -> dict:
    text = open(path).read()
    parse_t, norm_t, ana_t, total = [], [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        module = parse_hlo(text, path)
        t1 = time.perf_counter()
        module_cost(module)
        t2 = time.perf_counter()
        prog = Program.from_module(module)
        t3 = time.perf_counter()
        # per-instruction metrics of the normalized program (what kernels and cost models use)
        FusionSpace(prog, "tpu").node_costs
        t4 = time.perf_counter()
        parse_t.append(t1 - t0)
        ana_t.append((t2 - t1) + (t4 - t3))
        norm_t.append(t3 - t2)
        total.append(t4 - t0)
    return {"instructions": module.instruction_count(), "parse_s": min(parse_t), "normalize_s": min(norm_t),
            "analysis_s": min(ana_t), "total_s": min(total), "total_median_s": statistics.median(total)}


def time_neighbors(path: str, target: str, seconds: float, seed: int = 0, hashed: bool = False) -> dict:
    prog = Program.from_file(path)
    t0 = time.perf_counter()
    space = FusionSpace(prog, target)
    cfg = space.default()
    state = space.state(cfg)
    setup = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    n = 0
    touched = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(200):
            nxt = space.neighbor(cfg, rng)
            st = space.state(nxt)
            if hashed:
                for k, m in (nxt.delta or {}).items():
                    if m is not None:
                        st.kernels[k].hash
            touched += len(nxt.delta or ())
            cfg.detach()
            cfg = nxt
            n += 1
    el = time.perf_counter() - start
    return {"target": target, "edges": space.n_edges, "kernels_default": len(state.refs()),
            "setup_s": setup, "updates": n, "updates_per_s": n / el, "kernels_touched_per_update": touched / n,
            "hashed": hashed}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--program", default=None)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    path = args.program or largest_program()
    res = {"program": os.path.relpath(path, ROOT), "machine": f"{platform.machine()} {os.cpu_count()} cores, "
           f"Python {platform.python_version()}", "load": time_load(path, args.repeats),
           "neighbors": [time_neighbors(path, t, args.seconds, hashed=h) for t in ("tpu", "cpu") for h in (False, True)]}
    if args.json:
        print(json.dumps(res, indent=2))
        return res
    ld = res["load"]
    print(f"program: {res['program']} ({ld['instructions']:,} instructions); {res['machine']}")
    print(f"parse {ld['parse_s']:.3f} s + normalize {ld['normalize_s']:.3f} s + analysis {ld['analysis_s']:.3f} s"
          f" = {ld['total_s']:.3f} s (best of {args.repeats}; median {ld['total_median_s']:.3f} s)")
    print("| target | fusible edges | default kernels | space set-up (s) | neighbor updates/s | "
          "with hashes of changed kernels | kernels touched/update |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    nb = res["neighbors"]
    for r, rh in zip(nb[0::2], nb[1::2]):
        print(f"| {r['target']} | {r['edges']:,} | {r['kernels_default']:,} | {r['setup_s']:.2f} | "
              f"{r['updates_per_s']:,.0f} | {rh['updates_per_s']:,.0f} | {r['kernels_touched_per_update']:.1f} |")
    return res


if __name__ == "__main__":
    main()
