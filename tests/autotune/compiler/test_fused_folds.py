"""fold_fused_body: what XLA folds inside a fused computation, folded before we write it."""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.compiler.fused_folds import fold_fused_body
from autotune.compiler.hlo import parse_hlo

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hlo"


def _body(text: str):
    """The instructions of the computation `fused` of a small module."""
    module = parse_hlo("HloModule m\n\n" + text + "\n\nENTRY e {\n  ROOT z = f32[] constant(0)\n}\n")
    return next(c for c in module.computations if c.name == "fused").instructions


def _fold(text: str):
    body, kept = fold_fused_body(_body(text))
    return {i.name: i for i in body}, kept, next(i.name for i in body if i.is_root)


def test_select_on_a_splat_constant_predicate_drops_the_dead_branch_and_its_parameter():
    """jax.random.gamma: select(2.5 >= 1, 1, bitcast-convert(p1)); p1 is read by nothing else, so
    it goes (XLA's verifier rejects a fusion parameter without users)."""
    names, kept, root = _fold("""fused {
  p0 = f32[5]{0} parameter(0)
  p1 = u32[5]{0} parameter(1)
  c25 = f32[] constant(2.5)
  c1 = f32[] constant(1)
  b25 = f32[5]{0} broadcast(c25), dimensions={}
  b1 = f32[5]{0} broadcast(c1), dimensions={}
  ge = pred[5]{0} compare(b25, b1), direction=GE
  bc = f32[5]{0} bitcast-convert(p1)
  s = f32[5]{0} select(ge, b1, bc)
  ROOT m = f32[5]{0} add(p0, s)
}""")
    assert kept == [0]
    assert "p1" not in names and "bc" not in names and "s" not in names
    assert names["m"].operands == ["p0", "b1"]
    assert root == "m"


def test_false_predicate_takes_the_other_branch_and_renumbers_parameters():
    names, kept, _ = _fold("""fused {
  p0 = f32[5]{0} parameter(0)
  p1 = f32[5]{0} parameter(1)
  p2 = f32[5]{0} parameter(2)
  c = s32[] constant(3)
  b = s32[5]{0} broadcast(c), dimensions={}
  lt = pred[5]{0} compare(b, b), direction=LT
  s = f32[5]{0} select(lt, p0, p1)
  ROOT a = f32[5]{0} add(s, p2)
}""")
    assert kept == [1, 2]
    assert names["p1"].parameter_number == 0 and names["p2"].parameter_number == 1
    assert names["a"].operands == ["p1", "p2"]


@pytest.mark.parametrize("expr, dtype, folds", [
    ("and(p0, k)", "pred", "false"),        # and(x, false) = false
    ("or(p0, k)", "pred", "true"),          # or(x, true) = true
    ("multiply(p0, k)", "s32", "0"),        # integer x * 0 = 0
    ("multiply(p0, k)", "f32", None),       # float x * 0 is not 0 (NaN, inf, -0): kept
    ("multiply(p0, k)", "bf16", None),      # bf16 values are not evaluated at all
])
def test_absorbing_constants(expr, dtype, folds):
    lit = folds if folds is not None else "0"
    body = f"""fused {{
  p0 = {dtype}[4]{{0}} parameter(0)
  p1 = {dtype}[4]{{0}} parameter(1)
  c = {dtype}[] constant({lit})
  k = {dtype}[4]{{0}} broadcast(c), dimensions={{}}
  x = {dtype}[4]{{0}} {expr}
  ROOT r = pred[4]{{0}} compare(x, p1), direction=EQ
}}"""
    names, kept, _ = _fold(body)
    if folds is None:
        assert kept == [0, 1] and "x" in names
    else:
        assert kept == [1] and "p0" not in names and names["r"].operands == ["k", "p1"]


def test_integer_xor_with_itself_is_a_zero_broadcast():
    names, kept, root = _fold("""fused {
  p0 = s32[4]{0} parameter(0)
  p1 = s32[4]{0} parameter(1)
  x = s32[4]{0} xor(p0, p0)
  ROOT r = pred[4]{0} compare(x, p1), direction=EQ
}""")
    assert kept == [1]
    assert root == "r"
    zero = names[names["r"].operands[0]]
    assert zero.opcode == "broadcast" and names[zero.operands[0]].literal == "0"


def test_a_kernel_folding_to_its_input_has_a_parameter_root():
    """threefry's add(broadcast(0), x): the fusion would return its input (XLA:CPU aborts on that);
    callers see the parameter root and emit a copy instead."""
    names, kept, root = _fold("""fused {
  p0 = u32[5]{0} parameter(0)
  c = u32[] constant(0)
  b = u32[5]{0} broadcast(c), dimensions={}
  ROOT a = u32[5]{0} add(b, p0)
}""")
    assert kept == [0] and root == "p0" and set(names) == {"p0"}


def test_nothing_to_fold_returns_the_same_instructions():
    body = _body("""fused {
  p0 = f32[5]{0} parameter(0)
  c = f32[] constant(0)
  b = f32[5]{0} broadcast(c), dimensions={}
  s = f32[5]{0} subtract(b, p0)
  ROOT m = f32[5]{0} maximum(s, p0)
}""")
    new, kept = fold_fused_body(body)
    assert kept == [0] and all(a is b for a, b in zip(new, body)) and len(new) == len(body)


def test_random_gamma_emits_programs_xla_accepts_and_that_compute_the_same():
    """The program that found both failures (default configuration for tpu: a parameter left
    unread; random ones: an identity fusion aborting XLA:CPU) verifies, compiles and computes the
    original's outputs."""
    pytest.importorskip("jax")
    from hardware.parity import check_program
    results = check_program(str(FIXTURES / "random_gamma.hlo"), "tpu", specs=("default", "random:0"),
                            modes=("xla",), timeout=300)
    assert [r.status for r in results] == ["ok"] * 2, [(r.config, r.status) for r in results]
