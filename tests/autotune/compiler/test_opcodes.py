"""Every opcode of `autotune.compiler.hlo.OPCODES`, end to end: a one-op HLO program per opcode goes through
parse -> Program -> FusionSpace (tpu and cpu) -> default kernels -> instruction_cost / module_cost ->
TpuSimulator -> AnalyticalCostModel -> features without an exception, kernels that do work get a
finite positive runtime, and the opcodes the project refuses (`UNSUPPORTED_OPCODES`) are refused
with one line naming the instruction and file:line:col. Where jaxlib's XLA parses the template,
`instruction_cost` is checked against XLA's own HloCostAnalysis.

Adding an opcode to OPCODES without a template here fails `test_every_opcode_has_a_template`.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from autotune.compiler.analysis import instruction_cost, module_cost
from autotune.compiler.hlo import OPCODES, HloParseError, parse_hlo
from autotune.compiler.program import UNSUPPORTED_OPCODES, Program, ProgramError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# --------------------------------------------------------------------------------------------------
# Templates: one small valid module per opcode. The instruction under test is named `r` (its ROOT
# unless the opcode cannot be a root of a useful program, e.g. `send`).

X = "f32[4,8]{1,0}"
I32 = "s32[4,8]{1,0}"

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""
GE = """ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
"""
LT = """lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
"""
LT2 = """lt2 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT e = pred[] compare(a, b), direction=LT
}
"""
NEG = f"""neg {{
  a = {X} parameter(0)
  ROOT n = {X} negate(a)
}}
"""


def module(body: str, extra: str = "", header: str = "") -> str:
    return f"HloModule m{header}\n\n{extra}\nENTRY main {{\n{body}\n}}\n"


def unary(op: str, dtype: str = "f32", out: str = "") -> str:
    shape = f"{dtype}[4,8]{{1,0}}"
    return module(f"p = {shape} parameter(0)\nROOT r = {out or shape} {op}(p)")


def binary(op: str, dtype: str = "f32", out: str = "", attrs: str = "") -> str:
    shape = f"{dtype}[4,8]{{1,0}}"
    return module(f"p = {shape} parameter(0)\nq = {shape} parameter(1)\n"
                  f"ROOT r = {out or shape} {op}(p, q){attrs}")


TEMPLATES: dict[str, str] = {}
for _op in ("abs acos acosh asin asinh atan atanh cbrt ceil copy cosh cosine erf exponential "
            "exponential-minus-one floor log log-plus-one logistic negate round-nearest-afz "
            "round-nearest-even rsqrt sign sine sinh sqrt tan tanh").split():
    TEMPLATES[_op] = unary(_op)
for _op in ("not", "popcnt", "count-leading-zeros"):
    TEMPLATES[_op] = unary(_op, "s32")
for _op in "add subtract multiply divide maximum minimum power remainder atan2".split():
    TEMPLATES[_op] = binary(_op)
for _op in "and or xor shift-left shift-right-arithmetic shift-right-logical mulhi".split():
    TEMPLATES[_op] = binary(_op, "s32")
TEMPLATES.update({
    "is-finite": unary("is-finite", out="pred[4,8]{1,0}"),
    "real": unary("real", "c64", out=X),
    "imag": unary("imag", "c64", out=X),
    "convert": unary("convert", out=I32),
    "bitcast-convert": unary("bitcast-convert", out=I32),
    "reduce-precision": module(f"p = {X} parameter(0)\n"
                               f"ROOT r = {X} reduce-precision(p), exponent_bits=5, mantissa_bits=10"),
    "bitcast": module(f"p = {X} parameter(0)\nROOT r = f32[32]{{0}} bitcast(p)"),
    "compare": binary("compare", out="pred[4,8]{1,0}", attrs=", direction=LT"),
    "complex": binary("complex", out="c64[4,8]{1,0}"),
    "stochastic-convert": module(f"p = {X} parameter(0)\nq = u32[4,8]{{1,0}} parameter(1)\n"
                                 "ROOT r = s8[4,8]{1,0} stochastic-convert(p, q)"),
    "select": module(f"c = pred[4,8]{{1,0}} parameter(0)\np = {X} parameter(1)\nq = {X} parameter(2)\n"
                     f"ROOT r = {X} select(c, p, q)"),
    "clamp": module(f"lo = f32[] parameter(0)\np = {X} parameter(1)\nhi = f32[] parameter(2)\n"
                    f"ROOT r = {X} clamp(lo, p, hi)"),
    # ---- shapes and data movement
    "broadcast": module(f"p = f32[8]{{0}} parameter(0)\nROOT r = {X} broadcast(p), dimensions={{1}}"),
    "reshape": module(f"p = {X} parameter(0)\nROOT r = f32[2,16]{{1,0}} reshape(p)"),
    "transpose": module(f"p = {X} parameter(0)\nROOT r = f32[8,4]{{1,0}} transpose(p), dimensions={{1,0}}"),
    "slice": module(f"p = {X} parameter(0)\nROOT r = f32[2,8]{{1,0}} slice(p), slice={{[0:2], [0:8]}}"),
    "pad": module(f"p = {X} parameter(0)\nz = f32[] constant(0)\n"
                  "ROOT r = f32[5,10]{1,0} pad(p, z), padding=0_1x1_1"),
    "concatenate": module(f"p = {X} parameter(0)\nq = {X} parameter(1)\n"
                          "ROOT r = f32[8,8]{1,0} concatenate(p, q), dimensions={0}"),
    "reverse": module(f"p = {X} parameter(0)\nROOT r = {X} reverse(p), dimensions={{0}}"),
    "iota": module(f"ROOT r = {X} iota(), iota_dimension=1"),
    "dynamic-slice": module(f"p = {X} parameter(0)\ni = s32[] parameter(1)\n"
                            "ROOT r = f32[2,8]{1,0} dynamic-slice(p, i, i), dynamic_slice_sizes={2,8}"),
    "dynamic-update-slice": module(f"p = {X} parameter(0)\nu = f32[2,8]{{1,0}} parameter(1)\n"
                                   f"i = s32[] parameter(2)\nROOT r = {X} dynamic-update-slice(p, u, i, i)"),
    "gather": module("p = f32[10,8]{1,0} parameter(0)\ni = s32[5,1]{1,0} parameter(1)\n"
                     "ROOT r = f32[5,8]{1,0} gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, "
                     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}"),
    "scatter": module("p = f32[10,8]{1,0} parameter(0)\ni = s32[5,1]{1,0} parameter(1)\n"
                      "u = f32[5,8]{1,0} parameter(2)\nROOT r = f32[10,8]{1,0} scatter(p, i, u), "
                      "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                      "index_vector_dim=1, to_apply=add", ADD),
    "dynamic-reshape": module(f"p = {X} parameter(0)\nn = s32[] parameter(1)\n"
                              "ROOT r = f32[<=32]{0} dynamic-reshape(p, n)"),
    "get-dimension-size": module(f"p = {X} parameter(0)\nROOT r = s32[] get-dimension-size(p), dimensions={{0}}"),
    "set-dimension-size": module(f"p = {X} parameter(0)\nn = s32[] parameter(1)\n"
                                 "ROOT r = f32[<=4,8]{1,0} set-dimension-size(p, n), dimensions={0}"),
    # Rotate every row by one lane (XLA's newest opcode; the text follows HloShuffleInstruction).
    "shuffle": module(f"p = {X} parameter(0)\nROOT r = {X} shuffle(p), dimensions={{1}}, mode=rotate, "
                      "shifts={1}"),
    # ---- reductions and called computations
    "reduce": module(f"p = {X} parameter(0)\nz = f32[] constant(0)\n"
                     "ROOT r = f32[4]{0} reduce(p, z), dimensions={1}, to_apply=add", ADD),
    "reduce-window": module(f"p = {X} parameter(0)\nz = f32[] constant(0)\n"
                            "ROOT r = f32[3,4]{1,0} reduce-window(p, z), window={size=2x2 stride=1x2}, "
                            "to_apply=add", ADD),
    "select-and-scatter": module(f"p = {X} parameter(0)\ns = f32[2,4]{{1,0}} parameter(1)\n"
                                 f"z = f32[] constant(0)\nROOT r = {X} select-and-scatter(p, s, z), "
                                 "window={size=2x2 stride=2x2}, select=ge, scatter=add", ADD + GE),
    "map": module(f"p = {X} parameter(0)\nq = {X} parameter(1)\n"
                  f"ROOT r = {X} map(p, q), dimensions={{0,1}}, to_apply=add", ADD),
    "sort": module(f"p = {X} parameter(0)\nq = {I32} parameter(1)\n"
                   f"ROOT r = ({X}, {I32}) sort(p, q), dimensions={{1}}, is_stable=true, to_apply=lt2", LT2),
    "topk": module(f"p = {X} parameter(0)\n"
                   "ROOT r = (f32[4,2]{1,0}, s32[4,2]{1,0}) topk(p), k=2, largest=true"),
    "scan": module(f"p = {X} parameter(0)\nz = f32[8]{{0}} parameter(1)\n"
                   f"ROOT r = ({X}, f32[8]{{0}}) scan(p, z), dimensions={{0}}, num_carries=1, to_apply=step",
                   "step {\n  x = f32[8]{0} parameter(0)\n  c = f32[8]{0} parameter(1)\n"
                   "  s = f32[8]{0} add(x, c)\n  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(s, s)\n}\n"),
    # ---- linear algebra
    "dot": module("p = f32[4,8]{1,0} parameter(0)\nq = f32[8,16]{1,0} parameter(1)\n"
                  "ROOT r = f32[4,16]{1,0} dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    "convolution": module("p = f32[1,8,8,4]{3,2,1,0} parameter(0)\nw = f32[3,3,4,8]{3,2,1,0} parameter(1)\n"
                          "ROOT r = f32[1,8,8,8]{3,2,1,0} convolution(p, w), window={size=3x3 pad=1_1x1_1}, "
                          "dim_labels=b01f_01io->b01f"),
    "ragged-dot": module("p = f32[16,8]{1,0} parameter(0)\nq = f32[2,8,32]{2,1,0} parameter(1)\n"
                         "g = s32[2]{0} parameter(2)\nROOT r = f32[16,32]{1,0} ragged-dot(p, q, g), "
                         "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, "
                         "rhs_group_dims={0}"),
    "scaled-dot": module("p = f32[4,32]{1,0} parameter(0)\nq = f32[32,16]{1,0} parameter(1)\n"
                         "ps = f32[4,1]{1,0} parameter(2)\nqs = f32[1,16]{1,0} parameter(3)\n"
                         "ROOT r = f32[4,16]{1,0} scaled-dot(p, q, ps, qs), lhs_contracting_dims={1}, "
                         "rhs_contracting_dims={0}"),
    "fft": module("p = c64[4,8]{1,0} parameter(0)\nROOT r = c64[4,8]{1,0} fft(p), fft_type=FFT, fft_length={8}"),
    "cholesky": module("p = f32[2,8,8]{2,1,0} parameter(0)\nROOT r = f32[2,8,8]{2,1,0} cholesky(p), lower=true"),
    "triangular-solve": module("a = f32[8,8]{1,0} parameter(0)\nb = f32[8,4]{1,0} parameter(1)\n"
                               "ROOT r = f32[8,4]{1,0} triangular-solve(a, b), left_side=true, lower=true, "
                               "transpose_a=NO_TRANSPOSE"),
    "batch-norm-training": module(
        "p = f32[2,4,8]{2,1,0} parameter(0)\ns = f32[4]{0} parameter(1)\no = f32[4]{0} parameter(2)\n"
        "ROOT r = (f32[2,4,8]{2,1,0}, f32[4]{0}, f32[4]{0}) batch-norm-training(p, s, o), epsilon=0.001, "
        "feature_index=1"),
    "batch-norm-inference": module(
        "p = f32[2,4,8]{2,1,0} parameter(0)\ns = f32[4]{0} parameter(1)\no = f32[4]{0} parameter(2)\n"
        "m = f32[4]{0} parameter(3)\nv = f32[4]{0} parameter(4)\n"
        "ROOT r = f32[2,4,8]{2,1,0} batch-norm-inference(p, s, o, m, v), epsilon=0.001, feature_index=1"),
    "batch-norm-grad": module(
        "p = f32[2,4,8]{2,1,0} parameter(0)\ns = f32[4]{0} parameter(1)\nm = f32[4]{0} parameter(2)\n"
        "v = f32[4]{0} parameter(3)\ng = f32[2,4,8]{2,1,0} parameter(4)\n"
        "ROOT r = (f32[2,4,8]{2,1,0}, f32[4]{0}, f32[4]{0}) batch-norm-grad(p, s, m, v, g), epsilon=0.001, "
        "feature_index=1"),
    # ---- random numbers
    "rng": module(f"lo = f32[] parameter(0)\nhi = f32[] parameter(1)\n"
                  f"ROOT r = {X} rng(lo, hi), distribution=rng_uniform"),
    "rng-bit-generator": module("s = u64[2]{0} parameter(0)\n"
                                "ROOT r = (u64[2]{0}, u32[4,8]{1,0}) rng-bit-generator(s), algorithm=rng_default"),
    "rng-get-and-update-state": module("ROOT r = u64[2]{0} rng-get-and-update-state(), delta=32"),
    # ---- control flow and structure
    "parameter": module(f"ROOT r = {X} parameter(0)"),
    "constant": module(f"p = f32[2,2]{{1,0}} parameter(0)\nr = f32[2,2]{{1,0}} constant({{ {{1, 2}}, {{3, 4}} }})\n"
                       "ROOT s = f32[2,2]{1,0} add(p, r)"),
    "tuple": module(f"p = {X} parameter(0)\nq = {X} exponential(p)\nROOT r = ({X}, {X}) tuple(p, q)"),
    "get-tuple-element": module(f"p = ({X}, {X}) parameter(0)\nr = {X} get-tuple-element(p), index=1\n"
                                f"ROOT e = {X} exponential(r)"),
    "call": module(f"p = {X} parameter(0)\nROOT r = {X} call(p), to_apply=neg", NEG),
    "fusion": module(f"p = {X} parameter(0)\nROOT r = {X} fusion(p), kind=kLoop, calls=neg", NEG),
    "while": module(
        f"z = s32[] constant(0)\nx = {X} parameter(0)\nt = (s32[], {X}) tuple(z, x)\n"
        f"ROOT r = (s32[], {X}) while(t), condition=cond, body=body",
        f"cond {{\n  p = (s32[], {X}) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
        "  n = s32[] constant(10)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
        f"body {{\n  p = (s32[], {X}) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
        f"  x = {X} get-tuple-element(p), index=1\n  one = s32[] constant(1)\n  i2 = s32[] add(i, one)\n"
        f"  y = {X} exponential(x)\n  ROOT t = (s32[], {X}) tuple(i2, y)\n}}\n"),
    "conditional": module(
        f"c = s32[] parameter(0)\nx = {X} parameter(1)\n"
        f"ROOT r = {X} conditional(c, x, x), branch_computations={{neg, ex}}",
        NEG + f"ex {{\n  a = {X} parameter(0)\n  ROOT e = {X} exponential(a)\n}}\n"),
    "opt-barrier": module(f"p = {X} parameter(0)\nq = {X} exponential(p)\nt = ({X}, {X}) tuple(p, q)\n"
                          f"r = ({X}, {X}) opt-barrier(t)\ng = {X} get-tuple-element(r), index=1\n"
                          f"ROOT n = {X} negate(g)"),
    "after-all": module("ROOT r = token[] after-all()"),
    "add-dependency": module(f"p = {X} parameter(0)\nt = token[] after-all()\n"
                             f"r = {X} add-dependency(p, t)\nROOT n = {X} negate(r)"),
    "domain": module(f"p = {X} parameter(0)\nr = {X} domain(p), domain={{kind=\"sharding\", "
                     "entry={maximal device=0}, exit={maximal device=1}}\n"
                     f"ROOT n = {X} negate(r)"),
    "custom-call": module(f"p = {X} parameter(0)\n"
                          f"ROOT r = {X} custom-call(p), custom_call_target=\"my_kernel\""),
    "partition-id": module("ROOT r = u32[] partition-id()"),
    "replica-id": module("ROOT r = u32[] replica-id()"),
    # ---- host transfers
    "infeed": module(f"t = token[] after-all()\nr = ({X}, token[]) infeed(t)\n"
                     f"g = {X} get-tuple-element(r), index=0\nROOT n = {X} negate(g)"),
    "outfeed": module(f"p = {X} parameter(0)\nt = token[] after-all()\n"
                      f"ROOT r = token[] outfeed(p, t), outfeed_shape={X}"),
    # ---- collectives (a two-device group)
    "all-gather": module(f"p = {X} parameter(0)\n"
                         "ROOT r = f32[8,8]{1,0} all-gather(p), replica_groups={{0,1}}, dimensions={0}",
                         header=", replica_count=2"),
    "all-reduce": module(f"p = {X} parameter(0)\nROOT r = {X} all-reduce(p), replica_groups={{{{0,1}}}}, "
                         "to_apply=add", ADD, header=", replica_count=2"),
    "all-to-all": module(f"p = {X} parameter(0)\n"
                         f"ROOT r = {X} all-to-all(p), replica_groups={{{{0,1}}}}, dimensions={{0}}",
                         header=", replica_count=2"),
    "reduce-scatter": module(f"p = {X} parameter(0)\nROOT r = f32[2,8]{{1,0}} reduce-scatter(p), "
                             "replica_groups={{0,1}}, dimensions={0}, to_apply=add", ADD,
                             header=", replica_count=2"),
    "collective-broadcast": module(f"p = {X} parameter(0)\n"
                                   f"ROOT r = {X} collective-broadcast(p), replica_groups={{{{0,1}}}}",
                                   header=", replica_count=2"),
    "collective-permute": module(f"p = {X} parameter(0)\n"
                                 f"ROOT r = {X} collective-permute(p), source_target_pairs={{{{0,1}},{{1,0}}}}",
                                 header=", replica_count=2"),
    "collective-reduce": module(f"p = {X} parameter(0)\nROOT r = {X} collective-reduce(p), "
                                "replica_groups={{0,1}}, to_apply=add", ADD, header=", replica_count=2"),
    "ragged-all-to-all": module(
        "p = f32[8]{0} parameter(0)\no = f32[8]{0} parameter(1)\nio = s32[2]{0} parameter(2)\n"
        "ss = s32[2]{0} parameter(3)\noo = s32[2]{0} parameter(4)\nrs = s32[2]{0} parameter(5)\n"
        "ROOT r = f32[8]{0} ragged-all-to-all(p, o, io, ss, oo, rs), replica_groups={{0,1}}",
        header=", replica_count=2"),
    "all-gather-start": module(f"p = {X} parameter(0)\n"
                               f"r = ({X}, f32[8,8]{{1,0}}) all-gather-start(p), replica_groups={{{{0,1}}}}, "
                               "dimensions={0}\nROOT d = f32[8,8]{1,0} all-gather-done(r)",
                               header=", replica_count=2"),
    "all-reduce-start": module(f"p = {X} parameter(0)\nr = {X} all-reduce-start(p), "
                               f"replica_groups={{{{0,1}}}}, to_apply=add\nROOT d = {X} all-reduce-done(r)",
                               ADD, header=", replica_count=2"),
    "collective-permute-start": module(
        f"p = {X} parameter(0)\nr = ({X}, {X}) collective-permute-start(p), "
        f"source_target_pairs={{{{0,1}},{{1,0}}}}\nROOT d = {X} collective-permute-done(r)",
        header=", replica_count=2"),
    "copy-start": module(f"p = {X} parameter(0)\nr = ({X}, {X}, u32[]) copy-start(p)\n"
                         f"ROOT d = {X} copy-done(r)"),
    "async-start": module(
        f"p = {X} parameter(0)\nr = (({X}), {X}, s32[]) async-start(p), calls=wrapped\n"
        f"u = (({X}), {X}, s32[]) async-update(r)\nROOT d = {X} async-done(u)",
        f"wrapped {{\n  a = {X} parameter(0)\n  ROOT c = {X} custom-call(a), custom_call_target=\"my_kernel\"\n}}\n"),
    # ---- point-to-point transfers (refused: see UNSUPPORTED_OPCODES)
    "send": module(f"p = {X} parameter(0)\nt = token[] after-all()\n"
                   f"r = ({X}, u32[], token[]) send(p, t), channel_id=1\n"
                   "ROOT d = token[] send-done(r), channel_id=1"),
    "recv": module(f"t = token[] after-all()\nr = ({X}, u32[], token[]) recv(t), channel_id=1\n"
                   f"d = ({X}, token[]) recv-done(r), channel_id=1\n"
                   f"ROOT g = {X} get-tuple-element(d), index=0"),
})
# The second halves of start/done pairs share their start's template (their instruction is `d`).
PAIRED = {"all-gather-done": "all-gather-start", "all-reduce-done": "all-reduce-start",
          "collective-permute-done": "collective-permute-start", "copy-done": "copy-start",
          "async-update": "async-start", "async-done": "async-start", "send-done": "send",
          "recv-done": "recv"}
for _done, _start in PAIRED.items():
    TEMPLATES[_done] = TEMPLATES[_start]


def instruction_name(op: str) -> str:
    return {"async-update": "u"}.get(op, "d" if op in PAIRED else "r")


# What each template's instruction becomes in the kernels: async pairs turn into their synchronous
# operation (Program), called/fused computations are inlined, free and control-flow instructions are
# no kernel (None).
SYNC_OF = {"all-gather-start": "all-gather", "all-gather-done": "all-gather",
           "all-reduce-start": "all-reduce", "all-reduce-done": "all-reduce",
           "collective-permute-start": "collective-permute", "collective-permute-done": "collective-permute",
           "copy-start": "copy", "copy-done": "copy", "async-start": "custom-call",
           "async-update": "custom-call", "async-done": "custom-call", "call": "negate", "fusion": "negate"}
NO_KERNEL = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "after-all", "add-dependency",
                       "opt-barrier", "domain", "partition-id", "replica-id", "while", "conditional"})
# Opcodes that jaxlib 0.10.2's XLA does not know yet (newer XLA has them).
XLA_UNKNOWN = frozenset({"atan", "collective-reduce", "shuffle"})
SUPPORTED = sorted(set(TEMPLATES) - UNSUPPORTED_OPCODES)


def test_every_opcode_has_a_template():
    assert set(TEMPLATES) == set(OPCODES), (
        f"opcodes without a template: {sorted(set(OPCODES) - set(TEMPLATES))}; "
        f"templates of unknown opcodes: {sorted(set(TEMPLATES) - set(OPCODES))}")
    assert UNSUPPORTED_OPCODES <= OPCODES and XLA_UNKNOWN <= OPCODES


@pytest.mark.parametrize("op", sorted(TEMPLATES))
def test_template_round_trips_through_the_printer(op):
    m = parse_hlo(TEMPLATES[op], f"{op}.hlo")
    name = instruction_name(op)
    ins = m.entry.by_name[name]
    assert ins.opcode == op
    text = m.to_text()
    assert parse_hlo(text).to_text() == text


def _finite_cost(c) -> bool:
    return all(math.isfinite(v) for v in (c.flops, c.transcendentals, c.bytes_read, c.bytes_written))


@pytest.fixture(scope="module")
def models():
    from costmodels.analytical import AnalyticalCostModel
    from hardware.simulator import TpuSimulator
    return TpuSimulator(noise=0.0), AnalyticalCostModel("tpu")


@pytest.mark.parametrize("op", SUPPORTED)
def test_opcode_end_to_end(op, models):
    from costmodels.features import NODE_DIM, OPCODE_INDEX, OTHER_OPCODE_ID, kernel_graph
    from autotune.compiler.fusion import FusionSpace

    text = TEMPLATES[op]
    # Static cost of the instruction (XLA's units) and of the unfused module.
    m = parse_hlo(text, f"{op}.hlo")
    ins = m.entry.by_name[instruction_name(op)]
    assert _finite_cost(instruction_cost(ins, m.entry, m))
    assert _finite_cost(module_cost(m))

    sim, analytical = models
    prog = Program.from_text(text, f"{op}.hlo")
    expected = None if op in NO_KERNEL else SYNC_OF.get(op, op)
    for target in ("tpu", "cpu"):
        space = FusionSpace(prog, target)
        kernels = space.kernels(space.default())
        if expected is not None:
            assert any(expected in k.opcodes for k in kernels), (target, [k.opcodes for k in kernels])
        for k in kernels:
            g = kernel_graph(k, target)
            assert g.node_feat.shape[1] == NODE_DIM and np.isfinite(g.node_feat).all()
            assert np.isfinite(g.kernel_feat).all()
            assert all(o == OPCODE_INDEX.get(i.opcode, OTHER_OPCODE_ID)
                       for o, i in zip(g.opcode[-len(k.members):], k.instructions))
            k.to_hlo_module()
        if target != "tpu" or not kernels:
            continue
        measured = sim.measure(kernels)
        untiled = analytical.predict(kernels)
        tiled = analytical.predict(kernels, [None] * len(kernels))
        for k, meas, a, b in zip(kernels, measured, untiled, tiled):
            assert meas.ok, (k.opcodes, meas.status)
            for t in (meas.seconds, a, b):
                assert math.isfinite(t) and (t > 0 if not k.is_trivial else t == 0), (k.opcodes, t)


@pytest.mark.parametrize("op", sorted(UNSUPPORTED_OPCODES))
def test_unsupported_opcode_is_refused_with_one_line(op, tmp_path):
    from click.testing import CliRunner
    from autotune.cli.app import main

    text = TEMPLATES[op]
    path = tmp_path / f"{op}.hlo"
    path.write_text(text)
    with pytest.raises(ProgramError) as e:
        Program.from_file(str(path))
    msg = str(e.value)
    first = next(i for i in parse_hlo(text).entry.instructions if i.opcode in UNSUPPORTED_OPCODES)
    line = text.splitlines().index(next(ln for ln in text.splitlines() if ln.startswith(f"{first.name} = "))) + 1
    assert msg.startswith(f"{path}:{line}:1: error: instruction '{first.name}' ('{first.opcode}')"), msg
    assert "\n" not in msg and "device" in msg
    r = CliRunner().invoke(main, ["show", str(path)])
    assert r.exit_code == 2 and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"autotune: error: {path}:{line}:1: "), r.output


def test_async_pair_without_done_is_refused():
    text = module(f"p = {X} parameter(0)\nr = ({X}, f32[8,8]{{1,0}}) all-gather-start(p), "
                  f"replica_groups={{{{0,1}}}}, dimensions={{0}}\nROOT n = {X} negate(p)")
    with pytest.raises(ProgramError,
                       match=r"^x.hlo:6:1: error: instruction 'r' \('all-gather-start'\) has no matching"):
        Program.from_text(text, "x.hlo")


def test_async_pairs_become_their_synchronous_operation():
    prog = Program.from_text(TEMPLATES["async-start"])
    ops = [i.opcode for i in prog.entry.instructions]
    assert ops == ["parameter", "custom-call"] and not prog.module.computations_by_name.get("wrapped")
    prog = Program.from_text(TEMPLATES["all-gather-start"])
    (ag,) = [i for i in prog.entry.instructions if i.opcode == "all-gather"]
    assert ag.name == "d" and ag.is_root and ag.attrs["dimensions"] == "{0}" and ag.operands == ["p"]
    assert "all-gather(" in prog.to_text() and "-start" not in prog.to_text()


# XLA prints an async op wrapping one instruction X as `X-start` / `X-update` / `X-done`.
SHORTHAND = module(
    f"p = {X} parameter(0)\ns = (({X}), {X}, s32[]) custom-call-start(p), custom_call_target=\"my_kernel\"\n"
    f"u = (({X}), {X}, s32[]) custom-call-update(s)\nd = {X} custom-call-done(u)\n"
    f"rs = (({X}), f32[2,8]{{1,0}}) reduce-scatter-start(d), replica_groups={{{{0,1}}}}, dimensions={{0}}, "
    "to_apply=add\nROOT r = f32[2,8]{1,0} reduce-scatter-done(rs)", ADD, header=", replica_count=2")


def test_async_shorthand_is_parsed_costed_and_made_synchronous(models):
    from autotune.compiler.hlo import async_sugar
    assert async_sugar("custom-call-start") == ("custom-call", "start")
    assert async_sugar("all-gather-start") is None and async_sugar("parameter-start") is None
    with pytest.raises(HloParseError, match="unknown opcode 'frobnicate-start'"):
        parse_hlo(module(f"p = {X} parameter(0)\nROOT r = {X} frobnicate-start(p)"))
    m = parse_hlo(SHORTHAND)
    # custom-call-start costs a custom-call (XLA: unknown, -1), reduce-scatter-start a reduce-scatter
    # (128 + 64 bytes); updates and dones read their operand's tuple index table (8 per element) and
    # write their result's leaves (the update: 128 + 128 + 4).
    c = module_cost(m)
    assert (c.flops, c.bytes_accessed, c.bytes_written) == (-1, -1 + (24 + 260) + (24 + 128) + 192 + (16 + 64),
                                                            -1 + 260 + 128 + 64 + 64)
    prog = Program.from_text(SHORTHAND)
    assert [i.opcode for i in prog.entry.instructions] == ["parameter", "custom-call", "reduce-scatter"]
    rs = prog.entry.instructions[-1]
    assert rs.name == "r" and rs.attrs["dimensions"] == "{0}" and rs.parsed["to_apply"] == "add"
    assert all(meas.ok for meas in models[0].measure(_kernels(SHORTHAND)))
    text = prog.to_text()
    assert "custom-call(" in text and "-start" not in text and parse_hlo(text).to_text() == text


# --------------------------------------------------------------------------------------------------
# Parity with XLA's HloCostAnalysis (jaxlib's), for every template XLA:CPU parses


@pytest.mark.xla
@pytest.mark.parametrize("op", sorted(TEMPLATES) + ["<async shorthand>"])
def test_instruction_costs_match_xla(op):
    pytest.importorskip("jax")
    from hardware.xla import cost_analysis

    text = TEMPLATES.get(op, SHORTHAND)
    try:
        xla = cost_analysis(text)
    except Exception as e:  # noqa: BLE001 - jaxlib's XLA predates the opcode
        assert op in XLA_UNKNOWN, f"XLA rejects the {op} template: {str(e)[:300]}"
        pytest.skip(f"jaxlib's XLA does not know '{op}'")
    assert op not in XLA_UNKNOWN, f"XLA now parses '{op}': drop it from XLA_UNKNOWN"
    ours = module_cost(parse_hlo(text, op))
    assert ours.flops == xla["flops"] and ours.transcendentals == xla["transcendentals"]
    assert ours.bytes_accessed == xla["bytes_accessed"]
    assert ours.bytes_written == float(xla["raw"].get("bytes accessedout{}", 0.0))


# --------------------------------------------------------------------------------------------------
# Device work: what the simulator and the analytical model charge (docs/simulator.md, section 1b)


def _kernels(text: str):
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(Program.from_text(text), "tpu")
    return [k for k in space.kernels(space.default()) if not k.is_trivial]


def _one(text: str, opcode: str):
    (k,) = [k for k in _kernels(text) if opcode in k.opcodes]
    return k


def _times(kernels, models) -> np.ndarray:
    sim, analytical = models
    return np.array([sim.simulate(kernels, noise=False), analytical.predict(kernels),
                     analytical.predict(kernels, [None] * len(kernels))])


def test_sort_is_priced_as_a_bitonic_network(models):
    from autotune.compiler.tiles import device_work
    sizes = (1 << 12, 1 << 16, 1 << 20)
    ks = [_one(module(f"p = f32[{n}]{{0}} parameter(0)\nROOT r = f32[{n}]{{0}} sort(p), dimensions={{0}}, "
                      "to_apply=lt", LT), "sort") for n in sizes]
    for n, k in zip(sizes, ks):
        L = int(math.log2(n))
        assert device_work(k).flops == n * L * (L + 1) / 2 * 2  # compare + one select per element-stage
        assert k.cost.flops == n * L  # XLA's figure stays in kernel.cost (and in the features)
    t = _times(ks, models)
    # n log^2 n: 16x the elements and (20*21)/(16*17) the stages -> over 20x the time when compute bound
    assert np.all(t[:, 2] / t[:, 1] > 20)
    rows = _one(module(f"p = f32[256,16]{{1,0}} parameter(0)\nROOT r = f32[256,16]{{1,0}} sort(p), "
                       "dimensions={1}, to_apply=lt", LT), "sort")
    assert device_work(rows).flops == 4096 * 4 * 5 / 2 * 2  # rows of 16: 10 stages


def test_fft_is_n_log_n_over_all_transformed_dims():
    from autotune.compiler.tiles import device_work
    k = _one(module("p = c64[4,64,64]{2,1,0} parameter(0)\nROOT r = c64[4,64,64]{2,1,0} fft(p), "
                    "fft_type=FFT, fft_length={64,64}"), "fft")
    assert device_work(k).flops == 8 * 4 * 64 * 64 * 12  # log2(64 * 64), not 6 * 6 as XLA counts
    assert k.cost.flops == 8 * 4 * 64 * 64 * 36


@pytest.mark.parametrize("groups, g", [("{{0,1}}", 2), ("{{0,1,2,3},{4,5,6,7}}", 4), ("[2,4]<=[8]", 4),
                                       ("{}", 8), ("{{0}}", 1)])
def test_all_reduce_crosses_the_interconnect(groups, g, models):
    from autotune.compiler.tiles import device_work
    text = module(f"p = f32[1024,256]{{1,0}} parameter(0)\nROOT r = f32[1024,256]{{1,0}} all-reduce(p), "
                  f"replica_groups={groups}, to_apply=add", ADD, header=", replica_count=8")
    k = _one(text, "all-reduce")
    nbytes = 1024 * 256 * 4
    assert device_work(k).interconnect_bytes == pytest.approx(2 * (g - 1) / g * nbytes)
    local = _one(module(f"p = f32[1024,256]{{1,0}} parameter(0)\nROOT r = f32[1024,256]{{1,0}} negate(p)"),
                 "negate")
    t, t_local = _times([k], models)[:, 0], _times([local], models)[:, 0]
    from autotune.compiler.targets import get_spec
    link = 2 * (g - 1) / g * nbytes / get_spec("tpu").interconnect_bytes_per_s
    assert np.all(t >= t_local + 0.99 * link) and (g > 1 or np.allclose(t, t_local, rtol=0.2))


def test_collectives_move_what_their_algorithm_sends():
    from autotune.compiler.tiles import device_work
    x = 4 * 8 * 4
    expected = {"all-gather": 0.5 * 2 * x, "reduce-scatter": 0.5 * x, "all-to-all": 0.5 * x,
                "collective-broadcast": x, "collective-permute": x, "collective-reduce": 2 * 0.5 * x,
                "ragged-all-to-all": 0.5 * 8 * 4}
    for op, nbytes in expected.items():
        assert device_work(_one(TEMPLATES[op], op)).interconnect_bytes == nbytes, op
    still = module(f"p = {X} parameter(0)\nROOT r = {X} collective-permute(p), source_target_pairs={{{{0,0}}}}")
    assert device_work(_one(still, "collective-permute")).interconnect_bytes == 0


def test_host_transfers_cross_the_host_link(models):
    from autotune.compiler.tiles import device_work
    from autotune.compiler.targets import get_spec
    n = 1 << 20
    k = _one(module(f"t = token[] after-all()\nr = (f32[{n}]{{0}}, token[]) infeed(t)\n"
                    f"ROOT g = f32[{n}]{{0}} get-tuple-element(r), index=0"), "infeed")
    assert device_work(k).host_bytes == 4 * n
    assert np.all(_times([k], models) >= 4 * n / get_spec("tpu").host_link_bytes_per_s)
    out = _one(module(f"p = f32[{n}]{{0}} parameter(0)\nt = token[] after-all()\n"
                      f"ROOT r = token[] outfeed(p, t), outfeed_shape=f32[{n}]{{0}}"), "outfeed")
    assert device_work(out).host_bytes == 4 * n


def test_custom_call_is_memory_bound(models):
    from autotune.compiler.tiles import device_work
    from autotune.compiler.targets import get_spec
    n = 1 << 22
    k = _one(module(f'p = f32[{n}]{{0}} parameter(0)\nROOT r = f32[{n}]{{0}} custom-call(p), '
                    'custom_call_target="my_kernel"'), "custom-call")
    assert k.cost.flops == -1 and device_work(k).flops == 0
    assert np.all(_times([k], models) >= 2 * 4 * n / get_spec("tpu").hbm_bytes_per_s)


def test_scan_runs_its_step_once_per_element_of_the_scanned_dim():
    from autotune.compiler.tiles import device_work
    k = _one(TEMPLATES["scan"], "scan")
    assert device_work(k).flops == 4 * 8  # 4 steps of an 8-element add


def test_batch_norm_and_topk_do_vector_work():
    from autotune.compiler.tiles import BATCH_NORM_OPS_PER_ELEMENT, device_work
    for op in BATCH_NORM_OPS_PER_ELEMENT:
        k = _one(TEMPLATES[op], op)
        assert k.cost.flops == 0 and device_work(k).flops == BATCH_NORM_OPS_PER_ELEMENT[op] * 64
    k = _one(TEMPLATES["topk"], "topk")
    assert device_work(k).flops == 32 * 3 * 4 / 2 * 3  # rows of 8: 6 stages, compare + 2 selects


def test_ragged_and_scaled_dots_run_on_the_matrix_unit():
    from autotune.compiler.tiles import tiling_info
    for op, flops in (("ragged-dot", 2 * 16 * 32 * 8), ("scaled-dot", 2 * 4 * 16 * 32)):
        info = tiling_info(_one(TEMPLATES[op], op), "tpu")
        assert info.hero == "dot" and info.hero_flops == flops and info.n_mask.tolist() == [False, True]
    # Each ragged-dot row multiplies with one of the 2 groups' matrices: a tile reads half the rhs.
    info = tiling_info(_one(TEMPLATES["ragged-dot"], "ragged-dot"), "tpu")
    assert info.rhs_fraction == 0.5 and max(r.bytes for r in info.inputs) == 2 * 8 * 32 * 4 / 2


def test_topk_is_tiled_over_the_rows_it_reduces():
    from autotune.compiler.tiles import tiling_info
    assert tiling_info(_one(TEMPLATES["topk"], "topk"), "tpu").dims == (4, 8)


def test_linear_algebra_scales_with_its_flops(models):
    chol = [_one(module(f"p = f32[{n},{n}]{{1,0}} parameter(0)\n"
                        f"ROOT r = f32[{n},{n}]{{1,0}} cholesky(p), lower=true"), "cholesky") for n in (256, 1024)]
    t = _times(chol, models)
    assert np.all(t[:, 1] / t[:, 0] > 30)  # n^3: 64x the flops (memory traffic only 16x)


NEW_ELEMENTWISE = """HloModule newops

