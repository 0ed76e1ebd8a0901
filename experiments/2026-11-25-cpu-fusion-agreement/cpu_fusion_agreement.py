"""Agreement of the `cpu` default fusion configuration with the fusions XLA:CPU itself makes.

For every corpus program: compile the original with jaxlib (XLA:CPU, its own fusion passes on), read
the fusions it made (`hardware.xla.xla_fusion_report`), map the fused instructions back to our
normalized program through their original names (XLA keeps them as metadata op_name when the input
has none; our normalization renames inlined instructions `name.iN`, so both sides are keyed by the
original name with the `.iN` suffixes stripped), and compare:

* kernels: our default kernel count vs XLA's (every top-level fusion, `wrapped_*` single-op fusions
  and library `__ynn_fusion` kCustom fusions included, plus bare instructions that do work such as a
  convolution). Our single-op reshape/bitcast kernels are not counted: all corpus layouts are the
  default row-major ones, so XLA:CPU turns every reshape into a free bitcast.
* edge agreement: over our fusible edges (producer -> consumer) on which XLA has an opinion (both
  instructions still exist in XLA's optimized module), the fraction where both fuse or both do not.
  XLA "fused" an edge when some XLA kernel contains both instructions.

`__ynn_fusion` (kCustom) kernels are YNNPACK library calls that XLA:CPU 0.10.2 forms around dots and
reductions (with their elementwise producers/consumers). They are kernels, so they count in the
kernel totals and as "fused" for edge agreement by default; `--ynn exclude` drops every edge that
touches an instruction XLA put into a ynn fusion (our `cpu` rules cannot emit library fusions: a
hand-made fusion containing a reduce runs as an XLA loop, so those edges are structural
differences, not heuristic ones). Both numbers are printed.

Usage: python experiments/2026-11-25-cpu-fusion-agreement/cpu_fusion_agreement.py [--programs a,b] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "hlo"
sys.path.insert(0, str(ROOT))

_SUFFIX = re.compile(r"(\.i\d+)+$")
_FREE_SINGLE = frozenset({"reshape", "bitcast"})


def base_name(name: str) -> str:
    return _SUFFIX.sub("", name)


def xla_kernels(text: str) -> tuple[list[dict], float]:
    """XLA's kernels of the kernel-bearing computations (reducers etc. excluded)."""
    from hardware.xla import compile_hlo, strip_metadata, xla_fusion_report
    t0 = time.perf_counter()
    mod = compile_hlo(strip_metadata(text)).optimized_module()
    secs = time.perf_counter() - t0
    printed = mod.to_string()
    attached = set(re.findall(r"(?:to_apply|comparator|scatter)=%?([\w.\-]+)", printed))
    rep = xla_fusion_report(text, include_unfused=True, optimized_module=mod)
    return [r for r in rep if r["computation"] not in attached], secs


def analyse(name: str) -> dict:
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    path = CORPUS / f"{name}.hlo"
    text = path.read_text()
    prog = Program.from_text(text, filename=str(path))
    space = FusionSpace(prog, "cpu")
    cfg = space.default()
    refs = space.state(cfg).refs()
    ours = 0
    for r in refs:
        comp = prog.computations[r.comp]
        if len(r.members) == 1 and comp.instructions[r.root].opcode in _FREE_SINGLE:
            continue
        ours += 1
    kernels, compile_s = xla_kernels(text)
    # origin name -> list of XLA kernel ids containing it; and which are ynn kernels
    where: dict[str, set[int]] = {}
    ynn_names: set[str] = set()
    for k, rep in enumerate(kernels):
        for o in rep["origins"]:
            where.setdefault(o, set()).add(k)
            if rep.get("custom_kind") == "__ynn_fusion":
                ynn_names.add(o)
    n_xla = len(kernels)
    bits = cfg.bits
    stats = {"all": [0, 0], "no_ynn": [0, 0]}
    disagree: dict[str, int] = {}
    for e in range(space.n_edges):
        comp = prog.computations[space.edge_comp[e]]
        p, c = comp.instructions[space.edge_prod[e]], comp.instructions[space.edge_cons[e]]
        kp, kc = base_name(p.name), base_name(c.name)
        if kp not in where or kc not in where:
            continue  # rewritten or removed by XLA's passes: no opinion
        xla_fused = bool(where[kp] & where[kc])
        agree = xla_fused == bool(bits[e])
        stats["all"][0] += agree
        stats["all"][1] += 1
        if kp not in ynn_names and kc not in ynn_names:
            stats["no_ynn"][0] += agree
            stats["no_ynn"][1] += 1
        if not agree:
            key = f"{p.opcode}->{c.opcode}:{'xla' if xla_fused else 'ours'}"
            disagree[key] = disagree.get(key, 0) + 1
    top = sorted(disagree.items(), key=lambda kv: -kv[1])[:6]
    return {"program": name, "ours": ours, "xla": n_xla, "ratio": ours / max(n_xla, 1),
            "edges": space.n_edges, "compared": stats["all"][1],
            "agreement": stats["all"][0] / stats["all"][1] if stats["all"][1] else None,
            "compared_no_ynn": stats["no_ynn"][1],
            "agreement_no_ynn": stats["no_ynn"][0] / stats["no_ynn"][1] if stats["no_ynn"][1] else None,
            "top_disagreements": top, "xla_compile_s": compile_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    names = [m["name"] for m in manifest]
    if args.programs:
        want = set(args.programs.split(","))
        names = [n for n in names if n in want]
    rows = []
    print("| program | our kernels | XLA kernels | ratio | edges compared | agreement | agreement excl. ynn | "
          "top disagreements (ours vs xla fused) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        r = analyse(name)
        rows.append(r)
        fmt = lambda v: "-" if v is None else f"{100 * v:.1f}%"
        top = ", ".join(f"{k} x{v}" for k, v in r["top_disagreements"][:3])
        print(f"| {name} | {r['ours']} | {r['xla']} | {r['ratio']:.2f} | {r['compared']}/{r['edges']} | "
              f"{fmt(r['agreement'])} | {fmt(r['agreement_no_ynn'])} | {top} |", flush=True)
    ag = [r["agreement"] for r in rows if r["agreement"] is not None]
    ag2 = [r["agreement_no_ynn"] for r in rows if r["agreement_no_ynn"] is not None]
    ratios = [r["ratio"] for r in rows]
    if rows:
        print(f"\nmedian agreement {100 * statistics.median(ag):.1f}% (excl. ynn {100 * statistics.median(ag2):.1f}%), "
              f"median kernel ratio ours/XLA {statistics.median(ratios):.2f} over {len(rows)} programs")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
