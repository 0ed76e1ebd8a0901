"""A measured map of where XLA:CPU's time goes, per operation class (issue 44 part 1).

For every program of the corpora, the original program is compiled by XLA:CPU with its default
options (`hardware.xla.compile_hlo`), run on the inputs programs are timed on
(`hardware.xla.outputs.verification_inputs`) and profiled in place (`hardware.xla.profile.profile_compiled`:
each thunk's self time inside the program, per execution). Every thunk of the optimized module is
classified into an operation class from what it computes (its fused computation's "hero": a
convolution, dot, pooling window, reduce ... see :func:`classify`), priced with the project's cost
analysis (`autotune.compiler.analysis.instruction_cost` on the optimized module: flops and the
fusion's boundary bytes, times the thunk's executions per program run), and compared with the
machine's measured peaks (:func:`measure_peaks`: f32 matmul GFLOP/s and streaming bandwidth,
measured before and after the programs, the best kept):

    time at roofline = max(flops / peak GFLOP/s, bytes / peak GB/s)
    achieved fraction = time at roofline / measured time

Output: per program and (class, shape signature) the time, its share of the program's time (the
median span of a profiled execution), achieved GFLOP/s, GB/s and fraction; per class over all
programs the total share and median fraction; per program the share of its top class; and the
ranking that decides which formulations come first: the (class, shape) groups that take >= 10% of
some program's time at an achieved fraction < 10%, ranked by total time.

Usage: python -m benchmarks.operation_map [--corpus NAME ...] [--runs N] [--quick]
           [--out benchmarks/results/operation_map.json] [--md benchmarks/results/operation_map.md]
       python -m benchmarks.operation_map --render benchmarks/results/operation_map.json   # the markdown again

Each program runs in a worker process with a compile and a profile time limit: a program past it
is recorded as skipped, with why. Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from benchmarks.tables import git_commit, machine_info

ROOT = Path(__file__).resolve().parents[1]

CORPORA = {"models": ROOT / "examples" / "hlo", "library": ROOT / "examples" / "hlo_library",
           "heldout": ROOT / "examples" / "hlo_heldout", "heldout2": ROOT / "examples" / "hlo_heldout2",
           "attention": ROOT / "examples" / "hlo_attention", "encoder": ROOT / "examples" / "hlo_encoder",
           "frontends": ROOT / "examples" / "hlo_frontends"}

# --quick: a few programs that cover convolutions (forward, gradients, depthwise), dots, pooling,
# reductions, scatter/gather and while loops
QUICK = ("resnet_small_train", "efficientnet_small_infer", "bert_small_infer", "lstm_small_infer",
         "gnn_small_train", "inception_small_train")

# ------------------------------------------------------------------------------- classes
CONV_DEPTHWISE = "conv depthwise/grouped"
CONV_1X1 = "conv 1x1"
CONV_KXK = "conv kxk forward"
CONV_INPUT_GRAD = "conv input-gradient/transposed"
CONV_WEIGHT_GRAD = "conv weight-gradient"
DOT = "dot"
DOT_BATCHED = "dot batched"
DOT_TRANSPOSED = "dot transposed operands"
DOT_BATCHED_TRANSPOSED = "dot batched, transposed operands"
REDUCE_WINDOW_MAX = "reduce-window max pool"
REDUCE_WINDOW_AVG = "reduce-window avg pool"
REDUCE_WINDOW_ARGMAX = "reduce-window max pool with indices"
REDUCE_WINDOW = "reduce-window other"
SELECT_AND_SCATTER = "select-and-scatter"
REDUCE = "reduce"
ELEMENTWISE = "elementwise loop fusion"
SCATTER_GATHER = "scatter/gather"
SORT = "sort"
WHILE = "while"
COPY = "copy/transpose"
OTHER = "other"

CLASSES = (CONV_DEPTHWISE, CONV_1X1, CONV_KXK, CONV_INPUT_GRAD, CONV_WEIGHT_GRAD, DOT, DOT_BATCHED,
           DOT_TRANSPOSED, DOT_BATCHED_TRANSPOSED, REDUCE_WINDOW_MAX, REDUCE_WINDOW_AVG, REDUCE_WINDOW_ARGMAX, REDUCE_WINDOW,
           SELECT_AND_SCATTER, REDUCE, ELEMENTWISE, SCATTER_GATHER, SORT, WHILE, COPY, OTHER)

# Which instruction of a fusion decides its class: the first of these opcodes it holds.
_HERO_ORDER = ("convolution", "dot", "scaled-dot", "ragged-dot", "select-and-scatter", "reduce-window",
               "scatter", "gather", "sort", "reduce", "fft", "triangular-solve", "cholesky", "custom-call",
               "rng-bit-generator", "rng")
_DATA_MOVEMENT = frozenset({"copy", "transpose", "reshape", "bitcast", "broadcast", "slice", "concatenate", "pad",
                            "reverse", "dynamic-slice", "dynamic-update-slice", "iota", "constant", "parameter",
                            "tuple", "get-tuple-element"})
_CONTROL = frozenset({"while", "conditional", "call", "async-start", "async-done"})


def _fused_instructions(module: Any, comp_name: str) -> list:
    """(instruction, computation) of a fused computation, nested fusions' bodies included (not
    reducers' or comparators' scalar computations)."""
    out: list = []
    comp = module.computations_by_name.get(comp_name)
    if comp is None:
        return out
    for ins in comp.instructions:
        out.append((ins, comp))
        if ins.opcode == "fusion":
            for c in ins.attr("calls") or ():
                out += _fused_instructions(module, c)
    return out


def _reducer_kind(module: Any, ins: Any) -> str:
    """"max", "add", "argmax" (a variadic max with its indices: compare and select) or "other": what a
    reduce-window's scalar computation computes."""
    name = ins.attr("to_apply")
    comp = module.computations_by_name.get(name) if name else None
    ops = {i.opcode for i in comp.instructions} - {"parameter", "constant", "tuple", "get-tuple-element"} \
        if comp else set()
    if ops == {"maximum"}:
        return "max"
    if ops == {"add"}:
        return "add"
    if ins.shape.tuple_shapes is not None and {"compare", "select"} <= ops:
        return "argmax"
    return "other"


