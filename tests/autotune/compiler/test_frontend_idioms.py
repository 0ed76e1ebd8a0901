"""What other frontends write and the emission must survive (issue 46's root fixes).

TensorFlow and torch_xla programs hold instructions JAX never writes: identity broadcasts and
layout-changing transposes on every bias add (torch_xla), no-op pads (TensorFlow's stft, pooling
and strided-slice gradients), `logistic` (sigmoid gates), while conditions that go through a `call`
with nested tuple state. The fixtures in tests/fixtures/hlo/frontend_idioms are the smallest
programs that broke the emission or the trip counts before the fixes; each is checked here for the
default and random configurations on both targets, on XLA:CPU, against the original and float64.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.compiler.fused_folds import fold_fused_body, logical_identity
from autotune.compiler.hlo import HloParseError, parse_hlo
from autotune.compiler.program import Program

IDIOMS = Path(__file__).resolve().parents[2] / "fixtures" / "hlo" / "frontend_idioms"
EMITTED = sorted(p.name for p in IDIOMS.glob("*.hlo"))


def _fused(text: str):
    module = parse_hlo("HloModule m\n\n" + text + "\n\nENTRY e {\n  ROOT z = f32[] constant(0)\n}\n")
    return next(c for c in module.computations if c.name == "fused").instructions


@pytest.mark.parametrize("line, identity", [
    ("b = f32[4,8]{0,1} broadcast(p0), dimensions={0,1}", True),      # layout change only
    ("b = f32[8,4]{1,0} broadcast(p1), dimensions={1}", False),
    ("b = f32[4,8]{0,1} transpose(p0), dimensions={0,1}", True),
    ("b = f32[4,8]{1,0} pad(p0, z), padding=0_0x0_0", True),
    ("b = f32[4,9]{1,0} pad(p0, z), padding=0_0x0_1", False),
    ("b = f32[4,8]{1,0} slice(p0), slice={[0:4], [0:8]}", True),
    ("b = f32[4,8]{1,0} reverse(p0), dimensions={}", True),
    ("b = f32[4,8]{1,0} reverse(p0), dimensions={1}", False),
    ("b = f32[4,8]{0,1} bitcast(p0)", False),                          # reinterprets the bytes
    ("b = f32[4,8]{1,0} bitcast(p0)", True),
    ("b = f32[4,8]{1,0} concatenate(p0), dimensions={0}", True),
])
def test_logical_identities_ignore_layouts_but_not_bitcasts(line, identity):
    body = _fused(f"""fused {{
  p0 = f32[4,8]{{1,0}} parameter(0)
  p1 = f32[4]{{0}} parameter(1)
  z = f32[] constant(0)
  {line}
  ROOT n = f32[{'4,9' if '0_1' in line else '8,4' if 'p1' in line else '4,8'}]{{1,0}} negate(b)
}}""")
    by_name = {i.name: i for i in body}
    b = by_name["b"]
    assert (logical_identity(b, [by_name[o] for o in b.operands]) == "p0") is identity


def test_a_noop_pad_in_a_fusion_drops_its_pad_value_parameter():
    """TensorFlow's `pad(x, c), padding=0_0x0_0`: XLA removes the pad inside the fusion and the
    pad value's parameter is left without users ("Non-root instruction ... must have users")."""
    body, kept = fold_fused_body(_fused("""fused {
  p0 = f32[4,8]{1,0} parameter(0)
  p1 = f32[] parameter(1)
  e = f32[4,8]{1,0} exponential(p0)
  p = f32[4,8]{1,0} pad(e, p1), padding=0_0x0_0
  ROOT n = f32[4,8]{1,0} negate(p)
}"""))
    assert kept == [0]
    assert [i.opcode for i in body] == ["parameter", "exponential", "negate"]


