"""Layout spaces through the Tuner and the `autotune layout` command: pricing, strategies unchanged,
checkpoints and resume, saved configurations, outputs, verification, errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune.compiler.hlo import parse_hlo
from autotune.compiler.layouts import LayoutSpace
from autotune.compiler.program import Program, load_program
from autotune.tuning.config_io import load_config, save_config
from autotune.tuning.pricing import LayoutCost
from autotune.tuning.result import TuningError
from autotune.tuning.options import TunerOptions
from autotune.tuning.tuner import Tuner
from hardware.simulator import simulate
from search.base import get_strategy

ROOT = Path(__file__).resolve().parents[3]
VAE = ROOT / "examples" / "hlo" / "vae_small_infer.hlo"

# The entry parameter is column-major: the reshape's row-major default input layout needs a copy,
# reading it in the parameter's layout needs none, so the default is not the best configuration.
COLUMN_MAJOR = """HloModule column_major, entry_computation_layout={(f32[256,1024]{0,1})->f32[256,8,128]{2,1,0}}

ENTRY main {
  p = f32[256,1024]{0,1} parameter(0)
  e = f32[256,1024]{0,1} exponential(p)
  r = f32[256,8,128]{2,1,0} reshape(e)
  ROOT t = f32[256,8,128]{2,1,0} tanh(r)
}
"""


def _sim(kernels):
    return simulate(kernels)


@pytest.fixture(scope="module")
def vae():
    return LayoutSpace(load_program(VAE), "tpu")


def test_layout_cost_is_the_rewritten_programs_kernel_sum(vae):
    cost = LayoutCost(vae, _sim)
    rng = np.random.default_rng(0)
    cfgs = [vae.default()] + [vae.random(rng) for _ in range(4)]
    got = cost(cfgs)
    for c, g in zip(cfgs, got):
        ks = vae.kernels(c)
        assert g == pytest.approx(float(np.sum(simulate(ks) * [k.multiplicity for k in ks])), rel=1e-12)
    before = cost.kernels_priced
    assert np.array_equal(cost(cfgs), got) and cost.kernels_priced == before  # memoized


@pytest.mark.parametrize("strategy", ["random", "annealing", "genetic"])
def test_strategies_search_layouts_unchanged(strategy, tmp_path):
    space = LayoutSpace(Program.from_text(COLUMN_MAJOR), "tpu")
    t = Tuner(space, _sim, get_strategy(strategy)(space, seed=0), budget=30.0,
              options=TunerOptions(max_evaluations=40, out_dir=tmp_path, progress=False, batch_size=8))
    r = t.run()
    assert r.evaluations >= 8 and r.best_cost <= r.default_cost
    assert (tmp_path / "checkpoint.pkl").exists() and (tmp_path / "best_config.json").exists()
    if strategy != "random":  # a configuration better than the default (which copies the input) is found
        assert r.best_cost < r.default_cost


def test_resume_and_saved_configuration(tmp_path):
    space = LayoutSpace(Program.from_text(COLUMN_MAJOR), "tpu")
    t = Tuner(space, _sim, get_strategy("annealing")(space, seed=1), budget=30.0,
              options=TunerOptions(max_evaluations=16, out_dir=tmp_path, progress=False, batch_size=8))
    r = t.run()
    saved = load_config(space, tmp_path / "best_config.json")
    assert saved == r.best
    t2 = Tuner(space, _sim, get_strategy("annealing")(space, seed=1), budget=60.0,
               options=TunerOptions(max_evaluations=24, out_dir=tmp_path, progress=False, batch_size=8))
    t2.resume(tmp_path)
    assert t2.evaluations == r.evaluations and t2.best == r.best
    other = LayoutSpace(load_program(VAE), "tpu")
    t3 = Tuner(other, _sim, get_strategy("annealing")(other, seed=1), budget=5.0,
               options=TunerOptions(progress=False))
    with pytest.raises(TuningError, match="another program"):
        t3.resume(tmp_path)
    with pytest.raises(ValueError, match="program"):
        load_config(other, tmp_path / "best_config.json")
    d = json.loads((tmp_path / "best_config.json").read_text())
    d["nodes"][0]["layouts"][0] = [0, 0, 1]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="bad.json"):
        load_config(space, tmp_path / "bad.json")
    p = tmp_path / "again.json"
    save_config(space, r.best, p)
    assert load_config(space, p) == r.best


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_layout_command_writes_the_fusion_outputs(tmp_path):
    prog = tmp_path / "column_major.hlo"
    prog.write_text(COLUMN_MAJOR)
    out = tmp_path / "run"
    r = _cli("layout", str(prog), "--budget", "60s", "--max-evals", "24", "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert {"report.json", "best_config.json", "layouts.hlo", "search.png", "log.jsonl"} <= \
        {p.name for p in out.iterdir()}
    rep = json.loads((out / "report.json").read_text())
    assert rep["task"] == "layout" and rep["configurable_nodes"] == 1 and rep["cost_model"] == "sim"
    assert rep["verification"]["status"] == "verified" and rep["verification"]["method"] == "kernel-sum"
    assert rep["best_cost_s"] < rep["default_cost_s"] and rep["copies_default"] == 1
    assert rep["xla_cpu_honours_layouts"] is False and "StableHLO" in rep["xla_cpu_layouts_note"]
    parse_hlo((out / "layouts.hlo").read_text())  # the rewritten program parses and verifies
    assert "x" in r.stdout and "configurable nodes" in r.stdout


def test_layout_command_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0\n}\n")
    r = _cli("layout", str(bad), "--budget", "10s")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "bad.hlo:" in r.stderr
    r = _cli("layout", str(VAE), "--budget", "10s", "--hw-budget", "20s")
    assert r.returncode == 2 and "leaves nothing" in r.stderr


@pytest.mark.xla
def test_layout_command_on_xla_checks_values_and_says_layouts_are_dropped(tmp_path):
    pytest.importorskip("jax")
    out = tmp_path / "cpu"
    r = _cli("layout", str(VAE), "--target", "cpu", "--budget", "60s", "--max-evals", "16", "--out", str(out),
             "--no-progress", "--store", "none")
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    v = rep["verification"]
    assert v["method"] == "outputs" and v["status"] == "verified" and v["layouts_honoured"] is False
    assert all(e["outputs_match"] for e in rep["verified"])
    assert any("layout timings not measured" in w for w in rep["warnings"])


def test_layout_command_without_configurable_nodes(tmp_path):
    out = tmp_path / "none"
    r = _cli("layout", str(ROOT / "tests" / "fixtures" / "hlo" / "small" / "exp_add.hlo"), "--budget", "10s",
             "--out", str(out), "--no-progress", "--strategy", "genetic")
    assert r.returncode == 0, r.stderr
    assert "one layout configuration" in r.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["configurable_nodes"] == 0 and rep["speedup"] == 1.0
    assert (out / "layouts.hlo").read_text().count("relayout") == 0


def _residual_model(space):
    """An untrained residual layout GNN (zero correction) with its feature scaler fitted on the program."""
    from autotune.tuning.dataset import layout_config_features, tpugraphs_layout_arrays
    from costmodels.features import FeatureScaler
    from costmodels.gnn.layout import LayoutGnnModel, LayoutGraph
    m = LayoutGnnModel(residual=True, hops=1, hidden=16, embedding=8, layers=2)
    m.init_network()
    arrays = tpugraphs_layout_arrays(space.program.module, [(nd.computation, nd.instruction) for nd in space.nodes],
                                     layout_config_features(space, space.default())[None], [1.0])
    m.scaler_ = FeatureScaler().fit([LayoutGraph("p", "p", arrays).raw])
    m.analytical_scale_ = 5.0
    return m


def test_learned_layout_cost_is_the_analytical_price_times_the_learned_correction(vae):
    import torch
    from autotune.tuning.dataset import layout_config_features
    from autotune.tuning.pricing import LearnedLayoutCost
    from costmodels.analytical import AnalyticalCostModel
    m = _residual_model(vae)
    rng = np.random.default_rng(1)
    cfgs = [vae.default()] + [vae.random(rng) for _ in range(5)]
    priced = LayoutCost(vae, AnalyticalCostModel("tpu").predict)
    analytical, terms = priced(cfgs), priced.terms(cfgs)
    np.testing.assert_allclose(terms.sum(axis=1), analytical, rtol=1e-12)
    cost = LearnedLayoutCost(vae, m)
    np.testing.assert_allclose(cost(cfgs), analytical, rtol=1e-5)       # zero correction: the analytical prices
    draw = torch.Generator().manual_seed(0)
    with torch.no_grad():                                                # a correction: the order of the scores
        for p in m.net_.head.parameters():
            p.normal_(0, 0.3, generator=draw)
    cost = LearnedLayoutCost(vae, m)
    got = cost(cfgs)
    assert got[0] == pytest.approx(analytical[0], rel=1e-9) and not np.allclose(got, analytical, rtol=1e-3)
    cost.graph.set_configs({"node_config_feat": np.stack([layout_config_features(vae, c) for c in cfgs]),
                            "config_runtime": np.ones(len(cfgs)), "config_analytical": analytical,
                            "config_analytical_terms": terms}, analytical[0])
    assert np.array_equal(np.argsort(got), np.argsort(m.scores(cost.graph)))
    before = cost.kernels_priced
    assert np.array_equal(cost(cfgs), got) and cost.kernels_priced == before   # memoized


@pytest.mark.parametrize("kind", ["gnn", "xgboost"])
def test_layout_command_prices_with_the_shipped_layout_model(kind, tmp_path):
    from autotune import api
    shipped = api.shipped_model(kind, "layout", "tpu")
    assert shipped is not None and shipped.stat().st_size <= 20 * 2 ** 20
    out = tmp_path / kind
    r = _cli("layout", str(VAE), "--cost-model", kind, "--budget", "60s", "--max-evals", "32", "--out", str(out),
             "--no-progress")
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["cost_model"] == str(shipped) and rep["evaluations"] >= 16
    assert rep["verification"]["status"] == "verified" and rep["measured_default_s"] > 0
    assert rep["best_cost_s"] <= rep["default_cost_s"]


def test_layout_command_refuses_models_of_another_task_or_target(tmp_path):
    from autotune import api
    fusion_gnn = api.shipped_model("gnn", "fusion", "tpu")
    r = _cli("layout", str(VAE), "--cost-model", str(fusion_gnn), "--budget", "10s", "--out", str(tmp_path / "a"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "task fusion" in r.stderr and "this needs task layout" in r.stderr
    r = _cli("fusion", str(VAE), "--cost-model", str(api.shipped_model("gnn", "layout", "tpu")), "--budget", "10s",
             "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "layout GNN model, not a fusion" in r.stderr
    r = _cli("layout", str(VAE), "--target", "cpu", "--cost-model", "xgboost", "--budget", "10s",
             "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "no shipped xgboost model for task 'layout' and target 'cpu'" in r.stderr


@pytest.mark.parametrize("name,seed", [("resnet_small_infer", 0), ("inception_small_infer", 1), ("bert_small_train", 2)])
def test_incremental_layout_pricing_equals_from_scratch(name, seed):
    """A move (or a short walk of moves) priced by LayoutSpace.move_delta's windows costs exactly what
    the whole rewritten program costs, over random configurations and moves; the windows decide most
    moves (the size threshold lowered so that these small programs use them)."""
    space = LayoutSpace(load_program(ROOT / "examples" / "hlo" / f"{name}.hlo"), "tpu")
    space.WINDOW_MIN_COMPUTATION = 0
    space.WINDOW_MAX_SHARE = 0.5
    inc, ref = LayoutCost(space, _sim), LayoutCost(space, _sim, incremental=False)
    rng = np.random.default_rng(seed)
    head = space.random(rng, p=0.3)
    inc([head])
    for step in range(14):
        cfg = head
        for _ in range(1 if step % 3 else 3):  # every third proposal: a walk of three moves
            cfg = space.neighbor(cfg, rng)
        got, want = inc([cfg])[0], ref([cfg])[0]
        assert got == pytest.approx(want, rel=1e-9), (name, step)
        np.testing.assert_allclose(inc.config_terms[cfg.key()], ref.config_terms[cfg.key()], rtol=1e-9, atol=1e-15)
        if rng.random() < 0.6:
            head = cfg
    assert inc.moves_incremental >= 7  # most moves by a window, not from scratch


def test_layout_walks_and_small_programs_from_scratch(vae):
    """A small computation is priced from scratch (the window would cost more); a large one's space
    asks the annealer for walks from the default instead of random starting configurations."""
    assert vae.move_delta(vae.default(), vae.neighbor(vae.default(), np.random.default_rng(0))) is None
    assert not vae.walks
    big = LayoutSpace(load_program(ROOT / "examples" / "hlo" / "resnet_medium_train.hlo"), "tpu")
    assert big.walks
    assert not LayoutSpace(load_program(ROOT / "examples" / "hlo" / "resnet_medium_train.hlo"), "cpu").walks
