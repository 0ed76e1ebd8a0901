"""Real XLA:CPU: what `autotune fusion --target cpu` writes, against XLA's own compilation.

For each program: search fusion configurations for the `cpu` target with a cost model, then the
tuner's own end-to-end verification (`Tuner.verify`: the best predictions emitted as fused.hlo is
written, compiled with `EMITTED_CPU_COMPILE_OPTIONS`, outputs checked against the original's, raced
against the default configuration within `--hw-seconds`) picks the program fused.hlo would hold.
Then, in one interleaved loop repeated `--rounds` times (fresh timings, after the verification; the
order rotates each round), time (a) the original program compiled by XLA with its own fusion pass,
(b) our default configuration, (c) the verified program. Reported: min over rounds of each, the
ratios measured side by side, and the speedup the tuner claimed in its verification beside the one
re-measured in the rounds (how much of a claimed speedup holds up).

The claims: the race's (default / winner of the race's medians of absolute timings, what the tuner
reported before paired verification) and the paired one (the race's winner timed beside the default,
with its 95% interval; the tuner keeps the winner only if the interval is above 1). Re-measured after
the tuner, for `--remeasure-seconds` each: the race's winner right after the tuner (its compiled programs) and
after the rounds, and the written program, each timed beside our default (`XlaEvaluator.measure_paired`), the speedup with its interval (`median_interval`).

    python -m benchmarks.xla_cpu_tuning [--programs a.hlo b.hlo ...] [--search-seconds 20]
        [--hw-seconds 10] [--verify 8] [--rounds 5] [--remeasure-seconds 10]
        [--cost-model analytical|xgboost|gnn|FILE] [--json OUT]
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

DEFAULT_PROGRAMS = ["vae_small_infer", "lstm_small_infer", "mlp_mixer_small_infer", "bert_small_infer",
                    "recommender_small_infer", "autoencoder_small_infer"]


def race_winner(verification: dict):
    """Which configuration won the tuner's race: "default", a prediction's number, or (runs before the
    paired check recorded it apart) the written winner."""
    return verification.get("race_winner", verification.get("winner"))


def race_winner_text(verification: dict, written: str, default_text: str, prediction_text) -> str:
    """The text of the configuration that won the tuner's race: what was written, unless the paired check
    then kept the original, in which case the race's winner was the default configuration ("default") or the
    prediction numbered ``race_winner`` (``prediction_text(i)`` emits it)."""
    won = race_winner(verification)
    if won == verification.get("winner"):
        return written
    if won == "default":
        return default_text
    return prediction_text(won)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="*", default=None)
    ap.add_argument("--search-seconds", type=float, default=20.0)
    ap.add_argument("--hw-seconds", type=float, default=10.0, help="the tuner's verification budget")
    ap.add_argument("--verify", type=int, default=8, help="top predicted configurations verified end to end")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--remeasure-seconds", type=float, default=10.0,
                    help="paired re-measurement of the race's winner (and the written program) against our default")
    ap.add_argument("--cost-model", default="analytical")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    from autotune.compiler.program import Program
    from autotune.tuning.options import TunerOptions, VerifyOptions
    from autotune.tuning.tuner import Tuner
    from autotune.tuning.verification import confirm_paired
    from autotune import api
    from hardware.xla import XlaEvaluator, jaxlib_version
    from search.base import get_strategy

    paths = args.programs or [os.path.join(ROOT, "examples", "hlo", p + ".hlo") for p in DEFAULT_PROGRAMS]
    ev = XlaEvaluator(target="cpu", timeout_s=300)
    model = api.make_cost_model(args.cost_model, "fusion", "cpu")  # gnn / xgboost: the shipped cpu models
    rows = []
    t0 = time.time()
    try:
        for path in paths:
            name = os.path.basename(path)[:-4]
            original = open(path).read()
            space = FusionSpace(Program.from_file(path), "cpu")
            tuner = Tuner(space, model, get_strategy("annealing")(space, seed=args.seed),
                          budget=args.search_seconds, evaluator=ev, options=TunerOptions(progress=False),
                          verify=VerifyOptions(top_k=args.verify, hw_budget=args.hw_seconds, reference_text=original))
            res = tuner.run()
            ver = res.verification
            if res.fused_text is None:
                print(f"{name}: not verified ({ver.get('reason')})", file=sys.stderr)
                rows.append({"program": name, "verification": ver, "warnings": res.warnings})
                continue
            default_text = emit_fused_text(space, space.default())
            default_hdr = emit_fused_text(space, space.default(), header=True)  # as the tuner emits it
            claimed = res.measured_speedup
            won = race_winner(ver)
            race_text = race_winner_text(ver, res.fused_text, default_hdr,
                                         lambda i: emit_fused_text(space, tuner.top_predicted()[i][1], header=True))

            def remeasure(text):  # speedup of `text` over our default, timed beside it, with its interval
                if text == default_hdr:
                    return {"speedup": 1.0, "interval": [1.0, 1.0], "ratios": 0, "status": "the default itself"}
                c = confirm_paired(lambda s: ev.measure_paired(default_hdr, text, s, **EMITTED_CPU_COMPILE_OPTIONS),
                                   args.remeasure_seconds)
                return {"speedup": c.speedup, "interval": c.speedup_interval, "ratios": len(c.ratios),
                        "status": c.status}
            early = remeasure(race_text)  # right after the tuner, on its compiled programs
            times: dict = {"xla_default": [], "ours_default": [], "tuned": []}
            programs = [("xla_default", original, {}), ("ours_default", default_text, EMITTED_CPU_COMPILE_OPTIONS),
                        ("tuned", res.fused_text, EMITTED_CPU_COMPILE_OPTIONS)]
            for i in range(args.rounds):  # interleaved: the three see the same machine state; the order
                for key, text, opts in programs[i % 3:] + programs[:i % 3]:  # rotates (no position bias)
                    m = ev.measure_program(text, **opts)
                    times[key].append(m.seconds if m.ok else float("nan"))
            best = {k: min(v) for k, v in times.items()}
            re_race = remeasure(race_text)
            re_written = re_race if race_text == res.fused_text else remeasure(res.fused_text)
            paired = ver.get("paired") or {}
            rows.append({"program": name, "predicted_speedup": res.speedup, "evaluations": res.evaluations,
                         "verification": ver, "warnings": res.warnings, "claimed_speedup": claimed,
                         "winner": ver.get("winner"), "race_winner": won,
                         "race_claim": ver.get("race_speedup"), "paired_claim": paired.get("speedup"),
                         "paired_claim_interval": paired.get("speedup_interval"), "paired_ratios": paired.get("ratios"),
                         "remeasured_race_winner": re_race, "remeasured_written": re_written,
                         "remeasured_race_winner_early": early,
                         "times": times, "min_s": best,
                         "tuned_vs_xla": best["xla_default"] / best["tuned"],
                         "tuned_vs_ours_default": best["ours_default"] / best["tuned"],
                         "ours_default_vs_xla": best["xla_default"] / best["ours_default"]})
            print(f"{name}: xla {best['xla_default'] * 1e3:.3f} ms, ours-default {best['ours_default'] * 1e3:.3f} ms, "
                  f"tuned {best['tuned'] * 1e3:.3f} ms (claimed x{claimed or float('nan'):.3f}, winner "
                  f"{ver.get('winner')}, race winner {won}: race x{ver.get('race_speedup') or float('nan'):.3f}, "
                  f"paired {paired}; re-measured {re_race} / written {re_written})", file=sys.stderr)
    finally:
        ev.close()
    done = [r for r in rows if "min_s" in r]
    print(f"# XLA:CPU end to end ({platform.machine()}, {os.cpu_count()} cores, jaxlib {jaxlib_version()}); "
          f"{args.search_seconds:g} s search with {args.cost_model}, the tuner's verification of the top "
          f"{args.verify} within {args.hw_seconds:g} s, then min of {args.rounds} interleaved rounds; "
          f"{time.time() - t0:.0f} s\n")
    print("| program | XLA default (ms) | our default (ms) | verified (ms) | verified vs XLA | verified vs our default "
          "| claimed by the verification | kept |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if "min_s" not in r:
            print(f"| {r['program']} | not verified: {r['verification'].get('reason')} |||||||")
            continue
        b = r["min_s"]
        kept = "default" if r["winner"] == "default" else f"prediction {r['winner']}"
        print(f"| {r['program']} | {b['xla_default'] * 1e3:.3f} | {b['ours_default'] * 1e3:.3f} | {b['tuned'] * 1e3:.3f} | "
              f"{r['tuned_vs_xla']:.3f}x | {r['tuned_vs_ours_default']:.3f}x | {r['claimed_speedup']:.3f}x | {kept} |")
    if done:
        print(f"| **median** | | | | **{statistics.median(r['tuned_vs_xla'] for r in done):.3f}x** | "
              f"**{statistics.median(r['tuned_vs_ours_default'] for r in done):.3f}x** | "
              f"**{statistics.median(r['claimed_speedup'] for r in done):.3f}x** | |")
    def iv(x):
        return f"{x[0]:.3f}-{x[1]:.3f}" if x else "-"

    def fx(x):
        return f"{x:.3f}x" if x else "-"
    print(f"\n## Claimed against re-measured (paired with our default, {args.remeasure_seconds:g} s each, 95% intervals)\n")
    print("| program | race winner | claimed by the race (before) | paired claim (after) | its interval | block ratios "
          "| written | race winner re-measured right after | its interval | race winner re-measured after the rounds "
          "| its interval | written re-measured | its interval |")
    print("|---|---|---:|---:|---|---:|---|---:|---|---:|---|---:|---|")
    for r in done:
        a, b, e = r["remeasured_race_winner"], r["remeasured_written"], r["remeasured_race_winner_early"]
        print(f"| {r['program']} | {r['race_winner']} | {fx(r['race_claim'])} | {fx(r['paired_claim'])} | "
              f"{iv(r['paired_claim_interval'])} | {r['paired_ratios'] or '-'} | {r['winner']} | {fx(e['speedup'])} | "
              f"{iv(e['interval'])} | {fx(a['speedup'])} | "
              f"{iv(a['interval'])} | {fx(b['speedup'])} | {iv(b['interval'])} |")
    if args.json:
        json.dump({"args": vars(args), "rows": rows}, open(args.json, "w"), indent=1, default=str)
    return {"rows": rows}


if __name__ == "__main__":
    main()
