"""Real XLA:CPU: tuned fusion configurations against XLA's own default compilation, end to end.

For each program: search fusion configurations for the `cpu` target with a cost model, time the
top predicted configurations end to end (the fused program compiled by jaxlib), keep the best;
then, in one interleaved loop repeated `--rounds` times, time (a) the original program compiled by
XLA with its own fusion pass, (b) our default configuration, (c) the tuned configuration. Reported:
min over rounds of each, and the ratios measured side by side.

    python benchmarks/xla_cpu_tuning.py [--programs a.hlo b.hlo ...] [--search-seconds 20] [--verify 8]
        [--rounds 5] [--cost-model analytical] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_PROGRAMS = ["vae_small_infer", "lstm_small_infer", "mlp_mixer_small_infer", "bert_small_infer",
                    "recommender_small_infer", "autoencoder_small_infer"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="*", default=None)
    ap.add_argument("--search-seconds", type=float, default=20.0)
    ap.add_argument("--verify", type=int, default=8, help="top predicted configurations timed end to end")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cost-model", default="analytical")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from autotune.fusion import FusionSpace
    from autotune.kernel import emit_fused_text
    from autotune.program import Program
    from autotune.tuner import Tuner
    from costmodels.base import get_cost_model
    from hardware.xla import XlaEvaluator, jaxlib_version
    from search.base import get_strategy

    paths = args.programs or [os.path.join(ROOT, "examples", "hlo", p + ".hlo") for p in DEFAULT_PROGRAMS]
    ev = XlaEvaluator(target="cpu", timeout_s=300)
    model = get_cost_model(args.cost_model, target="cpu") if args.cost_model == "analytical" else get_cost_model(args.cost_model)
    rows = []
    t0 = time.time()
    try:
        for path in paths:
            name = os.path.basename(path)[:-4]
            original = open(path).read()
            space = FusionSpace(Program.from_file(path), "cpu")
            tuner = Tuner(space, model, get_strategy("annealing")(space, seed=args.seed),
                          budget=args.search_seconds, progress=False, top_k_verify=args.verify)
            res = tuner.run()
            default_text = emit_fused_text(space, space.default(), metadata=False)
            best_text, best_t, statuses = default_text, ev.measure_program(default_text).seconds, []
            for _, cfg in tuner.top_predicted():
                text = emit_fused_text(space, cfg, metadata=False)
                m = ev.measure_program(text)
                statuses.append(m.status)
                if m.ok and best_t is not None and m.seconds < best_t:
                    best_text, best_t = text, m.seconds
            times: dict = {"xla_default": [], "ours_default": [], "tuned": []}
            for _ in range(args.rounds):  # interleaved: the three see the same machine state
                for key, text in (("xla_default", original), ("ours_default", default_text), ("tuned", best_text)):
                    m = ev.measure_program(text)
                    times[key].append(m.seconds if m.ok else float("nan"))
            best = {k: min(v) for k, v in times.items()}
            rows.append({"program": name, "predicted_speedup": res.speedup, "evaluations": res.evaluations,
                         "verify_statuses": statuses, "times": times, "min_s": best,
                         "tuned_vs_xla": best["xla_default"] / best["tuned"],
                         "tuned_vs_ours_default": best["ours_default"] / best["tuned"],
                         "ours_default_vs_xla": best["xla_default"] / best["ours_default"]})
            print(f"{name}: xla {best['xla_default'] * 1e3:.3f} ms, ours-default {best['ours_default'] * 1e3:.3f} ms, "
                  f"tuned {best['tuned'] * 1e3:.3f} ms", file=sys.stderr)
    finally:
        ev.close()
    print(f"# XLA:CPU end to end ({platform.machine()}, {os.cpu_count()} cores, jaxlib {jaxlib_version()}); "
          f"{args.search_seconds:g} s search with {args.cost_model}, top {args.verify} timed, min of "
          f"{args.rounds} interleaved rounds; {time.time() - t0:.0f} s\n")
    print("| program | XLA default (ms) | our default (ms) | tuned (ms) | tuned vs XLA | tuned vs our default |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        b = r["min_s"]
        print(f"| {r['program']} | {b['xla_default'] * 1e3:.3f} | {b['ours_default'] * 1e3:.3f} | {b['tuned'] * 1e3:.3f} | "
              f"{r['tuned_vs_xla']:.3f}x | {r['tuned_vs_ours_default']:.3f}x |")
    print(f"| **median** | | | | **{statistics.median(r['tuned_vs_xla'] for r in rows):.3f}x** | "
          f"**{statistics.median(r['tuned_vs_ours_default'] for r in rows):.3f}x** |")
    if args.json:
        json.dump({"args": vars(args), "rows": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
