"""Run-to-run timing noise of XlaEvaluator on this machine.

Times ~10 small standalone kernels R separate times each through `hardware.xla.XlaEvaluator`
(no store, so every request is a fresh compile + measurement; rounds are interleaved across
kernels so slow drifts show up as noise) and prints, per kernel, the median runtime and the
run-to-run coefficient of variation (stdev / mean of the R measured minima), then the median CV.

    python experiments/2026-11-22-xla-evaluator-noise/xla_noise.py            # markdown table
    python experiments/2026-11-22-xla-evaluator-noise/xla_noise.py --json     # JSON (machine info, options, per-kernel values)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hardware.xla import TimingOptions, XlaEvaluator, jaxlib_version  # noqa: E402

_REDUCE_ADD = """add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""

KERNELS: dict[str, str] = {
    "add_1024x1024": """HloModule add
ENTRY e {
  x = f32[1024,1024] parameter(0)
  y = f32[1024,1024] parameter(1)
  ROOT a = f32[1024,1024] add(x, y)
}""",
    "exp_mul_tanh_512x512": """HloModule chain
ENTRY e {
  x = f32[512,512] parameter(0)
  y = f32[512,512] parameter(1)
  a = f32[512,512] exponential(x)
  m = f32[512,512] multiply(a, y)
  ROOT t = f32[512,512] tanh(m)
}""",
    "bias_relu_1024x512": """HloModule bias_relu
ENTRY e {
  x = f32[1024,512] parameter(0)
  b = f32[512] parameter(1)
  bb = f32[1024,512] broadcast(b), dimensions={1}
  a = f32[1024,512] add(x, bb)
  z = f32[] constant(0)
  zb = f32[1024,512] broadcast(z), dimensions={}
  ROOT r = f32[1024,512] maximum(a, zb)
}""",
    "transpose_1024x1024": """HloModule transpose
ENTRY e {
  x = f32[1024,1024] parameter(0)
  ROOT t = f32[1024,1024]{1,0} transpose(x), dimensions={1,0}
}""",
    "dot_256x256x256": """HloModule dot
ENTRY e {
  a = f32[256,256] parameter(0)
  b = f32[256,256] parameter(1)
  ROOT d = f32[256,256] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""",
    "dot_64x64x64": """HloModule dot_small
ENTRY e {
  a = f32[64,64] parameter(0)
  b = f32[64,64] parameter(1)
  ROOT d = f32[64,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""",
    "reduce_sum_rows_1024x1024": "HloModule reduce_rows\n" + _REDUCE_ADD + """ENTRY e {
  x = f32[1024,1024] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[1024] reduce(x, z), dimensions={1}, to_apply=add_f32
}""",
    "reduce_max_cols_1024x1024": "HloModule reduce_cols\n" + _REDUCE_ADD + """ENTRY e {
  x = f32[1024,1024] parameter(0)
  z = f32[] constant(-inf)
  ROOT r = f32[1024] reduce(x, z), dimensions={0}, to_apply=max_f32
}""",
    "conv3x3_nhwc_1x32x32x32_to_32": """HloModule conv
ENTRY e {
  x = f32[1,32,32,32] parameter(0)
  k = f32[3,3,32,32] parameter(1)
  ROOT c = f32[1,32,32,32] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}""",
    "softmax_rows_256x1024": "HloModule softmax\n" + _REDUCE_ADD + """ENTRY e {
  x = f32[256,1024] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[256] reduce(x, ninf), dimensions={1}, to_apply=max_f32
  mb = f32[256,1024] broadcast(mx), dimensions={0}
  s = f32[256,1024] subtract(x, mb)
  e = f32[256,1024] exponential(s)
  z = f32[] constant(0)
  sm = f32[256] reduce(e, z), dimensions={1}, to_apply=add_f32
  sb = f32[256,1024] broadcast(sm), dimensions={0}
  ROOT d = f32[256,1024] divide(e, sb)
}""",
}


