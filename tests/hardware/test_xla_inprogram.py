"""In-program kernel timing on XLA:CPU (hardware/xla.py: profile_compiled, attribute_thunks,
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
    # the while thunk's own time is reported, never silently dropped
    assert any(n.startswith("while") for n in timing.unattributed)


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


def test_dataset_build_cli_offers_the_in_program_evaluator() -> None:
    from click.testing import CliRunner

    from autotune.cli import main
    r = CliRunner().invoke(main, ["dataset", "build", "--help"])
    assert r.exit_code == 0 and "xla-inprogram" in r.output
    r = CliRunner().invoke(main, ["dataset", "build", "--programs", str(REPO / "examples/idioms/power_iteration.hlo"),
                                  "--task", "tile", "--evaluator", "xla-inprogram", "--target", "cpu", "--out", "unused"])
    assert r.exit_code == 2 and "tile" in r.output and "Traceback" not in r.output


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
