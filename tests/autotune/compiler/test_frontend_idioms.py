"""What other frontends write and the emission must survive (issue 46's root fixes).

TensorFlow and torch_xla programs hold instructions JAX never writes: identity broadcasts and
layout-changing transposes on every bias add (torch_xla), no-op pads (TensorFlow's stft, pooling
and strided-slice gradients), `logistic` (sigmoid gates), while conditions that go through a `call`
with nested tuple state. The fixtures in tests/fixtures/hlo/frontend_idioms are the smallest
programs that broke the emission or the trip counts before the fixes; each is checked here for the
default and random configurations on both targets, on XLA:CPU, against the original and float64.
Scientific JAX (mujoco-mjx, jax-md) adds scalar gathers, reshape-like broadcasts next to reductions,
equal constants, literals with `/*i0=0*/` comments, and host callbacks (diffrax's `error_if`).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.compiler.fused_folds import fold_fused_body, logical_identity
from autotune.compiler.hlo import HloParseError, parse_hlo
from autotune.compiler.program import Program

IDIOMS = Path(__file__).resolve().parents[2] / "fixtures" / "hlo" / "frontend_idioms"
FRONTENDS = Path(__file__).resolve().parents[3] / "examples" / "hlo_frontends"
HOST_CALLBACK = "host_callback.hlo"  # runs only where its callback's handler is: compiled, not run
EMITTED = sorted(p.name for p in IDIOMS.glob("*.hlo") if p.name != HOST_CALLBACK)


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


def test_a_literal_with_index_comments_parses():
    """XLA prints `/*i0=0*/` before each sub-array of a large literal (mujoco-mjx's box corners)."""
    text = (IDIOMS / "literal_comments.hlo").read_text()
    parse_hlo(text)
    with pytest.raises(HloParseError, match="dimension 3 has 2 entries"):
        parse_hlo(text.replace("{ -1, -1, 1 }", "{ -1, 1 }"))


def test_host_callbacks_are_flagged_and_not_run_by_the_parity():
    """A custom call into the tracing process (jax's pure_callback, equinox's error_if): one warning
    line among the program's flags; the parity check emits and compiles it but runs neither it nor
    the original, and says so (neither ok nor a failure)."""
    prog = Program.from_file(str(IDIOMS / HOST_CALLBACK))
    assert len(prog.flags) == 1 and "host callback" in prog.flags[0] and "\n" not in prog.flags[0]
    assert not Program.from_file(str(IDIOMS / "noop_pad.hlo")).flags
    pytest.importorskip("jax")
    from hardware.parity import HOST_CALLBACK_SKIP, check_program, summarize
    results = check_program(str(IDIOMS / HOST_CALLBACK), "cpu", specs=("default", "random:0"), timeout=300)
    assert [r.status for r in results] == [HOST_CALLBACK_SKIP] * 4
    assert all(r.skipped and not r.ok for r in results)
    assert summarize(results)["cases"] == 0 and summarize(results)["skipped"] == 4


def test_layout_safe_selects_copy_a_laid_out_predicate():
    """A select whose non-scalar predicate keeps its layout in the fusion (a parameter) while its
    on-true value loses it: XLA's verifier aborts after layout assignment ("has_layout()"); a copy
    of the predicate inside the fusion has no layout either."""
    from autotune.compiler.fused_folds import layout_safe_selects
    body = _fused("""fused {
  p0 = pred[4,8]{1,0} parameter(0)
  p1 = f32[4,8]{1,0} parameter(1)
  e = f32[4,8]{1,0} exponential(p1)
  s = f32[4,8]{1,0} select(p0, e, p1)
  ROOT n = f32[4,8]{1,0} negate(s)
}""")
    out = layout_safe_selects(body)
    sel = next(i for i in out if i.opcode == "select")
    pred = next(i for i in out if i.name == sel.operands[0])
    assert pred.opcode == "copy" and pred.operands == ["p0"]
    swapped = [i.copy(operands=["p0", "p1", "e"]) if i.opcode == "select" else i for i in body]
    assert layout_safe_selects(swapped) is swapped  # on-true a parameter: nothing to do
    pytest.importorskip("jax")
    from hardware.xla import compile_hlo
    lines = "\n".join("  " + i.to_text(percent=False) for i in out)
    compile_hlo("HloModule m\n\nfused {\n" + lines + "\n}\n\nENTRY e {\n"
                "  a = pred[4,8]{1,0} parameter(0)\n  b = f32[4,8]{1,0} parameter(1)\n"
                "  ROOT f = f32[4,8]{1,0} fusion(a, b), kind=kLoop, calls=fused\n}\n")


def test_repaired_random_configurations_are_valid():
    """Repair walks kernels from the last root down; a cut below could shrink a kernel already
    repaired into an illegal one (a select whose predicate left the kernel while its on-true value
    stayed: jax-md's FIRE minimizer, random configuration 0, aborted XLA:CPU)."""
    import numpy as np
    from autotune.compiler.fusion import FusionSpace
    path = FRONTENDS / "jaxmd_fire_minimize_infer.hlo"
    if not path.exists():
        pytest.skip("frontends corpus not present")
    space = FusionSpace(Program.from_file(str(path)), "cpu")
    for seed in range(4):
        assert space.is_valid(space.random(np.random.default_rng(seed))), seed


def test_reshape_like_broadcasts_stay_out_of_reduce_fusions():
    """`f32[1] broadcast(f32[])` and `pred[4,1] broadcast(pred[4])` become reshapes in the StableHLO
    round trip; reached from the root of a fusion holding a reduce, XLA:CPU's hero search asks for
    their layouts and aborts. The cpu rules keep them out of such kernels."""
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(Program.from_file(str(IDIOMS / "reduce_select_scalar_broadcast.hlo")), "cpu")
    comp = space.program.computations[0]
    kernels = [{comp.instructions[m].name for m in r.members} for r in space.state(space.default()).refs()]
    assert {"r", "sel", "a"} in kernels and not any("b" in k and "r" in k for k in kernels)
    assert not any("rb" in k and "r2" in k for k in kernels)


def test_a_scalar_gather_under_a_sunk_fusion_is_read_in_canonical_form():
    """GatherSimplifier makes `f32[2] gather(x, s32[2,1])` a reshape of `f32[2,1] gather`, in the same
    simplification round as ReshapeMover: the elementwise kernel of it and of two reshapes is sunk
    by us, and reads the canonical gather itself (mujoco-mjx's clamp of actuator forces)."""
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(Program.from_file(str(IDIOMS / "scalar_gather_reshape_mover.hlo")), "cpu")
    text = emit_fused_text(space, space.default())
    entry = text.split("ENTRY")[1]
    canonical = next(line.split(" = ")[0].strip() for line in entry.splitlines()
                     if "f32[2,1]{1,0} gather(x, i), offset_dims={1}, collapsed_slice_dims={}" in line)
    assert any(" fusion(" in line and canonical in line for line in entry.splitlines())
    assert "ROOT mn = f32[2]{0} reshape(" in entry


def test_equal_constants_are_one_fusion_operand():
    """XLA folds `f32[1] broadcast(f32[] 0)` into `f32[1] constant({0})` and CSE merges it with an equal
    constant: a fusion reading both gets one operand twice, and XLA:CPU's instruction fusion aborts
    ("raw_hash_map<>::at", mujoco-mjx's contact solver). The emission passes such values once."""
    from autotune.compiler.emission import emit_fused_module
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(Program.from_file(str(IDIOMS / "equal_constant_inputs.hlo")), "cpu")
    module = emit_fused_module(space, space.default())
    entry = next(c for c in module.computations if c.is_entry)
    fusion = next(i for i in entry.instructions if i.opcode == "fusion" and i.name == "add")
    assert not {"b", "c0"} <= set(fusion.operands)


def test_an_nchw_convolution_counts_as_a_transpose_for_the_sink():
    """XLA:CPU's ConvCanonicalization rewrites a `bf01_oi01->bf01` convolution (torch_xla) in the
    entry computation as an NHWC convolution and a transpose, before ReshapeMover looks: with a
    torch_xla bias (a transposed broadcast) the elementwise kernel of both is sunk by us, computing
    on [batch, spatial..., feature]."""
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(Program.from_file(str(IDIOMS / "nchw_convolution_bias.hlo")), "cpu")
    entry = emit_fused_text(space, space.default()).split("ENTRY")[1]
    assert "f32[2,2,2,4]{3,2,1,0} fusion(" in entry
    assert "ROOT r = f32[2,4,2,2]{3,2,1,0} transpose(" in entry and "dimensions={0,3,1,2}" in entry


def test_a_batched_gather_is_written_as_xla_normalizes_it():
    """jax's batched gathers (`operand_batching_dims`, mujoco-mjx): XLA:CPU normalizes them (an iota
    of batch indices before the indices) and GatherSimplifier makes them a reshape of a canonical
    gather; both are written out, so the kernel reading the gather and a reshape is sunk by us."""
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(Program.from_file(str(IDIOMS / "batched_gather_negate.hlo")), "cpu")
    entry = emit_fused_text(space, space.default()).split("ENTRY")[1]
    assert "iota(), iota_dimension=0" in entry and "operand_batching_dims" not in entry
    assert "f32[4,1,1]{2,1,0} gather(" in entry and "ROOT a = f32[1,4]{1,0} reshape(" in entry
