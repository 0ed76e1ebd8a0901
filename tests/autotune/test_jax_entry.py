"""autotune.jax: tune() caches by (program, target, machine, jaxlib version) - a miss searches, a hit does
not, a changed jaxlib version misses -; the returned callable runs the written program with jax.jit's
results, or jax.jit itself with one warning when the run kept the original; load() reads a run folder."""
from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import autotune  # noqa: E402
import autotune.jax as aj  # noqa: E402


def block(params, x):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return {"y": h * jax.nn.sigmoid(h), "mean": h.mean()}


ARGS = ({"w": jnp.linspace(-1, 1, 32 * 16, dtype=jnp.float32).reshape(32, 16), "b": jnp.zeros(16)},
        jnp.cos(jnp.arange(8 * 32, dtype=jnp.float32)).reshape(8, 32))


@pytest.fixture
def fake_search(monkeypatch, tmp_path):
    """Replace the subprocess search by one that writes what `autotune fusion` writes: the default
    configuration's emission, verified (or the original kept); records each call."""
    monkeypatch.setenv(aj.CACHE_ENV, str(tmp_path / "cache"))
    calls = []
    keep = {"original": False}

    def search(program, out, budget, target, cost_model):
        from autotune.compiler.emission import emit_fused_text
        from autotune.compiler.fusion import FusionSpace
        from autotune.compiler.program import Program
        calls.append(program)
        space = FusionSpace(Program.from_file(str(program)), target)
        fused = program.read_text() if keep["original"] else emit_fused_text(space, space.default(), header=True)
        (out / "fused.hlo").write_text(fused)
        (out / "report.json").write_text(json.dumps({
            "verification": {"status": "verified"}, "keep_original": keep["original"],
            "measured_speedup": 1.0 if keep["original"] else 1.07}))
    monkeypatch.setattr(aj, "_run_search", search)
    return calls, keep


def _close(a, b):
    return all(np.allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)
               for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def test_a_miss_searches_and_a_hit_does_not(fake_search):
    calls, _ = fake_search
    first = aj.tune(block, *ARGS, budget="10s")
    assert len(calls) == 1 and first.tuned and first.measured_speedup == 1.07
    assert _close(first(*ARGS), jax.jit(block)(*ARGS))
    assert set(first(*ARGS)) == {"y", "mean"}  # the outputs' pytree, as the function returns it
    t0 = time.perf_counter()
    again = aj.tune(block, *ARGS, budget="10s")
    assert len(calls) == 1 and time.perf_counter() - t0 < 5.0  # no search (the benchmark times the < 1 s goal)
    assert _close(again(*ARGS), jax.jit(block)(*ARGS))
    aj.tune(block, *ARGS, budget="10s", cache=False)
    assert len(calls) == 2


def test_another_jaxlib_version_or_shape_is_a_miss(fake_search, monkeypatch):
    calls, _ = fake_search
    aj.tune(block, *ARGS)
    import hardware.xla
    real = hardware.xla.jaxlib_version
    monkeypatch.setattr(hardware.xla, "jaxlib_version", lambda: "0.0.1")
    aj.tune(block, *ARGS)
    assert len(calls) == 2
    monkeypatch.setattr(hardware.xla, "jaxlib_version", real)
    aj.tune(block, *ARGS)
    assert len(calls) == 2  # the first entry is still valid for the real version
    wider = (ARGS[0], jnp.ones((16, 32)))
    aj.tune(block, *wider)
    assert len(calls) == 3


def test_kept_original_runs_jax_jit_with_one_warning(fake_search):
    _, keep = fake_search
    keep["original"] = True
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        f = aj.tune(block, *ARGS)
    assert not f.tuned and len(w) == 1 and "keep the original" in str(w[0].message)
    assert w[0].filename == __file__  # the warning points at the caller's line
    assert _close(f(*ARGS), jax.jit(block)(*ARGS))


def test_wrong_arguments_are_one_line(fake_search):
    f = aj.tune(block, *ARGS)
    with pytest.raises(ValueError, match="call it with arguments shaped as the example ones"):
        f(ARGS[0], jnp.ones((4, 32)))


def test_load_reads_a_run_folder(fake_search):
    f = aj.tune(block, *ARGS)
    g = autotune.load(f.run_dir)
    assert g.tuned and _close(g(*ARGS), tuple(jax.tree_util.tree_leaves(jax.jit(block)(*ARGS))))
    with pytest.raises(ValueError, match="not an autotune fusion run folder"):
        autotune.load(f.run_dir / "nowhere")


def test_load_compiles_with_the_compile_options_the_run_verified(tmp_path):
    """A run whose written program is the original with compiler options (the compiler-options stage):
    load() compiles it with report.json's compile_options, without a keep-the-original warning."""
    from autotune.tuning.compiler_options import options_header
    from hardware.xla import compile_hlo
    text = jax.jit(block).lower(*ARGS).as_text(dialect="hlo")
    flags = {"xla_backend_optimization_level": 2}
    (tmp_path / "fused.hlo").write_text(options_header(1.1, [1.05, 1.15], flags) + text)
    (tmp_path / "report.json").write_text(json.dumps({
        "verification": {"status": "verified", "winner": "original with compiler options"}, "keep_original": False,
        "compile_options": {"disable_fusion": False, "xla_flags": flags}, "measured_speedup": 1.1}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tuned = autotune.load(tmp_path)
    leaves = jax.tree_util.tree_leaves(ARGS)
    want = compile_hlo(text)(*[np.asarray(a) for a in leaves])
    got = tuned(*leaves)
    assert all(np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6) for a, b in zip(got, want))


def test_the_search_is_the_library_run_in_this_process(monkeypatch, tmp_path):
    """`tune` calls autotune.run.tune in-process (no `autotune fusion` subprocess) with the run folder as the
    cache entry; a refused run is a TuningFailed in one line."""
    import subprocess

    import autotune.run
    monkeypatch.setenv(aj.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("tune started a subprocess"))
    seen = {}

    def run(program, target, *, cost_model, budget, options):
        seen.update(program=program, target=target, budget=budget, out=options.out_dir, progress=options.progress)
        (options.out_dir / "fused.hlo").write_text(program.read_text())
        (options.out_dir / "report.json").write_text(json.dumps({"verification": {"status": "verified"},
                                                                 "keep_original": True}))
        return type("R", (), {"interrupted": False})()
    monkeypatch.setattr(autotune.run, "tune", run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = aj.tune(block, *ARGS, budget="7s")
    assert seen == {"program": f.run_dir / "program.hlo", "target": "cpu", "budget": "7s", "out": f.run_dir,
                    "progress": False}

    def refuse(program, target, **_):
        raise autotune.run.RunError("--budget 7s is too short for this program\nsecond line")
    monkeypatch.setattr(autotune.run, "tune", refuse)
    with pytest.raises(aj.TuningFailed, match=r"^autotune fusion on program.hlo failed: --budget 7s is too short "
                                              r"for this program$"):
        aj.tune(block, *ARGS, budget="7s", cache=False)
