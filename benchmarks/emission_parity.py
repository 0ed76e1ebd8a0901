"""Emission parity on XLA:CPU: fused programs compute what the original computes.

For every program of the corpora (examples/hlo, the 58-program model corpus; examples/idioms,
programs written around common JAX idioms; examples/hlo_library, programs written with flax, haiku,
equinox, optax and HF transformers; examples/hlo_attention and hlo_encoder; the held-out families of
examples/hlo_heldout and hlo_heldout2; examples/hlo_frontends, programs from TensorFlow, torch_xla,
keras_hub and scientific JAX), every target (`cpu`, `tpu`) and the default
configuration plus N random valid ones, the program is emitted with one `fusion` per kernel,
re-read by our parser and XLA's, compiled by XLA:CPU with XLA's default options (`xla`, what a
user does with fused.hlo) and with the options the evaluator measures with (`measure`), run on the
same random inputs as the original, and its outputs compared (metric and tolerance:
`hardware.parity`). `tpu` configurations are checked in the form XLA:CPU can run: every fusion
kLoop, kernels XLA:CPU cannot compile as one loop fusion split into single instructions; the table
says how many of their multi-instruction kernels were checked as fusions. Every case also records its
error and the original's against the program computed in f64 (`vs_f64`, whole-array errors,
`hardware.xla.norm_error`; programs with custom calls have no f64 version): the emission must be as
accurate as the original (`hardware.xla.accuracy_fallback`).

examples/hlo_frontends (`--corpus frontends`: TensorFlow, torch_xla, keras_hub and scientific JAX
programs) holds a program with host callbacks (diffrax's `error_if`, a custom call to
`xla_ffi_python_cpu_callback`; `host_callback` in its manifest entry): its callback's handler exists
only in the process that traced it, and any other process fails or crashes when the callback runs.
Its cases are emitted, re-read and compiled by XLA:CPU like every other (emission, parse and compile
errors are failures), but neither the original nor the emission is run: they are reported as
`skipped: host callback (compiled, not run)`, counted apart from the cases (neither ok nor a failure,
no outputs compared). The exit status ignores skipped cases.

Usage: python -m benchmarks.emission_parity [--configs 3] [--targets cpu,tpu] [--corpus all]
         [--programs a,b] [--jobs 2] [--json out.json] [--md out.md]
Exit status 0 when every case passes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hardware.parity import FORMULATED, MODES, as_dicts, check_program, summarize
from hardware.xla import ACCURACY_FACTOR, OUTPUT_TOL

ROOT = Path(__file__).resolve().parents[1]

CORPORA = {"models": ROOT / "examples" / "hlo", "idioms": ROOT / "examples" / "idioms",
           "library": ROOT / "examples" / "hlo_library", "attention": ROOT / "examples" / "hlo_attention",
           "encoder": ROOT / "examples" / "hlo_encoder",
           # the held-out test families: correctness work on them is allowed (docs/evaluation.md)
           "heldout": ROOT / "examples" / "hlo_heldout", "heldout2": ROOT / "examples" / "hlo_heldout2",
           # programs from TensorFlow, torch_xla, keras_hub and scientific JAX (issue 46)
           "frontends": ROOT / "examples" / "hlo_frontends"}


def corpus_programs(which: str = "all") -> list[Path]:
    """Programs of a corpus (a key of `CORPORA`, or `all`), in manifest order."""
    out: list[Path] = []
    for name, folder in CORPORA.items():
        if which not in ("all", name) or not (folder / "manifest.json").exists():
            continue
        out += [folder / f"{m['name']}.hlo" for m in json.loads((folder / "manifest.json").read_text())]
    return out


def worst_f64(results) -> "tuple[float, float] | None":
    """The case whose error against the program in f64 is largest relative to the original's."""
    judged = [r.vs_f64 for r in results if r.vs_f64 is not None]
    if not judged:
        return None
    worst = max(judged, key=lambda v: v["emitted"] / max(v["original"], 1e-30))
    return worst["emitted"], worst["original"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="all", choices=["all", *CORPORA])
    ap.add_argument("--programs", default="", help="comma-separated names (default: all of the corpus)")
    ap.add_argument("--targets", default="cpu,tpu")
    ap.add_argument("--configs", type=int, default=3, help="random configurations per program and target")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--jobs", type=int, default=2, help="programs checked in parallel")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per subprocess")
    ap.add_argument("--formulations", action="store_true",
                    help="random configurations after random formulation choices (autotune/compiler/formulations)")
    ap.add_argument("--json", default="")
    ap.add_argument("--md", default="")
    args = ap.parse_args(argv)
    paths = corpus_programs(args.corpus)
    if args.programs:
        want = set(args.programs.split(","))
        paths = [p for p in paths if p.stem in want]
    if not paths:
        print("emission_parity: no programs selected", file=sys.stderr)
        return 2
    specs = ["default"] + [f"random:{args.seed * 1000 + k}" for k in range(args.configs)]
    if args.formulations:  # the random configurations after random formulation choices
        specs = ["default"] + [s + FORMULATED for s in specs[1:]]
    targets = args.targets.split(",")
    modes = args.modes.split(",")
    jobs = [(p, t) for p in paths for t in targets]
    head = ["| program | target | cases ok | fusions checked | max error | error vs f64: emitted / original (worst) "
            "| failures |", "|---|---|---|---|---|---|---|"]
    print("\n".join(head), flush=True)
    rows, lines = [], list(head)
    t0 = time.perf_counter()

    def one(job):
        path, target = job
        return path, target, check_program(str(path), target, specs, modes, timeout=args.timeout, record_f64=True)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for path, target, res in pool.map(one, jobs):
            rows += res
            s = summarize(res)
            errs = [r.error for r in res if r.error is not None]
            fails = "; ".join(f"{r.config}/{r.mode}: {r.status}" for r in res if not r.ok and not r.skipped)
            if s.get("skipped"):
                fails = "; ".join(x for x in (f"{s['skipped']} cases skipped: host callback (compiled, not run)",
                                              fails) if x)
            acc = worst_f64(res)
            line = (f"| {path.stem} | {target} | {s['ok']}/{s['cases']} | {s['fusions_checked']}/{s['fusions_total']} | "
                    f"{max(errs) if errs else float('nan'):.2e} | "
                    f"{f'{acc[0]:.2e} / {acc[1]:.2e}' if acc else 'no f64 version'} | {fails[:300]} |")
            lines.append(line)
            print(line, flush=True)
    total = summarize(rows)
    by_target = {t: summarize([r for r in rows if r.target == t]) for t in targets}
    skipped = f" ({total['skipped']} more skipped: host callbacks, compiled but not run)" if total.get("skipped") else ""
    tail = [f"\n{total['ok']}/{total['cases']} cases ok{skipped} over {len(paths)} programs, targets {', '.join(targets)}, "
            f"configurations {', '.join(specs)}, XLA options {', '.join(modes)} "
            f"({time.perf_counter() - t0:.0f} s)"]
    judged = [r for r in rows if r.vs_f64 is not None]
    accurate = sum(r.vs_f64["emitted"] <= max(OUTPUT_TOL, ACCURACY_FACTOR * r.vs_f64["original"]) for r in judged)
    tail.append(f"- against the program in f64: {accurate}/{len(judged)} cases as accurate as the original "
                f"(error at most {ACCURACY_FACTOR:g}x the original's, or within {OUTPUT_TOL:g}); "
                f"{len(rows) - len(judged)} cases without an f64 version (custom calls) or not run")
    for t, s in by_target.items():
        skip = f" ({s['skipped']} skipped)" if s.get("skipped") else ""
        tail.append(f"- {t}: {s['ok']}/{s['cases']} ok{skip}; multi-instruction kernels checked as fusions "
                    f"{s['fusions_checked']}/{s['fusions_total']}; failures {s['failures'] or 'none'}")
    print("\n".join(tail))
    if args.json:
        Path(args.json).write_text(json.dumps(as_dicts(rows), indent=1))
    if args.md:
        Path(args.md).write_text("\n".join(lines + tail) + "\n")
    return 0 if total["ok"] == total["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