def _producer(module: Any, hero: Any, hero_comp: Any, outer: Any, outer_comp: Any, k: int) -> tuple:
    """(instruction, computation) that produces operand k of `hero`, seen through the fusion it
    sits in (a fused parameter is the fusion's operand)."""
    op = hero_comp.by_name.get(hero.operands[k]) if k < len(hero.operands) else None
    if op is not None and op.opcode == "parameter" and outer is not hero and outer.opcode == "fusion" \
            and op.parameter_number is not None and op.parameter_number < len(outer.operands):
        return outer_comp.by_name.get(outer.operands[op.parameter_number]), outer_comp
    return op, hero_comp


def _holds(module: Any, ins: Any, opcode: str) -> bool:
    """Whether an instruction is, or is a fusion that holds, `opcode`."""
    if ins is None:
        return False
    if ins.opcode == opcode:
        return True
    if ins.opcode == "fusion":
        return any(i.opcode == opcode for c in ins.attr("calls") or () for i, _ in _fused_instructions(module, c))
    return False


def _conv_class(module: Any, hero: Any, hero_comp: Any, outer: Any, outer_comp: Any) -> str:
    window = hero.attr("window") or ()
    labels = hero.attr("dim_labels")
    if hero.attr("batch_group_count", 1) > 1:
        return CONV_WEIGHT_GRAD
    if hero.attr("feature_group_count", 1) > 1:
        return CONV_DEPTHWISE
    if labels is not None and window:
        out_spatial = [hero.shape.dims[d] for d in labels.out_spatial]
        # a weight gradient convolves the activations with the output gradient: its window is the
        # activations' spatial extent (at least the output's in every dim), its output the small kernel
        if math.prod(w.size for w in window) > math.prod(out_spatial) \
                and all(w.size >= o for w, o in zip(window, out_spatial)):
            return CONV_WEIGHT_GRAD
    # an input gradient (or a transposed convolution: the same computation) dilates its input by the
    # forward stride, or convolves with the flipped kernel
    if any(w.lhs_dilate > 1 or w.reversal for w in window):
        return CONV_INPUT_GRAD
    kernel, _ = _producer(module, hero, hero_comp, outer, outer_comp, 1)
    if _holds(module, kernel, "reverse"):  # a stride-1 input gradient: the flipped kernel
        return CONV_INPUT_GRAD
    if all(w.size == 1 for w in window):
        return CONV_1X1
    return CONV_KXK


def _dot_class(module: Any, hero: Any, hero_comp: Any) -> str:
    lb = tuple(hero.attr("lhs_batch_dims") or ())
    rb = tuple(hero.attr("rhs_batch_dims") or ())
    lc = tuple(hero.attr("lhs_contracting_dims") or ())
    rc = tuple(hero.attr("rhs_contracting_dims") or ())
    lhs = hero_comp.by_name.get(hero.operands[0])
    rhs = hero_comp.by_name.get(hero.operands[1]) if len(hero.operands) > 1 else None
    lrank = lhs.shape.rank if lhs is not None else 0
    # canonical: batch dims lead both operands, lhs contracts its trailing dims, rhs the ones right
    # after its batch dims ([b..., m, k] x [b..., k, n])
    canonical = (lb == tuple(range(len(lb))) and rb == tuple(range(len(rb)))
                 and lc == tuple(range(lrank - len(lc), lrank))
                 and rc == tuple(range(len(rb), len(rb) + len(rc))))
    fed_by_transpose = any(o is not None and o.opcode == "transpose" for o in (lhs, rhs))
    transposed = not canonical or fed_by_transpose
    if lb:
        return DOT_BATCHED_TRANSPOSED if transposed else DOT_BATCHED
    return DOT_TRANSPOSED if transposed else DOT


