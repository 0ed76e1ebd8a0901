"""The XGBoost layout baseline (costmodels/xgb_layout.py): its feature rows, training with rank:pairwise
per program, save/load, and model files of the wrong task refused in one line."""
import numpy as np
import pytest

from autotune import api
from autotune.compiler.layouts import KERNEL_CLASSES
from costmodels.gnn.layout import LAYOUT_INPUT_DIM, LayoutGraph, analytical_log_ratio
from costmodels.metrics import kendall
from costmodels.xgb_layout import LAYOUT_XGB_DIM, LayoutXgbModel, layout_config_matrix


def test_feature_rows_aggregate_the_node_configurations_and_the_analytical_ratio(layout_ds):
    rec = layout_ds.load_layout("bert_small_infer")
    g = LayoutGraph("bert", "bert", rec.arrays)
    X = layout_config_matrix(g)
    assert X.shape == (rec.num_configs, LAYOUT_XGB_DIM)
    np.testing.assert_allclose(X[:, :LAYOUT_INPUT_DIM], g.cfg.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(X[:, -1], analytical_log_ratio(rec.arrays), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(X[:, -1 - len(KERNEL_CLASSES):-1].sum(axis=1), np.exp(X[:, -1]), rtol=1e-5)
    assert X[0, -1] == 0.0 and X[:, -1 - len(KERNEL_CLASSES)].max() > 0   # the default; layout copies priced
    counts = X[0, LAYOUT_INPUT_DIM::5][:3]        # convolutions, dots, reshapes
    assert counts.sum() == len(g.ids) and counts[1] > 0


def test_training_ranks_the_training_programs_and_round_trips(layout_ds, tmp_path):
    m = LayoutXgbModel(n_estimators=60, early_stopping_rounds=0).fit(layout_ds)
    taus = [kendall(m.predict_layouts(n, f, r.arrays), r.arrays["config_runtime"])
            for n, f, r in layout_ds.iter_layouts("train")]
    assert np.mean(taus) > 0.5, taus
    m.save(str(tmp_path / "x.json"))
    back = api.load_model_file(tmp_path / "x.json")
    assert isinstance(back, LayoutXgbModel)
    rec = layout_ds.load_layout("vae_small_infer")
    np.testing.assert_allclose(back.predict_layouts("v", "vae", rec.arrays), m.predict_layouts("v", "vae", rec.arrays))
    with pytest.raises(ValueError, match="task layout.*this needs task fusion"):
        api.load_model_file(tmp_path / "x.json", "fusion", "tpu")
    with pytest.raises(ValueError, match="target tpu; this needs task layout, target cpu"):
        api.load_model_file(tmp_path / "x.json", "layout", "cpu")
    fusion_xgb = api.shipped_model("xgboost", "fusion", "tpu")
    with pytest.raises(ValueError, match="task fusion.*this needs task layout"):
        api.load_model_file(fusion_xgb, "layout", "tpu")
    fusion_gnn = api.shipped_model("gnn", "fusion", "tpu")
    with pytest.raises(ValueError, match="task fusion.*this needs task layout"):
        api.load_model_file(fusion_gnn, "layout", "tpu")


def test_untrained_model_is_refused(layout_ds):
    rec = layout_ds.load_layout("vae_small_infer")
    with pytest.raises(ValueError, match="not trained"):
        LayoutXgbModel().predict_layouts("v", "vae", rec.arrays)
