"""Tests for autotune.compiler.analysis: hand-checked costs of small HLO snippets (no jax needed), and parity
of program totals with XLA's own HloCostAnalysis (jaxlib's private binding) when jax is installed."""
from __future__ import annotations

import glob
import os
import time

import pytest

from autotune.compiler.analysis import (Cost, computation_costs, instruction_cost, module_cost,
                               shape_size, _valid_positions)
from autotune.compiler.hlo import parse_hlo

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXTERNAL = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "hlo", "external", "*.hlo")))
CORPUS = sorted(glob.glob(os.path.join(REPO, "examples", "hlo", "*.hlo")))
FIXTURES = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "hlo", "analysis_*.hlo")))

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""


def module(body: str, extra: str = "") -> str:
    return f"HloModule m\n\n{extra}\nENTRY main {{\n{body}\n}}\n"


def total(text: str) -> Cost:
    return module_cost(parse_hlo(text))


def root_cost(text: str) -> Cost:
    m = parse_hlo(text)
    return instruction_cost(m.entry.root, m.entry, m)


# Hand-checked snippets: (HLO text, expected (flops, transcendentals, bytes read, bytes written)).
SNIPPETS: dict = {
    # 2 * 4*16 outputs * 8 contracted; reads 4*8*4 + 8*16*4 bytes, writes 4*16*4.
    "dot": (module("a = f32[4,8]{1,0} parameter(0)\nb = f32[8,16]{1,0} parameter(1)\n"
                   "ROOT d = f32[4,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
            (1024, 0, 128 + 512, 256)),
    "batch_dot": (module("a = f32[3,4,8]{2,1,0} parameter(0)\nb = f32[3,8,16]{2,1,0} parameter(1)\n"
                         "ROOT d = f32[3,4,16]{2,1,0} dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, "
                         "lhs_contracting_dims={2}, rhs_contracting_dims={1}"),
                  (3 * 2 * 4 * 16 * 8, 0, 384 + 1536, 768)),
    # 1-D conv, input 5, kernel 3, pad 1_1: kernel taps 0,1,2 hit 4,5,4 real inputs = 13 positions;
    # 2 * Cin 2 * Cout 3 * batch 1 * 13.
    "conv_pad": (module("x = f32[1,2,5]{2,1,0} parameter(0)\nw = f32[3,2,3]{2,1,0} parameter(1)\n"
                        "ROOT c = f32[1,3,5]{2,1,0} convolution(x, w), window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0"),
                 (2 * 2 * 3 * 13, 0, 40 + 72, 60)),
    # Stride 2, no padding: output 2, each tap valid for both outputs: 3*2 = 6 positions per 1-D dim,
    # two spatial dims -> 36; feature_group_count=2 halves the input features (4 -> 2).
    "conv_stride_groups": (module(
        "x = f32[2,5,5,4]{3,2,1,0} parameter(0)\nw = f32[3,3,2,6]{3,2,1,0} parameter(1)\n"
        "ROOT c = f32[2,2,2,6]{3,2,1,0} convolution(x, w), window={size=3x3 stride=2x2}, "
        "dim_labels=b01f_01io->b01f, feature_group_count=2"),
        (2 * 2 * 6 * 2 * 36, 0, 800 + 432, 192)),
    # reduce f32[4,8] -> f32[4] with add: 32 - 4 = 28 additions; bytes are the default (in + init + out).
    "reduce": (module("p = f32[4,8]{1,0} parameter(0)\nz = f32[] constant(0)\n"
                      "ROOT r = f32[4]{0} reduce(p, z), dimensions={1}, to_apply=add", ADD),
               (28, 0, 128 + 4, 16)),
    # 2x2 window, 3x4 outputs: (4 - 1) * 12 additions.
    "reduce_window": (module("p = f32[4,8]{1,0} parameter(0)\nz = f32[] constant(0)\n"
                             "ROOT r = f32[3,4]{1,0} reduce-window(p, z), window={size=2x2 stride=1x2}, to_apply=add",
                             ADD),
                      (36, 0, 128 + 4, 48)),
    # exp and tanh are transcendentals, add is a flop: 32 each.
    "transcendentals": (module("p = f32[4,8]{1,0} parameter(0)\ne = f32[4,8]{1,0} exponential(p)\n"
                               "t = f32[4,8]{1,0} tanh(e)\nROOT a = f32[4,8]{1,0} add(t, p)"),
                        (32, 64, 128 + 128 + 256, 3 * 128)),
    # Slice reads only what it writes.
    "slice": (module("p = f32[4,8]{1,0} parameter(0)\nROOT s = f32[2,8]{1,0} slice(p), slice={[0:2],[0:8]}"),
              (0, 0, 64, 64)),
    # dynamic-slice: output + the first index operand (4 bytes).
    "dynamic_slice": (module("p = f32[4,8]{1,0} parameter(0)\ni = s32[] parameter(1)\n"
                             "ROOT s = f32[2,8]{1,0} dynamic-slice(p, i, i), dynamic_slice_sizes={2,8}"),
                      (0, 0, 64 + 4, 64)),
    # dynamic-update-slice reads the update (and an index), writes only the update region.
    "dynamic_update_slice": (module("p = f32[4,8]{1,0} parameter(0)\nu = f32[2,8]{1,0} parameter(1)\n"
                                    "i = s32[] parameter(2)\nROOT d = f32[4,8]{1,0} dynamic-update-slice(p, u, i, i)"),
                             (0, 0, 64 + 4, 64)),
    # gather: 2 * output + indices.
    "gather": (module("p = f32[10,8]{1,0} parameter(0)\ni = s32[5,1]{1,0} parameter(1)\n"
                      "ROOT g = f32[5,8]{1,0} gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, "
                      "start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}"),
               (0, 0, 160 + 20, 160)),
    # scatter: 3 * updates + indices; one combiner add per update element.
    "scatter": (module("p = f32[10,8]{1,0} parameter(0)\ni = s32[5,1]{1,0} parameter(1)\n"
                       "u = f32[5,8]{1,0} parameter(2)\nROOT s = f32[10,8]{1,0} scatter(p, i, u), "
                       "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                       "index_vector_dim=1, to_apply=add", ADD),
                (40, 0, 2 * 160 + 20, 160)),
    # Transpose that is a bitcast under the layouts is free; bitcast is free.
    "transpose_bitcast": (module("p = f32[4,8]{1,0} parameter(0)\n"
                                 "ROOT t = f32[8,4]{0,1} transpose(p), dimensions={1,0}"), (0, 0, 0, 0)),
    "transpose_real": (module("p = f32[4,8]{1,0} parameter(0)\n"
                              "ROOT t = f32[8,4]{1,0} transpose(p), dimensions={1,0}"), (0, 0, 128, 128)),
    # Sort: n * ceil(log2 n) for all 32 elements of operand 0.
    "sort": (module("p = f32[4,8]{1,0} parameter(0)\nROOT s = f32[4,8]{1,0} sort(p), dimensions={1}, to_apply=lt",
                    "lt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                    "  ROOT c = pred[] compare(a, b), direction=LT\n}\n"),
             (32 * 5, 0, 128, 128)),
    # A tuple writes its index table only (8 bytes per element on CPU).
    "tuple": (module("p = f32[4,8]{1,0} parameter(0)\nROOT t = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(p, p)"),
              (0, 0, 0, 16)),
    # Fusion: flops of the fused ops, bytes at the boundary only. The parameter is read as two slices
    # (64 each) plus once whole for the negate; the output is written once.
    "fusion": (module("p = f32[4,8]{1,0} parameter(0)\n"
                      "ROOT f = f32[2,8]{1,0} fusion(p), kind=kLoop, calls=fc",
                      "fc {\n  a = f32[4,8]{1,0} parameter(0)\n  n = f32[4,8]{1,0} negate(a)\n"
                      "  s = f32[2,8]{1,0} slice(a), slice={[0:2],[0:8]}\n"
                      "  t = f32[2,8]{1,0} slice(n), slice={[2:4],[0:8]}\n"
                      "  ROOT r = f32[2,8]{1,0} add(s, t)\n}\n"),
               (32 + 16, 0, 64 + 128, 64)),
    "custom_call": (module('p = f32[4,8]{1,0} parameter(0)\n'
                           'ROOT c = f32[4,8]{1,0} custom-call(p), custom_call_target="foo"'),
                    (-1, 0, 0, -1)),
    # acos..sinh are transcendentals in XLA (jaxlib 0.10.2); mulhi is a flop.
    "inverse_trig": (module("p = f32[4,8]{1,0} parameter(0)\na = f32[4,8]{1,0} acos(p)\n"
                            "ROOT s = f32[4,8]{1,0} sinh(a)"), (0, 64, 256, 256)),
    "mulhi": (module("p = s32[4,8]{1,0} parameter(0)\nROOT m = s32[4,8]{1,0} mulhi(p, p)"), (32, 0, 256, 128)),
    # Cholesky reads and writes one triangle: half of f32[2,8,8] each way; 8 * 128 / 3 flops.
    "cholesky": (module("p = f32[2,8,8]{2,1,0} parameter(0)\nROOT c = f32[2,8,8]{2,1,0} cholesky(p), lower=true"),
                 (341, 0, 256, 256)),
    # Triangular solve reads half of a (256 / 2) and all of b; 2 * 8 * 32 flops.
    "triangular_solve": (module("a = f32[8,8]{1,0} parameter(0)\nb = f32[8,4]{1,0} parameter(1)\n"
                                "ROOT x = f32[8,4]{1,0} triangular-solve(a, b), left_side=true, lower=true, "
                                "transpose_a=NO_TRANSPOSE"), (512, 0, 128 + 128, 128)),
    # A dynamic shape carries an s32 size per dim after its data: f32[<=4,8] is 128 + 8 bytes.
    "dynamic_shape": (module("p = f32[4,8]{1,0} parameter(0)\nn = s32[] parameter(1)\n"
                             "ROOT d = f32[<=4,8]{1,0} set-dimension-size(p, n), dimensions={0}"),
                      (0, 0, 132, 136)),
    # scaled-dot costs its dot (the scales are read, nothing more).
    "scaled_dot": (module("p = f32[4,32]{1,0} parameter(0)\nq = f32[32,16]{1,0} parameter(1)\n"
                          "ps = f32[4,1]{1,0} parameter(2)\nqs = f32[1,16]{1,0} parameter(3)\n"
                          "ROOT d = f32[4,16]{1,0} scaled-dot(p, q, ps, qs), lhs_contracting_dims={1}, "
                          "rhs_contracting_dims={0}"), (4096, 0, 512 + 2048 + 16 + 64, 256)),
    # A domain is free; the negate is not.
    "domain": (module('p = f32[4,8]{1,0} parameter(0)\nd = f32[4,8]{1,0} domain(p), domain={kind="sharding", '
                      "entry={maximal device=0}, exit={maximal device=1}}\nROOT n = f32[4,8]{1,0} negate(d)"),
               (32, 0, 128, 128)),
    # scan: the step (8 flops) times the elements of operand 1 (the f32[8] carry), default bytes.
    "scan": (module("p = f32[4,8]{1,0} parameter(0)\nz = f32[8]{0} parameter(1)\n"
                    "ROOT r = (f32[4,8]{1,0}, f32[8]{0}) scan(p, z), dimensions={0}, num_carries=1, to_apply=step",
                    "step {\n  x = f32[8]{0} parameter(0)\n  c = f32[8]{0} parameter(1)\n"
                    "  s = f32[8]{0} add(x, c)\n  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(s, s)\n}\n"),
             (64, 0, 160, 160)),
}

WHILE = module(
    "z = s32[] constant(0)\nx = f32[4,8]{1,0} parameter(0)\nt = (s32[], f32[4,8]{1,0}) tuple(z, x)\n"
    "ROOT w = (s32[], f32[4,8]{1,0}) while(t), condition=cond, body=body, "
    'backend_config={"known_trip_count":{"n":"10"}}',
    """cond {
  p = (s32[], f32[4,8]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[4,8]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4,8]{1,0} get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  y = f32[4,8]{1,0} exponential(x)
  ROOT t = (s32[], f32[4,8]{1,0}) tuple(i2, y)
}
""")

CONDITIONAL = module(
    "p = s32[] parameter(0)\nx = f32[4,8]{1,0} parameter(1)\n"
    "ROOT r = f32[4,8]{1,0} conditional(p, x, x), branch_computations={b0, b1}",
    """b0 {
  a = f32[4,8]{1,0} parameter(0)
  ROOT c = f32[4,8]{1,0} exponential(a)
}
b1 {
  a = f32[4,8]{1,0} parameter(0)
  b = f32[4,8]{1,0} add(a, a)
  ROOT c = f32[4,8]{1,0} add(b, a)
}
""")


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_snippet_costs(name):
    text, (flops, trans, read, written) = SNIPPETS[name]
    c = total(text)
    assert (c.flops, c.transcendentals, c.bytes_read, c.bytes_written) == (flops, trans, read, written)


def test_while_counts_one_iteration():
    # Body: add (1 flop, 12 bytes), exp (32 transcendentals, 256 bytes), tuple (16 bytes);
    # condition: compare (1 flop, 9 bytes). The trip count (10) is ignored, as XLA does; the
    # entry's tuple adds 16 bytes, the while itself nothing.
    c = total(WHILE)
    assert (c.flops, c.transcendentals, c.bytes_accessed) == (2, 32, 16 + 12 + 256 + 16 + 9)


def test_conditional_takes_max_per_metric():
    c = root_cost(CONDITIONAL)
    assert (c.flops, c.transcendentals, c.bytes_accessed) == (64, 32, 768)


def test_valid_positions_matches_brute_force():
    def brute(i, k, o, s, pl, bd, wd):
        n = 0
        for kk in range(k):
            for oo in range(o):
                u = oo * s - pl + kk * wd
                if u >= 0 and u % bd == 0 and u // bd < i:
                    n += 1
        return n
    import itertools
    for i, k, o, s, pl, bd, wd in itertools.product((1, 4, 7), (1, 3), (1, 5, 9), (1, 2, 3), (-1, 0, 2),
                                                  (1, 2, 3), (1, 2)):
        assert _valid_positions(i, k, o, s, pl, bd, wd) == brute(i, k, o, s, pl, bd, wd)


def test_cost_arithmetic_and_shape_size():
    a = Cost(1, 2, 3, 4)
    b = a + Cost(10, 20, 30, 40)
    assert b == Cost(11, 22, 33, 44) and b.bytes_accessed == 77 and a.bytes_accessed == 7
    m = parse_hlo(module("p = (f32[4]{0}, s4[8]{0}) parameter(0)\nROOT g = s4[8]{0} get-tuple-element(p), index=1"))
    assert shape_size(m.entry.by_name["p"].shape) == 16  # tuple index table
    assert shape_size(m.entry.root.shape) == 8  # sub-byte types take a byte each on CPU


def test_computation_costs_cover_every_instruction():
    m = parse_hlo(SNIPPETS["fusion"][0])
    per = computation_costs(m)
    assert set(per) == {"fc", "main"}
    assert [len(v) for v in per.values()] == [len(c.instructions) for c in m.computations]
    # Inside the fusion the slice is priced standalone; the entry's fusion only at its boundary.
    fc = m.computations_by_name["fc"]
    assert per["fc"][[i.name for i in fc.instructions].index("s")] == Cost(0, 0, 64, 64)
    assert sum(per["main"], Cost()) == module_cost(m)


def _synthetic_module(n: int) -> str:
    """A chain of n elementwise ops, slices and fusions (no jax needed)."""
    lines = ["p0 = f32[64,128]{1,0} parameter(0)"]
    prev = "p0"
    ops = ["add", "multiply", "exponential", "tanh", "subtract", "maximum"]
    for i in range(n):
        if i % 10 == 9:
            lines.append(f"v{i} = f32[64,128]{{1,0}} fusion({prev}, p0), kind=kLoop, calls=fc")
        elif ops[i % 6] in ("exponential", "tanh"):
            lines.append(f"v{i} = f32[64,128]{{1,0}} {ops[i % 6]}({prev})")
        else:
            lines.append(f"v{i} = f32[64,128]{{1,0}} {ops[i % 6]}({prev}, p0)")
        prev = f"v{i}"
    lines.append(f"ROOT r = f32[64,128]{{1,0}} negate({prev})")
    fc = ("fc {\n  a = f32[64,128]{1,0} parameter(0)\n  b = f32[64,128]{1,0} parameter(1)\n"
          "  e = f32[64,128]{1,0} exponential(a)\n  ROOT c = f32[64,128]{1,0} add(e, b)\n}\n")
    return module("\n".join(lines), fc)


def test_module_cost_is_fast():
    m = parse_hlo(_synthetic_module(10_000))
    assert m.instruction_count() > 10_000
    best = min(_timed(module_cost, m) for _ in range(3))
    assert best < 0.5, f"module_cost took {best:.3f} s on {m.instruction_count()} instructions"
    # Per element: a fusion is 1 flop + 1 transcendental, exp/tanh 1 transcendental, the rest 1 flop.
    kinds = ["fusion" if i % 10 == 9 else ("t" if i % 6 in (2, 3) else "f") for i in range(10_000)]
    c = module_cost(m)
    assert c.flops == 64 * 128 * (kinds.count("fusion") + kinds.count("f") + 1)
    assert c.transcendentals == 64 * 128 * (kinds.count("fusion") + kinds.count("t"))


def _timed(fn, *args) -> float:
    """CPU seconds of this process: other jobs on a shared machine do not make the test fail."""
    t = time.process_time()
    fn(*args)
    return time.process_time() - t


# --------------------------------------------------------------------------------------------------
# Parity with XLA's HloCostAnalysis (needs jax)


def _rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def _check_parity(text: str, name: str) -> None:
    pytest.importorskip("jax")
    from autotune.compiler.analysis import _oracle_totals

    try:
        oracle = _oracle_totals(text)
    except Exception as e:  # every program compared here is one XLA takes: a rejection is a bug
        pytest.fail(f"XLA's cost analysis rejects {name}: {str(e)[:200]}")
    ours = module_cost(parse_hlo(text, name))
    for metric in ("flops", "transcendentals", "bytes_accessed"):
        a, b = getattr(ours, metric), getattr(oracle, metric)
        assert _rel(a, b) <= 0.01, f"{name}: {metric} ours {a} vs XLA {b}"


@pytest.mark.parametrize("path", EXTERNAL + CORPUS + FIXTURES, ids=os.path.basename)
def test_parity_with_xla_on_files(path):
    with open(path, encoding="utf-8") as f:
        _check_parity(f.read(), path)


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_snippets_agree_with_xla(name):
    _check_parity(SNIPPETS[name][0], name)


@pytest.mark.parametrize("text", [WHILE, CONDITIONAL], ids=["while", "conditional"])
def test_control_flow_agrees_with_xla(text):
    _check_parity(text, "control")


def test_synthetic_module_agrees_with_xla():
    _check_parity(_synthetic_module(300), "synthetic")


def test_compiled_text_with_stack_frame_tables_round_trips():
    """compile().as_text() puts stack-frame tables between the header and the computations
    (parser fix in autotune/compiler/hlo.py); printing keeps them there, where XLA accepts them."""
    path = os.path.join(REPO, "tests", "fixtures", "hlo", "analysis_conv_misc_opt.hlo")
    with open(path, encoding="utf-8") as f:
        m = parse_hlo(f.read(), path)
    assert m.tables.startswith("FileNames") and len(m.computations) > 1
    text = m.to_text()
    assert parse_hlo(text).to_text() == text
    assert module_cost(parse_hlo(text)) == module_cost(m)
    _check_parity(text, "printed " + os.path.basename(path))