def _hero(module: Any, ins: Any, comp: Any) -> tuple:
    """(hero instruction, its computation): the instruction of a thunk that decides its class."""
    if ins.opcode != "fusion":
        return ins, comp
    body = [x for c in ins.attr("calls") or () for x in _fused_instructions(module, c)]
    for opcode in _HERO_ORDER:
        for i, c in body:
            if i.opcode == opcode:
                return i, c
    arithmetic = [(i, c) for i, c in body if i.opcode not in _DATA_MOVEMENT]
    if arithmetic:
        return arithmetic[-1]
    movers = [(i, c) for i, c in body if i.opcode not in ("parameter", "constant", "tuple", "get-tuple-element",
                                                          "bitcast", "reshape")]
    root = next((i for i, c in body if i.is_root), None)
    return (movers[-1] if movers else (root, body[0][1]) if root is not None else (ins, comp))


def classify(module: Any, ins: Any, comp: Any) -> tuple:
    """(class, hero instruction, its computation) of one thunk's instruction of an optimized module."""
    if ins.opcode in _CONTROL:
        return (WHILE if ins.opcode == "while" else OTHER), ins, comp
    hero, hero_comp = _hero(module, ins, comp)
    op = hero.opcode
    if op == "convolution":
        return _conv_class(module, hero, hero_comp, ins, comp), hero, hero_comp
    if op in ("dot", "scaled-dot", "ragged-dot"):
        return _dot_class(module, hero, hero_comp), hero, hero_comp
    if op == "select-and-scatter":
        return SELECT_AND_SCATTER, hero, hero_comp
    if op == "reduce-window":
        kind = _reducer_kind(module, hero)
        return {"max": REDUCE_WINDOW_MAX, "add": REDUCE_WINDOW_AVG, "argmax": REDUCE_WINDOW_ARGMAX}.get(kind, REDUCE_WINDOW), hero, hero_comp
    if op in ("scatter", "gather"):
        return SCATTER_GATHER, hero, hero_comp
    if op == "sort":
        return SORT, hero, hero_comp
    if op == "reduce":
        return REDUCE, hero, hero_comp
    if op in _DATA_MOVEMENT:
        return COPY, hero, hero_comp
    if ins.opcode == "fusion" or op in _ELEMENTWISE:
        return ELEMENTWISE, hero, hero_comp
    return OTHER, hero, hero_comp


def _elementwise() -> frozenset:
    from autotune.compiler.analysis import ELEMENTWISE_OPCODES
    return ELEMENTWISE_OPCODES


_ELEMENTWISE = _elementwise()


def _dims(shape: Any) -> str:
    if shape is None:
        return "?"
    if shape.tuple_shapes is not None:
        return "(" + ",".join(_dims(s) for s in shape.tuple_shapes) + ")"
    return f"{shape.dtype}[{','.join(str(d) for d in shape.dims)}]"


def signature(cls: str, ins: Any, hero: Any, hero_comp: Any) -> str:
    """A shape signature of a thunk: its hero's operand and result shapes and what else sets its work."""
    ops = [hero_comp.by_name.get(o) for o in hero.operands]
    shapes = [_dims(o.shape) if o is not None else "?" for o in ops]
    if hero.opcode == "convolution":
        window = hero.attr("window") or ()
        parts = [f"{shapes[0]}*{shapes[1] if len(shapes) > 1 else '?'}->{_dims(hero.shape)}",
                 "win=" + "x".join(str(w.size) for w in window)]
        if any(w.stride > 1 for w in window):
            parts.append("s=" + "x".join(str(w.stride) for w in window))
        if any(w.lhs_dilate > 1 for w in window):
            parts.append("lhs_dil=" + "x".join(str(w.lhs_dilate) for w in window))
        if any(w.rhs_dilate > 1 for w in window):
            parts.append("rhs_dil=" + "x".join(str(w.rhs_dilate) for w in window))
        for k in ("feature_group_count", "batch_group_count"):
            if hero.attr(k, 1) > 1:
                parts.append(f"{k.split('_')[0][0]}gc={hero.attr(k)}")
        return " ".join(parts)
    if hero.opcode in ("dot", "scaled-dot", "ragged-dot"):
        dn = "".join(f" {k[:3]}{k.split('_')[1][0]}={','.join(map(str, hero.attr(k) or ()))}"
                     for k in ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims")
                     if hero.attr(k))
        return f"{'x'.join(shapes[:2])}->{_dims(hero.shape)}{dn}"
    if hero.opcode in ("reduce-window", "select-and-scatter"):
        window = hero.attr("window") or ()
        s = "x".join(str(w.size) for w in window)
        st = "x".join(str(w.stride) for w in window)
        return f"{shapes[0]}->{_dims(hero.shape)} win={s} s={st}"
    if hero.opcode == "reduce":
        return f"{shapes[0]}->{_dims(hero.shape)} dims={','.join(map(str, hero.attr('dimensions') or ()))}"
    if cls == WHILE:
        return f"{_dims(ins.shape)[:120]}"
    if cls in (ELEMENTWISE, COPY):
        return f"{_dims(ins.shape)[:120]}"
    return f"{hero.opcode} {','.join(shapes)[:80]}->{_dims(hero.shape)[:60]}"


