"""Tests for the hardware/xla/ package: real compilation and execution through jaxlib (skipped without it)."""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jaxlib")
pytest.importorskip("jax")

from hardware import xla as X  # noqa: E402
from hardware.base import Budget, Measurement  # noqa: E402
from hardware.xla import _jaxlib  # noqa: E402
from hardware.xla.evaluator import _CRASH_EXIT_CODE  # noqa: E402

pytestmark = pytest.mark.xla

REPO = Path(__file__).resolve().parents[2]

ADD = """HloModule add
ENTRY e {
  x = f32[16,32] parameter(0)
  y = f32[16,32] parameter(1)
  ROOT a = f32[16,32] add(x, y)
}"""

EXP_ADD = """HloModule exp_add
ENTRY e {
  x = f32[64,128] parameter(0)
  y = f32[64,128] parameter(1)
  a = f32[64,128] add(x, y), metadata={op_name="jit(f)/add" source_file="f.py" source_line=3}
  ROOT r = f32[64,128] exponential(a)
}"""

TUPLE = """HloModule tup
ENTRY e {
  x = f32[8] parameter(0)
  i = s32[8] parameter(1)
  m = f32[8] multiply(x, x)
  n = s32[8] negate(i)
  ROOT t = (f32[8], s32[8]) tuple(m, n)
}"""

