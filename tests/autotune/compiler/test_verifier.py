"""HLO verifier: accepts every real program we have, rejects wrong ones per opcode family with the
exact file:line:column, guards the analyses against inputs that would hang them."""
from __future__ import annotations

import glob
import json
import os
import time

import pytest

from autotune.compiler.hlo import HloParseError, parse_hlo, parse_hlo_file
from autotune.compiler.verifier import MAX_CALL_DEPTH

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REAL = sorted(glob.glob(os.path.join(ROOT, "examples", "hlo", "*.hlo"))
              + glob.glob(os.path.join(ROOT, "tests", "fixtures", "hlo", "**", "*.hlo"), recursive=True)
              + [os.path.join(ROOT, "data", "tpugraphs", "layout_module.hlo")])


def test_accepts_every_real_program():
    assert len(REAL) >= 70
    for path in REAL:
        parse_hlo_file(path)  # raises on the first rejection, naming the file
    kernels = json.load(open(os.path.join(ROOT, "data", "tpugraphs", "tile_kernels.json")))["kernels"]
    for k in kernels:  # XLA:TPU kernels: tiled layouts, mixed precision
        parse_hlo(k["hlo_text"], k["name"])


# A small module; each case replaces @BODY@ with instructions of the entry computation. `«` marks
# where the error must point (it is removed before parsing).
TEMPLATE = """HloModule m

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

less_f32 {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT lt = pred[] compare(x, y), direction=LT
}

cond {
  st = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  n = s32[] constant(10)
  ROOT c = pred[] compare(i, n), direction=LT
}

body {
  st = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  v = f32[4] get-tuple-element(st), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4]) tuple(j, v)
}

double {
  d = f32[8,4] parameter(0)
  ROOT dd = f32[8,4] add(d, d)
}

ENTRY main {
  p = f32[8,4] parameter(0)
  q = f32[4,8] parameter(1)
  r = f32[8,8] parameter(2)
  zero = f32[] constant(0)
  i0 = s32[] constant(0)
@BODY@
}
"""


def _module(body: str, extra: str = "") -> str:
    return f"HloModule m\n\n{extra}\nENTRY main {{\n{body}\n}}\n"


def case_text(body: str) -> tuple[str, int, int]:
    text = TEMPLATE.replace("@BODY@", "\n".join("  " + line for line in body.strip("\n").split("\n")))
    at = text.index("«")
    line = text.count("\n", 0, at) + 1
    col = at - text.rfind("\n", 0, at)
    return text.replace("«", ""), line, col


