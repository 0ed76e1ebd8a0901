"""A benchmark a user can believe: `autotune fusion P --target cpu --budget B` as a user runs it, then the
program it wrote timed against XLA's own compile of the original, independently of the tuner.

Per program: (1) the tuning run in a fresh process (`autotune fusion ... --store STORE`, one store for the
whole benchmark, so later programs learn from earlier ones as on a user's machine); (2) `--rounds`
interleaved rounds, each timing the original (XLA's default options) and the written fused.hlo (compiled
with the `compile_options` its report.json names, or XLA's defaults when it says keep the original) in
two fresh processes, the order alternating per round; each process compiles, checks nothing, times for
`--seconds` (min over repeats of the mean of >= 20 ms of executions) and prints its time; (3) the written
program's outputs against the original's (XLA's defaults, the same verification inputs), judged as the
tuner judges (`hardware.xla.output_error`, then the f64 yardstick): a wrong output is counted.

Reported per program: the speedup original / written, the median over rounds of the per-round ratios
with a bootstrap 95% interval (rounds resampled), what the tuner claimed, whether outputs are right; and
over programs: median and geometric mean, the count of programs whose interval lies below 1 (slower) or
above 1, with the seed and machine. One plot per program (per-round times of both) and one of all.

    python -m benchmarks.user_speedup [--corpus examples/hlo] [--programs a,b] [--budget 2m] [--cost-model M]
        [--rounds 7] [--seconds 1.0] [--out DIR] [--json OUT.json] [--md OUT.md] [--plots DIR]
    python -m benchmarks.user_speedup --compare A.json B.json [--md OUT.md]   (two runs side by side, per corpus)
    python -m benchmarks.user_speedup --time-one PROGRAM --compile-json '{"disable_fusion": false, ...}'
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from benchmarks.tables import bootstrap_median, git_commit

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def time_one(path: str, compile_json: str, seconds: float, seed: int = 0) -> dict:
    """In this process: compile one program with the given options, time it for about `seconds`."""
    from hardware.xla import compile_hlo, verification_inputs
    from hardware.xla.timing import TimingOptions, time_compiled
    text = Path(path).read_text()
    opts = json.loads(compile_json)
    t0 = time.perf_counter()
    compiled = compile_hlo(text, disable_fusion=bool(opts.get("disable_fusion", False)),
                           xla_flags=dict(opts.get("xla_flags") or {}))
    compile_s = time.perf_counter() - t0
    inputs = verification_inputs(text, seed)
    probe = time_compiled(compiled, inputs, TimingOptions(repeat=1, warmup=1))
    per_repeat = max(0.02, probe.seconds * max(1, probe.number))
    repeat = max(3, min(200, int(seconds / per_repeat)))
    res = time_compiled(compiled, inputs, TimingOptions(repeat=repeat, warmup=1))
    return {"seconds": res.seconds, "repeats": len(res.repeats), "number": res.number, "compile_s": compile_s}


def _timed_in_fresh_process(path: Path, compile_options: dict, seconds: float) -> dict:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.user_speedup", "--time-one", str(path),
                           "--compile-json", json.dumps(compile_options), "--seconds", str(seconds)],
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_outputs(original: Path, written: Path, compile_options: dict) -> dict:
    """The written program's outputs against XLA's default compile of the original, judged as the tuner
    judges them (tolerance, then the 16-bit and f64 second opinions)."""
    from hardware.xla import compile_hlo, verification_inputs
    from hardware.xla.accuracy import accuracy_fallback
    from hardware.xla.outputs import computes_in_16bit, output_error
    orig_text, text = original.read_text(), written.read_text()
    inputs = verification_inputs(orig_text, 0)
    ref = compile_hlo(orig_text)(*inputs)
    got = compile_hlo(text, disable_fusion=bool(compile_options.get("disable_fusion", False)),
                      xla_flags=dict(compile_options.get("xla_flags") or {}))(*inputs)
    low = computes_in_16bit(orig_text)
    err, ok = output_error(got, ref, low_precision=low)
    extra: dict = {}
    if not ok:
        ok, extra = accuracy_fallback(ok, low, text, orig_text, inputs, got, ref, options=compile_options)
    return {"ok": bool(ok), "error": float(err), **{k: v for k, v in extra.items() if isinstance(v, (int, float, str))}}


def median_and_interval(values: list, seed: int = 0) -> tuple:
    """Median and a bootstrap 95% interval of the median (values resampled; `bootstrap_median`)."""
    return (float(statistics.median(values)), *bootstrap_median(values, seed=seed))


def run_program(path: Path, args: argparse.Namespace, out: Path, store: Path) -> dict:
    run_dir = out / path.stem
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "fusion", str(path), "--target", "cpu",
                           "--budget", args.budget, "--out", str(run_dir), "--store", str(store), "--no-progress",
                           "--seed", str(args.seed)] + (["--cost-model", args.cost_model] if args.cost_model else []),
                          capture_output=True, text=True, cwd=ROOT, env=ENV)
    row: dict = {"program": path.stem, "corpus": path.parent.name, "exit": proc.returncode,
                 "tune_wall_s": round(time.perf_counter() - t0, 1)}
    report_path = run_dir / "report.json"
    if not report_path.exists():
        row["error"] = (proc.stderr.strip().splitlines() or ["no report"])[-1][:300]
        return row
    rep = json.loads(report_path.read_text())
    written = run_dir / "fused.hlo"
    compile_options = rep.get("compile_options")
    if compile_options is None:
        from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS
        compile_options = ({"disable_fusion": False, "xla_flags": {}} if rep.get("keep_original")
                           else EMITTED_CPU_COMPILE_OPTIONS)
    opt = (rep.get("verification") or {}).get("compiler_options") or {}
    row.update({"status": (rep.get("verification") or {}).get("status"), "keep_original": rep.get("keep_original"),
                "winner": (rep.get("verification") or {}).get("winner"), "XLA_FLAGS": rep.get("XLA_FLAGS"),
                "claimed_speedup": rep.get("measured_speedup"), "claimed_interval": rep.get("measured_speedup_interval"),
                "options_prior_programs": opt.get("prior_programs"), "options_trace": opt.get("trace"),
                "options_decision": opt.get("decision"), "compile_options": compile_options})
    try:
        row["outputs"] = check_outputs(path, written, compile_options)
    except Exception as e:  # noqa: BLE001 - recorded: a written program that does not run is wrong
        row["outputs"] = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    original_opts = {"disable_fusion": False, "xla_flags": {}}
    orig_t, writ_t, ratios = [], [], []
    for r in range(args.rounds):
        pair = [("original", path, original_opts), ("written", written, compile_options)]
        if r % 2:
            pair.reverse()
        got = {name: _timed_in_fresh_process(p, o, args.seconds) for name, p, o in pair}
        if "error" in got["original"] or "error" in got["written"]:
            row["timing_error"] = got["original"].get("error") or got["written"].get("error")
            break
        orig_t.append(got["original"]["seconds"])
        writ_t.append(got["written"]["seconds"])
        ratios.append(orig_t[-1] / writ_t[-1])
    row.update({"original_s": orig_t, "written_s": writ_t, "round_speedups": ratios})
    if ratios:
        med, lo, hi = median_and_interval(ratios, args.seed)
        row.update({"speedup": med, "interval": [lo, hi] if lo is not None else None})
    return row


def summarize(rows: list) -> dict:
    sp = [r["speedup"] for r in rows if r.get("speedup")]
    if not sp:
        return {"programs": len(rows), "timed": 0}
    med, lo, hi = median_and_interval(sp)
    return {"programs": len(rows), "timed": len(sp), "median": med, "median_interval": [lo, hi],
            "geomean": math.exp(statistics.mean(math.log(s) for s in sp)), "mean": statistics.mean(sp),
            "faster_beyond_interval": sum(1 for r in rows if r.get("interval") and r["interval"][0] > 1),
            "slower_beyond_interval": sum(1 for r in rows if r.get("interval") and r["interval"][1] < 1),
            "wrong_outputs": sum(1 for r in rows if r.get("outputs") is not None and not r["outputs"].get("ok")),
            "failed_runs": sum(1 for r in rows if r.get("outputs") is None or not r.get("speedup")),
            "tuned_fusion_written": sum(1 for r in rows if r.get("winner") not in (None, "original",
                                                                                    "original with compiler options")),
            "options_written": sum(1 for r in rows if r.get("XLA_FLAGS"))}


def compare(a: dict, b: dict) -> dict:
    """Two runs of the benchmark (e.g. two budgets) on the programs they share: per program both speedups,
    per corpus and pooled each run's `summarize`, and the median over programs of b's speedup over a's."""
    rows_a = {r["program"]: r for r in a["rows"]}
    shared = [r for r in b["rows"] if r["program"] in rows_a]
    per = [{"program": r["program"], "corpus": r.get("corpus"), "a": rows_a[r["program"]].get("speedup"),
            "a_interval": rows_a[r["program"]].get("interval"), "b": r.get("speedup"), "b_interval": r.get("interval"),
            "a_written": rows_a[r["program"]].get("winner"), "b_written": r.get("winner")} for r in shared]
    groups: dict = {}
    for r in shared:
        groups.setdefault(r.get("corpus") or "", []).append(r["program"])
    keys = ("budget", "cost_model", "commit", "date")
    out: dict = {"a": {k: a.get(k) for k in keys}, "b": {k: b.get(k) for k in keys}, "programs": per, "groups": {}}
    for name, progs in [*sorted(groups.items()), ("pooled", [r["program"] for r in shared])]:
        ra = [rows_a[p] for p in progs]
        rb = [r for r in shared if r["program"] in progs]
        both = [(x["a"], x["b"]) for x in per if x["program"] in progs and x["a"] and x["b"]]
        ratio = median_and_interval([y / x for x, y in both]) if both else (None, None, None)
        out["groups"][name] = {"programs": len(progs), "a": summarize(ra), "b": summarize(rb),
                               "median_b_over_a": ratio[0], "median_b_over_a_interval": list(ratio[1:])}
    return out


