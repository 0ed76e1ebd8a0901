"""The layout GNN (costmodels/gnn/layout.py): layout features, segment joining (GST), training with
ListMLE / pairwise / MSE on a small sim-priced layout dataset, save/load, and the CLI around it."""
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from autotune.cli.app import main
from autotune.tuning.dataset import Dataset, build_dataset
from autotune.tuning.evaluation import evaluate_models
from costmodels.gnn.layout import (LAYOUT_INPUT_DIM, LayoutGnnModel, LayoutGraph, analytical_log_ratio,
                                   config_node_features, join_partials, segment_bounds, segment_partials)
from costmodels.metrics import kendall

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ["vae_small_infer", "lstm_small_infer", "bert_small_infer", "mlp_mixer_small_infer"]  # conftest's layout_ds
TINY = dict(hidden=16, embedding=8, layers=2)


def test_config_features_name_the_minor_dims_their_sizes_and_the_tile_padding():
    # one configurable node (id 1) with a [3, 200] output whose producer (id 0) is [200, 3]
    node_feat = np.zeros((2, 140), np.float32)
    node_feat[1, 21:23] = [3, 200]
    node_feat[0, 21:23] = [200, 3]
    edge_index = np.array([[1, 0]])
    cfeat = np.full((2, 1, 18), -1, np.float32)
    cfeat[0, 0, :2], cfeat[0, 0, 6:8] = [1, 0], [1, 0]    # row-major output and input
    cfeat[1, 0, :2], cfeat[1, 0, 6:8] = [0, 1], [0, 1]    # column-major both
    f = config_node_features(node_feat, edge_index, np.array([1]), cfeat)
    assert f.shape == (2, 1, LAYOUT_INPUT_DIM) and f[:, 0, 0].tolist() == [1.0, 1.0]
    out0 = f[0, 0, 1:17]
    assert out0[1] == 1 and out0[6 + 0] == 1          # minor dim 1, second-minor dim 0
    assert out0[12] == pytest.approx(np.log2(200) / 10) and out0[13] == pytest.approx(np.log2(3) / 10)
    assert out0[14] == pytest.approx(np.log2(256 / 200) + np.log2(8 / 3))   # (8, 128) padding
    assert out0[15] == 1.0 and f[1, 0, 16] == 0.0    # row-major flag
    in1 = f[1, 0, 17:33]                               # operand: [200, 3] with dim 0 minor
    assert in1[0] == 1 and in1[12] == pytest.approx(np.log2(200) / 10) and in1[15] == 0.0


def test_segment_bounds_cover_the_nodes():
    assert segment_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert segment_bounds(2, 5) == [(0, 1), (1, 2)]
    assert segment_bounds(7, 1) == [(0, 7)]


def test_layout_dataset_shards_are_tpugraphs_layout_files_split_by_family(layout_ds):
    from autotune.compiler.layouts import LayoutSpace
    from autotune.compiler.program import Program
    from autotune.tuning.dataset import read_tpugraphs_layout
    from autotune.tuning.pricing import LayoutCost
    from hardware.base import create_evaluator
    assert layout_ds.task == "layout" and sorted(layout_ds.programs) == sorted(PROGRAMS)
    fams = {}
    for name, rec in layout_ds.programs.items():
        fams.setdefault(rec["family"], set()).add(rec["split"])
    assert all(len(s) == 1 for s in fams.values())
    name = "vae_small_infer"
    space = LayoutSpace(Program.from_file(str(ROOT / "examples" / "hlo" / f"{name}.hlo")), "tpu")
    rec, cfgs = read_tpugraphs_layout(layout_ds.root / layout_ds.programs[name]["file"], space)
    assert cfgs[0] == space.default() and bool(rec.config_is_default[0]) and not rec.config_is_default[1:].any()
    assert len({c.key() for c in cfgs}) == len(cfgs) == rec.num_configs >= 8
    ev = create_evaluator("sim", "tpu")
    again = LayoutCost(space, lambda ks: np.array([m.seconds for m in ev.measure(ks)]))(cfgs)
    np.testing.assert_allclose(rec.config_runtime, np.round(again * 1e9), rtol=1e-6)
    assert np.all(rec.config_analytical > 0)