DOT = """HloModule dot
ENTRY e {
  a = f32[64,32] parameter(0)
  b = f32[32,16] parameter(1)
  ROOT d = f32[64,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""

SHAPE_MISMATCH = """HloModule bad
ENTRY e {
  x = f32[4] parameter(0)
  ROOT a = f32[5] add(x, x)
}"""

UNKNOWN_CUSTOM_CALL = """HloModule cc
ENTRY e {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="autotune_no_such_target"
}"""


@dataclass
class K:
    """Minimal KernelLike."""

    hash: str
    text: str

    def to_hlo_module(self) -> str:
        return self.text


FAST = X.TimingOptions(number=1, repeat=3, min_repeat_ms=1.0, warmup=1)


@pytest.fixture(scope="module")
def evaluator():
    # a generous timeout: compiling and running a program (and its reference) outlasts a few seconds on a
    # loaded machine; the hang test has its own evaluator with a short one
    ev = X.XlaEvaluator(timing=FAST, timeout_s=60.0)
    yield ev
    ev.close()


def test_module_import_does_not_import_jax():
    code = "import sys, hardware.xla; assert 'jax' not in sys.modules and 'jaxlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)})


def test_parse_and_parameter_shapes():
    X.parse_hlo_text(ADD)
    with pytest.raises(Exception):
        X.parse_hlo_text("HloModule m\nENTRY e {\n ROOT x = f32[4] bogus_op()\n}")
    assert X.parameter_shapes(TUPLE) == [(np.dtype("float32"), (8,)), (np.dtype("int32"), (8,))]


def test_random_inputs_deterministic_and_in_range():
    shapes = [(np.dtype("float32"), (100,)), (np.dtype("int32"), (100,)), (np.dtype("bool"), (10,))]
    a, b = X.random_inputs(shapes, seed=3), X.random_inputs(shapes, seed=3)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert a[0].dtype == np.float32 and np.abs(a[0]).max() < 1.0
    assert a[1].dtype == np.int32 and set(np.unique(a[1])) <= {0, 1}
    assert a[2].dtype == np.bool_


def test_compile_and_run_add_matches_numpy():
    x, y = X.random_inputs(ADD, seed=1)
    (out,) = X.run_hlo(ADD, [x, y])
    np.testing.assert_allclose(out, x + y, rtol=1e-6)


def test_tuple_output_is_flattened():
    x = np.arange(8, dtype=np.float32)
    i = np.arange(8, dtype=np.int32)
    m, n = X.run_hlo(TUPLE, [x, i])
    np.testing.assert_allclose(m, x * x)
    np.testing.assert_array_equal(n, -i)


def test_compile_errors_raise():
    with pytest.raises(Exception):
        X.compile_hlo(SHAPE_MISMATCH)
    with pytest.raises(Exception):
        X.compile_hlo(UNKNOWN_CUSTOM_CALL)


def test_cost_analysis_dot_flops():
    ca = X.cost_analysis(DOT)
    assert ca["flops"] == 2 * 64 * 16 * 32
    assert ca["bytes_accessed"] == 4 * (64 * 32 + 32 * 16 + 64 * 16)
    ca = X.cost_analysis(EXP_ADD)
    assert ca["transcendentals"] == 64 * 128


def test_optimized_text_contains_fusion_and_report():
    text = X.optimized_hlo_text(EXP_ADD)
    assert "fusion(" in text and "kind=kLoop" in text
    report = X.xla_fusion_report(EXP_ADD)
    real = [f for f in report if not f["wrapped"]]
    assert len(real) == 1
    f = real[0]
    assert f["kind"] == "kLoop"
    assert [i["opcode"] for i in f["instructions"]] == ["add", "exponential"]
    # With input metadata stripped, op_name is the original instruction name.
    assert f["origins"] == ["a", "r"] and f["op_name"] == "r"
    # Without stripping, the pre-existing op_name wins.
    kept = X.xla_fusion_report(EXP_ADD, strip_input_metadata=False)
    assert [i["op_name"] for i in kept[0]["instructions"]] == ["jit(f)/add", "r"]


def test_disable_fusion_leaves_only_wrapped_ops():
    compiled = X.compile_hlo(X.strip_metadata(EXP_ADD), disable_fusion=True)
    report = X.xla_fusion_report(EXP_ADD, optimized_module=compiled.optimized_module())
    assert report and all(f["wrapped"] for f in report)
    assert sorted(f["instructions"][0]["origin"] for f in report) == ["a", "r"]
    x, y = X.random_inputs(EXP_ADD, seed=0)
    np.testing.assert_allclose(compiled(x, y)[0], np.exp(x + y), rtol=1e-5)


def test_strip_metadata():
    s = 'a = f32[] add(x, y), metadata={op_name="q{}\\"x" source_line=3}, sharding={replicated}'
    assert X.strip_metadata(s) == "a = f32[] add(x, y), sharding={replicated}"


def test_time_compiled_grows_number():
    compiled = X.compile_hlo(ADD)
    res = X.time_compiled(compiled, X.random_inputs(ADD), X.TimingOptions(repeat=3, min_repeat_ms=2.0))
    assert res.seconds > 0 and len(res.repeats) == 3 and res.seconds == min(res.repeats)
    assert res.number > 1  # a 16x32 add takes microseconds
    assert res.repeats[0] * res.number >= 1e-3  # about min_repeat_ms (allowing for noise)


def _on_cpu(evaluator) -> bool:
    # The evaluator's worker knows the platform; asking here would open the GPU in the test process
    # too (GPUs in exclusive-process mode then refuse the worker).
    return evaluator.platform == "cpu"


def test_evaluator_measures_and_reports_failures(evaluator):
    assert evaluator.target == ("cpu" if _on_cpu(evaluator) else "gpu") and evaluator.name == "xla"
    assert X.jaxlib_version() in evaluator.version and evaluator.platform in evaluator.version
    ms = evaluator.measure([K("add", ADD), K("bad", SHAPE_MISMATCH), K("cc", UNKNOWN_CUSTOM_CALL)])
    assert ms[0].ok and ms[0].seconds > 0
    assert len(ms[0].extra["repeats"]) == FAST.repeat
    assert ms[1].status.startswith("compile_error: ") and "\n" not in ms[1].status
    assert ms[2].status.startswith("compile_error: ")
    assert "autotune_no_such_target" in ms[2].status


class TimedStore:
    """A store that notes when each result was committed."""

    def __init__(self):
        self.d, self.put_at = {}, {}

    def get(self, target, ns, h, tile, machine=""):
        return self.d.get((target, ns, h, tile, machine))

    def put(self, target, ns, h, tile, m, machine=""):
        self.d[(target, ns, h, tile, machine)] = Measurement(m.seconds, m.status, True, m.extra)
        self.put_at[h] = time.monotonic()


def test_crash_segfault_and_hang_fail_their_kernel_only(monkeypatch):
    monkeypatch.setenv(X.FAULT_ENV, "crash:k_crash,segv:k_segv,hang:k_hang")
    with X.XlaEvaluator(timing=FAST, timeout_s=4.0) as evaluator:  # the hang ends at this timeout
        _crash_segfault_and_hang(evaluator, monkeypatch)


def _crash_segfault_and_hang(evaluator, monkeypatch):
    before = evaluator.worker_restarts
    evaluator.store = store = TimedStore()
    try:
        ms = evaluator.measure([K("k_crash", ADD), K("ok1", ADD), K("k_segv", EXP_ADD), K("k_hang", DOT),
                                K("ok2", DOT)])
        returned = time.monotonic()
    finally:
        evaluator.store = None
    assert ms[0].status == f"crash: worker exited with code {_CRASH_EXIT_CODE}"
    assert ms[1].ok
    assert ms[2].status == "crash: worker killed by signal SIGSEGV"
    assert ms[3].status == "timeout"
    assert ms[4].ok
    assert evaluator.worker_restarts == before + 3
    # Each result reached the store the moment it existed: ok1's long before the hang ended.
    assert set(store.put_at) == {"k_crash", "ok1", "k_segv", "k_hang", "ok2"}
    assert returned - store.put_at["ok1"] > evaluator.timeout_s * 0.75
    monkeypatch.delenv(X.FAULT_ENV)
    assert evaluator.measure([K("after", EXP_ADD)])[0].ok


def test_workers_start_on_first_use_and_stop_at_close(evaluator, monkeypatch):
    if not _on_cpu(evaluator):
        pytest.skip("two workers beside the module's one: a GPU in exclusive-process mode refuses them")
    before = set(multiprocessing.active_children())
    ev = X.XlaEvaluator(target="cpu", timing=FAST, timeout_s=60.0, n_workers=2)
    assert set(multiprocessing.active_children()) == before  # the constructor starts nothing
    monkeypatch.setenv(X.FAULT_ENV, "segv:k_segv")
    with ev:
        ms = ev.measure([K("k_segv", ADD), K("a", ADD), K("b", DOT), K("c", EXP_ADD)])
        # the crashed worker's replacement may still be starting when the last result arrives
        deadline = time.monotonic() + 20
        while len(set(multiprocessing.active_children()) - before) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = set(multiprocessing.active_children()) - before
        assert len(workers) == 2 and ev.platform == "cpu" and ev.worker_restarts == 1
    assert ms[0].status == "crash: worker killed by signal SIGSEGV" and all(m.ok for m in ms[1:])
    deadline = time.monotonic() + 10
    while any(p.is_alive() for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(p.is_alive() for p in workers)


def test_a_backend_that_cannot_start_is_one_error_at_first_use(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "no_such_platform")  # inherited by the spawned worker
    ev = X.XlaEvaluator(target="cpu", startup_timeout_s=60.0)  # starts nothing, so no error yet
    try:
        with pytest.raises(X.XlaStartError, match="XLA worker failed to start: .*no_such_platform") as err:
            ev.measure([K("a", ADD)])
        assert "\n" not in str(err.value) and isinstance(err.value, X.XlaApiError)
    finally:
        ev.close()


def test_zero_budget_does_no_work(evaluator, monkeypatch):
    # The module's evaluator with a zero budget (one worker process: a GPU in exclusive-process
    # mode admits no second one).
    ev = evaluator
    saved = (ev.budget, ev.measured, ev.budget_exhausted, ev.worker_restarts)
    ev.budget, ev.measured, ev.budget_exhausted = Budget(0), 0, False
    try:
        monkeypatch.setenv(X.FAULT_ENV, "crash:*")  # any request reaching the worker would crash
        ms = ev.measure([K("a", ADD), K("b", DOT)])
        assert [m.status for m in ms] == ["budget_exhausted"] * 2
        assert ev.measured == 0 and ev.budget_exhausted and ev.worker_restarts == saved[3]
        assert ev.measure_program(ADD).status == "budget_exhausted"
    finally:
        ev.budget, ev.measured, ev.budget_exhausted = saved[0], saved[1], saved[2]


def test_measure_program_and_tiles(evaluator):
    m = evaluator.measure_program(EXP_ADD)
    assert m.ok and m.seconds > 0
    (t,) = evaluator.measure([K("dot_tile", DOT)], tiles=[(8, 8)])
    assert t.ok and t.extra.get("tile_ignored")


def test_store_roundtrip(evaluator):
    class Store:
        def __init__(self):
            self.d = {}

        def get(self, target, ns, h, tile, machine=""):
            return self.d.get((target, ns, h, tile, machine))

        def put(self, target, ns, h, tile, m, machine=""):
            self.d[(target, ns, h, tile, machine)] = Measurement(m.seconds, m.status, True, m.extra)

    evaluator.store = Store()
    try:
        first = evaluator.measure([K("s", ADD)])[0]
        second = evaluator.measure([K("s", ADD)])[0]
        assert first.ok and not first.cached and second.cached and second.seconds == first.seconds
        assert all(k[1] == evaluator.store_namespace for k in evaluator.store.d)
        # keyed by the measuring workers' machine: this host's CPU model and core count
        assert all(k[4] == evaluator.machine for k in evaluator.store.d)
        assert evaluator.machine.endswith(f"({os.cpu_count()} cores)")
    finally:
        evaluator.store = None


CONV = """HloModule conv
ENTRY e {
  x = f32[1,8,16,16] parameter(0)
  k = f32[4,8,3,3] parameter(1)
  ROOT c = f32[1,4,16,16] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}"""


def test_fusion_report_include_unfused_lists_convolution():
    if X.backend_platform() != "cpu":  # (no evaluator worker is running in this test)
        pytest.skip("XLA:CPU's convolution layout rewrite")
    report = X.xla_fusion_report(CONV, include_unfused=True)
    convs = [r for r in report if r["kind"] is None]
    assert [r["instructions"][0]["opcode"] for r in convs] == ["convolution"]
    # Layout assignment rewrites the convolution (NCHW -> NHWC): the new `convolution` has no
    # op_name; the transpose fusion that restores the layout carries the original name.
    assert any(r["op_name"] == "c" for r in report if r["kind"] == "kLoop")


def test_missing_private_api_names_jaxlib_version(monkeypatch):
    from jax._src.lib import _jax

    monkeypatch.setattr(_jaxlib, "_API", None)
    monkeypatch.delattr(_jax, "hlo_module_cost_analysis")
    with pytest.raises(X.XlaApiError, match=rf"jaxlib {X.jaxlib_version()}.*hlo_module_cost_analysis"):
        X.cost_analysis(DOT)


FUSED_PROGRAM = """HloModule fused
fa {
  p0 = f32[64,128] parameter(0)
  p1 = f32[64,128] parameter(1)
  ROOT a = f32[64,128] add(p0, p1)
}
fe {
  q0 = f32[64,128] parameter(0)
  ROOT ex = f32[64,128] exponential(q0)
}
ENTRY e {
  x = f32[64,128] parameter(0)
  y = f32[64,128] parameter(1)
  f1 = f32[64,128] fusion(x, y), kind=kLoop, calls=fa
  ROOT f2 = f32[64,128] fusion(f1), kind=kLoop, calls=fe
}"""


def test_hand_made_fusions_are_kept_and_measured(evaluator):
    if not _on_cpu(evaluator):  # PJRT plugins take StableHLO only, where mhlo.fusion is illegal
        assert not evaluator.hand_fusions
        assert evaluator.measure_program(FUSED_PROGRAM).status.startswith("unsupported: hand-made fusion")
        return
    assert evaluator.hand_fusions
    report = X.xla_fusion_report(FUSED_PROGRAM)
    assert [r["op_name"] for r in report] == ["f1", "f2"]
    assert [r["origins"] for r in report] == [["a"], ["ex"]]
    assert evaluator.measure_program(FUSED_PROGRAM).ok


SMALL = REPO / "tests" / "fixtures" / "hlo" / "small"  # jax-lowered programs (generate.py)


def test_donated_program_is_timed_as_given():
    """jax.jit(..., donate_argnums=0): each execution consumes parameter 0's buffer; timing and
    end-to-end measurement re-run it on fresh copies and leave the module unchanged."""
    text = (SMALL / "donated_update.hlo").read_text()
    assert "input_output_alias" in text and X.donated_parameters(text) == frozenset({0})
    assert X.donated_parameters("HloModule m, buffer_donor={ (0, {}), (2, {1}) }\n") == frozenset({0, 2})
    assert X.donated_parameters(EXP_ADD) == frozenset()
    compiled = X.compile_hlo(text)
    inputs = X.random_inputs(text)
    args = compiled.put(inputs)
    compiled.execute(args)
    with pytest.raises(Exception, match="donated|deleted"):  # what donation does to a re-run
        compiled.execute(args)
    res = X.time_compiled(compiled, inputs, FAST)
    assert res.seconds > 0 and len(res.repeats) == FAST.repeat
    want = inputs[0] - 0.01 * inputs[1] * np.tanh(inputs[0])
    np.testing.assert_allclose(compiled(*inputs)[0], want, rtol=1e-5, atol=1e-7)


def test_64bit_parameters_keep_their_dtype():
    """threefry kernels take u64 operands; jax's default 32-bit mode would truncate them."""
    text = """HloModule wide
ENTRY e {
  x = u64[4] parameter(0)
  c = u64[] constant(4294967296)
  b = u64[4] broadcast(c), dimensions={}
  ROOT a = u64[4] add(x, b)
}"""
    x = np.array([0, 1, 2, 3], dtype=np.uint64)
    (out,) = X.compile_hlo(text)(x)
    assert out.dtype == np.uint64 and out.tolist() == [2 ** 32, 2 ** 32 + 1, 2 ** 32 + 2, 2 ** 32 + 3]


