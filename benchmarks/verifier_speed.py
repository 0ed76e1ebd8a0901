"""What the HLO verifier costs on top of parsing (issue 16: at most a few percent of parse time).

Times `parse_hlo(text, verify=False)` and `parse_hlo(text, verify=True)` alternately on the same
text (best of --repeats each, so both see the same machine load), on the largest corpus program and
summed over the whole corpus.

    python benchmarks/verifier_speed.py [--repeats 15]

Writes benchmarks/results/verifier_speed.md.
"""
from __future__ import annotations

import argparse
import gc
import glob
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from autotune.hlo import parse_hlo  # noqa: E402


def best_times(text: str, repeats: int) -> tuple[float, float, int]:
    """(best parse-only seconds, best parse+verify seconds, instructions)."""
    best = {False: float("inf"), True: float("inf")}
    n = 0
    for _ in range(repeats):
        for verify in (False, True):
            gc.collect()
            t0 = time.perf_counter()
            m = parse_hlo(text, "bench.hlo", verify=verify)
            best[verify] = min(best[verify], time.perf_counter() - t0)
            n = m.instruction_count()
    return best[False], best[True], n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "verifier_speed.md"))
    args = ap.parse_args()
    largest = os.path.join(ROOT, "examples", "hlo", "resnet_large_train.hlo")
    p, v, n = best_times(open(largest).read(), args.repeats)
    corpus = sorted(glob.glob(os.path.join(ROOT, "examples", "hlo", "*.hlo")))
    tp = tv = 0.0
    tn = 0
    for path in corpus:
        a, b, k = best_times(open(path).read(), max(3, args.repeats // 3))
        tp, tv, tn = tp + a, tv + b, tn + k
    lines = [
        "# HLO verifier cost (issue 16)",
        "",
        f"Command: `python benchmarks/verifier_speed.py --repeats {args.repeats}`",
        f"Machine: 2-core shared CI-class VM ({platform.machine()}, Python {platform.python_version()}); "
        f"date: {time.strftime('%Y-%m-%d')}. Best of {args.repeats} alternating runs.",
        "",
        "| program | instructions | parse (ms) | parse + verify (ms) | verifier (ms) | verifier / parse "
        "| verifier per instruction |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| resnet_large_train.hlo | {n:,} | {p * 1e3:.1f} | {v * 1e3:.1f} | {(v - p) * 1e3:.1f} | "
        f"{100 * (v - p) / p:.1f}% | {(v - p) / n * 1e6:.2f} us |",
        f"| all {len(corpus)} examples/hlo programs | {tn:,} | {tp * 1e3:.1f} | {tv * 1e3:.1f} | "
        f"{(tv - tp) * 1e3:.1f} | {100 * (tv - tp) / tp:.1f}% | {(tv - tp) / tn * 1e6:.2f} us |",
    ]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
