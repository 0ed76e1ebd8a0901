"""Learning across programs in the compiler-options search: how many trials a program needs to reach 95%
of its gain with what other programs taught, against none.

Input: the run folders of a `benchmarks.user_speedup` run (each report.json's compiler-options stage: every
setting tried with its first paired timing, and the trace of the best so far in the order the run tried
them) and its JSON (the programs, in the order they were tuned on one machine and one store). For each
program with a gain (its best first timing above 1), the trials (settings checked) until the best so far
holds 95% of that best gain (`autotune.tuning.options_search.trials_to_reach`), in three orders:

- cold: the declared order with no prior (singles as `CPU_COMPILER_OPTIONS` declares them, then the pairs
  the run measured), what the first program on a machine gets, replayed on the program's own timings;
- as run: the run's own trace (the prior of the programs tuned before it on this machine);
- leave-one-out: the prior of every other program of the benchmark (`OptionsPrior` over their first
  timings, as `options_prior` builds it from the store), replayed on the program's own timings.

A replay reorders measured timings (a setting's first timing does not depend on when it was taken, up to
noise); settings the run did not measure are left out of every order alike.

`--retest RUNS2 JSON2` (a second run of the same programs): how far any prior can go on this option space
and this timing noise. Per program measured in both runs, over the settings both measured: Kendall's tau
between the two runs' first timings, and the trials the second run needs to 95% of its gain in the order of
the first run's own timings of the same program (the best a prior can know: the program's own earlier
measurements) against the declared order.

    python -m benchmarks.options_transfer --runs OUT --json us.json [--md OUT.md] [--out OUT.json]
        [--retest OUT2 us2.json]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from autotune.tuning.options_search import FAILED_LOG_SPEEDUP, OptionsPrior, candidate_settings, trials_to_reach

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> list:
    """The settings' names in the cpu target's declared order (what a first program gets)."""
    from autotune.compiler.targets.cpu import CPU_COMPILER_OPTIONS
    return [c.name for c in candidate_settings(CPU_COMPILER_OPTIONS)]


def _gain(values: dict) -> tuple:
    """({setting: speedup} of the settings that ran, the best of them or 1.0) from their log speedups."""
    speedups = {k: math.exp(v) for k, v in values.items() if v != FAILED_LOG_SPEEDUP}
    return speedups, max(speedups.values(), default=1.0)


def _cold(declared: list, names) -> list:
    """The cold order of ``names``: the singles in the declared order, then the pairs."""
    return [n for n in declared if n in names] + [n for n in names if "+" in n]


def _trials(order: list, speedups: dict, final: float) -> int:
    trace, best = [], 1.0
    for i, name in enumerate(order, 1):
        best = max(best, speedups.get(name) or 0.0)
        trace.append((i, best))
    got = trials_to_reach(trace, final)
    return got if got is not None else len(order)


def stage_of(report: dict) -> dict:
    """A run's compiler-options stage: {setting: log speedup of its first timing (failed: -0.1)}, the
    settings in the order listed, and the trace."""
    stage = (report.get("verification") or {}).get("compiler_options") or {}
    values: dict = {}
    for c in stage.get("candidates", []):
        if c["status"].startswith("skipped"):
            continue
        values[c["name"]] = (math.log(c["speedup"]) if c["status"] == "ok" and c.get("speedup")
                             else FAILED_LOG_SPEEDUP)
    return {"values": values, "trace": stage.get("trace") or [], "prior_programs": stage.get("prior_programs", 0)}


def load_stages(runs: str, result_json: str) -> list:
    """(program, `stage_of` its report) for each program of a `benchmarks.user_speedup` result, in its order."""
    result = json.loads(Path(result_json).read_text())
    stages = []
    for r in result["rows"]:
        report = Path(runs) / r["program"] / "report.json"
        if not report.exists():  # the committed copy: benchmarks/results/user_speedup_DATE/reports/PROGRAM.json
            report = Path(runs) / f"{r['program']}.json"
        if report.exists():
            stages.append((r["program"], stage_of(json.loads(report.read_text()))))
    return stages


def replay(stages: list) -> list:
    """Per program (in tuning order): trials to 95% of its gain, cold / as run / leave-one-out."""
    declared = _declared()

    def prior_of(others: list) -> OptionsPrior:
        agg: dict = {}
        for st in others:
            for name, value in st["values"].items():
                agg.setdefault(name, []).append(value)
        return OptionsPrior.from_values(agg, len(others))

    out = []
    for i, (name, st) in enumerate(stages):
        measured = st["values"]
        speedups, final = _gain(measured)
        row: dict = {"program": name, "settings": len(measured), "best_first_timing": round(final, 4),
                     "prior_programs_as_run": st["prior_programs"]}
        if final <= 1.0:
            row["note"] = "no setting faster: nothing to reach"
            out.append(row)
            continue
        singles = [n for n in declared if n in measured]
        pairs = [n for n in measured if "+" in n]
        pr = prior_of([s for j, (_, s) in enumerate(stages) if j != i])
        known = [n for n in pr.winning_pairs() if n in measured]
        loo = sorted(singles + known, key=lambda n: -pr.score(n)) + [n for n in pairs if n not in known]
        as_run = trials_to_reach([tuple(t) for t in st["trace"]], final)
        row.update({"cold": _trials(_cold(declared, measured), speedups, final),
                    "as_run": as_run if as_run is not None else len(st["trace"]),
                    "leave_one_out": _trials(loo, speedups, final)})
        out.append(row)
    return out


def retest(first: list, second: list) -> dict:
    """The second run's trials to 95% of its gain in the order of the first run's timings of the same
    program, against the declared order, with the two runs' agreement (Kendall's tau over shared settings)."""
    from costmodels.metrics import kendall
    declared = _declared()
    before = dict(first)
    rows = []
    for name, st in second:
        if name not in before:
            continue
        a, b = before[name]["values"], st["values"]
        shared = [n for n in b if n in a]
        speedups, final = _gain({k: b[k] for k in shared})
        row: dict = {"program": name, "shared_settings": len(shared), "best_first_timing": round(final, 4),
                     "kendall": kendall([a[k] for k in shared], [b[k] for k in shared]) if len(shared) > 2 else None}
        if final > 1.0:
            row.update({"cold": _trials(_cold(declared, shared), speedups, final),
                        "own_earlier_order": _trials(sorted(shared, key=lambda k: -a[k]), speedups, final)})
        rows.append(row)
    gain = [r for r in rows if "cold" in r]
    taus = [r["kendall"] for r in rows if r["kendall"] is not None and math.isfinite(r["kendall"])]
    return {"programs": len(rows), "median_kendall": statistics.median(taus) if taus else None,
            "with_a_gain": len(gain),
            "median_cold": statistics.median([r["cold"] for r in gain]) if gain else None,
            "median_own_earlier_order": statistics.median([r["own_earlier_order"] for r in gain]) if gain else None,
            "median_ratio_own_earlier_over_cold": statistics.median([r["own_earlier_order"] / r["cold"] for r in gain])
            if gain else None,
            "own_earlier_within_a_third": sum(1 for r in gain if r["own_earlier_order"] * 3 <= r["cold"]),
            "rows": rows}


def summarize(rows: list) -> dict:
    """Medians of the trials in each order, and how many programs need <= 1/3 of the cold trials."""
    if not rows:
        return {"programs": 0}
    return {"programs": len(rows), "median_cold": statistics.median([t["cold"] for t in rows]),
            "median_as_run": statistics.median([t["as_run"] for t in rows]),
            "median_leave_one_out": statistics.median([t["leave_one_out"] for t in rows]),
            "median_ratio_as_run_over_cold": statistics.median([t["as_run"] / t["cold"] for t in rows]),
            "median_ratio_loo_over_cold": statistics.median([t["leave_one_out"] / t["cold"] for t in rows]),
            "as_run_within_a_third": sum(1 for t in rows if t["as_run"] * 3 <= t["cold"]),
            "loo_within_a_third": sum(1 for t in rows if t["leave_one_out"] * 3 <= t["cold"])}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True, help="the benchmarks.user_speedup --out folder (or a folder of its "
                                                  "report.json files named PROGRAM.json)")
    ap.add_argument("--json", required=True, help="the benchmarks.user_speedup result")
    ap.add_argument("--md", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--min-gain", type=float, default=1.03,
                    help="the summary's second line: programs whose best first timing reaches this")
    ap.add_argument("--retest", nargs=2, default=None, metavar=("RUNS2", "JSON2"),
                    help="a second run of the same programs: the noise any prior meets (see the module doc)")
    args = ap.parse_args(argv)
    stages = load_stages(args.runs, args.json)
    table = replay(stages)
    with_gain = [t for t in table if "cold" in t]
    summary: dict = {"programs": len(table), "all with a gain": summarize(with_gain),
                     f"best first timing >= {args.min_gain}": summarize(
                         [t for t in with_gain if t["best_first_timing"] >= args.min_gain])}
    first = next((t for t in with_gain), None)
    second = next((t for t in with_gain if t["program"] != (first or {}).get("program")), None)
    if first and second:
        summary["first_program"] = {"program": first["program"], "trials": first["as_run"]}
        summary["second_program"] = {"program": second["program"], "trials": second["as_run"],
                                     "within_a_third_of_the_first": second["as_run"] * 3 <= first["as_run"]}
    out = {"summary": summary, "rows": table, "source": args.json}
    if args.retest:
        out["retest"] = retest(stages, load_stages(*args.retest))
        out["retest"]["source"] = args.retest[1]
        summary["retest"] = {k: v for k, v in out["retest"].items() if k not in ("rows", "source")}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    if args.md:
        lines = ["| program | settings measured | best first timing | cold | as run (prior programs) | "
                 "leave-one-out |", "|---|---|---|---|---|---|"]
        for t in table:
            if "cold" in t:
                lines.append(f"| {t['program']} | {t['settings']} | {t['best_first_timing']:.3f} | {t['cold']} | "
                             f"{t['as_run']} ({t['prior_programs_as_run']}) | {t['leave_one_out']} |")
            else:
                lines.append(f"| {t['program']} | {t['settings']} | {t['best_first_timing']:.3f} | - | - | - |")
        Path(args.md).write_text("\n".join(lines) + "\n\n" + json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return out


if __name__ == "__main__":
    main()