ENTRY main {
  p = f32[64,128]{1,0} parameter(0)
  q = s32[64,128]{1,0} parameter(1)
  c = f32[] constant(0.5)
  b = f32[64,128]{1,0} broadcast(c), dimensions={}
  x = f32[64,128]{1,0} multiply(p, b)
  a1 = f32[64,128]{1,0} acos(x)
  a2 = f32[64,128]{1,0} asin(x)
  a3 = f32[64,128]{1,0} atanh(x)
  a4 = f32[64,128]{1,0} asinh(a1)
  a5 = f32[64,128]{1,0} cosh(a2)
  a6 = f32[64,128]{1,0} sinh(a3)
  a7 = f32[64,128]{1,0} acosh(a5)
  t1 = f32[64,128]{1,0} add(a4, a6)
  t2 = f32[64,128]{1,0} add(t1, a7)
  qf = f32[64,128]{1,0} convert(q)
  ROOT r = f32[64,128]{1,0} add(t2, qf)
}
"""


@pytest.mark.xla
def test_new_elementwise_opcodes_fuse_with_identical_results(tmp_path):
    """acos ... sinh are elementwise (fusion.ELEMENTWISE): the default configuration (one kernel)
    and random ones compute on XLA:CPU exactly what the unfused program computes."""
    pytest.importorskip("jax")
    from autotune.compiler.fusion import FusionSpace
    from hardware.parity import check_program

    space = FusionSpace(Program.from_text(NEW_ELEMENTWISE), "cpu")
    assert len([k for k in space.kernels(space.default()) if not k.is_trivial]) == 1
    path = tmp_path / "newops.hlo"
    path.write_text(NEW_ELEMENTWISE)
    res = check_program(str(path), "cpu", ["default", "random:0", "random:1"], timeout=300)
    assert {r.config for r in res} == {"default", "random:0", "random:1"}
    if all("UNIMPLEMENTED" in r.status for r in res):  # jaxlib 0.10.2's XLA:CPU has no acos ... sinh
        pytest.skip("this jaxlib's XLA:CPU does not implement acos ... sinh (the unfused program fails too)")
    for r in res:
        assert r.ok and r.error == 0.0, r


def test_every_element_type_is_priced_at_its_width(models):
    """fp8 and sub-byte types move their packed width (not a default 4 bytes) in the tile geometry."""
    from autotune.compiler.hlo import DTYPE_BYTES
    widths = {}
    for dt in sorted(set(DTYPE_BYTES) - {"token", "opaque"}):
        k = _one(module(f"p = {dt}[1024,1024]{{1,0}} parameter(0)\nROOT r = {dt}[1024,1024]{{1,0}} copy(p)"), "copy")
        widths[dt] = float(models[0].simulate([k], noise=False)[0])
    assert widths["f8e4m3fn"] < widths["bf16"] < widths["f32"] < widths["f64"] < widths["c128"]
    assert widths["s4"] < widths["s8"] and widths["f8e5m2"] == widths["s8"]
