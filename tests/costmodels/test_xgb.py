"""XGBoost baseline cost model, and the train/evaluate commands (tiny datasets)."""
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from autotune.cli.learn import dataset as dataset_cmd, evaluate as evaluate_cmd, train as train_cmd
from costmodels.features import FEATURE_VERSION, GEOMETRY_DIM, NUM_OPCODES, kernel_graph
from autotune.compiler.fusion import FusionSpace
from costmodels.metrics import ordered_pair_accuracy
from autotune.compiler.program import Program
from costmodels.base import get_cost_model
from costmodels.xgb import FEATURE_GROUPS, KERNEL_VECTOR_DIM, XgbCostModel, kernel_vector

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(n_estimators=30, max_depth=4, nthread=1)


@pytest.fixture(scope="module")
def kernels():
    prog = Program.from_file(str(ROOT / "examples/hlo/vae_small_infer.hlo"))
    space = FusionSpace(prog, "tpu")
    return [k for k in space.kernels(space.default()) if not k.is_trivial]


def test_kernel_vector(kernels):
    g = kernel_graph(kernels[0])
    v = kernel_vector(g)
    assert v.shape == (KERNEL_VECTOR_DIM,)
    assert v[:NUM_OPCODES].sum() == g.num_nodes  # opcode histogram
    assert np.isfinite(v).all()
    # the groups but the cpu ones partition the vector, and the geometry groups hold the featurizer's geometry
    # row; the cpu groups name columns of the same geometry block (what cpu-kind targets put there)
    cols = sorted(c for name, cols in FEATURE_GROUPS.items() if not name.startswith("cpu_") for c in cols)
    assert cols == list(range(KERNEL_VECTOR_DIM))
    geo = [c for name, cs in FEATURE_GROUPS.items() if name.startswith("geo_") for c in cs]
    assert len(geo) == GEOMETRY_DIM and np.array_equal(v[geo], g.geom_feat)
    cpu = sorted(c for name, cs in FEATURE_GROUPS.items() if name.startswith("cpu_") for c in cs)
    assert len(set(cpu)) == len(cpu) and set(cpu) < set(geo)


def test_min_runtime_and_dropped_groups(fusion_ds, kernels):
    """Training on slow kernels only sees fewer rows; a dropped group is invisible to the model."""
    train = fusion_ds.load("train")
    m = XgbCostModel("fusion", min_runtime_s=1e-6, drop_groups=["geo_analytical", "nodes"], **SMALL)
    X, ly, _ = m._xy(train)
    assert len(X) == int((train.runtime >= 1e-6).sum()) < len(train.runtime)
    assert not X[:, FEATURE_GROUPS["geo_analytical"] + FEATURE_GROUPS["nodes"]].any()
    m.fit(fusion_ds)
    assert np.isfinite(m.predict(kernels)).all()
    with pytest.raises(ValueError, match="unknown feature group 'nope'"):  # values are checked in fit
        XgbCostModel("fusion", drop_groups=["nope"]).fit(fusion_ds)
    with pytest.raises(TypeError, match=r"unknown parameter\(s\): max_dept \(accepted: .*max_depth"):
        XgbCostModel("fusion", max_dept=3)


def test_fusion_regression_save_load(fusion_ds, kernels, tmp_path):
    m = XgbCostModel("fusion", **SMALL).fit(fusion_ds)
    p = m.predict(kernels)
    assert p.shape == (len(kernels),) and (p > 0).all() and m.predicts_absolute
    train = fusion_ds.load("train")
    fit = m.predict_graphs(train.sample_graphs())
    assert np.corrcoef(np.log(fit), np.log(train.runtime))[0, 1] > 0.8
    path = tmp_path / "x.json"
    m.save(str(path))
    m2 = XgbCostModel.load(str(path), task="fusion", target="tpu")
    assert np.allclose(m2.predict(kernels), p)
    with pytest.raises(ValueError, match="model for task fusion, target tpu; this needs task tile, target tpu"):
        XgbCostModel.load(str(path), task="tile")
    with pytest.raises(ValueError, match="model for task fusion, target tpu; this needs task fusion, target cpu"):
        XgbCostModel.load(str(path), target="cpu")
    # a model saved with another feature layout (the version-1 files had no geometry features)
    doc = json.loads(path.read_text())
    for change in ({"version": 1, "feature_version": None}, {"feature_version": "0123456789ab"}):
        path.write_text(json.dumps({**doc, **change}))
        with pytest.raises(ValueError) as e:
            XgbCostModel.load(str(path))
        msg = str(e.value)
        assert "feature layout" in msg and FEATURE_VERSION in msg and "retrain" in msg and "\n" not in msg
    path.write_text("garbage")
    with pytest.raises(ValueError, match="not an XGBoost"):
        XgbCostModel.load(str(path))
    with pytest.raises(ValueError, match="untrained"):
        XgbCostModel("fusion").save(str(path))


