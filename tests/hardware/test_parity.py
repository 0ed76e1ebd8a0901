"""Output parity of emitted programs on XLA:CPU (hardware/parity.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from hardware.parity import ParityResult, config_for, summarize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hlo")


def test_config_for_names():
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    sp = FusionSpace(Program.from_file(os.path.join(FIXTURES, "dus_kv_update.hlo")), "tpu")
    assert config_for(sp, "default") == sp.default()
    assert config_for(sp, "unfused").count() == 0
    assert config_for(sp, "random:3") == config_for(sp, "random:3")
    with pytest.raises(ValueError):
        config_for(sp, "best")


def test_summarize_counts_failures_by_kind():
    rs = [ParityResult("p", "cpu", "default", "xla", "ok", fusions_checked=2, fusions_total=2),
          ParityResult("p", "cpu", "random:0", "xla", "mismatch", error=0.5),
          ParityResult("p", "tpu", "default", "xla", "crash: Check failed", fusions_checked=1, fusions_total=3)]
    s = summarize(rs)
    assert s == {"cases": 3, "ok": 1, "failures": {"mismatch": 1, "crash": 1}, "fusions_checked": 3,
                 "fusions_total": 5}


def test_program_computing_in_bf16_gets_the_16bit_tolerance_on_f32_outputs():
    from hardware.xla import OUTPUT_TOL_16BIT, computes_in_16bit, output_error
    ref = [np.array([0.3125, 0.8633], np.float32)]
    got = [np.array([0.3145, 0.8594], np.float32)]  # one bf16 ulp apart
    assert output_error(got, ref)[1] is False
    err, ok = output_error(got, ref, low_precision=True)
    assert ok and err < OUTPUT_TOL_16BIT
    assert output_error([ref[0] * 1.02], ref, low_precision=True)[1] is False
    text = open(os.path.join(FIXTURES, "bf16_layernorm_grad.hlo")).read()
    assert computes_in_16bit(text) and not computes_in_16bit(text.replace("bf16[", "f32["))
    assert not computes_in_16bit("HloModule jit_bf16_mlp\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n")


def test_all_zero_output_tolerates_rounding_noise_only():
    """imag(conj(c) @ ... * c) of a complex matmul is exactly 0 in XLA's default compile and ~1e-11 in
    a fused one (found by a user program: every configuration of it failed verification)."""
    from hardware.xla import output_error
    ref = [np.zeros((4, 3), np.float32)]
    assert output_error([np.full((4, 3), 3.5e-11, np.float32)], ref)[1] is True
    assert output_error([np.full((4, 3), 1e-3, np.float32)], ref)[1] is False
    assert output_error([np.full((4, 3), 1e-3, np.float32)], [np.full((4, 3), 1e-3, np.float32) * 0])[1] is False
    assert output_error(ref, ref) == (0.0, True)


# ---- on XLA:CPU: programs that broke emission (issue 16), and a check that can fail

xla = pytest.mark.xla


@xla
@pytest.mark.parametrize("name,target", [("keepdims_logsumexp", "cpu"), ("keepdims_logsumexp", "tpu"),
                                         ("dus_shifted_window", "tpu"), ("dus_kv_update", "tpu"),
                                         ("dot_slice_dus", "tpu"), ("dropout_rbg", "cpu"),
                                         ("dropout_rbg", "tpu"), ("loop_rotate_transpose", "cpu"),
                                         ("batched_embed_tanh", "cpu"), ("batched_embed_tanh", "tpu"),
                                         ("bf16_layernorm_grad", "tpu")])
def test_emitted_fixture_matches_original(name, target):
    pytest.importorskip("jax")
    from hardware.parity import check_program
    res = check_program(os.path.join(FIXTURES, f"{name}.hlo"), target, ["default", "random:0", "random:1"])
    assert len(res) == 6
    bad = [(r.config, r.mode, r.status, r.error) for r in res if not r.ok]
    assert not bad, bad


@xla
def test_illegal_in_place_fusion_is_caught_as_a_mismatch(tmp_path):
    """The check can fail: the shifted-window program emitted with every edge fused (what TPU
    legality allowed before) updates its buffer in place while reading it, and XLA:CPU computes
    other numbers."""
    pytest.importorskip("jax")
    from autotune.compiler.fusion import FusionConfig, FusionSpace
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.program import Program
    from hardware.xla import compile_hlo, output_error
    path = os.path.join(FIXTURES, "dus_shifted_window.hlo")
    text = open(path).read()
    sp = FusionSpace(Program.from_text(text, path), "tpu")
    everything = FusionConfig(bytearray([1] * sp.n_edges))
    emitted = emit_fused_text(sp, everything, metadata=False, kind="kLoop")
    cache = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    inputs = [cache, np.int32(0), np.int32(2)]  # read rows 0-3, write rows 2-5: overlapping
    ref = compile_hlo(text)(*inputs)
    got = compile_hlo(emitted)(*inputs)
    assert output_error(got, ref)[1] is False


@xla
def test_emitted_transpose_into_reshape_computes_under_measure_options():
    """XLA:CPU with EMITTED_CPU_COMPILE_OPTIONS computes `reshape(transpose(x))` of the original
    program without the permutation (so the measure-mode reference is wrong too); the emitted
    program gives what XLA's default compile of the original gives."""
    pytest.importorskip("jax")
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    from autotune.compiler.program import Program
    from hardware.xla import compile_hlo, verification_inputs
    path = os.path.join(FIXTURES, "loop_rotate_transpose.hlo")
    text = open(path).read()
    inputs = verification_inputs(text)
    want = np.asarray(compile_hlo(text)(*inputs)[0])
    assert not np.array_equal(np.asarray(compile_hlo(text, **EMITTED_CPU_COMPILE_OPTIONS)(*inputs)[0]), want)
    sp = FusionSpace(Program.from_file(path), "cpu")
    emitted = emit_fused_text(sp, sp.unfused())
    assert np.array_equal(np.asarray(compile_hlo(emitted, **EMITTED_CPU_COMPILE_OPTIONS)(*inputs)[0]), want)


@xla
def test_bf16_rounding_placement_is_judged_without_excess_precision():
    """A bf16 GELU + RMSNorm step three times in lax.fori_loop (batch 4): XLA:CPU keeps the
    original's fused bf16 chains in f32, the emitted fusions round where the HLO says: 2 bf16 ulps
    (relative 1.3e-2) apart under XLA's defaults, the same bits without excess precision. The
    parity check judges such a program by the latter; a wrong program still fails there."""
    pytest.importorskip("jax")
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import emit_fused_text
    from autotune.compiler.program import Program
    from hardware.parity import check_program
    from hardware.xla import compile_hlo, output_error, strict_precision_error, verification_inputs
    path = os.path.join(FIXTURES, "bf16_gelu_rmsnorm_loop.hlo")
    text = open(path).read()
    inputs = verification_inputs(text)
    sp = FusionSpace(Program.from_file(path), "cpu")
    emitted = emit_fused_text(sp, sp.unfused(), metadata=False)
    err, ok = output_error(compile_hlo(emitted)(*inputs), compile_hlo(text)(*inputs), low_precision=True)
    assert not ok and err < 0.05
    assert strict_precision_error(emitted, text, inputs) == (0.0, True)
    wrong = emitted.replace("rsqrt(", "sqrt(")
    assert wrong != emitted and strict_precision_error(wrong, text, inputs)[1] is False
    res = check_program(path, "tpu", ["default"], modes=("xla",))
    assert [r.status for r in res] == ["ok"], [(r.config, r.mode, r.status, r.error) for r in res]
