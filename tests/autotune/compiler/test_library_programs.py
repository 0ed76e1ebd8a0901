"""Programs written with the model libraries JAX users use (examples/hlo_library, made by
examples/generate_library_corpus.py from flax, haiku, equinox, optax and HF transformers' own code)
and the kernel-level rules they needed. Each fixture is the smallest program showing the pattern;
the docstrings name the library program that found it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.hlo import parse_hlo
from autotune.compiler.emission import cpu_checkable, emit_fused_module, emit_fused_text
from autotune.compiler.program import Program
from autotune.compiler.widen import WidenError, widen_to_f64

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "hlo"
LIBRARY = ROOT / "examples" / "hlo_library"


def _library_programs(max_instructions: int = 10**9) -> list[str]:
    manifest = json.loads((LIBRARY / "manifest.json").read_text())
    return [m["name"] for m in manifest if m["instructions"] <= max_instructions]


def test_library_manifest_lists_every_program_and_its_libraries():
    manifest = json.loads((LIBRARY / "manifest.json").read_text())
    names = {m["name"] for m in manifest}
    assert names == {p.stem for p in LIBRARY.glob("*.hlo")}
    libraries = {m["library"] for m in manifest}
    assert {"flax.linen", "flax.nnx", "haiku", "equinox", "transformers"} <= libraries
    assert {m["mode"] for m in manifest} == {"infer", "train"}
    assert all("jax" in m["versions"] for m in manifest)


@pytest.mark.slow
@pytest.mark.parametrize("name", _library_programs(max_instructions=2000))
def test_library_program_emits_for_every_target(name):
    """Our parser reads each library program; the default and a random configuration emit for cpu
    and tpu, and our parser (which verifies like XLA's) reads the emission back."""
    program = Program.from_file(str(LIBRARY / f"{name}.hlo"))
    for target in ("cpu", "tpu"):
        space = FusionSpace(program, target)
        for cfg in (space.default(), space.random(np.random.default_rng(0))):
            parse_hlo(emit_fused_text(space, cfg, header=True))


def _fusion_members(module, name: str) -> list:
    """Opcodes inside the fused computations of the module's fusions."""
    comps = {c.name: c for c in module.computations}
    return [[i.opcode for i in comps[ins.attrs["calls"]].instructions]
            for c in module.computations for ins in c.instructions if ins.opcode == "fusion"]


def test_one_element_counter_of_threefry_is_never_a_fusion():
    """flax/HF dropout in train mode (threefry's key counter: `u32[1] add(broadcast(c),
    reshape(slice(key)))` before a while loop) emitted as a fusion of broadcast + add: XLA's
    simplifier turns the broadcast of one element into a reshape without a layout and XLA:CPU aborts
    ("Check failed: output_shape.has_layout() u32[1]"; flax nn.RNN(nn.LSTMCell) with nn.Dropout,
    HF FlaxGPT2LMHeadModel, flax encoder-decoder train steps). Kernels of one element made of
    elementwise ops and broadcasts/reshapes are emitted plain."""
    space = FusionSpace(Program.from_file(str(FIXTURES / "threefry_counter_u32_1.hlo")), "cpu")
    for cfg in (space.default(), space.random(np.random.default_rng(0))):
        module = emit_fused_module(space, cfg)
        assert not [ops for ops in _fusion_members(module, "") if "broadcast" in ops and "add" in ops]


@pytest.mark.xla
def test_one_element_counter_of_threefry_compiles_on_xla_cpu():
    pytest.importorskip("jax")
    from hardware.parity import check_program
    res = check_program(str(FIXTURES / "threefry_counter_u32_1.hlo"), "cpu", ["default", "random:0", "random:1"])
    assert [r.status for r in res] == ["ok"] * 6, [r.status for r in res]


def test_upcast_of_a_16bit_value_stays_outside_fusions():
    """jmp's bf16 compute with f32 batch norm (haiku's ResNet train step): `f32 convert(bf16
    convolution)` fused with its square cut XLA:CPU's excess precision (it computes the bf16
    convolution in f32 and cancels the convert pair), forcing a rounding the original does not have:
    relative error 2.79 on the haiku program, 6e-3 on this fixture. The upcast stays outside, next to
    its producer; the fusions read its f32 value."""
    space = FusionSpace(Program.from_file(str(FIXTURES / "bf16_conv_batchnorm_f32.hlo")), "cpu")
    for cfg in (space.default(), space.random(np.random.default_rng(1))):
        module = emit_fused_module(space, cfg)
        comps = {c.name: c for c in module.computations}
        for c in module.computations:
            for ins in c.instructions:
                if ins.opcode != "fusion":
                    continue
                body = comps[ins.attrs["calls"]]
                shapes = {i.name: i.shape for i in body.instructions}
                assert not [i for i in body.instructions if i.opcode == "convert" and i.shape.dtype == "f32"
                            and shapes[i.operands[0]].dtype == "bf16"]


@pytest.mark.xla
def test_upcast_outside_fusions_computes_exactly_what_xla_computes():
    """With the upcast outside, XLA keeps the excess precision it keeps for the original: the
    emission's outputs equal the original's bit for bit (6e-3 apart with the upcast fused)."""
    pytest.importorskip("jax")
    from hardware.xla import compile_hlo, output_error, verification_inputs
    text = (FIXTURES / "bf16_conv_batchnorm_f32.hlo").read_text()
    space = FusionSpace(Program.from_text(text), "cpu")
    inputs = verification_inputs(text)
    ref = compile_hlo(text)(*inputs)
    for cfg in (space.default(), space.random(np.random.default_rng(0)), space.random(np.random.default_rng(1))):
        err, _ = output_error(compile_hlo(cpu_checkable(space, cfg).text)(*inputs), ref, low_precision=True)
        assert err == 0.0


@pytest.mark.xla
def test_vector_like_state_is_non_negative_in_verification_inputs():
    """haiku keeps batch-norm statistics as f32[1,1,1,C]: negative random variances made every output
    of a haiku ResNet NaN, and a comparison of NaN with NaN checks nothing."""
    pytest.importorskip("jax")
    from hardware.xla import compile_hlo, verification_inputs
    text = (LIBRARY / "haiku_resnet_bf16_infer.hlo").read_text()
    inputs = verification_inputs(text)
    for a in inputs:
        if a.dtype.kind in "fV" and sum(d > 1 for d in a.shape) <= 1:
            assert (np.asarray(a, np.float32) >= 0).all()
    assert any(a.ndim == 4 and a.shape[:3] == (1, 1, 1) for a in inputs)
    assert any((np.asarray(a, np.float32) < 0).any() for a in inputs if a.ndim == 4 and a.shape[0] > 1)
    out = compile_hlo(text)(*inputs)
    assert all(np.isfinite(np.asarray(o, np.float32)).all() for o in out)


@pytest.mark.xla
@pytest.mark.slow
def test_haiku_bf16_resnet_emission_matches_on_xla_cpu():
    pytest.importorskip("jax")
    from hardware.parity import check_program
    res = check_program(str(LIBRARY / "haiku_resnet_bf16_infer.hlo"), "cpu", ["default", "random:0"], ["xla"],
                        record_f64=True)
    assert [r.status for r in res] == ["ok", "ok"], [r.status for r in res]
    assert all(r.vs_f64 is not None and r.vs_f64["emitted"] <= 2 * r.vs_f64["original"] + 1e-2 for r in res)


# ------------------------------------------------------------------------------ the f64 yardstick

def test_widen_keeps_the_bits_that_bitcast_convert_reinterprets():
    text = """HloModule m
ENTRY e {
  k = u32[4]{0} parameter(0)
  x = f32[4]{0} parameter(1)
  one = u32[] constant(1065353216)
  b = u32[4]{0} broadcast(one), dimensions={}
  o = u32[4]{0} or(k, b)
  f = f32[4]{0} bitcast-convert(o)
  h = bf16[4]{0} convert(x)
  u = u16[4]{0} bitcast-convert(h)
  y = f32[4]{0} multiply(f, x)
  ROOT t = (f32[4]{0}, u16[4]{0}) tuple(y, u)
}
"""
    wide = widen_to_f64(text)
    module = parse_hlo(wide)  # verified like XLA verifies
    by = {i.name: i for i in module.entry.instructions}
    assert by["f.bits"].shape.dtype == "f32" and by["f"].opcode == "convert" and by["f"].shape.dtype == "f64"
    assert by["u.narrow"].shape.dtype == "bf16" and by["u"].shape.dtype == "u16"
    assert by["y"].shape.dtype == "f64" and "f32[" not in wide.replace("f.bits = f32[", "")


def test_widen_refuses_custom_calls_and_passes_sharding_through():
    call = """HloModule m
ENTRY e {
  x = f32[4]{0} parameter(0)
  ROOT c = f32[4]{0} custom-call(x), custom_call_target="%s"
}
"""
    with pytest.raises(WidenError, match="custom-call"):
        widen_to_f64(call % "my_kernel")
    assert "f64[4]" in widen_to_f64(call % "Sharding")


@pytest.mark.xla
def test_f64_yardstick_judges_a_reassociated_sum():
    """An f32 sum reassociated differs from the original by more than the f32 tolerance, yet is as
    close to the exact sum: accepted as accurate. A wrong answer is not."""
    pytest.importorskip("jax")
    from hardware.xla import f64_accuracy
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4096]{0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
}
"""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(4096) * 100 + 1).astype(np.float32)
    exact = float(np.sum(x.astype(np.float64)))
    original = [np.float32(np.cumsum(x)[-1])]        # sequential f32 sum
    pairwise = [np.float32(np.sum(x))]                 # numpy's pairwise f32 sum
    assert f64_accuracy(pairwise, original, text, [x])["ok"]
    wrong = [np.float32(exact * 1.01)]
    acc = f64_accuracy(wrong, original, text, [x])
    assert not acc["ok"] and acc["emitted"] > acc["original"]


@pytest.mark.xla
def test_norm_error_tells_a_wrong_answer_from_an_imprecise_one():
    """One cancelling element (a bf16 batch-norm variance) dominates a per-element relative error;
    the whole-array error does not, while a permuted (wrong) output stands out."""
    pytest.importorskip("jax")
    from hardware.xla import norm_error, output_error
    rng = np.random.default_rng(0)
    exact = rng.standard_normal(1000)
    exact[7] = 1e-6                                     # a near-zero value from a cancellation
    imprecise = exact * (1 + 4e-3 * rng.standard_normal(1000))
    imprecise[7] = 0.2                                  # ... computed in bf16: relatively far off
    wrong = exact[::-1].copy()
    assert output_error([imprecise], [exact])[0] > 1.0  # per element: looks as bad as a wrong answer
    assert norm_error([imprecise], [exact]) < 1e-2 < 1.0 < norm_error([wrong], [exact])
    assert norm_error([np.array([1, 2, 3])], [np.array([1, 2, 4])]) == pytest.approx(1 / 3)
    assert norm_error([np.array([np.nan, 1.0])], [np.array([1.0, 1.0])]) == float("inf")
    assert norm_error([np.array([np.nan, 1.0])], [np.array([np.nan, 1.0])]) == 0.0  # NaN where the exact has it
    assert norm_error([np.array([np.inf, 1.0])], [np.array([-np.inf, 1.0])]) == float("inf")
    assert norm_error([exact], [exact, exact]) == float("inf")


def test_parameters_reaching_a_square_root_are_found():
    """adam's second moment nu reaches a sqrt through elementwise updates (any shape): drawn
    non-negative; a weight that only feeds a dot is not."""
    from hardware.xla.outputs import _parameters_under_roots
    text = """HloModule adam
