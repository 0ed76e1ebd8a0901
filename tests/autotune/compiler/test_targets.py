"""Tests for the hardware specs of autotune/compiler/targets/ (get_spec): published specs are
self-consistent, the host CPU is measured once (targets/host.py)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from autotune.compiler.targets import H100, TPU_V2, TPU_V3, TargetSpec, UnknownTargetError, get_spec, list_specs
from autotune.compiler.targets import host as targets


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Never touch the user's cache; start each test without the in-process host spec."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(targets, "_HOST_SPEC", None)


def test_names_and_aliases(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_NO_MICROBENCH", "1")
    assert get_spec("tpu") is TPU_V3 and get_spec("TPU-v3") is TPU_V3
    assert get_spec("tpu-v2") is TPU_V2 and get_spec("h100") is H100
    assert get_spec("cpu").kind == "cpu" and get_spec("host").name == "cpu"
    assert get_spec(TPU_V2) is TPU_V2
    assert get_spec("gpu") is H100  # the GPU spec (no GPU compilation target: see test_target_registry.py)
    for name in list_specs():
        assert get_spec(name).name == name
    with pytest.raises(UnknownTargetError, match="tpu-v3"):
        get_spec("tpu-v9")
    assert issubclass(UnknownTargetError, ValueError)


def test_tpu_specs_match_published_chip_numbers():
    # Per-chip peaks (2 TensorCores): v2 45-46 TFLOPS, v3 123 TFLOPS bf16; HBM v2 16 GiB, v3 32 GiB/900 GB/s.
    assert 2 * TPU_V2.peak_flops_bf16 == pytest.approx(45.9e12, rel=0.01)
    assert 2 * TPU_V3.peak_flops_bf16 == pytest.approx(123e12, rel=0.01)
    assert 2 * TPU_V3.hbm_bytes_per_s == pytest.approx(900e9)
    assert 2 * TPU_V3.hbm_bytes == 32 * 2**30 and 2 * TPU_V2.hbm_bytes == 16 * 2**30
    assert (TPU_V2.mxu_count, TPU_V3.mxu_count) == (1, 2)
    for t in (TPU_V2, TPU_V3):
        assert t.kind == "tpu" and t.mxu_width == 128 and t.vector_shape == (8, 128) and t.num_cores == 2
        assert t.peak_flops == t.mxu_count * 128 * 128 * 2 * t.clock_hz
        assert t.scratchpad_bytes == 16 * 2**20
        assert t.vector_flops < t.peak_flops and t.transcendental_per_s < t.vector_flops
        assert t.kernel_launch_s > 0 and t.dma_setup_s > 0 and t.sources
    assert TPU_V3.clock_hz > TPU_V2.clock_hz and TPU_V3.hbm_bytes_per_s > TPU_V2.hbm_bytes_per_s


def test_h100_spec():
    assert H100.kind == "gpu" and H100.num_cores == 132
    assert H100.vector_flops == pytest.approx(132 * 128 * 2 * H100.clock_hz, rel=0.01)  # 67 TFLOPS FP32
    assert H100.peak_flops_bf16 == pytest.approx(989e12, rel=0.01)
    assert H100.hbm_bytes_per_s == pytest.approx(3.35e12)
    assert H100.scratchpad_bytes == 228 * 1024


def test_spec_is_frozen_and_validated():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TPU_V3.clock_hz = 1.0  # type: ignore[misc]
    faster = TPU_V3.replace(hbm_bytes_per_s=2 * TPU_V3.hbm_bytes_per_s)
    assert faster.ridge_flops_per_byte == pytest.approx(TPU_V3.ridge_flops_per_byte / 2)
    with pytest.raises(ValueError):
        TPU_V3.replace(kind="fpga")
    with pytest.raises(ValueError):
        TPU_V3.replace(peak_flops=0.0)
    d = TPU_V3.to_dict()
    assert json.loads(json.dumps(d))["vector_shape"] == [8, 128]
    assert TargetSpec(**{**d, "vector_shape": tuple(d["vector_shape"]), "sources": tuple(d["sources"])}) == TPU_V3


def test_cpu_without_microbench_uses_defaults(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_NO_MICROBENCH", "1")
    monkeypatch.setattr(targets, "measure_host", lambda: pytest.fail("must not benchmark"))
    cpu = get_spec("cpu")
    assert not cpu.measured and cpu.kind == "cpu" and cpu.peak_flops > 0 and cpu.hbm_bytes_per_s > 0
    assert cpu.vector_shape[1] in (4, 8, 16) and cpu.scratchpad_bytes > 0 and cpu.num_cores >= 1
    assert not targets.host_cache_path().exists()


def test_cpu_is_measured_once_and_cached(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_NO_MICROBENCH", raising=False)
    calls = []
    fake = {"peak_flops": 5e10, "hbm_bytes_per_s": 2e10, "vector_flops": 1e10, "transcendental_per_s": 1e9}
    monkeypatch.setattr(targets, "measure_host", lambda: calls.append(1) or dict(fake))
    cpu = get_spec("cpu")
    assert cpu.measured and cpu.peak_flops == 5e10 and cpu.hbm_bytes_per_s == 2e10 and calls == [1]
    assert get_spec("cpu") is cpu and calls == [1]  # memoized in-process
    path = targets.host_cache_path()
    cached = json.loads(path.read_text())
    assert cached["peak_flops"] == 5e10 and cached["cpu_model"] == targets._cpu_model()
    # A fresh process (simulated) reads the cache instead of re-measuring.
    monkeypatch.setattr(targets, "_HOST_SPEC", None)
    assert get_spec("cpu").peak_flops == 5e10 and calls == [1]
    # A corrupt cache is re-measured and rewritten.
    path.write_text("{not json")
    monkeypatch.setattr(targets, "_HOST_SPEC", None)
    assert get_spec("cpu").peak_flops == 5e10 and calls == [1, 1]
    assert json.loads(path.read_text())["format"] == 1
    # refresh=True re-measures.
    targets.host_cpu_spec(refresh=True)
    assert calls == [1, 1, 1]


def test_real_microbenchmarks_are_plausible():
    rates = targets.measure_host()
    assert 1e8 < rates["peak_flops"] < 1e14
    assert 1e8 < rates["hbm_bytes_per_s"] < 1e13
    assert 1e7 < rates["vector_flops"] and 1e6 < rates["transcendental_per_s"]