GOOD = {
    "elementwise": "ROOT «x = f32[8,4] multiply(p, p)",
    "broadcast": "ROOT «b = f32[2,8,4] broadcast(p), dimensions={1,2}",
    "reduce": "ROOT «s = f32[8] reduce(p, zero), dimensions={1}, to_apply=add_f32",
    "dot": "ROOT «d = f32[8,8] dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
    "while": "v = f32[4] constant({1, 2, 3, 4})\nst = (s32[], f32[4]) tuple(i0, v)\n"
             "ROOT «w = (s32[], f32[4]) while(st), condition=cond, body=body",
    "call": "ROOT «c = f32[8,4] call(p), to_apply=double",
    "fusion": "ROOT «f = f32[8,4] fusion(p), kind=kLoop, calls=double",
    "sort": "«s = f32[8,4] sort(p), dimensions={1}, to_apply=less_f32\nROOT t = (f32[8,4]) tuple(s)",
    "gather": "idx = s32[3,1] parameter(3)\n"
              "ROOT «g = f32[3,4] gather(p, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
              "index_vector_dim=1, slice_sizes={1,4}",
    "custom-call": 'ROOT «cc = f32[3] custom-call(p, q), custom_call_target="anything"',
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_accepts_well_formed_instructions(name):
    text, _, _ = case_text(GOOD[name])
    parse_hlo(text, "good.hlo")


# (body, message fragment); the error must be at «.
BAD = {
    # elementwise
    "add operand dims": ("ROOT add.1 = f32[8,4] add(p, «r)", "add 'add.1': operand 1 has shape f32[8,8], expected f32[8,4]"),
    "add result": ("ROOT «x = f32[4,8] add(p, p)", "result shape is f32[4,8], expected f32[8,4]"),
    "mixed element types": ("c = s32[8,4] convert(p)\nROOT x = f32[8,4] add(p, «c)", "operand 1 has shape s32[8,4], expected f32[8,4]"),
    "float-only unary": ("c = s32[8,4] convert(p)\nROOT x = s32[8,4] exponential(«c)", "expected a floating-point or complex type"),
    "integer-only op": ("ROOT x = f32[8,4] shift-left(«p, p)", "expected an integral type"),
    "and on floats": ("ROOT x = f32[8,4] and(«p, p)", "pred or an integral type"),
    "compare result": ("ROOT «x = f32[8,4] compare(p, p), direction=LT", "result shape is f32[8,4], expected pred[8,4]"),
    "compare direction": ("ROOT x = pred[8,4] compare(p, p), «direction=LESS", "attribute 'direction' is LESS"),
    "compare types": ("c = s32[8,4] convert(p)\nROOT x = pred[8,4] compare(p, «c), direction=LT", "operand 1 has element type s32"),
    "select pred type": ("ROOT x = f32[8,4] select(«p, p, p)", "operand 0 has element type f32, expected pred"),
    "select pred dims": ("m = pred[4,8] parameter(3)\nROOT x = f32[8,4] select(«m, p, p)", "operand 0 has shape pred[4,8], expected pred[8,4]"),
    "clamp bounds": ("ROOT x = f32[8,4] clamp(«q, p, p)", "operand 0 has shape f32[4,8], expected f32[] or f32[8,4]"),
    "complex parts": ("ROOT «x = c128[8,4] complex(p, p)", "result shape is c128[8,4], expected c64[8,4]"),
    # conversions
    "convert dims": ("ROOT «x = s32[4,8] convert(p)", "result shape is s32[4,8], expected s32[8,4]"),
    "bitcast-convert widths": ("ROOT «x = f16[8,4] bitcast-convert(p)", "expected f16[8,4,2]"),
    "bitcast-convert narrow": ("ROOT x = f64[8] bitcast-convert(«p)", "needs a last operand dimension of 2"),
    "reduce-precision bits": ("ROOT x = f32[8,4] reduce-precision(p), «exponent_bits=0, mantissa_bits=7", "exponent_bits must be at least 1"),
    # shape manipulation
    "broadcast out of range": ("ROOT b = f32[2,8,4] broadcast(p), «dimensions={1,3}", "dimension 3 out of range for result rank 3"),
    "broadcast sizes": ("ROOT b = f32[2,4,8] broadcast(p), «dimensions={1,2}", "operand dimension 0 (size 8) is broadcast into result dimension 1 of size 4"),
    "broadcast count": ("ROOT b = f32[2,8,4] broadcast(p), «dimensions={1}", "dimensions has 1 entries, the operand has rank 2"),
    "reshape elements": ("ROOT «x = f32[5,6] reshape(p)", "reshape changes the element count: f32[8,4] (32 elements) to f32[5,6] (30 elements)"),
    "transpose permutation": ("ROOT x = f32[4,8] transpose(p), «dimensions={1,1}", "is not a permutation"),
    "transpose result": ("ROOT «x = f32[8,4] transpose(p), dimensions={1,0}", "result shape is f32[8,4], expected f32[4,8]"),
    "slice bounds": ("ROOT x = f32[8,4] slice(p), «slice={[0:8], [0:5]}", "slice dimension 1 [0:5:1] is out of bounds for size 4"),
    "slice result": ("ROOT «x = f32[4,4] slice(p), slice={[0:8:2], [1:4]}", "result shape is f32[4,4], expected f32[4,3]"),
    "dynamic-slice index type": ("ROOT x = f32[2,2] dynamic-slice(p, i0, «zero), dynamic_slice_sizes={2,2}", "a start index) has shape f32[], expected an integral scalar"),
    "dynamic-slice sizes": ("ROOT x = f32[2,9] dynamic-slice(p, i0, i0), «dynamic_slice_sizes={2,9}", "dynamic_slice_sizes[1] = 9 is out of bounds for size 4"),
    "dynamic-slice index count": ("ROOT «x = f32[2,2] dynamic-slice(p, i0), dynamic_slice_sizes={2,2}", "expects 3 operands"),
    "dynamic-update-slice update": ("ROOT x = f32[8,4] dynamic-update-slice(p, «r, i0, i0)", "larger than the operand"),
    "concatenate dims": ("ROOT x = f32[16,4] concatenate(p, «q), dimensions={0}", "operand 1 has shape f32[4,8], expected f32[4,4]"),
    "concatenate result": ("ROOT «x = f32[8,8] concatenate(p, p), dimensions={0}", "result shape is f32[8,8], expected f32[16,4]"),
    "pad value": ("ROOT x = f32[10,4] pad(p, «i0), padding=1_1x0_0", "operand 1 (the padding value) has shape s32[], expected f32[]"),
    "pad result": ("ROOT «x = f32[10,4] pad(p, zero), padding=1_1_1x0_0", "result shape is f32[10,4], expected f32[17,4]"),
    "iota dimension": ("ROOT x = s32[8,4] iota(), «iota_dimension=2", "iota_dimension 2 is out of range for rank 2"),
    "reverse dimensions": ("ROOT x = f32[8,4] reverse(p), «dimensions={0,0}", "repeated dimension"),
    # reductions
    "reduce dimension range": ("ROOT s = f32[8] reduce(p, zero), «dimensions={2}, to_apply=add_f32", "dimension 2 out of range for rank 2"),
    "reduce result": ("ROOT «s = f32[4] reduce(p, zero), dimensions={1}, to_apply=add_f32", "result shape is f32[4], expected f32[8]"),
    "reduce init": ("ROOT s = f32[8] reduce(p, i0), dimensions={1}, «to_apply=add_f32", "init value 0 is s32[], to_apply computation 'add_f32' accumulates f32[]"),
    "reduce reducer": ("ROOT s = f32[8] reduce(p, zero), dimensions={1}, «to_apply=double", "must take 2 parameters, takes 1"),
    "reduce-window window rank": ("ROOT x = f32[4,2] reduce-window(p, zero), «window={size=2}, to_apply=add_f32", "window has 1 dimensions, the operand has rank 2"),
    "reduce-window result": ("ROOT «x = f32[4,4] reduce-window(p, zero), window={size=2x2 stride=2x2}, to_apply=add_f32", "result shape is f32[4,4], expected f32[4,2]"),
    "select-and-scatter source": ("src = f32[3,2] parameter(3)\nROOT x = f32[8,4] select-and-scatter(p, «src, zero), window={size=2x2 stride=2x2}, select=less_f32, scatter=add_f32", "operand 1 (the source) has shape f32[3,2], expected f32[4,2]"),
    # dot and convolution
    "dot contracting sizes": ("ROOT d = f32[8,8] dot(p, r), lhs_contracting_dims={1}, «rhs_contracting_dims={0}", "contracting dimension sizes differ"),
    "dot dimension range": ("ROOT d = f32[8,8] dot(p, q), «lhs_contracting_dims={2}, rhs_contracting_dims={0}", "dimension 2 out of range"),
    "dot result": ("ROOT «d = f32[4,4] dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "result shape is f32[4,4], expected f32[8,8]"),
    "dot batch": ("b = f32[2,8,4] parameter(3)\nc = f32[3,4,8] parameter(4)\nROOT d = f32[2,8,8] dot(b, c), lhs_batch_dims={0}, «rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}", "batch dimension sizes differ"),
    "convolution result": ("x = f32[1,8,8,3] parameter(3)\nk = f32[3,3,3,16] parameter(4)\nROOT «c = f32[1,8,8,16] convolution(x, k), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "result shape is f32[1,8,8,16], expected f32[1,4,4,16]"),
    "convolution labels": ("x = f32[1,8,8,3] parameter(3)\nk = f32[3,3,3,16] parameter(4)\nROOT c = f32[1,8,8,16] convolution(x, k), window={size=3x3 pad=1_1x1_1}, «dim_labels=b01f_01io->b0f", "output labels 'b0f' for a rank-4 output"),
    "convolution window vs kernel": ("x = f32[1,8,8,3] parameter(3)\nk = f32[3,3,3,16] parameter(4)\nROOT c = f32[1,8,8,16] convolution(x, k), «window={size=5x5 pad=2_2x2_2}, dim_labels=b01f_01io->b01f", "window size 5 in spatial dimension 0 does not match the kernel"),
    "convolution feature groups": ("x = f32[1,8,8,3] parameter(3)\nk = f32[3,3,3,16] parameter(4)\nROOT c = f32[1,8,8,16] convolution(x, «k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=3", "feature_group_count 3 must equal the kernel's input features"),
    "convolution too large to analyze": ("x = f32[1,4000000,1] parameter(3)\nk = f32[4000000,1,1] parameter(4)\nROOT c = f32[1,4000000,1] convolution(x, k), «window={size=4000000 pad=1999999_2000000}, dim_labels=b0f_0io->b0f", "at most 1048576 on one side can be analyzed"),
    # gather / scatter
    "gather start_index_map": ("idx = s32[3,1] parameter(3)\nROOT g = f32[3,4] gather(p, idx), offset_dims={1}, collapsed_slice_dims={0}, «start_index_map={2}, index_vector_dim=1, slice_sizes={1,4}", "start_index_map {2}: dimension 2 out of range"),
    "gather slice sizes": ("idx = s32[3,1] parameter(3)\nROOT g = f32[3,4] gather(p, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, «slice_sizes={2,4}", "a collapsed or batching dimension needs size 0 or 1"),
    "gather result": ("idx = s32[3,1] parameter(3)\nROOT «g = f32[3,5] gather(p, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}", "result shape is f32[3,5], expected f32[3,4]"),
    "scatter updates": ("idx = s32[3,1] parameter(3)\nu = f32[3,5] parameter(4)\nROOT s = f32[8,4] scatter(p, idx, «u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_f32", "window dimension 1 is larger than the operand's (4)"),
    # sort, map
    "sort comparator": ("s = f32[8,4] sort(p), dimensions={1}, «to_apply=add_f32\nROOT t = (f32[8,4]) tuple(s)", "comparator 'add_f32' is (f32[], f32[]) -> f32[], expected (f32[], f32[]) -> pred[]"),
    "sort dimension": ("s = f32[8,4] sort(p), «dimensions={2}, to_apply=less_f32\nROOT t = (f32[8,4]) tuple(s)", "dimension 2 out of range"),
    "map arity": ("ROOT m = f32[8,4] map(p), dimensions={0,1}, «to_apply=add_f32", "computation 'add_f32' is (f32[], f32[]) -> f32[], expected (f32[]) -> a scalar"),
    # control flow and calls
    "while body": ("v = f32[5] constant({1, 2, 3, 4, 5})\nst = (s32[], f32[5]) tuple(i0, v)\nROOT w = (s32[], f32[5]) while(st), «condition=cond, body=body", "condition 'cond' is ((s32[], f32[4])) -> pred[], expected one parameter of shape (s32[], f32[5])"),
    "while condition result": ("v = f32[4] constant({1, 2, 3, 4})\nst = (s32[], f32[4]) tuple(i0, v)\nROOT w = (s32[], f32[4]) while(st), «condition=body, body=body", "condition 'body' returns (s32[], f32[4]), expected pred[]"),
    "conditional index": ("ROOT c = f32[8,4] conditional(«zero, p, p), branch_computations={double, double}", "operand 0 (the branch index) has shape f32[], expected s32[]"),
    "conditional branch": ("ROOT c = f32[8,4] conditional(i0, p, «q), branch_computations={double, double}", "branch 1 'double' is (f32[8,4]) -> f32[8,4], expected one parameter of shape f32[4,8]"),
    "call operand": ("ROOT c = f32[8,4] call(«q), to_apply=double", "operand 0 has shape f32[4,8], parameter 0 of 'double' is f32[8,4]"),
    "call count": ("ROOT c = f32[8,4] call(p, q), «to_apply=double", "computation 'double' has 1 parameters, called with 2 operands"),
    "fusion result": ("ROOT «f = f32[4,8] fusion(p), kind=kLoop, calls=double", "result shape is f32[4,8], expected f32[8,4]"),
    "fusion kind": ("ROOT f = f32[8,4] fusion(p), «kind=kFast, calls=double", "attribute 'kind' is kFast"),
    # tuples
    "get-tuple-element index": ("t = (f32[8,4], f32[4,8]) tuple(p, q)\nROOT g = f32[8,4] get-tuple-element(t), «index=2", "index 2 is out of range for (f32[8,4], f32[4,8])"),
    "get-tuple-element shape": ("t = (f32[8,4], f32[4,8]) tuple(p, q)\nROOT «g = f32[8,4] get-tuple-element(t), index=1", "result shape is f32[8,4], expected f32[4,8]"),
    "tuple shape": ("ROOT «t = (f32[8,4], f32[8,4]) tuple(p, q)", "result shape is (f32[8,4], f32[8,4]), expected (f32[8,4], f32[4,8])"),
    # linear algebra, fft, rng, misc
    "fft length": ("c = c64[8,4] convert(p)\nROOT x = c64[8,4] fft(c), fft_type=FFT, «fft_length={1,2,3,4}", "fft_length has 4 entries"),
    "rfft result": ("ROOT «x = c64[8,4] fft(p), fft_type=RFFT, fft_length={4}", "result shape is c64[8,4], expected c64[8,3]"),
    "cholesky square": ("ROOT x = f32[8,4] cholesky(«p), lower=true", "expected square matrices"),
    "triangular-solve": ("a = f32[4,4] parameter(3)\nROOT «x = f32[8,4] triangular-solve(a, q), left_side=true, lower=true, transpose_a=NO_TRANSPOSE", "result shape is f32[8,4], expected f32[4,8]"),
    "triangular-solve sides": ("a = f32[4,4] parameter(3)\nROOT x = f32[8,4] triangular-solve(a, «p), left_side=true, lower=true, transpose_a=NO_TRANSPOSE", "its rows must match f32[4,4]"),
    "rng operands": ("ROOT x = f32[8,4] rng(zero, «i0), distribution=rng_uniform", "operand 1 has shape s32[], expected f32[]"),
    "topk": ("ROOT x = (f32[8,9], s32[8,9]) topk(p), «k=9", "k=9 is out of range"),
    "get-dimension-size": ("ROOT x = s32[] get-dimension-size(p), «dimensions={5}", "dimension 5 out of range"),
    "all-reduce reducer": ("ROOT x = f32[8,4] all-reduce(p), replica_groups={}, «to_apply=less_f32", "parameter 0 is f32[], its result pred[]"),
    "all-gather size": ("ROOT «x = f32[8,4] all-gather(p), replica_groups={{0,1}}, dimensions={0}", "result shape is f32[8,4], expected f32[16,4]"),
    "after-all token": ("ROOT x = token[] after-all(«p)", "operand 0 has shape f32[8,4], expected token[]"),
    "outfeed token": ("ROOT x = token[] outfeed(p, «p)", "operand 1 has shape f32[8,4], expected token[]"),
    "constant literal": ("ROOT «c = f32[3] constant({1, 2})", "constant literal does not match f32[3]: dimension 0 has 2 entries, expected 3"),
    "operand count": ("ROOT «x = f32[8,4] negate(p, p)", "expects 1 operand, got 2"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_rejects_wrong_programs_at_the_exact_position(name):
    body, fragment = BAD[name]
    text, line, col = case_text(body)
    with pytest.raises(HloParseError) as info:
        parse_hlo(text, "bad.hlo")
    err = info.value
    assert fragment in err.message, err.one_line()
    assert (err.line, err.col) == (line, col), err.one_line()
    assert err.one_line().startswith(f"bad.hlo:{line}:{col}: error: ")
    assert "\n" not in err.one_line()


def test_every_opcode_family_is_covered():
    """The table above exercises the verifier's rules; each opcode the parser knows has one."""
    from autotune.compiler.hlo import OPCODES
    from autotune.compiler.verifier import _RULES
    assert OPCODES <= set(_RULES)


STRUCTURE = {
    # recursion through the call graph (three computations), reported at the call closing the cycle
    "indirect recursion": (
        "HloModule m\n\na {\n  x = f32[] parameter(0)\n  ROOT y = f32[] call(x), to_apply=b\n}\n\n"
        "b {\n  x = f32[] parameter(0)\n  ROOT y = f32[] call(x), to_apply=c\n}\n\n"
        "c {\n  x = f32[] parameter(0)\n  ROOT y = f32[] call(x), «to_apply=a\n}\n\n"
        "ENTRY main {\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=a\n}\n",
        "computation 'c' calls 'a', which calls back into it (a -> b -> c -> a); recursion is not allowed"),
    # a reducer that calls itself (issue 16: memory grew without bound in kernel.py)
    "reducer calls itself": (
        "HloModule m\n\nr {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n"
        "  ROOT z = f32[] reduce(x, y), dimensions={}, «to_apply=r\n}\n\n"
        "ENTRY main {\n  p = f32[4] parameter(0)\n  c = f32[] constant(0)\n"
        "  ROOT s = f32[] reduce(p, c), dimensions={0}, to_apply=r\n}\n",
        "computation 'r' calls itself"),
    # operands are defined above their users, as XLA's parser requires (so no value depends on itself)
    "instruction cycle": (
        _module("  a = f32[2] parameter(0)\n  b = f32[2] add(a, «c)\n  c = f32[2] negate(b)\n  ROOT d = f32[2] copy(c)"),
        "'b' uses 'c' before its definition"),
    # no ROOT: the last line is the result, and what it uses must come before it (XLA: 4:21)
    "no ROOT, last line uses a later value": (
        _module("  p = f32[2] parameter(0)\n  b = f32[2] negate(«a)\n  a = f32[2] add(p, p)"),
        "'b' uses 'a' before its definition"),
    "signature result": (
        "HloModule m\n\nf (x: f32[2]) -> «f32[3] {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] negate(x)\n}\n\n"
        "ENTRY main {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] call(p), to_apply=f\n}\n",
        "signature returns f32[3], its root 'y' is f32[2]"),
    "signature parameter": (
        "HloModule m\n\nf («x: f32[3]) -> f32[2] {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] negate(x)\n}\n\n"
        "ENTRY main {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] call(p), to_apply=f\n}\n",
        "signature parameter 'x' is f32[3], parameter(0) 'x' is f32[2]"),
    "inline operand shape": (
        _module("  %a = f32[2]{0} parameter(0)\n  ROOT %b = f32[2]{0} negate(«f32[3]{0} %a)"),
        "operand 0 is written as f32[3], but 'a' is f32[2]"),
    "duplicate name": (_module("  a = f32[2] parameter(0)\n  «a = f32[2] negate(a)"), "duplicate instruction name 'a'"),
    "undefined operand": (_module("  a = f32[2] parameter(0)\n  ROOT b = f32[2] add(a, «nope)"), "undefined value 'nope'"),
    "parameter numbering": (_module("  «a = f32[2] parameter(0)\n  b = f32[2] parameter(2)\n  ROOT c = f32[2] add(a, b)"),
                            "parameter numbers [0, 2]"),
    "two entries": ("HloModule m\n\nENTRY a {\n  ROOT x = f32[] constant(1)\n}\n\n«ENTRY b {\n  ROOT x = f32[] constant(1)\n}\n",
                    "more than one ENTRY"),
    "called computation on a plain op": (_module("  a = f32[2] parameter(0)\n  ROOT b = f32[2] negate(a), «to_apply=main"),
                                         "attribute 'to_apply' is not allowed on 'negate'"),
    "reduce without reducer": (_module("  a = f32[2] parameter(0)\n  c = f32[] constant(0)\n"
                                       "  ROOT b = f32[] reduce(a, c), dimensions={0}, «calls=main"),
                               "attribute 'calls' is not allowed on 'reduce'"),
    # limits
    "too many elements": (_module("  ROOT a = «f32[4611686018427387904,4] parameter(0)"), "more than 2^62 elements"),
    "dimension too large": (_module("  ROOT a = f32[«99999999999999999999] parameter(0)"), "larger than 2^62"),
    "attribute integer too large": (_module("  a = f32[4] parameter(0)\n  ROOT b = f32[4] slice(a), «slice={[0:99999999999999999999999]}"),
                                    "expected an integer from -2^62 to 2^62"),
    "window volume": (_module("  a = f32[4,4] parameter(0)\n  z = f32[] constant(0)\n  ROOT b = f32[1,1] reduce-window(a, z), "
                              "«window={size=4611686018427387904x4 stride=4611686018427387904x4 pad=4611686018427387900_0x0_0}, "
                              "to_apply=add", "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n"
                              "  ROOT s = f32[] add(x, y)\n}\n"), "window has more than 2^62 elements"),
}


@pytest.mark.parametrize("name", sorted(STRUCTURE))
def test_module_structure_errors(name):
    raw, fragment = STRUCTURE[name]
    at = raw.index("«")
    line, col = raw.count("\n", 0, at) + 1, at - raw.rfind("\n", 0, at)
    with pytest.raises(HloParseError) as info:
        parse_hlo(raw.replace("«", ""), "bad.hlo")
    err = info.value
    assert fragment in err.message, err.one_line()
    assert (err.line, err.col) == (line, col), err.one_line()


def _call_chain(depth: int) -> str:
    parts = ["HloModule chain\n"]
    for k in range(depth):
        callee = f"  ROOT y = f32[4] call(x), to_apply=f{k + 1}" if k + 1 < depth else "  ROOT y = f32[4] negate(x)"
        parts.append(f"f{k} {{\n  x = f32[4] parameter(0)\n{callee}\n}}\n")
    parts.append("ENTRY main {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] call(p), to_apply=f0\n}\n")
    return "\n".join(parts)


def test_call_nesting_is_bounded():
    from autotune.testing.fuzz import run_pipeline
    run_pipeline(_call_chain(MAX_CALL_DEPTH - 1), "deep.hlo")  # deep but allowed: the whole pipeline runs
    with pytest.raises(HloParseError, match=f"calls nested more than {MAX_CALL_DEPTH} deep"):
        parse_hlo(_call_chain(3 * MAX_CALL_DEPTH), "deeper.hlo")


def test_huge_convolution_window_is_refused_quickly():
    """The hang of issue 16: a convolution with a huge window dimension made the cost analysis loop."""
    text = _module("  x = f32[1,1000000000,1] parameter(0)\n  k = f32[1000000000,1,1] parameter(1)\n"
                   "  ROOT c = f32[1,1000000000,1] convolution(x, k), "
                   "window={size=1000000000 pad=499999999_500000000}, dim_labels=b0f_0io->b0f")
    t0 = time.perf_counter()
    with pytest.raises(HloParseError, match="can be analyzed"):
        parse_hlo(text, "conv.hlo")
    assert time.perf_counter() - t0 < 10.0  # milliseconds on a quiet machine; the hang ran without end


def test_large_kernel_small_output_convolution_is_priced_exactly():
    """A kernel of 2^21 taps with 3 outputs: counted on the small side, same result as the double loop."""
    from autotune.compiler.analysis import module_cost
    n = 1 << 21
    text = _module(f"  x = f32[1,{n + 2},1] parameter(0)\n  k = f32[{n},1,1] parameter(1)\n"
                   f"  ROOT c = f32[1,3,1] convolution(x, k), window={{size={n}}}, dim_labels=b0f_0io->b0f")
    assert module_cost(parse_hlo(text)).flops == 2.0 * 3 * n


def test_mixed_precision_only_in_tpu_modules():
    cpu = _module("  a = f32[4] parameter(0)\n  ROOT b = bf16[2,2] reshape(a)")
    with pytest.raises(HloParseError, match="expected element type f32"):
        parse_hlo(cpu)
    tpu = _module("  a = f32[4]{0:T(256)} parameter(0)\n  ROOT b = bf16[2,2]{1,0:T(2,128)(2,1)} reshape(a)")
    parse_hlo(tpu)


def test_verify_false_skips_shape_checks():
    text = _module("  a = f32[4] parameter(0)\n  ROOT b = f32[5] negate(a)")
    parse_hlo(text, verify=False)
    with pytest.raises(HloParseError):
        parse_hlo(text)


def test_cli_prints_one_line_with_the_position(tmp_path):
    import subprocess
    import sys
    text, line, col = case_text(BAD["add operand dims"][0])
    path = tmp_path / "prog.hlo"
    path.write_text(text)
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "show", str(path)], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 2
    assert r.stderr.strip() == (f"autotune: error: {path}:{line}:{col}: add 'add.1': operand 1 has shape f32[8,8], "
                                f"expected f32[8,4]")


@pytest.mark.xla
def test_accepts_hlo_printed_by_xla_after_optimization():
    """XLA:CPU's optimized modules: fusions, layouts, schedules, backend configs."""
    pytest.importorskip("jax")
    from hardware.xla import compile_hlo
    for name in ("bert_small_infer", "resnet_small_infer", "lstm_small_infer"):
        compiled = compile_hlo(open(os.path.join(ROOT, "examples", "hlo", f"{name}.hlo")).read())
        text = compiled.executable.hlo_modules()[0].to_string()
        assert "fusion" in text and "is_scheduled=true" in text
        parse_hlo(text, f"{name}.optimized.hlo")


_WHILE_PARTS = ("\ncond {\n  s = s32[] parameter(0)\n  z = s32[] constant(10)\n"
                "  ROOT l = pred[] compare(s, z), direction=LT\n}\n")


def _shared_while_bodies(levels: int) -> str:
    """Each body runs two loops over the next body: 2^levels control-flow paths, `levels` computations."""
    comps = []
    for k in range(levels):
        inner = (f"  w1 = s32[] while(s), condition=cond, body=b{k + 1}\n"
                 f"  ROOT w2 = s32[] while(w1), condition=cond, body=b{k + 1}") if k + 1 < levels else \
            "  o = s32[] constant(1)\n  ROOT w2 = s32[] add(s, o)"
        comps.append(f"b{k} {{\n  s = s32[] parameter(0)\n{inner}\n}}\n")
    return _module("  i = s32[] constant(0)\n  ROOT w = s32[] while(i), condition=cond, body=b0",
                   _WHILE_PARTS + "\n".join(reversed(comps)))


EXTREME = dict([
    ("long chain", _module("\n".join(["  p0 = f32[4] parameter(0)"] + [
        f"  a{i} = f32[4] add({'p0' if i == 0 else f'a{i - 1}'}, p0)" for i in range(5000)]))),
    ("deeply nested backend_config JSON", _module(
        '  i = s32[] constant(0)\n  ROOT w = s32[] while(i), condition=cond, body=cond2, backend_config={"x":'
        + "[" * 100000 + "]" * 100000 + "}",
        _WHILE_PARTS + "\ncond2 {\n  s = s32[] parameter(0)\n  o = s32[] constant(1)\n  ROOT n = s32[] add(s, o)\n}\n")),
    ("while bodies shared by 2^60 paths", _shared_while_bodies(60)),
    ("deeply nested metadata", _module("  ROOT c = f32[] constant(1), metadata={" + "{" * 50000 + "}" * 50000 + "}")),
])


@pytest.mark.parametrize("name", sorted(EXTREME))
def test_extreme_inputs_finish_quickly(name):
    """Inputs that used to recurse or revisit without bound (or could): each goes through within the fuzz check's
    20 s limit (a second or two on a quiet machine; the unbounded versions ran for hours or overflowed the stack;
    no tighter wall-clock bound, which a loaded machine breaks)."""
    from autotune.testing.fuzz import OK, check
    assert check(EXTREME[name], "extreme.hlo", 20.0) == (OK, "")