def test_tile_ranking(tile_ds, kernels):
    m = XgbCostModel("tile", **SMALL).fit(tile_ds.load("all"))
    assert not m.predicts_absolute
    s = tile_ds.load("all")
    acc = ordered_pair_accuracy(m.predict_graphs(s.sample_graphs(), s.tile_feat), s.runtime, s.graph)
    assert acc > 0.7, acc
    assert np.isfinite(m.predict(kernels[:3])).all()


def test_shipped_tile_model_ranks_tiles(tile_ds):
    """costmodels/shipped/xgb_tile_tpu.json (what `autotune tile --cost-model xgboost` loads) orders the
    simulator's tiles of kernels it was not trained on (these programs are in the train split, so this is a
    loading and sanity check: the file matches the feature layout and ranks far better than chance)."""
    from autotune import api
    m = api.make_cost_model("xgboost", "tile", "tpu")
    assert isinstance(m, XgbCostModel) and m.task == "tile" and not m.predicts_absolute
    s = tile_ds.load("all")
    acc = ordered_pair_accuracy(m.predict_graphs(s.sample_graphs(), s.tile_feat), s.runtime, s.graph)
    assert acc > 0.8, acc


def test_registry_names():
    assert isinstance(get_cost_model("xgboost"), XgbCostModel)


def test_cli_build_train_evaluate(progs, corpus_names, tmp_path):
    r = CliRunner()
    out = tmp_path / "ds"
    res = r.invoke(dataset_cmd, ["build", "--programs", str(progs), "--task", "fusion", "--evaluator", "sim",
                                 "--configs-per-program", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "manifest.json").is_file()
    model = tmp_path / "m.json"
    res = r.invoke(train_cmd, ["--model", "xgboost", "--task", "fusion", "--data", str(out), "--out", str(model),
                               "--n-estimators", "10"])
    assert res.exit_code == 0, res.output
    res = r.invoke(evaluate_cmd, ["--model", "analytical", "--model", str(model), "--data", str(out),
                                  "--split", "all", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc["programs"]) == set(corpus_names)
    assert set(doc["summary"]) == {"analytical", "m.json"}
    assert set(doc["summary"]["m.json"]) == {"mape", "kendall", "n_kernels", "mape_all", "kendall_all"}
    res = r.invoke(evaluate_cmd, ["--model", "analytical", "--data", str(out), "--split", "all"])
    assert res.exit_code == 0 and "median" in res.output and "mean" in res.output
    # errors: one line, exit status 2
    res = r.invoke(train_cmd, ["--model", "xgboost", "--task", "tile", "--data", str(out), "--out", str(model)])
    assert res.exit_code == 2 and "fusion dataset, not tile" in res.output
    res = r.invoke(evaluate_cmd, ["--model", str(tmp_path / "nope.pt"), "--data", str(out)])
    assert res.exit_code == 2 and "does not exist" in res.output
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00junk")
    res = r.invoke(evaluate_cmd, ["--model", str(bad), "--data", str(out)])
    assert res.exit_code == 2 and "not a GNN" in res.output
    res = r.invoke(train_cmd, ["--model", "xgboost", "--task", "fusion", "--data", str(tmp_path), "--out", str(model)])
    assert res.exit_code == 2 and "not a dataset" in res.output
    # an ablation: feature groups left out, recorded in the file and applied when it predicts
    dropped = tmp_path / "drop.json"
    res = r.invoke(train_cmd, ["--model", "xgboost", "--task", "fusion", "--data", str(out), "--out", str(dropped),
                               "--n-estimators", "10", "--drop-groups", "geo_*,nodes"])
    assert res.exit_code == 0, res.output
    assert "geo_dot" in json.loads(dropped.read_text())["params"]["drop_groups"]
    res = r.invoke(train_cmd, ["--model", "xgboost", "--task", "fusion", "--data", str(out), "--out", str(dropped),
                               "--drop-groups", "nope"])
    assert res.exit_code == 2 and "unknown XGBoost feature group 'nope'" in res.output
    res = r.invoke(train_cmd, ["--model", "gnn", "--task", "fusion", "--data", str(out), "--out", str(dropped),
                               "--drop-groups", "nodes"])
    assert res.exit_code == 2 and "--drop-groups is an option of --model xgboost" in res.output


def test_cli_tile_evaluate_metrics(tile_ds):
    res = CliRunner().invoke(evaluate_cmd, ["--model", "analytical", "--data", str(tile_ds.root), "--split", "all",
                                            "--json"])
    assert res.exit_code == 0, res.output
    summ = json.loads(res.stdout)["summary"]["analytical"]
    assert {"tile_ape", "top1", "top5", "top10", "kendall", "mape"} <= set(summ)