def classify_module(module: Any) -> dict:
    """{thunk-able instruction name: {"class", "signature", "opcode", "cost": Cost or None, "computation"}}
    for every instruction of an optimized module that runs as a thunk (fusions, bare ops, control),
    in the entry, while bodies and other non-fused computations."""
    from autotune.compiler.analysis import instruction_cost, instruction_costs

    fused = {c for comp in module.computations for i in comp.instructions if i.opcode == "fusion"
             for c in i.attr("calls") or ()}
    scalar = {c for comp in module.computations for i in comp.instructions if i.opcode not in ("while", "conditional",
                                                                                               "call", "fusion")
              for c in i.called_computations()}
    comps = [c for c in module.computations if c.name not in fused and c.name not in scalar]
    try:
        costs = dict(zip((c.name for c in comps), instruction_costs(comps, module)))
    except Exception:  # noqa: BLE001  (one instruction the analysis refuses: price the others one by one)
        costs = {}
    out = {}
    for comp in comps:
        for k, ins in enumerate(comp.instructions):
            if ins.opcode in ("parameter", "constant", "tuple", "get-tuple-element", "bitcast"):
                continue
            cls, hero, hero_comp = classify(module, ins, comp)
            if ins.opcode in _CONTROL:
                cost = None
            elif comp.name in costs:
                cost = costs[comp.name][k]
            else:
                try:
                    cost = instruction_cost(ins, comp, module)
                except Exception:  # noqa: BLE001  (an instruction the analysis refuses: no roofline)
                    cost = None
            out[ins.name] = {"class": cls, "signature": signature(cls, ins, hero, hero_comp), "opcode": ins.opcode,
                             "hero": hero.opcode, "cost": cost, "computation": comp.name}
    return out


def classify_text(text: str) -> dict:
    """:func:`classify_module` of a program as XLA:CPU compiles it (no timing)."""
    from autotune.compiler.hlo import parse_hlo
    from hardware.xla.compile import compile_hlo
    return classify_module(parse_hlo(compile_hlo(text).optimized_text()))


