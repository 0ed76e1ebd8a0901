"""Program normalization: call inlining, DCE, tuple forwarding, trip counts, multiplicities."""
from __future__ import annotations

import os

import pytest

from autotune.compiler.program import DEFAULT_TRIP_COUNT, Program

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HLO = os.path.join(ROOT, "examples", "hlo")

CALLS = """
HloModule calls

helper {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  s = f32[4] add(a, b)
  ROOT t = (f32[4], f32[4]) tuple(s, a)
}

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  dead = f32[4] multiply(x, x)
  c = (f32[4], f32[4]) call(x, y), to_apply=helper
  g0 = f32[4] get-tuple-element(c), index=0
  g1 = f32[4] get-tuple-element(c), index=1
  ROOT r = f32[4] subtract(g0, g1)
}
"""


def test_calls_are_inlined_and_dead_code_removed():
    p = Program.from_text(CALLS)
    ops = [i.opcode for i in p.entry.instructions]
    assert "call" not in ops and "multiply" not in ops
    assert "get-tuple-element" not in ops and "tuple" not in ops  # forwarded through the tuple
    r = p.entry.instructions[p.entry.root]
    assert r.opcode == "subtract"
    add = p.entry.instructions[p.entry.operands[p.entry.root][0]]
    assert add.opcode == "add"
    assert [m.name for m in p.module.computations] == ["main"]  # helper no longer referenced
    Program.from_text(p.to_text())  # prints back to valid HLO


def _loop(cfg: str, limit: str = "10", direction: str = "LT", start: str = "0") -> str:
    return f"""
HloModule loop
cond {{
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({limit})
  ROOT lt = pred[] compare(i, n), direction={direction}
}}
body {{
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(2)
  j = s32[] add(i, one)
  y = f32[4] exponential(x)
  ROOT t = (s32[], f32[4]) tuple(j, y)
}}
ENTRY main {{
  x = f32[4] parameter(0)
  c0 = s32[] constant({start})
  init = (s32[], f32[4]) tuple(c0, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body{cfg}
  ROOT r = f32[4] get-tuple-element(w), index=1
}}
"""


def test_trip_count_from_backend_config():
    p = Program.from_text(_loop(', backend_config={"known_trip_count":{"n":"7"}}'))
    assert [(w.trip_count, w.source) for w in p.whiles] == [(7, "backend_config")]
    assert p.computation("body").multiplicity == 7
    assert p.computation("cond").multiplicity == 8
    assert not p.flags


@pytest.mark.parametrize("limit,direction,start,expected", [
    ("10", "LT", "0", 5), ("10", "LE", "0", 6), ("11", "LT", "1", 5), ("9", "LT", "0", 5),
])
def test_trip_count_from_induction_variable(limit, direction, start, expected):
    p = Program.from_text(_loop("", limit, direction, start))
    (w,) = p.whiles
    assert (w.trip_count, w.source) == (expected, "induction_variable")


def test_a_loop_whose_condition_fails_at_once_runs_zero_times():
    p = Program.from_text(_loop("", "10", "GT"))
    (w,) = p.whiles
    assert (w.trip_count, w.source) == (0, "evaluated")
    assert not p.flags


def test_unknown_trip_count_is_flagged():
    """i = 0, 2, 4, ... never equals 11 (it wraps around in s32): no analysis can know the count."""
    p = Program.from_text(_loop("", "11", "NE"))
    (w,) = p.whiles
    assert (w.trip_count, w.source) == (DEFAULT_TRIP_COUNT, "default")
    assert p.flags and "trip count unknown" in p.flags[0]


def test_scan_in_corpus_has_trip_counts():
    path = os.path.join(HLO, "lstm_small_infer.hlo")
    p = Program.from_file(path)
    assert p.whiles and all(w.source != "default" for w in p.whiles)
    assert all(c.multiplicity >= 1 for c in p.computations)


def test_noop_and_splat_folding():
    text = """
HloModule m
ENTRY main {
  x = f32[2,3] parameter(0)
  b = f32[2,3] broadcast(x), dimensions={0,1}
  c = f32[] constant(1)
  big = f32[5,2,3] broadcast(c), dimensions={}
  i = s32[] parameter(1)
  z = s32[] constant(0)
  ds = f32[1,2,3] dynamic-slice(big, i, z, z), dynamic_slice_sizes={1,2,3}
  r = f32[2,3] reshape(ds)
  ROOT a = f32[2,3] add(b, r)
}
"""
    p = Program.from_text(text)
    ins = {i.name: i for i in p.entry.instructions}
    assert "b" not in ins                       # identity broadcast removed
    assert ins["a"].operands[0] == "x"
    assert ins["r"].opcode == "broadcast" and ins["r"].operands == ["c"]  # data movement of a splat


def test_existing_fusions_are_unfused():
    p = Program.from_file(os.path.join(ROOT, "tests", "fixtures", "hlo", "external", "hlo_to_mhlo_fusion.hlo"))
    assert all(i.opcode != "fusion" for c in p.computations for i in c.instructions)


def test_costing_the_module_before_normalizing_it_keeps_lookups_valid():
    """cli._load prices the unfused module (XLA's numbers), then normalizes the same module; the
    computations' name lookups must follow the instruction lists normalization replaces (the nmt
    programs failed every kernel with KeyError: 'lt.2.i3')."""
    from click.testing import CliRunner

    from autotune.compiler.analysis import module_cost
    from autotune.cli.app import main
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.hlo import parse_hlo_file

    path = os.path.join(HLO, "nmt_small_infer.hlo")
    m = parse_hlo_file(path)
    before = module_cost(m)
    space = FusionSpace(Program.from_module(m), "tpu")
    assert len(space.node_costs[0]) == len(space.program.computations[0].instructions)
    for comp in m.computations:
        assert {i.name for i in comp.instructions} == set(comp.by_name)
    assert before.flops > 0
    r = CliRunner().invoke(main, ["measure", path, "--evaluator", "sim", "--store", "none", "--json"])
    assert r.exit_code == 0, r.output
    assert '"kernels_failed": 0' in r.output