ENTRY e {
  w = f32[8,8]{1,0} parameter(0)
  nu = f32[8,8]{1,0} parameter(1)
  g = f32[8,8]{1,0} parameter(2)
  b = f32[] constant(0.999)
  bb = f32[8,8]{1,0} broadcast(b), dimensions={}
  g2 = f32[8,8]{1,0} multiply(g, g)
  nu1 = f32[8,8]{1,0} multiply(bb, nu)
  nu2 = f32[8,8]{1,0} add(nu1, g2)
  s = f32[8,8]{1,0} sqrt(nu2)
  d = f32[8,8]{1,0} dot(w, g), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  u = f32[8,8]{1,0} divide(d, s)
  ROOT t = (f32[8,8]{1,0}, f32[8,8]{1,0}) tuple(u, nu2)
}
"""
    assert _parameters_under_roots(text) == frozenset({1, 2})  # nu, and g through g*g
    assert _parameters_under_roots("not hlo") == frozenset()


@pytest.mark.xla
@pytest.mark.parametrize("target", ["cpu", "tpu"])
def test_kernel_folded_to_a_reshape_compiles_in_every_configuration(target):
    """haiku's ResNet averages a 1x1 image: `divide(reshape(x), broadcast(1))` folds to its input.
    Written as `copy(reshape)`, XLA's simplifier dropped the copy and ReshapeMover sank the reshape
    through the fusion reading it, unseen by our own sinking ("Fused computation shape
    (bf16[4,64]) is not equal to the fusion shape (bf16[4,1,1,64])", tpu configurations checked on
    XLA:CPU). The folded kernel is now the reshape itself, which the sinking sees."""
    pytest.importorskip("jax")
    from autotune.compiler.fusion import FusionConfig
    from hardware.xla import compile_hlo
    space = FusionSpace(Program.from_file(str(FIXTURES / "folded_divide_of_reshape.hlo")), target)
    for bits in range(2 ** space.n_edges):
        cfg = FusionConfig(bytearray((bits >> i) & 1 for i in range(space.n_edges)))
        compile_hlo(cpu_checkable(space, cfg).text)
