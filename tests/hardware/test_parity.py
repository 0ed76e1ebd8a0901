"""Output parity of emitted programs on XLA:CPU (hardware/parity.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from hardware.parity import ParityResult, config_for, output_error, summarize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hlo")


def test_output_error_relative_with_a_floor_for_cancellations():
    ref = [np.array([1.0, 2.0, 1e-9], np.float64)]
    assert output_error(ref, ref) == (0.0, True)
    err, ok = output_error([np.array([1.0002, 2.0, 1e-9])], ref)
    assert ok is False and err == pytest.approx(2e-4)
    # an element ~0 next to large ones is measured against 1% of the array's magnitude
    ref = [np.array([1.0, 1000.0, 1e-9], np.float64)]
    err, ok = output_error([np.array([1.0, 1000.0, 1e-5])], ref)
    assert ok and err == pytest.approx(1e-6, rel=1e-3)


def test_output_error_exact_for_integers_and_non_finite_values():
    assert output_error([np.array([1, 2])], [np.array([1, 3])])[1] is False
    assert output_error([np.array([np.inf, 1.0])], [np.array([np.inf, 1.0])]) == (0.0, True)
    assert output_error([np.array([np.nan, 1.0])], [np.array([np.nan, 1.0])]) == (0.0, True)
    assert output_error([np.array([np.inf, 1.0])], [np.array([-np.inf, 1.0])])[1] is False
    assert output_error([np.array([1.0, 1.0])], [np.array([np.nan, 1.0])])[1] is False


def test_output_error_structure_must_match():
    a = np.zeros((2, 3), np.float32)
    assert output_error([a], [a, a])[1] is False
    assert output_error([a.reshape(3, 2)], [a])[1] is False
    assert output_error([a.astype(np.float64)], [a])[1] is False
    bf = np.ones(4, np.float16)
    assert output_error([bf * np.float16(1.001)], [bf])[1]  # 16-bit floats: 1e-2


def test_config_for_names():
    from autotune.fusion import FusionSpace
    from autotune.program import Program
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


# ---- on XLA:CPU: programs that broke emission (issue 16), and a check that can fail

xla = pytest.mark.xla


@xla
@pytest.mark.parametrize("name,target", [("keepdims_logsumexp", "cpu"), ("keepdims_logsumexp", "tpu"),
                                         ("dus_shifted_window", "tpu"), ("dus_kv_update", "tpu"),
                                         ("dot_slice_dus", "tpu"), ("dropout_rbg", "cpu"),
                                         ("dropout_rbg", "tpu")])
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
    from autotune.fusion import FusionConfig, FusionSpace
    from autotune.kernel import emit_fused_text
    from autotune.program import Program
    from hardware.parity import parity_inputs
    from hardware.xla import compile_hlo
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
    assert parity_inputs(text)[0].shape == (128, 64)
