"""autotune.api: the factories the CLI, the benchmarks and users share; `autotune evaluate`'s vocabulary."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from autotune import api
from autotune.tuning.dataset import build_dataset

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ["vae_small_infer", "autoencoder_small_infer"]


class TargetAware:
    """A plug-in cost model that wants the task and target (and nothing else)."""

    def __init__(self, target: str = "?", task: str = "?"):
        self.target, self.task = target, task

    def predict(self, kernels, tiles=None):
        return np.ones(len(list(kernels)))


class Plain:
    def predict(self, kernels, tiles=None):
        return np.zeros(len(list(kernels)))


@pytest.fixture(scope="module")
def fusion_ds(tmp_path_factory):
    progs = tmp_path_factory.mktemp("progs")
    for p in PROGRAMS:
        shutil.copy(ROOT / "examples" / "hlo" / f"{p}.hlo", progs / f"{p}.hlo")
    return build_dataset(progs, "fusion", "sim", configs_per_program=2, out_dir=tmp_path_factory.mktemp("ds"))


def test_shipped_models_and_the_spec_vocabulary():
    gnn = api.shipped_model("gnn", "fusion", "tpu")
    assert gnn is not None and gnn.name == "gnn_fusion_tpu.pt" and gnn.parent == api.SHIPPED_DIR
    assert api.shipped_model("xgb", "fusion", "tpu") == api.shipped_model("xgboost", "fusion", "tpu")
    assert set(api.shipped_models("fusion", "tpu")) == {"gnn", "xgboost"}
    # gnn, shipped:gnn and the default all mean the shipped file, in every command
    for spec in ("gnn", "GNN", "shipped:gnn", None):
        assert api.resolve_cost_model(spec, "fusion", "tpu") == str(gnn)
    assert api.resolve_cost_model("analytical", "fusion", "tpu") == "analytical"
    assert api.resolve_cost_model(None, "fusion", "nowhere") == "analytical"
    # the tile task ships both kinds as well: `autotune tile --cost-model xgboost` works out of the box
    assert set(api.shipped_models("tile", "tpu")) == {"gnn", "xgboost"}
    assert api.resolve_cost_model("xgboost", "tile", "tpu") == str(api.SHIPPED_DIR / "xgb_tile_tpu.json")
    assert api.resolve_cost_model("xgboost", "fusion", "cpu") == str(api.SHIPPED_DIR / "xgb_fusion_cpu.json")
    with pytest.raises(ValueError, match="no shipped xgboost model for task 'tile' and target 'cpu'"):
        api.resolve_cost_model("xgboost", "tile", "cpu")  # XLA:CPU has no tile knob
    with pytest.raises(ValueError, match="train:KIND needs a dataset"):
        api.resolve_cost_model("train:gnn", "fusion", "tpu")
    with pytest.raises(ValueError, match="only learned models are shipped"):
        api.resolve_cost_model("shipped:analytical", "fusion", "tpu")
    with pytest.raises(ValueError, match="unknown learned model kind"):
        api.shipped_model("forest", "fusion", "tpu")


def test_make_cost_model_passes_task_and_target():
    from costmodels.analytical import AnalyticalCostModel
    from costmodels.base import EvaluatorCostModel
    from costmodels.gnn import GnnCostModel
    m = api.make_cost_model("analytical", "fusion", "cpu")
    assert isinstance(m, AnalyticalCostModel) and m.spec.name == "cpu"
    assert isinstance(api.make_cost_model("gnn", "tile", "tpu"), GnnCostModel)
    plug = api.make_cost_model(f"{__name__}:TargetAware", "tile", "cpu")
    assert (plug.task, plug.target) == ("tile", "cpu")
    assert isinstance(api.make_cost_model(f"{__name__}:Plain", "fusion", "tpu"), Plain)
    with pytest.raises(ValueError, match="simulates|TPU target"):  # the simulator model gets the target too
        api.make_cost_model("sim", "fusion", "cpu").predict([])  # (checked on first use, as a model's values are)
    ev = api.make_evaluator("sim", "tpu", store="none")
    assert isinstance(api.make_cost_model("hardware", "fusion", "tpu", ev), EvaluatorCostModel)
    with pytest.raises(ValueError, match="measures on an evaluator"):
        api.make_cost_model("hardware", "fusion", "tpu")
    with pytest.raises(ValueError, match="model file missing.pt does not exist"):
        api.make_cost_model("missing.pt", "fusion", "tpu")
    with pytest.raises(api.UnknownPluginError, match="unknown cost model 'forest' .*analytical.*gnn"):
        api.make_cost_model("forest", "fusion", "tpu")


def test_load_model_file_checks_scope(tmp_path):
    gnn = api.shipped_model("gnn", "fusion", "tpu")
    assert api.load_model_file(gnn, task="fusion", target="tpu").task == "fusion"
    with pytest.raises(ValueError, match="task fusion, target tpu; this needs task tile"):
        api.load_model_file(gnn, task="tile", target="tpu")
    renamed = tmp_path / "model.bin"  # no known suffix: told apart by content
    shutil.copy(gnn, renamed)
    assert type(api.load_model_file(renamed)).__name__ == "GnnCostModel"
    with pytest.raises(ValueError, match="does not exist"):
        api.load_model_file(tmp_path / "nope.json")


def test_evaluators_and_strategies():
    from hardware.simulator import TpuSimulator
    from search.annealing import SimulatedAnnealing
    assert api.default_evaluator("tpu") == "sim" and api.default_evaluator("v2") == "sim"
    assert api.default_evaluator("cpu") == "xla"
    ev = api.make_evaluator(None, "tpu", store="none", noise=0.0)
    assert isinstance(ev, TpuSimulator)
    assert isinstance(api.make_evaluator("simulator", "tpu-v2", store="none"), TpuSimulator)
    with pytest.raises(ValueError, match="simulates a TPU"):
        api.make_evaluator("sim", "cpu", store="none")
    with pytest.raises(api.UnknownPluginError, match=r"unknown evaluator 'gpu' \(known: sim, xla"):
        api.make_evaluator("gpu", "tpu", store="none")
    # a plug-in evaluator by module:Class gets the options it takes
    plug = api.make_evaluator("hardware.simulator:TpuSimulator", "tpu", store="none", seed=3, noise=0.0)
    assert isinstance(plug, TpuSimulator) and plug.seed == 3
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(api.load_program(ROOT / "examples" / "hlo" / "vae_small_infer.hlo"), "tpu")
    s = api.make_strategy("annealing", space, seed=1)
    assert isinstance(s, SimulatedAnnealing) and s.seed == 1 and len(s.ask(2)) >= 1
    assert {"annealing", "genetic", "random"} <= set(api.list_strategies())
    assert {"sim", "xla"} <= set(api.list_evaluators()) and "analytical" in api.list_cost_models()


def test_new_and_trained_models(fusion_ds):
    from costmodels.xgb import XgbCostModel
    m = api.new_model("xgb", "fusion", "tpu", n_estimators=5, max_depth=2, seed=2)
    assert isinstance(m, XgbCostModel)
    with pytest.raises(ValueError, match="unknown model kind 'forest'"):
        api.new_model("forest", "fusion", "tpu")
    fitted = api.train_model("analytical", fusion_ds)
    assert set(fitted.scales) == {"kLoop", "kInput", "kOutput"}
    xgb = api.train_model("xgboost", fusion_ds, n_estimators=5, max_depth=2, nthread=1)
    assert xgb.task == "fusion" and np.all(np.isfinite(xgb.predict_graphs(fusion_ds.load("all").sample_graphs()[:3])))


def test_evaluate_shipped_models_is_one_command(fusion_ds):
    """`autotune evaluate --data DS`: every shipped model for the dataset's task and target, and analytical."""
    from autotune.cli.app import main
    r = CliRunner()
    res = r.invoke(main, ["evaluate", "--data", str(fusion_ds.root), "--split", "all", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc["summary"]) == {"shipped:gnn", "shipped:xgboost", "analytical"}
    assert "gnn_fusion_tpu.pt" in res.stderr
    # the same word as `fusion --cost-model gnn`: the shipped model, not a fresh one
    res2 = r.invoke(main, ["evaluate", "--cost-model", "gnn", "--model", "analytical-raw", "--data",
                           str(fusion_ds.root), "--split", "all", "--json"])
    assert res2.exit_code == 0, res2.output
    doc2 = json.loads(res2.stdout)
    assert set(doc2["summary"]) == {"shipped:gnn", "analytical"}
    assert doc2["summary"]["shipped:gnn"] == doc["summary"]["shipped:gnn"]
    # fresh models fitted on the train split are spelled --train KIND (or train:KIND)
    res3 = r.invoke(main, ["evaluate", "--train", "analytical", "--cost-model", "train:analytical", "--data",
                           str(fusion_ds.root), "--split", "all", "--json"])
    assert res3.exit_code == 0, res3.output
    assert set(json.loads(res3.stdout)["summary"]) == {"train:analytical", "train:analytical'", "shipped:gnn",
                                                      "shipped:xgboost", "analytical"}
    res4 = r.invoke(main, ["evaluate", "--cost-model", "sim", "--data", str(fusion_ds.root)])
    assert res4.exit_code == 2 and "evaluate needs a saved model file" in res4.output
    res5 = r.invoke(main, ["evaluate", "--help"])
    assert "--train" in res5.output and "shipped" in res5.output


def test_shipped_cpu_models_load_and_refuse_another_target_or_task():
    """`--target cpu --cost-model gnn|xgboost` works out of the box; the wrong target or task is one line."""
    for kind in ("gnn", "xgboost"):
        path = api.shipped_model(kind, "fusion", "cpu")
        assert path is not None and path.stat().st_size <= 20 * 2**20
        model = api.make_cost_model(kind, "fusion", "cpu")
        assert (model.task, model.target) == ("fusion", "cpu")
        with pytest.raises(ValueError, match="target cpu") as e:
            api.load_model_file(path, task="fusion", target="tpu")
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no shipped gnn model for task 'tile' and target 'cpu'"):
        api.make_cost_model("gnn", "tile", "cpu")


def test_gnn_training_options_default_to_the_fusion_recipe():
    from costmodels.gnn import FUSION_RECIPE
    opts = api.gnn_training_options("fusion", {"seed": 1, "residual": False, "lr": None, "head_layers": 1})
    assert opts["residual"] is False and opts["head_layers"] == 1 and opts["seed"] == 1  # given: kept
    assert {k: opts[k] for k in FUSION_RECIPE if k not in ("residual", "head_layers")} \
        == {k: v for k, v in FUSION_RECIPE.items() if k not in ("residual", "head_layers")}
    # other tasks, and a fusion model trained with a rank loss, keep their own defaults
    assert api.gnn_training_options("tile", {"lr": None}) == {"lr": None}
    assert api.gnn_training_options("fusion", {"loss": "rank", "select": None}) == {"loss": "rank", "select": None}
    # the recipe's piecewise-linear encoding is of the geometry features: off without them, unless asked for
    assert FUSION_RECIPE["ple_bins"] == 32 and FUSION_RECIPE["patience"] == 25
    assert api.gnn_training_options("fusion", {"geometry_features": False})["ple_bins"] == 0
    assert api.gnn_training_options("fusion", {"kernel_features": False})["ple_bins"] == 0
    assert api.gnn_training_options("fusion", {"ple_bins": 3})["ple_bins"] == 3


def test_cli_train_gnn_fusion_uses_the_recipe_and_logs_epochs(fusion_ds, tmp_path):
    import torch
    from autotune.cli.app import main
    r = CliRunner().invoke(main, ["train", "--model", "gnn", "--task", "fusion", "--data", str(fusion_ds.root),
                                  "--out", str(tmp_path / "a.pt"), "--epochs", "2"])
    assert r.exit_code == 0, r.output
    assert "epoch 1: train loss" in r.stderr and "epoch 2: train loss" in r.stderr
    cfg = torch.load(tmp_path / "a.pt", weights_only=True)["config"]
    assert (cfg["geometry_features"], cfg["residual"], cfg["head_layers"], cfg["head_hidden"], cfg["ple_bins"]) \
        == (True, True, 2, 256, 32)
    r = CliRunner().invoke(main, ["train", "--model", "gnn", "--task", "fusion", "--data", str(fusion_ds.root),
                                  "--out", str(tmp_path / "b.pt"), "--epochs", "1", "--no-residual",
                                  "--no-geometry-features", "--head-layers", "1", "--head-hidden", "32"])
    assert r.exit_code == 0, r.output
    cfg = torch.load(tmp_path / "b.pt", weights_only=True)["config"]
    assert (cfg["geometry_features"], cfg["residual"], cfg["head_layers"], cfg["head_hidden"], cfg["ple_bins"]) \
        == (False, False, 1, 32, 0)