def compare_markdown(c: dict) -> str:
    a, b = c["a"], c["b"]
    def run(r: dict) -> str:
        return f"budget {r['budget']}" + (f", --cost-model {r['cost_model']}" if r.get("cost_model") else "")
    lines = [f"# user_speedup: A = {run(a)} ({a['date']}, {a['commit']}) against B = {run(b)} "
             f"({b['date']}, {b['commit']})", "",
             "| group | programs | median A [95%] | median B [95%] | geomean A / B | faster beyond interval A / B | "
             "slower beyond A / B | wrong outputs A / B | median of B / A per program [95%] |",
             "|---|---|---|---|---|---|---|---|---|"]

    def med(s: dict) -> str:
        iv = s.get("median_interval") or [None, None]
        return f"{s['median']:.3f}" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv[0] is not None else "") if s.get("timed") else "-"
    for name, g in c["groups"].items():
        sa, sb = g["a"], g["b"]
        r, iv = g["median_b_over_a"], g["median_b_over_a_interval"]
        lines.append(f"| {name} | {g['programs']} | {med(sa)} | {med(sb)} | {sa.get('geomean', 0):.3f} / "
                     f"{sb.get('geomean', 0):.3f} | {sa.get('faster_beyond_interval')} / {sb.get('faster_beyond_interval')} | "
                     f"{sa.get('slower_beyond_interval')} / {sb.get('slower_beyond_interval')} | "
                     f"{sa.get('wrong_outputs')} / {sb.get('wrong_outputs')} | "
                     + (f"{r:.3f}" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv[0] is not None else "") if r else "-") + " |")
    lines += ["", "| program | corpus | A [95%] | B [95%] | written A | written B |", "|---|---|---|---|---|---|"]

    def one(x: Optional[float], iv: Optional[list]) -> str:
        return f"{x:.3f}" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else "") if x else "-"
    for p in c["programs"]:
        lines.append(f"| {p['program']} | {p['corpus']} | {one(p['a'], p['a_interval'])} | {one(p['b'], p['b_interval'])} | "
                     f"{p['a_written']} | {p['b_written']} |")
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    s = result["summary"]
    model = f" --cost-model {result['cost_model']}" if result.get("cost_model") else ""
    lines = [f"# user_speedup: `autotune fusion --target cpu --budget {result['budget']}{model}`, re-timed independently",
             "",
             f"Machine: {result['machine']}; {result['date']}; commit {result['commit']}; {result['rounds']} rounds "
             f"x {result['seconds']} s per process.", ""]
    if s.get("timed"):
        lo, hi = s["median_interval"]
        iv = f" (95% [{lo:.3f}, {hi:.3f}])" if lo is not None else ""
        lines += [f"Median speedup over XLA's own compile: **{s['median']:.3f}**{iv}, geomean {s['geomean']:.3f}, mean {s['mean']:.3f} over {s['timed']} "
                  f"programs; faster beyond the interval {s['faster_beyond_interval']}, slower beyond it "
                  f"{s['slower_beyond_interval']}; wrong outputs {s['wrong_outputs']}; failed runs {s['failed_runs']}; written: tuned fusion "
                  f"{s['tuned_fusion_written']}, with compiler options {s['options_written']}.", ""]
    lines += ["| program | corpus | speedup [95%] | claimed | written | XLA_FLAGS (options) | outputs | prior programs |",
              "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        iv = r.get("interval")
        sp = f"{r['speedup']:.3f}" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else "") if r.get("speedup") else \
            r.get("error") or r.get("timing_error") or "-"
        cl = f"{r['claimed_speedup']:.3f}" if r.get("claimed_speedup") else "-"
        flags = " ".join(f for f in (r.get("XLA_FLAGS") or "").split() if not f.startswith("--xla_disable_hlo_passes"))
        outs = "ok" if (r.get("outputs") or {}).get("ok") else f"WRONG {r.get('outputs')}"
        lines.append(f"| {r['program']} | {r.get('corpus', '')} | {sp} | {cl} | {r.get('winner')} | {flags or '-'} | "
                     f"{outs} | {r.get('options_prior_programs')} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, folder: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder.mkdir(parents=True, exist_ok=True)
    rows = [r for r in result["rows"] if r.get("speedup")]
    for r in rows:
        fig, ax = plt.subplots(figsize=(4.5, 3))
        ax.plot([t * 1e3 for t in r["original_s"]], "o-", label="original, XLA's defaults")
        ax.plot([t * 1e3 for t in r["written_s"]], "s-", label="written by autotune")
        ax.set_xlabel("round (fresh processes)")
        ax.set_ylabel("ms per execution")
        ax.set_title(f"{r['program']}: x{r['speedup']:.3f}", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(folder / f"{r['program']}.png", dpi=90)
        plt.close(fig)
    if rows:
        fig, ax = plt.subplots(figsize=(max(5, 0.35 * len(rows)), 3.5))
        xs = range(len(rows))
        ax.bar(xs, [r["speedup"] - 1 for r in rows], bottom=1)
        ax.errorbar(xs, [r["speedup"] for r in rows],
                    yerr=[[r["speedup"] - (r["interval"] or [r["speedup"]] * 2)[0] for r in rows],
                          [(r["interval"] or [r["speedup"]] * 2)[1] - r["speedup"] for r in rows]],
                    fmt="none", ecolor="black", capsize=2)
        ax.axhline(1, color="gray", lw=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["program"] for r in rows], rotation=70, fontsize=6)
        ax.set_ylabel("speedup over XLA's own compile")
        fig.tight_layout()
        fig.savefig(folder / "all.png", dpi=100)
        plt.close(fig)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--compile-json", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", nargs="*", default=["examples/hlo"])
    ap.add_argument("--programs", default=None, help="comma-separated stems (default: every program of the corpora)")
    ap.add_argument("--budget", default="2m")
    ap.add_argument("--cost-model", default=None,
                    help="passed to `autotune fusion --cost-model` (default: none passed, the command's own default)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1.0, help="timing per fresh process")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="run folders and the store (default: a temporary folder)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--plots", default=None)
    ap.add_argument("--compare", nargs=2, default=None, metavar=("A.json", "B.json"),
                    help="measure nothing: two runs' results side by side (per corpus and pooled)")
    args = ap.parse_args(argv)
    if args.compare:
        c = compare(*(json.loads(Path(f).read_text()) for f in args.compare))
        if args.json:
            Path(args.json).write_text(json.dumps(c, indent=1))
        text = compare_markdown(c)
        if args.md:
            Path(args.md).write_text(text)
        print(text)
        return c
    if args.time_one:
        print(json.dumps(time_one(args.time_one, args.compile_json, args.seconds, args.seed)))
        return {}
    import tempfile
    from autotune.compiler.targets.host import host_machine
    out = Path(args.out or tempfile.mkdtemp(prefix="user_speedup_"))
    out.mkdir(parents=True, exist_ok=True)
    store = out / "store.sqlite"
    paths = [p for c in args.corpus for p in sorted((ROOT / c).glob("*.hlo"))]
    if args.programs:
        want = args.programs.split(",")
        paths = [p for w in want for p in paths if p.stem == w]
    result: dict = {"budget": args.budget, "cost_model": args.cost_model, "rounds": args.rounds,
                    "seconds": args.seconds, "seed": args.seed,
                    "machine": f"{host_machine()} ({platform.machine()})", "commit": git_commit(),
                    "date": time.strftime("%Y-%m-%d"), "load_start": os.getloadavg()[0], "rows": []}
    for i, p in enumerate(paths):
        row = run_program(p, args, out, store)
        result["rows"].append(row)
        print(f"[{i + 1}/{len(paths)}] {p.stem}: x{row.get('speedup', float('nan')):.3f} "
              f"{row.get('interval')} claimed {row.get('claimed_speedup')} written {row.get('winner')} "
              f"outputs {'ok' if (row.get('outputs') or {}).get('ok') else row.get('outputs')}", flush=True)
        result["summary"] = summarize(result["rows"])
        result["load_end"] = os.getloadavg()[0]
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    result["summary"] = summarize(result["rows"])
    if args.md:
        Path(args.md).write_text(markdown(result))
    if args.plots:
        plot(result, Path(args.plots))
    print(json.dumps(result["summary"], indent=1))
    return result


if __name__ == "__main__":
    main()
