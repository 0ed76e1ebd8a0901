"""What the HLO verifier costs on top of parsing (issue 16: at most a few percent of parse time).

Each measurement is one fresh process, as a CLI run is: it warms up on a tiny module, then times
`parse_hlo(text, verify=False)` or `parse_hlo(text, verify=True)` once. Runs alternate between the
two; the verifier's cost is the median over pairs of (verify) - (no verify), and the difference of
the best times. On the largest corpus program and summed over all of examples/hlo.

    python -m benchmarks.verifier_speed [--repeats 15] [--out F] [--quick]

Writes benchmarks/results/verifier_speed.md.
"""
from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(path: str, verify: bool) -> None:
    from autotune.compiler.hlo import parse_hlo
    parse_hlo("ENTRY e {\n  ROOT a = f32[] constant(1)\n}\n")  # imports, regexes, the verifier module
    text = open(path).read()
    t0 = time.perf_counter()
    m = parse_hlo(text, path, verify=verify)
    print(time.perf_counter() - t0, m.instruction_count())


def timed(path: str, verify: bool) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.verifier_speed", "--child", os.path.abspath(path),
                          "1" if verify else "0"], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
    return float(out[0]), int(out[1])


def paired(path: str, repeats: int) -> tuple[float, float, float, int]:
    """(best parse seconds, best verify - best parse, median of paired differences, instructions)."""
    plain, checked = [], []
    n = 0
    for _ in range(repeats):
        a, n = timed(path, False)
        b, _ = timed(path, True)
        plain.append(a)
        checked.append(b)
    return (min(plain), min(checked) - min(plain), statistics.median(b - a for a, b in zip(plain, checked)), n)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "verifier_speed.md"))
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: the smallest corpus program stands for both rows, one pair of processes each")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1] == "1")
        return {}
    largest = os.path.join(ROOT, "examples", "hlo", "resnet_large_train.hlo")
    corpus = sorted(glob.glob(os.path.join(ROOT, "examples", "hlo", "*.hlo")))
    corpus_pairs = max(3, args.repeats // 5)
    if args.quick:
        largest = min(corpus, key=os.path.getsize)
        corpus, corpus_pairs, args.repeats = [largest], 1, 1
    p, best, med, n = paired(largest, args.repeats)
    tp = tbest = tmed = 0.0
    tn = 0
    for path in corpus:
        a, b, c, k = paired(path, corpus_pairs)
        tp, tbest, tmed, tn = tp + a, tbest + b, tmed + c, tn + k
    lines = [
        "# HLO verifier cost (issue 16)",
        "",
        f"Command: `python -m benchmarks.verifier_speed --repeats {args.repeats}`",
        f"Machine: 2-core shared CI-class VM ({platform.machine()}, Python {platform.python_version()}); "
        f"date: {time.strftime('%Y-%m-%d')}. One fresh process per timing; parse = `parse_hlo(verify=False)`; "
        f"verifier = `parse_hlo(verify=True)` minus parse: difference of the best of {args.repeats} runs each, "
        f"and median of the paired differences ({corpus_pairs} pairs per program for the corpus).",
        "",
        "| program | instructions | parse (ms) | verifier, best (ms) | verifier, median (ms) | verifier / parse "
        "| per instruction |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| {os.path.basename(largest)} | {n:,} | {p * 1e3:.1f} | {best * 1e3:.1f} | {med * 1e3:.1f} | "
        f"{100 * best / p:.1f}% (median {100 * med / p:.1f}%) | {best / n * 1e6:.2f} us |",
        f"| all {len(corpus)} examples/hlo programs (sums) | {tn:,} | {tp * 1e3:.1f} | {tbest * 1e3:.1f} | "
        f"{tmed * 1e3:.1f} | {100 * tbest / tp:.1f}% (median {100 * tmed / tp:.1f}%) | {tbest / tn * 1e6:.2f} us |",
    ]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return {"instructions": n, "parse_s": p, "verify_best_s": best, "verify_median_s": med, "corpus_programs": len(corpus),
            "corpus_instructions": tn, "corpus_parse_s": tp, "corpus_verify_best_s": tbest}


if __name__ == "__main__":
    main()
