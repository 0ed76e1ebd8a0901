"""How the hardware models price opcodes beyond elementwise work, and a crash sweep of the CLI.

1. Pricing ladder: one-instruction programs of the opcodes whose device work is not XLA's figure
   (docs/simulator.md, section 1b) at three sizes; the noise-free simulator and the analytical
   model (untiled and default tile) price each kernel, and the log-log slope between the two largest
   sizes shows the growth in the problem size n (elements; the matrix side for the n x n rows):
   about 1 for streaming ops (below 1 where fixed costs still show), 1.14 for n log^2 n sorting
   (4M vs 256K elements), 3 for dot/cholesky/triangular-solve.
2. Sweep: `autotune show --target tpu`, `show --target cpu` and `measure --evaluator sim` (in
   process, `--store none`) over every program given (default: examples/hlo and
   tests/fixtures/hlo); counts programs, kernels and failures.

    python experiments/2026-11-24-opcode-coverage/opcode_pricing.py [--sweep PATH ...] [--no-sweep]
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.environ.setdefault("AUTOTUNE_NO_MICROBENCH", "1")

from autotune.compiler.fusion import FusionSpace  # noqa: E402
from autotune.compiler.program import Program  # noqa: E402
from autotune.compiler.tiles import device_work  # noqa: E402
from costmodels.analytical import AnalyticalCostModel  # noqa: E402
from hardware.simulator import TpuSimulator  # noqa: E402

LT = "lt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = pred[] compare(a, b), direction=LT\n}\n"
ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n"


def _module(body: str, extra: str = "", header: str = "") -> str:
    return f"HloModule m{header}\n\n{extra}\nENTRY main {{\n{body}\n}}\n"


def _vec(n: int, body: str, extra: str = "", header: str = "") -> str:
    return _module(body.format(n=n), extra, header)


# (name, opcode priced, sizes, program of a size; n = elements of the main operand or matrix side)
LADDER = [
    ("exponential", "exponential", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _vec(n, "p = f32[{n}]{{0}} parameter(0)\nROOT r = f32[{n}]{{0}} exponential(p)")),
    ("sort", "sort", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _vec(n, "p = f32[{n}]{{0}} parameter(0)\nROOT r = f32[{n}]{{0}} sort(p), dimensions={{0}}, "
                       "to_apply=lt", LT)),
    ("topk (k=8, rows of 1024)", "topk", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _module(f"p = f32[{n // 1024},1024]{{1,0}} parameter(0)\nROOT r = (f32[{n // 1024},8]{{1,0}}, "
                       f"s32[{n // 1024},8]{{1,0}}) topk(p), k=8, largest=true")),
    ("fft (c64, 1-D)", "fft", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _vec(n, "p = c64[{n}]{{0}} parameter(0)\nROOT r = c64[{n}]{{0}} fft(p), fft_type=FFT, "
                       "fft_length={{{n}}}")),
    ("custom-call", "custom-call", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _vec(n, 'p = f32[{n}]{{0}} parameter(0)\nROOT r = f32[{n}]{{0}} custom-call(p), '
                       'custom_call_target="my_kernel"')),
    ("all-reduce, 2 devices", "all-reduce", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _vec(n, "p = f32[{n}]{{0}} parameter(0)\nROOT r = f32[{n}]{{0}} all-reduce(p), "
                       "replica_groups={{{{0,1}}}}, to_apply=add", ADD)),
    ("all-reduce, 8 devices", "all-reduce", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _vec(n, "p = f32[{n}]{{0}} parameter(0)\nROOT r = f32[{n}]{{0}} all-reduce(p), "
                       "replica_groups=[1,8]<=[8], to_apply=add", ADD)),
    ("all-gather, 4 devices", "all-gather", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _module(f"p = f32[{n // 4}]{{0}} parameter(0)\nROOT r = f32[{n}]{{0}} all-gather(p), "
                       "replica_groups=[1,4]<=[4], dimensions={0}")),
    ("infeed", "infeed", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _vec(n, "t = token[] after-all()\nr = (f32[{n}]{{0}}, token[]) infeed(t)\n"
                       "ROOT g = f32[{n}]{{0}} get-tuple-element(r), index=0")),
    ("rng-bit-generator", "rng-bit-generator", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _vec(n, "s = u64[2]{{0}} parameter(0)\nROOT r = (u64[2]{{0}}, u32[{n}]{{0}}) "
                       "rng-bit-generator(s), algorithm=rng_default")),
    ("batch-norm-training", "batch-norm-training", (1 << 14, 1 << 18, 1 << 22),
     lambda n: _module(f"p = f32[{n // 1024},8,128]{{2,1,0}} parameter(0)\ns = f32[8]{{0}} parameter(1)\n"
                       f"o = f32[8]{{0}} parameter(2)\nROOT r = (f32[{n // 1024},8,128]{{2,1,0}}, f32[8]{{0}}, "
                       f"f32[8]{{0}}) batch-norm-training(p, s, o), epsilon=0.001, feature_index=1")),
    ("dot (n x n)", "dot", (256, 1024, 4096),
     lambda n: _module(f"p = f32[{n},{n}]{{1,0}} parameter(0)\nROOT r = f32[{n},{n}]{{1,0}} dot(p, p), "
                       "lhs_contracting_dims={1}, rhs_contracting_dims={0}")),
    ("ragged-dot (n x n, 4 groups)", "ragged-dot", (256, 1024, 4096),
     lambda n: _module(f"p = f32[{n},{n}]{{1,0}} parameter(0)\nq = f32[4,{n},{n}]{{2,1,0}} parameter(1)\n"
                       f"g = s32[4]{{0}} parameter(2)\nROOT r = f32[{n},{n}]{{1,0}} ragged-dot(p, q, g), "
                       "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, "
                       "rhs_group_dims={0}")),
    ("cholesky (n x n)", "cholesky", (256, 1024, 4096),
     lambda n: _module(f"p = f32[{n},{n}]{{1,0}} parameter(0)\nROOT r = f32[{n},{n}]{{1,0}} cholesky(p), "
                       "lower=true")),
    ("triangular-solve (n x n)", "triangular-solve", (256, 1024, 4096),
     lambda n: _module(f"a = f32[{n},{n}]{{1,0}} parameter(0)\nb = f32[{n},{n}]{{1,0}} parameter(1)\n"
                       f"ROOT r = f32[{n},{n}]{{1,0}} triangular-solve(a, b), left_side=true, lower=true, "
                       "transpose_a=NO_TRANSPOSE")),
]


def _kernel(text: str, opcode: str):
    space = FusionSpace(Program.from_text(text), "tpu")
    return next(k for k in space.kernels(space.default()) if opcode in k.opcodes)


def pricing() -> list[dict]:
    sim, model = TpuSimulator(noise=0.0), AnalyticalCostModel("tpu")
    rows = []
    for name, opcode, sizes, make in LADDER:
        ks = [_kernel(make(n), opcode) for n in sizes]
        t_sim = sim.simulate(ks, noise=False)
        t_an = model.predict(ks)
        t_tile = model.predict(ks, [None] * len(ks))
        work = [device_work(k) for k in ks]

        def slope(t):
            return math.log(t[2] / t[1]) / math.log(sizes[2] / sizes[1])
        rows.append({"name": name, "sizes": list(sizes), "sim_s": t_sim.tolist(), "analytical_s": t_an.tolist(),
                     "analytical_tiled_s": t_tile.tolist(), "slope_sim": slope(t_sim), "slope_analytical": slope(t_an),
                     "device_flops": [w.flops for w in work], "xla_flops": [k.cost.flops for k in ks],
                     "link_bytes": [w.interconnect_bytes + w.host_bytes for w in work]})
    return rows


def sweep(paths: list[str]) -> dict:
    from click.testing import CliRunner
    from autotune.cli.app import main
    runner = CliRunner()
    out = {"programs": 0, "commands": 0, "failed": [], "kernels": 0, "seconds": 0.0}
    t0 = time.perf_counter()
    for path in paths:
        out["programs"] += 1
        for args in (["show", path, "--target", "tpu"], ["show", path, "--target", "cpu"],
                     ["measure", path, "--evaluator", "sim", "--store", "none", "--json"]):
            out["commands"] += 1
            r = runner.invoke(main, args)
            if r.exit_code != 0 or (r.exception is not None and not isinstance(r.exception, SystemExit)):
                tail = (r.output or "").strip().splitlines()[-1:] or [repr(r.exception)]
                out["failed"].append(f"{' '.join(args[:1] + args[2:4])} {path}: {tail[0][:200]}")
            elif args[0] == "measure":
                out["kernels"] += json.loads(r.output)["kernels_total"]
    out["seconds"] = time.perf_counter() - t0
    return out


def _us(t: float) -> str:
    return f"{t * 1e6:,.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", nargs="*", default=None, help="programs to sweep (default: examples/hlo, "
                    "tests/fixtures/hlo)")
    ap.add_argument("--no-sweep", action="store_true")
    args = ap.parse_args()
    print("| opcode | n | simulator (us) | analytical (us) | analytical, default tile (us) | slope sim / analytical |")
    print("|---|---|---|---|---|---|")
    for r in pricing():
        print(f"| {r['name']} | {' / '.join(f'{n:,}' for n in r['sizes'])} | "
              f"{' / '.join(map(_us, r['sim_s']))} | {' / '.join(map(_us, r['analytical_s']))} | "
              f"{' / '.join(map(_us, r['analytical_tiled_s']))} | {r['slope_sim']:.2f} / {r['slope_analytical']:.2f} |")
    if args.no_sweep:
        return
    paths = args.sweep or (sorted(glob.glob(os.path.join(ROOT, "examples", "hlo", "*.hlo")))
                           + sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "hlo", "*.hlo"))))
    s = sweep(paths)
    print(f"\nsweep: {s['programs']} programs, {s['commands']} commands, {s['kernels']:,} kernels measured "
          f"(default configurations), {len(s['failed'])} failures, {s['seconds']:.0f} s")
    for f in s["failed"]:
        print("  FAILED", f)


if __name__ == "__main__":
    main()