# ------------------------------------------------------------------------------- peaks
_PEAK_DOT = """HloModule peak_dot
ENTRY e {{
  a = f32[{n},{n}]{{1,0}} parameter(0)
  b = f32[{n},{n}]{{1,0}} parameter(1)
  ROOT d = f32[{n},{n}]{{1,0}} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
_PEAK_ADD = """HloModule peak_add
ENTRY e {{
  a = f32[{n}]{{0}} parameter(0)
  b = f32[{n}]{{0}} parameter(1)
  ROOT c = f32[{n}]{{0}} add(a, b)
}}
"""
_PEAK_COPY = """HloModule peak_copy
ENTRY e {{
  a = f32[{n}]{{0}} parameter(0)
  ROOT c = f32[{n}]{{0}} negate(a)
}}
"""


def measure_peaks(matmul_n: int = 1024, stream_sizes: tuple = (1 << 18, 1 << 20, 1 << 22, 1 << 24),
                  repeat: int = 7) -> dict:
    """The machine's peaks, measured with XLA:CPU (each the best of `repeat` timings):

    * f32 matmul GFLOP/s: an n x n x n dot;
    * streaming GB/s: a f32 add (3 arrays moved) and negate (2 arrays) at each of `stream_sizes`
      elements. ``peak_gb_per_s`` is the best over sizes (the arrays of the corpus' programs are mostly
      cache-sized: a DRAM-only peak would put their memory-bound kernels above their roofline);
      ``dram_gb_per_s`` the best at the largest size (arrays far beyond the last-level cache).
    """
    from hardware.xla.compile import compile_hlo
    from hardware.xla.outputs import random_inputs
    from hardware.xla.timing import TimingOptions, time_compiled

    opts = TimingOptions(repeat=repeat, min_repeat_ms=50, warmup=2)
    dot = compile_hlo(_PEAK_DOT.format(n=matmul_n))
    t_dot = time_compiled(dot, random_inputs(dot.text), opts).seconds
    flops = 2.0 * matmul_n ** 3
    stream = []
    for n in stream_sizes:
        for name, tmpl, arrays in (("add", _PEAK_ADD, 3), ("negate", _PEAK_COPY, 2)):
            c = compile_hlo(tmpl.format(n=n))
            t = time_compiled(c, random_inputs(c.text), opts).seconds
            stream.append({"op": name, "elements": n, "seconds": t, "bytes": arrays * 4.0 * n,
                           "gb_per_s": arrays * 4.0 * n / t / 1e9})
    largest = max(stream_sizes)
    return {"matmul": {"n": matmul_n, "seconds": t_dot, "flops": flops, "gflop_per_s": flops / t_dot / 1e9},
            "stream": stream, "peak_gflop_per_s": flops / t_dot / 1e9,
            "peak_gb_per_s": max(v["gb_per_s"] for v in stream),
            "dram_gb_per_s": max(v["gb_per_s"] for v in stream if v["elements"] == largest)}


def best_peaks(*measured: dict) -> dict:
    """The best of several :func:`measure_peaks` (each kept under ``measurements``)."""
    out = dict(max(measured, key=lambda m: m["peak_gflop_per_s"]))
    out.pop("measurements", None)
    out["peak_gb_per_s"] = max(m["peak_gb_per_s"] for m in measured)
    out["dram_gb_per_s"] = max(m["dram_gb_per_s"] for m in measured)
    out["measurements"] = [{k: v for k, v in m.items() if k != "measurements"} for m in measured]
    return out


# ------------------------------------------------------------------------------- one program
def profile_program(path: str, runs: int = 10, max_profile_s: float = 60.0, report=None) -> dict:
    """Compile a program, profile it in place, and price and classify every thunk: one record."""
    from autotune.compiler.hlo import parse_hlo
    from hardware.xla.compile import compile_hlo
    from hardware.xla.outputs import verification_inputs
    from hardware.xla.profile import profile_compiled
    from hardware.xla.timing import TimingOptions

    text = Path(path).read_text()
    t0 = time.perf_counter()
    compiled = compile_hlo(text)
    compile_s = time.perf_counter() - t0
    if report:
        report({"stage": "compiled", "compile_s": compile_s})
    module = parse_hlo(compiled.optimized_text())
    info = classify_module(module)
    inputs = verification_inputs(text)
    # one execution first: its time sets how many profiled executions fit the limit
    compiled.execute(compiled.put(inputs))
    args = compiled.put(inputs)  # (fresh: an execution consumes donated parameters)
    t1 = time.perf_counter()
    compiled.execute(args)
    one_s = time.perf_counter() - t1
    n = max(2, min(int(runs), int(max_profile_s / 4 / max(one_s, 1e-6))))
    timing = TimingOptions(repeat=2, min_repeat_ms=min(20.0, 1e3 * one_s * 3), warmup=1)
    prof = profile_compiled(compiled, inputs, runs=n, timing=timing)
    program_s = statistics.median(prof.run_seconds)
    thunks = []
    for name, t in prof.thunks.items():
        meta = info.get(name)
        cost = meta["cost"] if meta else None
        count = max(t.count, 1)
        rec = {"name": name, "class": meta["class"] if meta else OTHER,
               "signature": meta["signature"] if meta else "?", "opcode": meta["opcode"] if meta else None,
               "hero": meta["hero"] if meta else None, "seconds": t.median,
               "gap_seconds": statistics.median(t.gaps) if t.gaps else 0.0, "count": t.count,
               "flops": None, "transcendentals": None, "bytes": None}
        if meta is not None and meta["opcode"] in _CONTROL:
            rec.update(flops=0.0, transcendentals=0.0, bytes=0.0)  # the loop's own time: no work of its own
        elif cost is not None and cost.flops >= 0 and cost.bytes_accessed >= 0:
            rec.update(flops=cost.flops * count, transcendentals=cost.transcendentals * count,
                       bytes=cost.bytes_accessed * count)
        thunks.append(rec)
    thunks.sort(key=lambda r: -r["seconds"])
    return {"program": Path(path).stem, "compile_s": round(compile_s, 3), "one_execution_s": one_s,
            "profiled_runs": prof.runs, "program_s": program_s, "end_to_end_s": prof.end_to_end.seconds,
            "tail_s": statistics.median(prof.tail_seconds) if prof.tail_seconds else 0.0,
            "unmatched_thunks": sorted(n for n in prof.thunks if n not in info), "thunks": thunks}


def _worker(conn) -> None:  # pragma: no cover - runs in a child process
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            res = profile_program(job["path"], job["runs"], job["max_profile_s"], report=conn.send)
            conn.send({"stage": "done", "result": res})
        except Exception as e:  # noqa: BLE001  (the program is recorded as failed, the run goes on)
            conn.send({"stage": "error", "error": f"{type(e).__name__}: {str(e)[:500]}"})


class Worker:
    """One child process that profiles programs; killed and replaced when a program runs past its limit."""

    def __init__(self):
        import multiprocessing as mp
        self._ctx = mp.get_context("spawn")
        self._start()

    def _start(self) -> None:
        self.conn, child = self._ctx.Pipe()
        self.proc = self._ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()

    def run(self, path: str, runs: int, max_compile_s: float, max_profile_s: float) -> dict:
        self.conn.send({"path": path, "runs": runs, "max_profile_s": max_profile_s})
        limit, stage, compile_s = max_compile_s, "compile", None
        deadline = time.perf_counter() + limit
        while True:
            left = deadline - time.perf_counter()
            if left <= 0 or not self.conn.poll(left):
                self.restart()
                why = (f"compile took over {max_compile_s:.0f} s" if stage == "compile"
                       else f"profile took over {max_profile_s:.0f} s (compile {compile_s:.1f} s)")
                return {"skipped": why}
            try:
                msg = self.conn.recv()
            except EOFError:
                self.restart()
                return {"skipped": f"worker died during {stage} (exit {self.proc.exitcode})"}
            if msg["stage"] == "compiled":
                stage, compile_s = "profile", msg["compile_s"]
                deadline = time.perf_counter() + max_profile_s
            elif msg["stage"] == "done":
                return msg["result"]
            else:
                return {"skipped": f"failed during {stage}: {msg['error']}"}

    def restart(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self._start()

    def close(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()


# ------------------------------------------------------------------------------- summaries
def _fraction(flops: Optional[float], nbytes: Optional[float], seconds: float, peaks: dict,
              bandwidth: str = "peak_gb_per_s") -> Optional[float]:
    """Time at roofline / measured time (None where the work is unknown)."""
    if flops is None or nbytes is None or seconds <= 0:
        return None
    roof = max(flops / (peaks["peak_gflop_per_s"] * 1e9), nbytes / (peaks[bandwidth] * 1e9))
    return roof / seconds


def group_program(rec: dict, peaks: dict) -> list:
    """Per (class, signature) of one program: time, share, achieved GFLOP/s, GB/s, fraction of roofline."""
    groups: dict = defaultdict(lambda: {"seconds": 0.0, "gap_seconds": 0.0, "flops": 0.0, "bytes": 0.0,
                                        "thunks": 0, "priced": True})
    for t in rec["thunks"]:
        g = groups[(t["class"], t["signature"])]
        g["seconds"] += t["seconds"]
        g["gap_seconds"] += t["gap_seconds"]
        g["thunks"] += 1
        if t["flops"] is None:
            g["priced"] = False
        else:
            g["flops"] += t["flops"]
            g["bytes"] += t["bytes"]
    out = []
    total = rec["program_s"]
    for (cls, sig), g in groups.items():
        s = g["seconds"]
        priced = g["priced"]
        out.append({"program": rec["program"], "corpus": rec.get("corpus"), "class": cls, "signature": sig,
                    "seconds": s, "gap_seconds": g["gap_seconds"], "thunks": g["thunks"],
                    "share": s / total if total > 0 else None,
                    "flops": g["flops"] if priced else None, "bytes": g["bytes"] if priced else None,
                    "gflop_per_s": g["flops"] / s / 1e9 if priced and s > 0 else None,
                    "gb_per_s": g["bytes"] / s / 1e9 if priced and s > 0 else None,
                    "fraction": _fraction(g["flops"] if priced else None, g["bytes"] if priced else None, s, peaks),
                    "fraction_dram": _fraction(g["flops"] if priced else None, g["bytes"] if priced else None, s,
                                               peaks, "dram_gb_per_s")})
    out.sort(key=lambda r: -r["seconds"])
    return out


def summarize(programs: list, peaks: dict, share_min: float = 0.10, fraction_max: float = 0.10) -> dict:
    """Groups per program, per-class aggregates, each program's top class, and the ranking."""
    groups = [g for rec in programs for g in group_program(rec, peaks)]
    total_s = sum(rec["program_s"] for rec in programs)
    n_prog = len(programs)
    by_class: dict = defaultdict(list)
    for g in groups:
        by_class[g["class"]].append(g)
    classes = {}
    for cls, gs in by_class.items():
        s = sum(g["seconds"] for g in gs)
        fr = [g["fraction"] for g in gs if g["fraction"] is not None]
        per_prog: dict = defaultdict(float)
        for g in gs:
            per_prog[g["program"]] += g["share"] or 0.0
        classes[cls] = {"seconds": s, "share_of_corpus": s / total_s if total_s else None,
                        "mean_share_per_program": sum(per_prog.values()) / n_prog if n_prog else None,
                        "programs": len(per_prog), "groups": len(gs),
                        "median_fraction": statistics.median(fr) if fr else None,
                        "time_weighted_fraction": (sum(g["fraction"] * g["seconds"] for g in gs if g["fraction"]
                                                       is not None) / sum(g["seconds"] for g in gs
                                                                          if g["fraction"] is not None))
                        if fr and sum(g["seconds"] for g in gs if g["fraction"] is not None) > 0 else None}
    top = {}
    for rec in programs:
        shares: dict = defaultdict(float)
        for t in rec["thunks"]:
            shares[t["class"]] += t["seconds"]
        if shares and rec["program_s"] > 0:
            cls = max(shares, key=shares.get)
            top[rec["program"]] = {"class": cls, "share": shares[cls] / rec["program_s"],
                                   "program_s": rec["program_s"]}
    # the ranking: (class, signature) groups that take >= share_min of some program at fraction < fraction_max
    slow: dict = defaultdict(lambda: {"seconds": 0.0, "programs": [], "fractions": [], "max_share": 0.0})
    for g in groups:
        if g["share"] is None or g["fraction"] is None:
            continue
        if g["share"] >= share_min and g["fraction"] < fraction_max:
            e = slow[(g["class"], g["signature"])]
            e["programs"].append(g["program"])
    for g in groups:
        key = (g["class"], g["signature"])
        if key in slow and g["fraction"] is not None:
            slow[key]["seconds"] += g["seconds"]
            slow[key]["fractions"].append(g["fraction"])
            slow[key]["max_share"] = max(slow[key]["max_share"], g["share"] or 0.0)
    ranking = sorted(({"class": c, "signature": s, "seconds": e["seconds"],
                       "share_of_corpus": e["seconds"] / total_s if total_s else None, "max_share": e["max_share"],
                       "median_fraction": statistics.median(e["fractions"]), "programs": sorted(set(e["programs"]))}
                      for (c, s), e in slow.items()), key=lambda r: -r["seconds"])
    class_rank: dict = defaultdict(lambda: {"seconds": 0.0, "groups": 0, "programs": set(), "max_share": 0.0})
    for r in ranking:
        e = class_rank[r["class"]]
        e["seconds"] += r["seconds"]
        e["groups"] += 1
        e["programs"].update(r["programs"])
        e["max_share"] = max(e["max_share"], r["max_share"])
    class_ranking = sorted(({"class": c, "seconds": e["seconds"], "share_of_corpus": e["seconds"] / total_s,
                             "groups": e["groups"], "programs": len(e["programs"]), "max_share": e["max_share"],
                             "class_median_fraction": classes[c]["median_fraction"]}
                            for c, e in class_rank.items()), key=lambda r: -r["seconds"])
    return {"total_program_s": total_s, "classes": classes, "top_class": top, "ranking": ranking,
            "class_ranking": class_ranking, "groups": groups,
            "criterion": {"share_min": share_min, "fraction_max": fraction_max}}


