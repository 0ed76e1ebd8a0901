"""Emission parity on XLA:CPU: fused whole programs compute what the original computes.

For every corpus program (examples/hlo/*.hlo) and for the default fusion configuration plus N
random valid ones (`space.random(rng)`), the program is emitted with one `fusion` per kernel
(`autotune.kernel.emit_fused_text`), compiled by jaxlib (HLO -> StableHLO -> HLO, XLA:CPU) and run
on the same random inputs as the original; outputs are compared.

Every compile runs in its own subprocess: an XLA `Check failed` aborts the process.

Emitted programs are compiled with XLA's own fusion passes *disabled* by default
(`--xla-fusion off`): our `fusion` instructions are then exactly the kernels that run (XLA:CPU only
wraps the remaining lone ops into single-op `wrapped_*` loop fusions and turns dots into library
calls). With XLA's fusion pass on, it would fuse the instructions we left outside fusions
(reshapes, transposes, ...) into our fusions, so the measured program would no longer be our
configuration. `--xla-fusion on` checks that mode too.

Error metric and inputs: `hardware.xla.output_error` (relative error, elements tiny against their
array measured against 1% of its magnitude; pass: err <= 1e-4 for f32/f64, 1e-2 for 16-bit floats,
integer/bool outputs equal) on `hardware.xla.verification_inputs` (random inputs, rank-0/1 float
parameters non-negative) - the same check `autotune fusion` applies to the program it writes.

Usage: python benchmarks/emission_parity.py [--configs 2] [--programs a,b] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "hlo"
sys.path.insert(0, str(ROOT))

# The error metric, its tolerance and the inputs live in the library (hardware/xla.py), where the
# tuner's end-to-end verification uses them too.
from hardware.xla import output_error, verification_inputs  # noqa: E402


def make_config(space, spec: str):
    import numpy as np
    if spec == "default":
        return space.default()
    if spec == "unfused":
        return space.unfused()
    if spec.startswith("random"):
        seed = int(spec.split(":")[1])
        return space.random(np.random.default_rng(seed))
    raise ValueError(spec)


def child(path: str, spec: str, refpath: str, disable_fusion: bool) -> dict:
    """Runs in a subprocess: compile + run one configuration (or the reference)."""
    import numpy as np
    from hardware.xla import compile_hlo
    text = Path(path).read_text()
    inputs = verification_inputs(text)
    if spec == "reference":
        c = compile_hlo(text)
        out = c(*inputs)
        np.savez(refpath, *out)
        return {"compile_s": c.compile_seconds}
    from autotune.fusion import FusionSpace
    from autotune.kernel import emit_fused_text
    from autotune.program import Program
    prog = Program.from_text(text, filename=path)
    space = FusionSpace(prog, "cpu")
    cfg = make_config(space, spec)
    fused = emit_fused_text(space, cfg, metadata=False)
    from autotune.kernel import EMITTED_CPU_COMPILE_OPTIONS
    opts = dict(EMITTED_CPU_COMPILE_OPTIONS)
    if not disable_fusion:
        opts["disable_fusion"] = False
    c = compile_hlo(fused, **opts)
    out = c(*inputs)
    ref = np.load(refpath)
    ref = [ref[f"arr_{i}"] for i in range(len(ref.files))]
    err, ok = output_error(out, ref)
    return {"compile_s": c.compile_seconds, "err": err, "ok": ok, "kernels": len(space.state(cfg).refs()),
            "fused_edges": cfg.count(), "edges": space.n_edges}


def check_program(path: str, specs: list[str]) -> dict:
    """In-process (run it in a subprocess: XLA aborts on bad modules): reference once, then for each
    configuration emit, re-parse (our parser and XLA's), compile once, run, compare.
    Returns {spec: {"ok", "err", "compile_s", "reparse"}} plus "_reference_compile_s"."""
    from autotune.fusion import FusionSpace
    from autotune.hlo import parse_hlo
    from autotune.kernel import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    from autotune.program import Program
    from hardware.xla import compile_hlo, parse_hlo_text
    text = Path(path).read_text()
    inputs = verification_inputs(text)
    c = compile_hlo(text)
    ref = c(*inputs)
    out: dict = {"_reference_compile_s": c.compile_seconds}
    space = FusionSpace(Program.from_text(text, filename=path), "cpu")
    for spec in specs:
        cfg = make_config(space, spec)
        fused = emit_fused_text(space, cfg, metadata=False)
        parse_hlo(fused)
        parse_hlo_text(fused)
        c = compile_hlo(fused, **EMITTED_CPU_COMPILE_OPTIONS)
        err, ok = output_error(c(*inputs), ref)
        out[spec] = {"ok": ok, "err": err, "compile_s": c.compile_seconds, "reparse": True,
                     "kernels": len(space.state(cfg).refs())}
    return out


def run_check_program(path: str, specs: list[str], timeout: float = 600) -> dict:
    """`check_program` in a subprocess; {"status": "ok"|"crash: ..."|"timeout", "results": {...}}."""
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT)!r}); "
            "import benchmarks.emission_parity as m; "
            f"print('RESULT', json.dumps(m.check_program({path!r}, {specs!r})))")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                           cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "results": {}}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return {"status": "ok", "results": json.loads(line[7:])}
    lines = (r.stderr or "").splitlines()
    why = next((l for l in lines if "Check failed" in l), None) or next(
        (l for l in reversed(lines) if l.strip()), f"exit {r.returncode}")
    return {"status": f"crash: {why.strip()[:300]}", "results": {}}


def run_child(path: str, spec: str, refpath: str, disable_fusion: bool, timeout: float = 600) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT)!r}); "
            "sys.argv=['x']; import benchmarks.emission_parity as m; "
            f"print('RESULT', json.dumps(m.child({path!r}, {spec!r}, {refpath!r}, {disable_fusion!r})))")
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                           cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "wall_s": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res["status"] = "ok" if res.get("ok", True) else "mismatch"
            res["wall_s"] = wall
            return res
    lines = (r.stderr or "").splitlines()
    why = next((l for l in lines if "Check failed" in l), None) or next(
        (l for l in reversed(lines) if l.strip()), f"exit {r.returncode}")
    return {"status": f"crash: {why.strip()[:300]}", "wall_s": wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", default="", help="comma-separated names (default: all)")
    ap.add_argument("--configs", type=int, default=2, help="random configurations per program")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--xla-fusion", choices=["off", "on"], default="off")
    ap.add_argument("--json", default="")
    ap.add_argument("--jobs", type=int, default=2, help="programs checked in parallel")
    args = ap.parse_args(argv)
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    names = [m["name"] for m in manifest]
    if args.programs:
        want = args.programs.split(",")
        names = [n for n in names if n in want]
    specs = ["default"] + [f"random:{args.seed * 1000 + k}" for k in range(args.configs)]
    tmp = tempfile.mkdtemp(prefix="parity_")
    disable = args.xla_fusion == "off"

    def one(name: str) -> dict:
        path = str(CORPUS / f"{name}.hlo")
        t0 = time.perf_counter()
        results: dict = {}
        ref_s = None
        if disable:  # fast path: one subprocess for the reference and every configuration
            res = run_check_program(path, specs)
            if res["status"] == "ok":
                ref_s = res["results"].pop("_reference_compile_s")
                for sp_, r in res["results"].items():
                    r["status"] = "ok" if r["ok"] else "mismatch"
                results = res["results"]
        if not results:  # a crash (or fusion on): one subprocess per configuration, to say which
            refpath = os.path.join(tmp, f"{name}.npz")
            ref = run_child(path, "reference", refpath, False)
            ref_s = ref.get("compile_s")
            for sp_ in specs:
                results[sp_] = (run_child(path, sp_, refpath, disable) if ref["status"] == "ok"
                                else {"status": "reference failed: " + ref["status"]})
        errs = [r["err"] for r in results.values() if "err" in r]
        cts = [r["compile_s"] for r in results.values() if "compile_s" in r]
        return {"program": name, "ok": sum(r["status"] == "ok" for r in results.values()), "n": len(specs),
                "max_err": max(errs) if errs else None, "ref_compile_s": ref_s,
                "compile_s": max(cts) if cts else None, "wall_s": time.perf_counter() - t0,
                "results": results}

    print("| program | configs ok | max err | ref compile s | max emitted compile s | failures |")
    print("|---|---|---|---|---|---|")
    from concurrent.futures import ThreadPoolExecutor
    rows = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for row in pool.map(one, names):
            rows.append(row)
            fails = "; ".join(f"{s_}: {r['status']}" for s_, r in row["results"].items() if r["status"] != "ok")
            me = f"{row['max_err']:.2e}" if row["max_err"] is not None else "-"
            rc = f"{row['ref_compile_s']:.2f}" if row["ref_compile_s"] is not None else "-"
            ec = f"{row['compile_s']:.2f}" if row["compile_s"] is not None else "-"
            print(f"| {row['program']} | {row['ok']}/{row['n']} | {me} | {rc} | {ec} | {fails[:200]} |", flush=True)
    tot = sum(r["ok"] for r in rows)
    n = sum(r["n"] for r in rows)
    print(f"\n{tot}/{n} configurations ok over {len(rows)} programs "
          f"(XLA fusion pass {'disabled' if args.xla_fusion == 'off' else 'enabled'} for emitted programs)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if tot == n else 1


if __name__ == "__main__":
    sys.exit(main())
