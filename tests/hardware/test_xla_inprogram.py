"""In-program kernel timing on XLA:CPU (hardware/xla/: profile_compiled, attribute_thunks,
XlaEvaluator.measure_in_program, the xla-inprogram evaluator). The trace arithmetic is tested without
jax; the rest runs real programs (skipped without jax/jaxlib)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hardware import xla as X

REPO = Path(__file__).resolve().parents[2]

SMALL = """HloModule small
ENTRY e {
  x = f32[64,128] parameter(0)
  w = f32[128,32] parameter(1)
  a = f32[64,128] exponential(x)
  b = f32[64,128] multiply(a, x)
  r = f32[8192] reshape(b)
  c = f32[8192] negate(r)
  c2 = f32[64,128] reshape(c)
  ROOT d = f32[64,32] dot(c2, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""


# ---------------------------------------------------------------------------------------------
# trace arithmetic and attribution (no jax needed)

def test_control_thunk_self_time_excludes_its_body_on_any_thread() -> None:
    # run 7: a while thunk (0..100 ns) with two body thunks, one on another thread; a thunk after it.
    events = [("t0", "while.1", 7, 0.0, 100.0), ("t0", "body_add", 7, 10.0, 30.0),
              ("t1", "body_mul", 7, 50.0, 20.0), ("t0", "after", 7, 120.0, 5.0),
              ("t0", "body_add", 8, 0.0, 40.0)]
    out = X.thunk_self_times(events, control={"while.1"})
    assert out[7]["while.1"] == (pytest.approx(50e-9), 1)
    assert out[7]["body_add"] == (pytest.approx(30e-9), 1) and out[7]["after"][0] == pytest.approx(5e-9)
    assert out[8] == {"body_add": (pytest.approx(40e-9), 1)}


def test_overlapping_non_control_thunks_keep_their_duration() -> None:
    # Independent thunks may run side by side on two threads: neither is the other's body.
    events = [("t0", "a", 1, 0.0, 100.0), ("t1", "b", 1, 10.0, 20.0), ("t0", "a", 1, 200.0, 10.0)]
    out = X.thunk_self_times(events)
    assert out[1]["a"] == (pytest.approx(110e-9), 2) and out[1]["b"][0] == pytest.approx(20e-9)


def test_thunk_gaps_charge_idle_time_to_the_next_thunk_and_cover_the_run() -> None:
    # run 3: executor starts at 0; a (2..10) and b (4..6) overlap; the while thunk (12..40) encloses
    # body (15..20) on another thread; c (45..50); the executor's run ends at 53.
    events = [("t0", "a", 3, 2.0, 8.0), ("t1", "b", 3, 4.0, 2.0), ("t0", "while.1", 3, 12.0, 28.0),
              ("t1", "body", 3, 15.0, 5.0), ("t0", "c", 3, 45.0, 5.0), ("t0", "body", 3, 30.0, 2.0)]
    gaps, tail = X.thunk_gaps(events, control={"while.1"}, execute={3: (0.0, 53.0)})[3]
    assert gaps["a"] == pytest.approx(2e-9) and gaps["b"] == 0.0  # b starts while a runs
    assert "while.1" not in gaps  # its overhead is its body's gaps: 10..15 and 20..30
    assert gaps["body"] == pytest.approx(5e-9 + 10e-9) and gaps["c"] == pytest.approx(13e-9)
    assert tail == pytest.approx(3e-9)
    busy = 8.0 + 5.0 + 2.0 + 5.0  # the union of the non-control thunks' intervals
    assert sum(gaps.values()) + tail + busy * 1e-9 == pytest.approx(53e-9)
    # no executor span: the run starts with its first thunk and has no tail
    gaps, tail = X.thunk_gaps([("t0", "a", 1, 7.0, 1.0), ("t0", "b", 1, 9.0, 1.0)])[1]
    assert gaps == {"a": 0.0, "b": pytest.approx(1e-9)} and tail == 0.0


def _kernel(root: str, opcodes: list[str], opcode: str = "add", elements: int = 4) -> SimpleNamespace:
    return SimpleNamespace(root_instruction=SimpleNamespace(name=root, opcode=opcode,
                                                            shape=SimpleNamespace(elements=elements)),
                           opcodes=opcodes)


def test_attribute_thunks_maps_roots_counts_and_explains_the_rest() -> None:
    kernels = [_kernel("add.1", ["multiply", "add"]), _kernel("r.2", ["reshape"], "reshape"),
               _kernel("dot.7", ["dot"], "dot", 12), _kernel("neg.3", ["negate"], "negate"),
               _kernel("loop_add", ["add"])]
    thunks = {
        "add.9": {"seconds": [3e-6, 5e-6, 4e-6], "count": 1, "origin": "add.1", "opcode": "fusion", "elements": 4},
        "dot.3": {"seconds": [2e-6, 2e-6, 2e-6], "count": 1, "origin": None, "opcode": "dot", "elements": 12},
        "copy.4": {"seconds": [1e-6, 1e-6, 1e-6], "count": 1, "origin": None, "opcode": "copy", "elements": 4},
        "body": {"seconds": [8e-6, 8e-6, 8e-6], "count": 4, "origin": "loop_add", "opcode": "fusion", "elements": 4},
    }
    ms, unattributed = X.attribute_thunks(kernels, thunks)
    assert all(m.ok for m in ms)
    assert ms[0].seconds == pytest.approx(4e-6) and ms[0].extra["thunks"] == ["add.9"]
    assert ms[1].seconds == 0.0 and "layout bitcast" in ms[1].extra["no_thunk"]
    assert ms[2].seconds == pytest.approx(2e-6) and "matched_by" in ms[2].extra
    assert ms[3].seconds == 0.0 and "elided or folded" in ms[3].extra["no_thunk"]
    assert ms[4].seconds == pytest.approx(2e-6) and ms[4].extra["count"] == 4  # per execution
    assert unattributed == {"copy.4": pytest.approx(1e-6)}
    timing = X.InProgramTiming(X.Measurement(20e-6), ms, unattributed)
    assert timing.kernel_sum == pytest.approx(4e-6 + 2e-6 + 8e-6)


def test_attribute_thunks_charges_each_thunks_preceding_gap_and_keeps_both_parts() -> None:
    kernels = [_kernel("add.1", ["add"]), _kernel("loop_add", ["add"])]
    thunks = {"add.9": {"seconds": [3e-6, 5e-6, 4e-6], "gap_seconds": [1e-6, 1e-6, 2e-6], "count": 1,
                        "origin": "add.1", "opcode": "fusion", "elements": 4},
              "body": {"seconds": [8e-6, 8e-6, 8e-6], "gap_seconds": [4e-6, 4e-6, 4e-6], "count": 4,
                       "origin": "loop_add", "opcode": "fusion", "elements": 4},
              "while.2": {"seconds": [6e-6, 6e-6, 6e-6], "gap_seconds": [0.0, 0.0, 0.0], "count": 1,
                          "origin": None, "opcode": "while", "control": True, "elements": None},
              "copy.4": {"seconds": [1e-6, 1e-6, 1e-6], "gap_seconds": [5e-7, 5e-7, 5e-7], "count": 1,
                         "origin": None, "opcode": "copy", "elements": 4}}
    ms, unattributed = X.attribute_thunks(kernels, thunks)
    assert ms[0].seconds == pytest.approx(6e-6) and ms[0].extra["repeats"] == pytest.approx([4e-6, 6e-6, 6e-6])
    assert ms[0].extra["thunk_seconds"] == pytest.approx(4e-6) and ms[0].extra["gap_seconds"] == pytest.approx(1e-6)
    assert ms[1].seconds == pytest.approx(3e-6) and ms[1].extra["gap_seconds"] == pytest.approx(1e-6)
    # the while loop's own time is in its body's gaps: charged, it costs nothing of its own
    assert unattributed == {"while.2": 0.0, "copy.4": pytest.approx(1.5e-6)}
    ms, unattributed = X.attribute_thunks(kernels, thunks, charge_gaps=False)
    assert ms[0].seconds == pytest.approx(4e-6) and ms[0].extra["gap_seconds"] == 0.0
    assert unattributed == {"while.2": pytest.approx(6e-6), "copy.4": pytest.approx(1e-6)}


def test_a_dot_xla_folded_into_a_transpose_is_charged_to_the_dots_kernel() -> None:
    # transpose(dot(a, b)) becomes dot(b, a) named after the transpose: its thunk's origin is the
    # transpose kernel's root, but the work is the dot kernel's (the one feeding the transpose).
    dot = _kernel("dot.7", ["dot"], "dot", 4096)
    other_dot = _kernel("dot.8", ["dot"], "dot", 4096)
    transpose = _kernel("transpose.50", ["transpose"], "transpose", 4096)
    dot.comp = other_dot.comp = transpose.comp = 0
    dot.root, other_dot.root, transpose.root, transpose.inputs = 7, 8, 50, [7]
    thunks = {"dot.52": {"seconds": [9e-6], "count": 1, "origin": "transpose.50", "opcode": "dot",
                         "computes": ["dot"], "elements": 4096},
              "dot.53": {"seconds": [2e-6], "count": 1, "origin": "dot.8", "opcode": "dot",
                         "computes": ["dot"], "elements": 4096}}
    ms, unattributed = X.attribute_thunks([dot, other_dot, transpose], thunks)
    assert ms[0].extra["thunks"] == ["dot.52"] and ms[0].seconds == pytest.approx(9e-6)
    assert "transpose(dot)" in ms[0].extra["matched_by"]
    assert ms[1].extra["thunks"] == ["dot.53"] and "matched_by" not in ms[1].extra
    assert ms[2].seconds == 0.0 and "folded it into the dot of kernel dot.7" in ms[2].extra["no_thunk"]
    assert unattributed == {}
    # a transpose kernel that computes a dot itself keeps its thunk
    fused = _kernel("transpose.50", ["dot", "transpose"], "transpose", 4096)
    ms, _ = X.attribute_thunks([dot, fused], {"dot.52": thunks["dot.52"]})
    assert ms[1].extra["thunks"] == ["dot.52"] and ms[0].extra["thunks"] == []


# ---------------------------------------------------------------------------------------------
# real programs

jax_needed = [pytest.mark.xla]


def _need_jax() -> None:
    pytest.importorskip("jaxlib")
    pytest.importorskip("jax")


def _space(text: str):
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    return FusionSpace(Program.from_text(text, "small"), "cpu")


@pytest.fixture(scope="module")
def evaluator():
    _need_jax()
    ev = X.XlaInProgramEvaluator(target="cpu", runs=4, timing=X.TimingOptions(repeat=2, min_repeat_ms=2))
    yield ev
    ev.close()


@pytest.mark.xla
def test_profile_compiled_times_each_thunk_in_every_profiled_run() -> None:
    _need_jax()
    compiled = X.compile_hlo(SMALL)
    prof = X.profile_compiled(compiled, X.random_inputs(SMALL), runs=3,
                              timing=X.TimingOptions(repeat=2, min_repeat_ms=0))
    assert prof.runs == 3 and len(prof.run_seconds) == 3 and len(prof.end_to_end.repeats) == 2
    assert prof.thunks and all(len(t.seconds) == 3 and t.count == 1 for t in prof.thunks.values())
    assert sum(t.median for t in prof.thunks.values()) <= max(prof.run_seconds) * 1.01


@pytest.mark.xla
def test_measure_in_program_times_every_kernel_of_a_configuration(evaluator) -> None:
    space = _space(SMALL)
    cfg = space.default()
    kernels = space.kernels(cfg)
    timing = evaluator.measure_in_program(space, cfg)
    assert timing.end_to_end.ok and timing.end_to_end.seconds > 0
    assert len(timing.kernels) == len(kernels) and all(m.ok for m in timing.kernels)
    by_root = {k.root_instruction.name: m for k, m in zip(kernels, timing.kernels)}
    assert by_root["d"].seconds > 0 and by_root["d"].extra["thunks"]  # the dot: a library call
    for k, m in zip(kernels, timing.kernels):
        if set(k.opcodes) <= {"reshape"}:
            assert m.seconds == 0.0 and "no thunk" in m.extra["no_thunk"]
    assert 0 < timing.kernel_sum and timing.unattributed == {}
    assert evaluator.store_namespace.startswith("xla-inprogram/")


@pytest.mark.xla
def test_while_and_call_programs_attribute_body_kernels_per_iteration(evaluator) -> None:
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    space = FusionSpace(Program.from_file(str(REPO / "examples/idioms/power_iteration.hlo")), "cpu")
    cfg = space.default()
    kernels = space.kernels(cfg)
    timing = evaluator.measure_in_program(space, cfg)
    assert timing.end_to_end.ok and all(m.ok for m in timing.kernels)
    counts = {k.computation.name: m.extra["count"] for k, m in zip(kernels, timing.kernels) if m.extra.get("thunks")}
    assert max(counts.values()) == 20  # the loop body runs 20 times per execution
    # the while thunk's own time is reported, never silently dropped: charged to its body's kernels
    # as the idle time before their thunks, and as its own time without the charging
    assert any(n.startswith("while") for n in timing.unattributed)
    assert sum(m.extra["gap_seconds"] for m in timing.kernels if m.extra.get("thunks")) > 0
    _, own = X.attribute_thunks(kernels, timing.end_to_end.extra["thunks"], charge_gaps=False)
    assert any(v > 0 for n, v in own.items() if n.startswith("while"))


@pytest.mark.xla
def test_the_xla_inprogram_evaluator_measures_kernels_through_their_configuration() -> None:
    _need_jax()
    from hardware.base import create_evaluator
    space = _space(SMALL)
    kernels = space.kernels(space.default())
    ev = create_evaluator("xla-inprogram", "cpu")
    try:
        assert isinstance(ev, X.XlaInProgramEvaluator)
        ev.runs = 3
        ev.timing = X.TimingOptions(repeat=2, min_repeat_ms=2)
        ms = ev.measure(kernels)
        assert all(m.ok for m in ms)
        assert ev.measure([SimpleNamespace(hash="x", to_hlo_module=lambda: SMALL)])[0].status.startswith("unsupported")
    finally:
        ev.close()
    with pytest.raises(ValueError, match="--target cpu"):
        create_evaluator("xla-inprogram", "tpu")


# ---------------------------------------------------------------------------------------------
# datasets of in-program kernel times (autotune dataset build --evaluator xla-inprogram)

@pytest.mark.xla
def test_in_program_dataset_keeps_kernel_medians_and_end_to_end_times(evaluator, tmp_path) -> None:
    import numpy as np

    from autotune.tuning.dataset import NO_THUNK_SECONDS, Dataset, build_dataset
    progs = tmp_path / "progs"
    progs.mkdir()
    (progs / "small_a.hlo").write_text(SMALL)
    (progs / "power_iteration.hlo").write_text((REPO / "examples/idioms/power_iteration.hlo").read_text())
    ds = build_dataset(progs, "fusion", evaluator, "cpu", configs_per_program=3, out_dir=tmp_path / "ds")
    assert Dataset.open(tmp_path / "ds").manifest["evaluator"] == "xla-inprogram"
    for name, s in ds.iter_programs():
        rec = ds.programs[name]
        c = s.config
        n_cfgs = rec["n_configs"]
        assert rec["n_end_to_end"] == n_cfgs and len(c["end_to_end"]) == n_cfgs
        assert np.all(c["end_to_end"] > 0) and np.all(c["end_to_end_min"] <= c["end_to_end"])
        assert len(c["runtime"]) == len(c["cfg"]) and np.all(np.isfinite(c["runtime"]))
        assert rec["n_failed"] == 0 and np.all(s.runtime > 0)
        # each kernel's runtime is the median of its in-program times over the configurations
        for g in range(len(s.graphs)):
            assert s.runtime[g] == pytest.approx(np.median(c["runtime"][c["graph"] == g]))
        assert rec["n_no_thunk"] == int(np.sum(s.runtime == NO_THUNK_SECONDS))
    assert ds.programs["small_a"]["n_no_thunk"] >= 1  # its reshapes are bitcasts


def test_dataset_build_cli_offers_the_in_program_evaluator(tmp_path) -> None:
    from click.testing import CliRunner

    from autotune.cli import main
    r = CliRunner().invoke(main, ["dataset", "build", "--help"])
    assert r.exit_code == 0 and "xla-inprogram" in r.output
    r = CliRunner().invoke(main, ["dataset", "build", "--programs", str(REPO / "examples/idioms/power_iteration.hlo"),
                                  "--task", "tile", "--evaluator", "xla-inprogram", "--target", "cpu", "--out", str(tmp_path / "ds")])
    assert r.exit_code == 2 and "tile" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "ds").exists()  # refused before anything is written


def test_op_name_less_thunks_of_equal_size_are_told_apart_by_how_often_they_run() -> None:
    entry_dot, body_dot = _kernel("dot.6", ["dot"], "dot", 32), _kernel("dot.2.i5", ["dot"], "dot", 32)
    entry_dot.multiplicity, body_dot.multiplicity = 1.0, 20.0
    thunks = {"dot.3": {"seconds": [40e-6], "count": 20, "origin": None, "opcode": "dot", "elements": 32},
              "dot.4": {"seconds": [1e-6], "count": 1, "origin": None, "opcode": "dot", "elements": 32}}
    ms, unattributed = X.attribute_thunks([entry_dot, body_dot], thunks)
    assert ms[0].extra["thunks"] == ["dot.4"] and ms[1].extra["thunks"] == ["dot.3"]
    assert ms[1].seconds == pytest.approx(2e-6) and unattributed == {}


@pytest.mark.xla
def test_measure_command_with_the_in_program_evaluator() -> None:
    _need_jax()
    import json
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "measure", str(REPO / "examples/idioms/power_iteration.hlo"),
                        "--target", "cpu", "--evaluator", "xla-inprogram", "--end-to-end", "--store", "none", "--json"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["evaluator"] == "xla-inprogram" and doc["end_to_end"]["config_s"] > 0


TRANSPOSED_DOT = """HloModule transposed_dot
ENTRY e {
  a = f32[64,128] parameter(0)
  b = f32[128,32] parameter(1)
  d = f32[64,32] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[32,64] transpose(d), dimensions={1,0}
}"""


def _profiled_once(text: str) -> tuple:
    """A program's default configuration emitted, compiled and profiled once: its kernels, the
    profile answer and the charged attribution."""
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    space = _space(text)
    kernels = [k for k in space.kernels(space.default()) if not k.is_trivial]
    emitted = X.strip_metadata(emit_fused_text(space, space.default()))
    compiled = X.compile_hlo(emitted, **EMITTED_CPU_COMPILE_OPTIONS)
    ans = X.profile_answer(compiled, X.verification_inputs(emitted), 1, X.TimingOptions(repeat=1, min_repeat_ms=0))
    return kernels, ans, *X.attribute_thunks(kernels, ans["thunks"])


@pytest.mark.xla
def test_a_transposed_dot_is_timed_as_the_dot_kernels() -> None:
    _need_jax()
    kernels, ans, ms, unattributed = _profiled_once(TRANSPOSED_DOT)
    by_root = {k.root_instruction.name: m for k, m in zip(kernels, ms)}
    assert [t["origin"] for t in ans["thunks"].values()] == ["t"]  # XLA's dot carries the transpose's name
    assert by_root["d"].seconds > 0 and "transpose(dot)" in by_root["d"].extra["matched_by"]
    assert by_root["t"].seconds == 0.0 and "folded it into the dot" in by_root["t"].extra["no_thunk"]
    assert unattributed == {}


@pytest.mark.xla
def test_charged_kernel_times_add_up_to_the_executors_run() -> None:
    # One profiled run of a chain of dependent thunks: the kernel times with their gaps, the
    # unattributed thunks and the tail after the last thunk cover the executor's run exactly.
    _need_jax()
    kernels, ans, ms, unattributed = _profiled_once(SMALL)
    total = X.InProgramTiming(X.Measurement(ans["seconds"]), ms, unattributed).kernel_sum
    assert total + sum(unattributed.values()) + ans["tail_seconds"][0] == pytest.approx(ans["run_seconds"][0])
    assert sum(m.extra.get("thunk_seconds", 0.0) for m in ms) < total
