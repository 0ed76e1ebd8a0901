"""Real XLA:CPU: does the paired speedup's interval hold? A program timed beside itself.

For each program, our default configuration's emitted program (as the tuner emits it) is timed beside
itself (`XlaEvaluator.measure_paired`), `--requests` times for `--seconds` each, alternately the same
compiled executable twice and a second, separately compiled copy of the same text (a comment line
added): the true ratio is 1. From the same blocks, two estimators of each request's ratio:

* "mean of two": each candidate block over the mean of the reference blocks around it
  (`hardware.xla.paired_ratios`' ratios);
* "neighbours": each candidate block over the reference block before it and over the one after it
  (`hardware.xla.neighbour_ratios`: what the tuner's paired verification uses).

Per estimator: the median over requests of the ratio, how far the requests' ratios spread, the mean
width of the 95% interval (`autotune.tuning.verification.median_interval`) and how many intervals
exclude 1 (a false claim: one whose upper end is below 1 would have kept a program no faster than the
default).

    python -m benchmarks.paired_calibration [--programs NAME|FILE.hlo ...] [--requests 12] [--seconds 1] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_PROGRAMS = ["mlp_mixer_small_infer", "recommender_small_infer", "vae_small_infer", "bert_small_infer"]


def estimators(extra: dict) -> dict:
    """Both estimators' ratios from one paired answer's raw blocks."""
    cand, ref, pairs = extra["candidate_blocks"], extra["reference_blocks"], extra["pairs"]
    mean_of_two, single = [], []
    for r0 in range(len(cand) // pairs):
        c = cand[r0 * pairs:(r0 + 1) * pairs]
        r = ref[r0 * (pairs + 1):(r0 + 1) * (pairs + 1)]
        mean_of_two += [ck / ((r[k] + r[k + 1]) / 2) for k, ck in enumerate(c)]
        single += [ck / rk for k, ck in enumerate(c) for rk in r[k:k + 2]]
    return {"mean of two": mean_of_two, "neighbours": single}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="*", default=DEFAULT_PROGRAMS)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    from autotune.compiler.program import Program
    from autotune.tuning.verification import median_interval
    from hardware.xla import XlaEvaluator, jaxlib_version

    t0 = time.time()
    rows = []
    with XlaEvaluator(target="cpu", timeout_s=120) as ev:
        for name in args.programs:
            path = name if name.endswith(".hlo") else os.path.join(ROOT, "examples", "hlo", name + ".hlo")
            space = FusionSpace(Program.from_file(path), "cpu")
            a = emit_fused_text(space, space.default(), header=True)
            b = "// the same program, compiled separately\n" + a
            for req in range(args.requests):
                same = req % 2 == 0
                m = ev.measure_paired(a, a if same else b, args.seconds, **EMITTED_CPU_COMPILE_OPTIONS)
                if not m.ok:
                    rows.append({"program": name, "request": req, "status": m.status})
                    continue
                row = {"program": name, "request": req, "executable": "same" if same else "separate",
                       "status": "ok", "rounds": len(m.extra["candidate_blocks"]) // m.extra["pairs"]}
                for est, ratios in estimators(m.extra).items():
                    lo, hi = median_interval(ratios)
                    row[est] = {"ratio": statistics.median(ratios), "interval": [lo, hi], "n": len(ratios)}
                rows.append(row)
                print(f"{name} {req} {row['executable']}: " + ", ".join(
                    f"{e} {row[e]['ratio']:.4f} [{row[e]['interval'][0]:.4f}, {row[e]['interval'][1]:.4f}]"
                    for e in ("mean of two", "neighbours")), file=sys.stderr, flush=True)
    print(f"# A program paired with itself (XLA:CPU, jaxlib {jaxlib_version()}, {os.cpu_count()} cores): "
          f"{args.requests} requests of {args.seconds:g} s per program; {time.time() - t0:.0f} s\n")
    print("| program | estimator | requests | median ratio | requests' ratios (min-max) | mean 95% interval width "
          "| intervals excluding 1 | of which below 1 (a false 'faster') |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    summary = {}
    for name in args.programs + ["all"]:
        ok = [r for r in rows if r["status"] == "ok" and (name == "all" or r["program"] == name)]
        if not ok:
            continue
        for est in ("mean of two", "neighbours"):
            ratios = [r[est]["ratio"] for r in ok]
            ivs = [r[est]["interval"] for r in ok if r[est]["interval"][0] is not None]
            excl = sum(1 for lo, hi in ivs if lo > 1 or hi < 1)
            below = sum(1 for lo, hi in ivs if hi < 1)
            width = statistics.fmean(hi - lo for lo, hi in ivs) if ivs else float("nan")
            summary[(name, est)] = {"median": statistics.median(ratios), "excluding_1": excl, "below_1": below,
                                    "requests": len(ok), "width": width}
            bold = "**" if name == "all" else ""
            print(f"| {bold}{name}{bold} | {est} | {len(ok)} | {statistics.median(ratios):.4f} | "
                  f"{min(ratios):.3f}-{max(ratios):.3f} | {width:.4f} | {excl} | {below} |")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(f"\nfailed requests: {len(failed)}: " + "; ".join(f"{r['program']} {r['request']}: {r['status']}"
                                                                for r in failed))
    out = {"args": vars(args), "rows": rows, "summary": {f"{k[0]}|{k[1]}": v for k, v in summary.items()}}
    if args.json:
        json.dump(out, open(args.json, "w"), indent=1)
    return out


if __name__ == "__main__":
    main()