def test_output_error_metric():
    a = np.array([1.0, 2.0, 0.0], np.float32)
    assert X.output_error([a], [a]) == (0.0, True)
    err, ok = X.output_error([a * (1 + 1e-3)], [a])
    assert not ok and err == pytest.approx(1e-3, rel=1e-3)
    assert X.output_error([a], [a, a]) == (float("inf"), False)
    assert X.output_error([np.array([1, 2])], [np.array([1, 3])])[1] is False
    nan = np.array([np.nan, 1.0])
    assert X.output_error([nan], [nan])[1] and not X.output_error([np.array([0.0, 1.0])], [nan])[1]
    # an element ~0 amid large ones is measured against 1% of the array's magnitude
    assert X.output_error([np.array([1e-6, 100.0])], [np.array([0.0, 100.0])])[1]
    v = X.verification_inputs([(np.dtype(np.float32), (8,)), (np.dtype(np.float32), (8, 8))], seed=1)
    assert (v[0] >= 0).all() and (v[1] < 0).any()


def test_measure_program_checks_outputs_against_a_reference(evaluator):
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    from autotune.compiler.program import Program
    for name in ("donated_update", "random_normal", "two_outputs"):
        original = (SMALL / f"{name}.hlo").read_text()
        space = FusionSpace(Program.from_text(original), "cpu")
        fused = emit_fused_text(space, space.default())
        m = evaluator.measure_program(fused, reference=original, **EMITTED_CPU_COMPILE_OPTIONS)
        assert m.ok and m.extra["outputs_match"] and m.extra["output_error"] <= X.OUTPUT_TOL, (name, m)
        again = evaluator.measure_program(fused, **EMITTED_CPU_COMPILE_OPTIONS)  # compiled once, reused
        assert again.ok and "outputs_match" not in again.extra
    # a program that computes something else fails verification, whatever its speed
    wrong = (SMALL / "exp_add.hlo").read_text().replace("exponential(", "tanh(")
    m = evaluator.measure_program(wrong, reference=(SMALL / "exp_add.hlo").read_text())
    assert not m.ok and m.status.startswith("output_mismatch") and m.extra["outputs_match"] is False


