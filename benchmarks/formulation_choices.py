"""Does the cost model pick the formulation the hardware picks? Every distinct instruction with
equivalent formulations (autotune/compiler/formulations/) in the corpora, each of its choices timed alone
on XLA:CPU (`XlaEvaluator.measure_program`, outputs checked against the original instruction) and priced
by cost models without hardware (`autotune.run.formulations.predicted_seconds`).

Adoption rule, written before the first run (issue 44's goal): the default cpu cost model's pick agrees
with the hardware's on >= 90% of the instances whose choices differ by >= 1.5x on the hardware (the
slowest choice over the fastest). Reported per model: that agreement with a Wilson 95% interval, the same
over all instances, and the geometric-mean slowdown of the model's picks against the hardware's best (what
trusting the model costs). The hardware's own pick is the fastest choice alone; the original counts as a
choice. Also per instance: the hardware's best speedup over the original alone, the data behind the map of
where the formulations pay.

    python -m benchmarks.formulation_choices [--corpus examples/hlo ...] [--programs a,b] [--models analytical,default]
        [--max-sites N] [--per-program N] [--json OUT.json] [--md OUT.md]
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPORA = ["examples/hlo", "examples/hlo_library", "examples/hlo_heldout", "examples/hlo_frontends",
                   "examples/idioms"]
DIFFER = 1.5  # the adoption rule's threshold


def wilson(k: int, n: int, z: float = 1.96) -> list:
    """Wilson score interval of k successes out of n."""
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    d = 1 + z * z / n
    c = p + z * z / (2 * n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [round((c - h) / d, 4), round((c + h) / d, 4)]


def collect(paths: list, models: dict, max_sites: int, log, per_program: int = 0) -> list:
    """One row per distinct signature: hardware seconds and each model's predicted seconds per choice."""
    from autotune.compiler.formulations import FormulationSpace
    from autotune.run.formulations import predicted_seconds
    from autotune.tuning.result import ORIGINAL_COMPILE_OPTIONS
    from hardware.xla import XlaEvaluator
    rows, seen = [], set()
    ev = XlaEvaluator(target="cpu")
    try:
        for path in paths:
            try:
                space = FormulationSpace(path.read_text(), str(path))
            except Exception as e:  # noqa: BLE001 - a program the parser refuses is reported, not fatal
                log(f"{path.name}: skipped ({type(e).__name__}: {e})")
                continue
            taken = 0
            for site in space.tunable:
                if site.signature in seen or len(rows) >= max_sites or (per_program and taken >= per_program):
                    continue
                taken += 1
                seen.add(site.signature)
                ref = space.site_program(site.key)
                hw = {}
                for c in site.choices:
                    m = ev.measure_program(ref if c == "original" else space.site_program(site.key, c),
                                           reference=None if c == "original" else ref, **ORIGINAL_COMPILE_OPTIONS)
                    hw[c] = m.seconds if m.ok else None
                pred = {name: predicted_seconds(space, site, model, "cpu") for name, model in models.items()}
                rows.append({"program": path.stem, "corpus": path.parent.name, "instruction": site.name,
                             "opcode": site.opcode, "signature": site.signature, "hardware_s": hw, "predicted_s": pred})
                ok = {c: s for c, s in hw.items() if s}
                best = min(ok, key=ok.get) if ok else None
                log(f"{path.stem} {site.name}: hardware best {best} "
                    + " ".join(f"{c}={s * 1e3:.3f}ms" for c, s in ok.items()))
    finally:
        ev.close()
    return rows