def test_analytical_terms_are_added_to_a_dataset_built_without_them(layout_ds, tmp_path):
    from autotune.tuning.dataset import add_layout_analytical_terms
    shutil.copytree(layout_ds.root, tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    shard = ds.root / ds.programs["lstm_small_infer"]["file"]
    full = dict(np.load(shard))
    np.testing.assert_allclose(full["config_analytical_terms"].sum(axis=1), full["config_analytical"], rtol=1e-9)
    np.savez(shard, **{k: v for k, v in full.items() if k != "config_analytical_terms"})
    assert add_layout_analytical_terms(Dataset.open(tmp_path / "ds")) == 1
    again = Dataset.open(tmp_path / "ds").load_layout("lstm_small_infer").arrays["config_analytical_terms"]
    np.testing.assert_allclose(again, full["config_analytical_terms"], rtol=1e-12)
    assert add_layout_analytical_terms(Dataset.open(tmp_path / "ds")) == 0
    tampered = dict(full, config_analytical=full["config_analytical"] * 2)
    del tampered["config_analytical_terms"]
    np.savez(shard, **tampered)
    with pytest.raises(ValueError, match="rebuild it"):
        add_layout_analytical_terms(Dataset.open(tmp_path / "ds"))


def test_a_program_without_layout_choices_is_skipped_with_a_warning(tmp_path):
    (tmp_path / "add_only.hlo").write_text(
        "HloModule add_only\n\nENTRY main {\n  a = f32[8,128]{1,0} parameter(0)\n"
        "  ROOT b = f32[8,128]{1,0} add(a, a)\n}\n")
    warned = []
    ds = build_dataset(tmp_path, "layout", "sim", configs_per_program=4, out_dir=tmp_path / "ds", warn=warned.append)
    assert not ds.programs and "add_only" in ds.manifest["skipped"]
    assert len(warned) == 1 and "add_only: skipped" in warned[0]


def test_joined_column_reduction_is_the_networks_forward(layout_ds):
    m = LayoutGnnModel(**TINY)
    m.init_network()
    rec = layout_ds.load_layout("bert_small_infer")
    g = LayoutGraph("bert", "bert", rec.arrays)
    from costmodels.features import FeatureScaler
    m.scaler_ = FeatureScaler().fit([g.raw])
    g.scale(m.scaler_)
    cfgs = np.arange(4)
    with torch.no_grad():
        s, mx = segment_partials(m.net_, g, cfgs, 0)
        joined = join_partials(m.net_, s[:, None], mx[:, None], g.num_nodes)
        whole = m.net_(g.batch(cfgs, 0))
    torch.testing.assert_close(joined, whole)


def test_segments_change_nothing_without_message_passing(layout_ds):
    """With no encoder layers no edge matters, so K segments joined = the whole graph (GST's join is exact)."""
    rec = layout_ds.load_layout("bert_small_infer")
    m1 = LayoutGnnModel(encoder="none", segments=1, **TINY)
    m4 = LayoutGnnModel(encoder="none", segments=4, **TINY)
    m4.init_network().load_state_dict(m1.init_network().state_dict())
    from costmodels.features import FeatureScaler
    g1, g4 = m1.prepare("b", "b", rec.arrays), m4.prepare("b", "b", rec.arrays)
    m1.scaler_ = m4.scaler_ = FeatureScaler().fit([g1.raw])
    assert len(g4.bounds) == 4
    np.testing.assert_allclose(m1.scores(g1), m4.scores(g4), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss", ["listmle", "rank", "mse"])
def test_training_ranks_the_training_programs(layout_ds, loss):
    kw = dict(loss="rank", rank_loss=loss) if loss != "mse" else dict(loss="mse")
    if loss == "rank":
        kw["rank_loss"] = "hinge"
    m = LayoutGnnModel(seed=0, **TINY, **kw)
    m.fit(layout_ds, epochs=25, configs_per_step=12, lr=3e-3, patience=100)
    taus = [kendall(m.predict_layouts(n, f, r.arrays), r.arrays["config_runtime"])
            for n, f, r in layout_ds.iter_layouts("train")]
    assert np.nanmean(taus) > 0.5, taus
    assert m.history_[-1]["best_epoch"] >= 1


def test_graph_segment_training_trains_and_round_trips(layout_ds, tmp_path):
    m = LayoutGnnModel(segments=3, hops=1, seed=1, **TINY)
    m.fit(layout_ds, epochs=3, configs_per_step=8)
    assert all("train_loss" in h for h in m.history_[:-1]) and np.isfinite(m.history_[0]["train_loss"])
    m.save(str(tmp_path / "lay.pt"))
    back = LayoutGnnModel.load(str(tmp_path / "lay.pt"))
    assert back.segments == 3 and back.hops == 1
    rec = layout_ds.load_layout("vae_small_infer")
    np.testing.assert_allclose(back.predict_layouts("v", "vae", rec.arrays), m.predict_layouts("v", "vae", rec.arrays))
    res = evaluate_models({"gst": back, "analytical": "analytical"}, layout_ds, "all")
    assert set(res["programs"]) == set(PROGRAMS)
    assert -1 <= res["summary"]["analytical"]["kendall"] <= 1 and "top1" in res["summary"]["gst"]


def test_an_untrained_residual_model_ranks_as_the_analytical_model_and_round_trips(layout_ds, tmp_path):
    m = LayoutGnnModel(residual=True, hops=1, seed=0, **TINY)
    m.fit(layout_ds, epochs=1, configs_per_step=8, lr=0.0)          # scaler and analytical scale only
    spreads = [np.std(analytical_log_ratio(r.arrays)) for _, _, r in layout_ds.iter_layouts("train")]
    assert m.analytical_scale_ == pytest.approx(1 / np.median([v for v in spreads if v > 0]))
    for name, fam, rec in layout_ds.iter_layouts("all"):
        s = m.predict_layouts(name, fam, rec.arrays)
        ratio = analytical_log_ratio(rec.arrays)
        assert ratio[np.flatnonzero(rec.arrays["config_is_default"])[0]] == 0.0
        np.testing.assert_allclose(s, m.analytical_scale_ * ratio, rtol=1e-5, atol=1e-5)  # zero correction
    m.fit(layout_ds, epochs=2, configs_per_step=8, lr=3e-3)
    m.save(str(tmp_path / "res.pt"))
    back = LayoutGnnModel.load(str(tmp_path / "res.pt"))
    assert back.residual and back.analytical_scale_ == m.analytical_scale_ and back.score_scale == m.score_scale
    rec = layout_ds.load_layout("lstm_small_infer")
    np.testing.assert_allclose(back.predict_layouts("l", "lstm", rec.arrays), m.predict_layouts("l", "lstm", rec.arrays))
    no_prices = {k: v for k, v in rec.arrays.items() if k != "config_analytical"}
    with pytest.raises(ValueError, match="analytical prices"):
        back.predict_layouts("l", "lstm", no_prices)


def test_cli_train_and_evaluate_layout(layout_ds, tmp_path):
    out = tmp_path / "m.pt"
    r = CliRunner().invoke(main, ["train", "--model", "gnn", "--task", "layout", "--data", str(layout_ds.root),
                                  "--out", str(out), "--epochs", "1", "--loss", "listmle", "--segments", "2",
                                  "--prune-hops", "2", "--hidden", "8", "--layers", "1"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["evaluate", "--task", "layout", "--data", str(layout_ds.root), "--split", "all",
                                  "--cost-model", str(out), "--cost-model", "analytical", "--json"])
    assert r.exit_code == 0, r.output
    assert '"kendall"' in r.output
    r = CliRunner().invoke(main, ["evaluate", "--task", "tile", "--data", str(layout_ds.root)])
    assert r.exit_code == 2 and "is a layout dataset, not tile" in r.output
    r = CliRunner().invoke(main, ["train", "--model", "xgboost", "--task", "layout", "--data", str(layout_ds.root),
                                  "--out", str(tmp_path / "x.json"), "--n-estimators", "20"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["evaluate", "--task", "layout", "--data", str(layout_ds.root), "--split", "all",
                                  "--cost-model", str(tmp_path / "x.json"), "--json"])
    assert r.exit_code == 0 and '"kendall"' in r.output, r.output
    r = CliRunner().invoke(main, ["evaluate", "--task", "fusion", "--data", str(layout_ds.root),
                                  "--cost-model", str(tmp_path / "x.json")])
    assert r.exit_code == 2


def test_cli_dataset_build_layout_and_layout_only_options(tmp_path):
    shutil.copy(ROOT / "examples" / "hlo" / "lstm_small_infer.hlo", tmp_path / "lstm_small_infer.hlo")
    r = CliRunner().invoke(main, ["dataset", "build", "--programs", str(tmp_path), "--task", "layout", "--evaluator",
                                  "sim", "--configs-per-program", "5", "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    assert "configurable nodes, 5 configurations" in r.output
    ds = Dataset.open(tmp_path / "ds")
    assert ds.load_layout("lstm_small_infer").num_configs == 5
    r = CliRunner().invoke(main, ["train", "--model", "gnn", "--task", "fusion", "--data", str(tmp_path / "ds"),
                                  "--out", str(tmp_path / "m.pt"), "--segments", "2"])
    assert r.exit_code == 2 and "not fusion" in r.output