def test_an_identity_root_keeps_the_fusion_shape():
    """A layout-changing identity broadcast at the root: the value it forwards takes the fusion's
    shape (a fused computation's root shape must be the fusion's)."""
    body, _ = fold_fused_body(_fused("""fused {
  p0 = f32[4,8]{1,0} parameter(0)
  e = f32[4,8]{1,0} exponential(p0)
  ROOT b = f32[4,8]{0,1} broadcast(e), dimensions={0,1}
}"""))
    root = next(i for i in body if i.is_root)
    assert root.opcode == "exponential" and root.shape.to_text() == "f32[4,8]{0,1}"


def test_logistic_is_expanded_as_xla_does_in_cpu_fusions():
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(Program.from_file(str(IDIOMS / "logistic_gates.hlo")), "cpu")
    text = emit_fused_text(space, space.default())
    fused = text.split("ENTRY")[0]
    assert "logistic(" not in fused and "exponential(" in fused and "divide(" in fused
    parse_hlo(text)  # verifies


def test_trip_count_through_a_called_condition_with_nested_tuples():
    """TensorFlow's while loops: the condition calls a computation returning (pred[]), the state is a
    nested tuple, the bound is `and` of the loop counter against maximum_iterations and the user's
    counter against 16: 16 iterations, found by running the loop's scalar state."""
    prog = Program.from_file(str(IDIOMS / "while_condition_call.hlo"))
    assert [(w.trip_count, w.source) for w in prog.whiles] == [(16, "evaluated")]
    assert not prog.flags


def test_a_data_dependent_loop_stays_flagged():
    # the condition reads a float of the state: not a scalar integer the evaluation can know
    text = (IDIOMS / "while_condition_call.hlo").read_text().replace(
        "  both = pred[] and(lt2, lt)",
        "  s = f32[1]{0} slice(a2), slice={[0:1]}\n  r = f32[] reshape(s)\n  zf = f32[] constant(0)\n"
        "  pos = pred[] compare(r, zf), direction=GT\n  both = pred[] and(pos, lt)")
    prog = Program.from_text(text)
    assert [w.source for w in prog.whiles] == ["default"]
    assert prog.flags


def test_entry_computation_layout_must_match_the_entry_computation():
    """XLA:CPU aborts the process on such a module (its StableHLO import checks the count); ours
    refuses it in one line at the header, as XLA's verifier does."""
    text = (IDIOMS / "layout_changing_transpose.hlo").read_text()
    bad = text.replace("{(f32[512,256,1,1]{3,2,1,0})->", "{(f32[512,256,1,1]{3,2,1,0}, f32[8]{0})->", 1)
    with pytest.raises(HloParseError, match=r":1:\d+: error: entry_computation_layout has 2 parameters, the entry "
                                            r"computation 'main' has 1"):
        parse_hlo(bad, "bad.hlo")
    wrong_dims = text.replace("{(f32[512,256,1,1]{3,2,1,0})->", "{(f32[512,256,1,2]{3,2,1,0})->", 1)
    with pytest.raises(HloParseError, match="parameter 0 is f32"):
        parse_hlo(wrong_dims)
    parse_hlo(text.replace("{(f32[512,256,1,1]{3,2,1,0})->", "{(f32[512,256,1,1]{0,1,2,3})->", 1))  # layouts may differ


@pytest.mark.parametrize("target", ["cpu", "tpu"])
@pytest.mark.parametrize("name", EMITTED)
def test_frontend_idioms_emit_compile_and_are_as_accurate(name, target):
    """Default and three random configurations, XLA's default options and the measured ones: XLA:CPU
    accepts every emission and its outputs are as accurate as the original's against float64."""
    pytest.importorskip("jax")
    from hardware.parity import check_program
    from hardware.xla import ACCURACY_FACTOR, OUTPUT_TOL
    results = check_program(str(IDIOMS / name), target, specs=("default", "random:0", "random:1", "random:2"),
                            modes=("xla", "measure"), timeout=300, record_f64=True)
    assert [r.status for r in results] == ["ok"] * len(results), [(r.config, r.mode, r.status) for r in results]
    for r in results:
        if r.vs_f64 is not None:
            assert r.vs_f64["emitted"] <= max(OUTPUT_TOL, ACCURACY_FACTOR * r.vs_f64["original"]), r