class _DriftingRun:
    """A stand-in for PreparedRun: each block takes `base` times a machine speed that drifts by 10%
    per block (a shared VM's drift, compressed), so absolute times rank nothing."""

    clock = [0]

    def __init__(self, base):
        self.base = base

    def block(self, n=None, warmup=0):
        _DriftingRun.clock[0] += 1
        return self.base * (1.0 + 0.1 * _DriftingRun.clock[0])


def test_paired_ratios_cancel_linear_drift():
    ref, cand = _DriftingRun(1e-4), _DriftingRun(3e-4)
    res = X.paired_ratios(ref, cand, pairs=5)
    assert len(res.ratios) == len(res.seconds) == 5 and len(res.reference_seconds) == 6
    # the candidate's absolute times drift by 40% over the pairs; its ratio to the reference beside it does not
    assert max(res.seconds) / min(res.seconds) > 1.3
    np.testing.assert_allclose(res.ratios, 3.0, rtol=1e-12)
    assert res.ratio == pytest.approx(3.0)
    with pytest.raises(ValueError, match="pairs must be >= 1"):
        X.paired_ratios(ref, cand, pairs=0)


DOTS = """HloModule dots
ENTRY e {
  x = f32[192,192] parameter(0)
  y = f32[192,192] parameter(1)
  a = f32[192,192] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[192,192] dot(a, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = f32[192,192] dot(b, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT d = f32[192,192] dot(c, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""

ADD192 = ADD.replace("16,32", "192,192")


def test_time_paired_ranks_real_programs():
    inputs = X.random_inputs(ADD192)
    add, dots = X.compile_hlo(ADD192), X.compile_hlo(DOTS)
    same = X.time_paired(add, add, inputs, pairs=6, min_block_ms=0.5)
    slower = X.time_paired(add, dots, inputs, pairs=6, min_block_ms=0.5)
    # orderings only (timing itself is benchmarked): four 192^3 dots take longer than one 192x192 add,
    # beside which the add itself is not slower than they are (a loaded machine once gave 0.24 for the add
    # against itself; the dots are ~100x the add)
    assert same.ratio > 0 and slower.ratio > 1.0 and slower.ratio > same.ratio
    assert len(slower.ratios) == 6 and all(r > 0 for r in slower.ratios)
    run = X.PreparedRun(add, inputs)
    assert run.calibrate(0.5) > 1 and run.block() > 0
    with pytest.raises(ValueError, match="min_block_ms"):
        run.calibrate(0)


def test_evaluator_measure_paired_real_programs():
    with X.XlaEvaluator(target="cpu") as ev:
        slower = ev.measure_paired(ADD192, DOTS, 0.3, min_block_ms=0.5)
        assert slower.ok, slower.status
        assert slower.seconds > 1.0 and len(slower.extra["ratios"]) >= 4  # four dots against one add
        assert slower.extra["candidate_s"] > slower.extra["reference_s"] > 0
        same = ev.measure_paired(ADD192, ADD192, 0.2, min_block_ms=0.5)
        assert same.ok and 0 < same.seconds < slower.seconds  # an ordering, not a timing
        bad = ev.measure_paired(ADD192, "HloModule broken\nENTRY e { ROOT x = f32[] bogus() }", 0.1)
        assert bad.status.startswith("compile_error")
        ev.budget = Budget(0.0)
        assert ev.measure_paired(ADD192, DOTS, 0.1).status == "budget_exhausted"


def test_measure_paired_compiles_the_reference_with_its_own_options():
    """`reference_options`: XLA's own compile of an original timed beside an emitted program compiled
    with other options (end-to-end verification): the options reach the reference, and only it."""
    with X.XlaEvaluator(target="cpu") as ev:
        bad = {"xla_flags": {"xla_no_such_flag_anywhere": True}}
        m = ev.measure_paired(ADD192, DOTS, 0.1, min_block_ms=0.5, reference_options=bad)
        assert m.status.startswith("compile_error") and "xla_no_such_flag_anywhere" in m.status
        m = ev.measure_paired(ADD192, DOTS, 0.2, min_block_ms=0.5, xla_flags=bad["xla_flags"],
                              reference_options={"disable_fusion": False, "xla_flags": {}})
        assert m.status.startswith("compile_error")  # the candidate keeps its own options
        ok = ev.measure_paired(ADD192, DOTS, 0.2, min_block_ms=0.5,
                               reference_options={"disable_fusion": False, "xla_flags": {}})
        assert ok.ok, ok.status


class _SpikyRun:
    """A stand-in for PreparedRun on a loaded machine: a block takes `base` plus interruptions of
    exponentially distributed length (right-skewed noise, the same for both programs)."""

    def __init__(self, base, rng):
        self.base, self.rng = base, rng

    def block(self, n=None, warmup=0):
        return self.base * (1.0 + self.rng.exponential(0.3))


def test_neighbour_ratios_are_unbiased_for_identical_programs():
    rng = np.random.default_rng(0)
    mean_of_two, single = [], []
    for _ in range(400):
        p = X.paired_ratios(_SpikyRun(1e-4, rng), _SpikyRun(1e-4, rng), pairs=4)
        mean_of_two += p.ratios
        single += X.neighbour_ratios(p)
        assert len(X.neighbour_ratios(p)) == 8
    # a block over the mean of its two neighbours is biased low under spiky noise; a block over one is not
    assert np.median(mean_of_two) < 0.98  # 0.970 in expectation
    assert abs(np.median(single) - 1.0) < 0.01


def test_measure_program_judges_bf16_roundings_without_excess_precision(evaluator):
    """A correct emission of a bf16 program is not rejected for rounding where the HLO says: the
    bf16 GELU + RMSNorm loop (batch 4) emitted unfused is 2 bf16 ulps from XLA's default compile of
    the original (excess precision keeps its fused chains in f32) and bit-identical without
    excess precision; a wrong program still fails."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    from autotune.compiler.program import Program
    original = (SMALL.parent / "bf16_gelu_rmsnorm_loop.hlo").read_text()
    space = FusionSpace(Program.from_text(original), "cpu")
    fused = emit_fused_text(space, space.unfused())
    m = evaluator.measure_program(fused, reference=original, **EMITTED_CPU_COMPILE_OPTIONS)
    assert m.ok and m.extra["outputs_match"] and m.extra["output_error_without_excess_precision"] == 0.0, m
    assert m.extra["output_error"] > 0  # the error under XLA's defaults stays on record
    wrong = fused.replace("rsqrt(", "sqrt(")
    m = evaluator.measure_program(wrong, reference=original, **EMITTED_CPU_COMPILE_OPTIONS)
    assert not m.ok and m.status.startswith("output_mismatch"), m