def _f(v: Optional[float], fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def markdown(result: dict, top_n: int = 25) -> str:
    from benchmarks.tables import md_table
    meta, peaks, summ = result["meta"], result["peaks"], result["summary"]
    lines = [f"# Operation map: where XLA:CPU's time goes ({meta['date']}, commit {meta['commit']})", "",
             f"`{meta['command']}` on {meta['machine']}, jaxlib {meta['jaxlib']}; "
             f"{len(result['programs'])} programs profiled, {len(result['skipped'])} skipped; peaks: f32 matmul "
             f"{peaks['peak_gflop_per_s']:.1f} GFLOP/s ({peaks['matmul']['n']}^3 dot), stream "
             f"{peaks['peak_gb_per_s']:.1f} GB/s (best over array sizes; {peaks['dram_gb_per_s']:.1f} GB/s at "
             f"{max(v['elements'] for v in peaks['stream']) * 4 >> 20} MiB arrays). Achieved fraction = "
             "max(flops / peak GFLOP/s, bytes / peak GB/s) / measured time (the in-program thunk self time; "
             "bytes: the kernel's boundary traffic, cost analysis of the optimized module).", "",
             f"## Classes that take >= {summ['criterion']['share_min']:.0%} of some program's time at an achieved "
             f"fraction < {summ['criterion']['fraction_max']:.0%}, by total time", ""]
    rows = [(r["class"], f"{r['seconds'] * 1e3:.2f}", f"{r['share_of_corpus']:.1%}", r["groups"], r["programs"],
             f"{r['max_share']:.1%}", _f(r["class_median_fraction"])) for r in summ["class_ranking"]]
    lines += [md_table(["class", "time (ms)", "share of corpus", "shapes", "programs", "max share in a program",
                        "median fraction (class)"], rows), ""]
    lines += [f"## Top {top_n} (class, shape) groups of that ranking", ""]
    rows = [(i + 1, r["class"], f"`{r['signature'][:110]}`", f"{r['seconds'] * 1e3:.2f}", f"{r['share_of_corpus']:.1%}",
             f"{r['max_share']:.1%}", _f(r["median_fraction"]), ", ".join(r["programs"][:3])
             + (f" +{len(r['programs']) - 3}" if len(r["programs"]) > 3 else ""))
            for i, r in enumerate(summ["ranking"][:top_n])]
    lines += [md_table(["#", "class", "shape", "time (ms)", "share of corpus", "max share", "fraction", "programs"],
                       rows), ""]
    lines += ["## Every class over all programs", ""]
    rows = [(c, f"{v['seconds'] * 1e3:.2f}", f"{v['share_of_corpus']:.1%}", f"{v['mean_share_per_program']:.1%}",
             v["programs"], v["groups"], _f(v["median_fraction"]), _f(v["time_weighted_fraction"]))
            for c, v in sorted(summ["classes"].items(), key=lambda kv: -kv[1]["seconds"])]
    lines += [md_table(["class", "time (ms)", "share of corpus", "mean share per program", "programs", "shapes",
                        "median fraction", "time-weighted fraction"], rows), ""]
    counts: dict = defaultdict(int)
    for v in summ["top_class"].values():
        counts[v["class"]] += 1
    lines += ["Top class per program (how many programs): " + ", ".join(
        f"{c} {n}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])) + "; per-program shares in the JSON.", ""]
    lines += ["## Per program: its top class and the share of its time that class takes", ""]
    rows = [(p, summ["top_class"][p]["class"], f"{summ['top_class'][p]['share']:.1%}",
             f"{summ['top_class'][p]['program_s'] * 1e3:.2f}")
            for p in sorted(summ["top_class"], key=lambda p: -summ["top_class"][p]["share"])]
    lines += [md_table(["program", "top class", "share", "program time (ms)"], rows), ""]
    if result["skipped"]:
        lines += ["Skipped: " + "; ".join(f"{s['program']} ({s['why']})" for s in result["skipped"]), ""]
    return "\n".join(lines)


def corpus_programs(names) -> list:
    """(corpus, path) of every program of the named corpora, in manifest order."""
    out = []
    for name in names:
        folder = CORPORA[name]
        manifest = folder / "manifest.json"
        if not manifest.exists():
            continue
        for m in json.loads(manifest.read_text()):
            p = folder / (m.get("file") or f"{m['name']}.hlo")
            if p.exists():
                out.append((name, p))
    return out


def _compact(obj: Any, digits: int = 6) -> Any:
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _compact(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_compact(v, digits) for v in obj]
    return obj


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", nargs="*", default=list(CORPORA), choices=list(CORPORA))
    ap.add_argument("--programs", default="", help="comma-separated program names (default: all of the corpora)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--runs", type=int, default=10, help="profiled executions per program (fewer for slow programs)")
    ap.add_argument("--max-compile-s", type=float, default=90.0, help="skip a program whose compile takes longer")
    ap.add_argument("--max-profile-s", type=float, default=60.0, help="skip a program whose profile takes longer")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "operation_map.json"))
    ap.add_argument("--md", default=None, help="markdown summary (default: --out with .md)")
    ap.add_argument("--render", default="", help="only write the markdown of this raw JSON result (no measuring)")
    args = ap.parse_args(argv)
    if args.render:
        md = markdown(read_results(args.render))
        print(md)
        Path(args.md or str(Path(args.render).with_suffix(".md"))).write_text(md + "\n")
        return 0
    progs = corpus_programs(args.corpus)
    if args.quick:
        progs = [(c, p) for c, p in progs if p.stem in QUICK]
    if args.programs:
        want = set(args.programs.split(","))
        progs = [(c, p) for c, p in progs if p.stem in want]
    if not progs:
        print("operation_map: no programs selected", file=sys.stderr)
        return 2
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    meta = {"command": "python -m benchmarks.operation_map " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(), **machine_info(), "load_average_start": [round(x, 2) for x in os.getloadavg()]}
    meta["machine"] = f"{meta['machine']}, {meta['arch']}, Python {meta['python']}"
    started = time.perf_counter()
    print("measuring peaks ...", file=sys.stderr, flush=True)
    peaks = measure_peaks()  # before the worker starts: nothing of ours runs beside it
    print(f"peaks: {peaks['peak_gflop_per_s']:.1f} GFLOP/s f32 matmul, {peaks['peak_gb_per_s']:.1f} GB/s stream",
          file=sys.stderr, flush=True)
    programs, skipped = [], []
    worker = Worker()
    try:
        for k, (corpus, path) in enumerate(progs):
            t0 = time.perf_counter()
            res = worker.run(str(path), args.runs, args.max_compile_s, args.max_profile_s)
            if "skipped" in res:
                skipped.append({"program": path.stem, "corpus": corpus, "why": res["skipped"]})
                msg = f"skipped: {res['skipped']}"
            else:
                res["corpus"] = corpus
                programs.append(res)
                msg = (f"{res['program_s'] * 1e3:.2f} ms/run, {len(res['thunks'])} thunks, compile "
                       f"{res['compile_s']:.1f} s")
            print(f"[{k + 1}/{len(progs)}] {corpus}/{path.stem}: {msg} ({time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr, flush=True)
    finally:
        worker.close()
    # again at the end, the best of both kept: a peak measured while other work shares the cores is too low
    print("measuring peaks again ...", file=sys.stderr, flush=True)
    peaks = best_peaks(peaks, measure_peaks())
    print(f"peaks: {peaks['peak_gflop_per_s']:.1f} GFLOP/s f32 matmul, {peaks['peak_gb_per_s']:.1f} GB/s stream",
          file=sys.stderr, flush=True)
    summ = summarize(programs, peaks)
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    result = {"meta": meta, "peaks": peaks, "programs": programs, "skipped": skipped, "summary": summ}
    md = markdown(result)
    print(md)
    if args.out:
        write_results(result, args.out)
        md_path = args.md or str(Path(args.out).with_suffix(".md"))
        Path(md_path).write_text(md + "\n")
    return 0


def thunks_path(out: str) -> Path:
    """Where the per-thunk records of a result go: beside it, ``NAME_thunks.json.gz``."""
    p = Path(out)
    return p.with_name(p.stem + "_thunks.json.gz")


def write_results(result: dict, out: str) -> None:
    """The raw result: `out` holds the meta, peaks, skipped programs, summary and the per program
    (class, shape) groups (one line each); the per-thunk records of every program (what the summary is
    computed from, :func:`summarize`) go gzipped beside it (:func:`thunks_path`)."""
    import gzip
    result = _compact(result)
    summary = dict(result["summary"])
    groups = summary.pop("groups")
    thunks = {p["program"]: p["thunks"] for p in result["programs"]}
    head = {**{k: v for k, v in result.items() if k not in ("summary", "programs")},
            "programs": [{k: v for k, v in p.items() if k != "thunks"} for p in result["programs"]],
            "thunks_file": thunks_path(out).name, "summary": summary}
    text = json.dumps(head, indent=1)
    rows = ",\n".join(json.dumps(g) for g in groups)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text[:-2] + ',\n "groups": [\n' + rows + "\n ]\n}\n")
    with gzip.open(thunks_path(out), "wt") as f:
        json.dump(thunks, f, separators=(",", ":"))


def read_results(out: str) -> dict:
    """A result as :func:`main` made it (the per-thunk records put back into its programs)."""
    import gzip
    head = json.loads(Path(out).read_text())
    path = Path(out).with_name(head["thunks_file"])
    if path.exists():
        with gzip.open(path, "rt") as f:
            thunks = json.load(f)
        for p in head["programs"]:
            p["thunks"] = thunks.get(p["program"], [])
    head["summary"]["groups"] = head.pop("groups")
    return head



if __name__ == "__main__":
    sys.exit(main())