def summarize(rows: list, models: list) -> dict:
    out: dict = {}
    for name in models:
        agree = agree_differ = n_differ = n = 0
        slow = []
        for r in rows:
            ok = {c: s for c, s in r["hardware_s"].items() if s}
            if len(ok) < 2:
                continue
            hw_best = min(ok, key=ok.get)
            pred = {c: s for c, s in r["predicted_s"][name].items() if c in ok and math.isfinite(s)}
            if not pred:
                continue
            pick = min(pred, key=pred.get)
            n += 1
            agree += pick == hw_best
            slow.append(ok[pick] / ok[hw_best])
            if max(ok.values()) / min(ok.values()) >= DIFFER:
                n_differ += 1
                agree_differ += pick == hw_best
        out[name] = {"instances": n, "agree": agree, "agreement": round(agree / n, 4) if n else None,
                     "agreement_interval": wilson(agree, n),
                     f"instances_differing_{DIFFER}x": n_differ, "agree_differing": agree_differ,
                     "agreement_differing": round(agree_differ / n_differ, 4) if n_differ else None,
                     "agreement_differing_interval": wilson(agree_differ, n_differ),
                     "geomean_slowdown_of_picks": round(math.exp(sum(map(math.log, slow)) / len(slow)), 4) if slow else None,
                     "adopted": bool(n_differ) and agree_differ / n_differ >= 0.9}
    return out


def markdown(result: dict) -> str:
    lines = [f"# Formulation choices: cost model vs hardware ({result['date']}, commit {result['commit']})", "",
             f"`{result['command']}` on {result['machine']}; {len(result['rows'])} distinct instructions.", "",
             "Rule (written before the run): the default cpu model's pick agrees with the hardware's on >= 90% of "
             f"the instances whose choices differ by >= {DIFFER}x.", "",
             "| model | instances | agreement [95%] | differing >= 1.5x | agreement there [95%] | geomean slowdown of its picks | rule met |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, s in result["summary"].items():
        lines.append(f"| {name} | {s['instances']} | {s['agreement']} {s['agreement_interval']} | "
                     f"{s[f'instances_differing_{DIFFER}x']} | {s['agreement_differing']} {s['agreement_differing_interval']} | "
                     f"{s['geomean_slowdown_of_picks']} | {'yes' if s['adopted'] else 'no'} |")
    lines += ["", "| program | instruction | hardware: best (x over original alone) | " + " | ".join(result["summary"]) + " |",
              "|---|---|---|" + "---|" * len(result["summary"])]
    for r in result["rows"]:
        ok = {c: s for c, s in r["hardware_s"].items() if s}
        if not ok or "original" not in ok:
            continue
        best = min(ok, key=ok.get)
        picks = [min(r["predicted_s"][m], key=r["predicted_s"][m].get) for m in result["summary"]]
        lines.append(f"| {r['program']} | {r['instruction']} | {best} (x{ok['original'] / ok[best]:.2f}) | "
                     + " | ".join(picks) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", nargs="*", default=DEFAULT_CORPORA)
    ap.add_argument("--programs", default="", help="comma-separated stems (default: all)")
    ap.add_argument("--models", default="analytical,default", help="cost-model specs; default = the cpu fusion default")
    ap.add_argument("--max-sites", type=int, default=400)
    ap.add_argument("--per-program", type=int, default=0,
                    help="at most this many distinct sites per program (0: all), so that every family is sampled")
    ap.add_argument("--json", default="")
    ap.add_argument("--md", default="")
    args = ap.parse_args(argv)
    from autotune import api
    from benchmarks.tables import git_commit
    paths = [p for c in args.corpus for p in sorted((ROOT / c).glob("*.hlo"))]
    if args.programs:
        keep = set(args.programs.split(","))
        paths = [p for p in paths if p.stem in keep]
    models = {}
    for spec in args.models.split(","):
        resolved = api.resolve_cost_model(None if spec == "default" else spec, "fusion", "cpu")
        name = spec if spec != "default" else f"default ({Path(resolved).name})"
        models[name] = api.make_cost_model(resolved, "fusion", "cpu")
    t0 = time.time()
    rows = collect(paths, models, args.max_sites, lambda s: print(s, file=sys.stderr, flush=True), args.per_program)
    result = {"command": "python -m benchmarks.formulation_choices " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": git_commit(),
              "machine": f"{platform.processor() or platform.machine()}, {platform.system()}", "seconds": round(time.time() - t0, 1),
              "rule": f"default model agreement >= 0.9 where choices differ >= {DIFFER}x",
              "summary": summarize(rows, list(models)), "rows": rows}
    text = markdown(result)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.md:
        Path(args.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