@dataclass
class Kernel:
    """KernelLike wrapper around a standalone HLO module."""

    name: str
    text: str

    @property
    def hash(self) -> str:
        return hashlib.sha1(self.text.encode()).hexdigest()

    def to_hlo_module(self) -> str:
        return self.text


def machine_info() -> dict:
    u = platform.uname()
    return {"uname": f"{u.system} {u.node} {u.release} {u.version} {u.machine}",
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "jaxlib": jaxlib_version(), "loadavg_1m": os.getloadavg()[0]}


def run(rounds: int, timing: TimingOptions, timeout_s: float) -> dict:
    info = machine_info()
    kernels = [Kernel(n, t) for n, t in KERNELS.items()]
    samples: dict[str, list[float]] = {k.name: [] for k in kernels}
    inner_cv: dict[str, list[float]] = {k.name: [] for k in kernels}
    failures: dict[str, list[str]] = {k.name: [] for k in kernels}
    t0 = time.perf_counter()
    with XlaEvaluator(store=None, timing=timing, timeout_s=timeout_s) as ev:
        platform_name, version = ev.platform, ev.version
        for _ in range(rounds):
            for k in kernels:  # one request per call: no in-batch de-duplication
                (m,) = ev.measure([k])
                if m.ok:
                    samples[k.name].append(m.seconds)
                    inner_cv[k.name].append(m.extra.get("cv", 0.0))
                else:
                    failures[k.name].append(m.status)
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()[0]
    rows = []
    for k in kernels:
        xs = samples[k.name]
        cv = statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else float("nan")
        rows.append({"kernel": k.name, "n": len(xs),
                     "median_us": statistics.median(xs) * 1e6 if xs else float("nan"),
                     "min_us": min(xs) * 1e6 if xs else float("nan"),
                     "max_us": max(xs) * 1e6 if xs else float("nan"),
                     "cv": cv,
                     "within_cv_median": statistics.median(inner_cv[k.name]) if xs else float("nan"),
                     "failures": failures[k.name]})
    cvs = [r["cv"] for r in rows if r["n"] > 1]
    return {"machine": info, "platform": platform_name, "evaluator_version": version,
            "rounds": rounds, "timing": asdict(timing), "wall_s": wall, "kernels": rows,
            "median_cv": statistics.median(cvs) if cvs else float("nan"),
            "loadavg_1m_after": load_after}


def markdown(res: dict) -> str:
    m = res["machine"]
    lines = [f"Machine: `{m['uname']}`, {m['cpu_count']} cores, Python {m['python']}, "
             f"jaxlib {m['jaxlib']} ({res['platform']}); evaluator {res['evaluator_version']}",
             f"Timing: {res['timing']}; R={res['rounds']} separate measurements per kernel; "
             f"wall {res['wall_s']:.1f} s; 1-min load average {m['loadavg_1m']:.2f} before, "
             f"{res['loadavg_1m_after']:.2f} after (other processes share the cores)", "",
             "| kernel | median (us) | min (us) | max (us) | run-to-run CV | within-run CV (median) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in res["kernels"]:
        fail = f" ({len(r['failures'])} failed: {r['failures'][0]})" if r["failures"] else ""
        lines.append(f"| {r['kernel']}{fail} | {r['median_us']:.1f} | {r['min_us']:.1f} | "
                     f"{r['max_us']:.1f} | {100 * r['cv']:.1f}% | {100 * r['within_cv_median']:.1f}% |")
    lines += ["", f"**Median run-to-run CV: {100 * res['median_cv']:.1f}%**"]
    return "\n".join(lines)


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", "-R", type=int, default=5, help="separate measurements per kernel")
    p.add_argument("--number", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=float, default=20.0)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    a = p.parse_args(argv)
    res = run(a.rounds, TimingOptions(number=a.number, repeat=a.repeat,
                                      min_repeat_ms=a.min_repeat_ms, warmup=a.warmup), a.timeout)
    print(json.dumps(res, indent=2) if a.json else markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
