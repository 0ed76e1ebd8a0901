"""XLA:CPU geometry features (costmodels.cpu_geometry) on small hand-written kernels, and the cpu feature layout."""
import json
import math

import numpy as np
import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from costmodels import features as F
from costmodels.cpu_geometry import CPU_GEOMETRY_NAMES, cpu_geometry_row

ADD_F = """add_f {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT r = f32[] add(p, q)
}

"""


def kernels_of(body: str, target: str = "cpu", extra: str = ""):
    prog = Program.from_text("HloModule m\n\n" + extra + "ENTRY e {\n" + body + "\n}\n")
    space = FusionSpace(prog, target)
    return [k for k in space.kernels(space.default()) if not k.is_trivial]


def row(kernel) -> dict:
    return dict(zip(CPU_GEOMETRY_NAMES, cpu_geometry_row(kernel)))


def l2(x):
    return math.log2(1 + x)


def test_softmax_row_reduction_counts_work_under_the_reduce():
    (k,) = [k for k in kernels_of("""
  x = f32[64,128]{1,0} parameter(0)
  e = f32[64,128]{1,0} exponential(x)
  z = f32[] constant(0)
  ROOT s = f32[64]{0} reduce(e, z), dimensions={1}, to_apply=add_f""", extra=ADD_F) if k.root_instruction.opcode == "reduce"]
    r = row(k)
    assert r["cpu_has_reduce"] == 1 and r["cpu_root_reduce"] == 1 and r["cpu_reduce_minor"] == 1
    assert r["cpu_reduce_factor"] == pytest.approx(l2(128)) and r["cpu_reduce_kept"] == pytest.approx(l2(64))
    # the exponential runs at each of the reduce's 8192 input elements, not at the 64 outputs
    assert r["cpu_ev_transcendental"] == pytest.approx(l2(64 * 128))
    assert r["cpu_out_elements"] == pytest.approx(l2(64)) and r["cpu_out_rank"] == 1


def test_column_reduction_is_not_minor():
    (k,) = kernels_of("""
  x = f32[64,128]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT s = f32[128]{0} reduce(x, z), dimensions={0}, to_apply=add_f""", extra=ADD_F)
    assert row(k)["cpu_reduce_minor"] == 0


def test_dot_dimensions_and_layouts():
    (k,) = kernels_of("""
  a = f32[32,64]{1,0} parameter(0)
  b = f32[64,16]{1,0} parameter(1)
  ROOT d = f32[32,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")
    r = row(k)
    assert r["cpu_has_dot"] == 1 and r["cpu_dot_matvec"] == 0
    assert (r["cpu_dot_M"], r["cpu_dot_N"], r["cpu_dot_K"]) == pytest.approx((l2(32), l2(16), l2(64)))
    assert r["cpu_dot_flops"] == pytest.approx(l2(2 * 32 * 16 * 64))
    assert r["cpu_dot_lhs_k_minor"] == 1 and r["cpu_dot_rhs_k_minor"] == 0


def test_convolution_features():
    (k,) = kernels_of("""
  x = f32[2,16,16,8]{3,2,1,0} parameter(0)
  w = f32[3,3,8,32]{3,2,1,0} parameter(1)
  ROOT c = f32[2,8,8,32]{3,2,1,0} convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f""")
    r = row(k)
    assert r["cpu_has_conv"] == 1 and r["cpu_conv_window"] == pytest.approx(l2(9))
    assert r["cpu_conv_in_features"] == pytest.approx(l2(8)) and r["cpu_conv_out_features"] == pytest.approx(l2(32))
    assert r["cpu_conv_out_positions"] == pytest.approx(l2(2 * 8 * 8))


def test_broadcast_and_transposed_inputs_and_the_loop_shape():
    (k,) = kernels_of("""
  x = f32[4,16,16,32]{3,2,1,0} parameter(0)
  b = f32[32]{0} parameter(1)
  t = f32[4,16,16,32]{2,1,0,3} parameter(2)
  bb = f32[4,16,16,32]{3,2,1,0} broadcast(b), dimensions={3}
  c = f32[4,16,16,32]{3,2,1,0} copy(t)
  a = f32[4,16,16,32]{3,2,1,0} add(x, bb)
  ROOT m = f32[4,16,16,32]{3,2,1,0} multiply(a, c)""")
    r = row(k)
    assert r["cpu_n_inputs"] == 3 and r["cpu_n_broadcast_inputs"] == 1
    assert r["cpu_in_broadcast_bytes"] == pytest.approx(l2(32 * 4))
    assert r["cpu_in_transposed_bytes"] == pytest.approx(l2(4 * 16 * 16 * 32 * 4))
    assert r["cpu_out_rank"] == 4 and r["cpu_out_minor"] == pytest.approx(l2(32))
    assert r["cpu_out_rows"] == pytest.approx(l2(4 * 16 * 16)) and r["cpu_out_minor_tail8"] == 0


def test_cpu_rows_fill_the_geometry_block_on_cpu_only():
    body = """
  a = f32[64,256]{1,0} parameter(0)
  b = f32[64,256]{1,0} parameter(1)
  ROOT c = f32[64,256]{1,0} add(a, b)"""
    (kc,) = kernels_of(body, "cpu")
    (kt,) = kernels_of(body, "tpu")
    gc = F.geometry_matrix([kc], "cpu")[0]
    assert gc[0] == 0.0  # geo_has_geometry: no tile geometry, so no tiled analytical baseline either
    assert F.geometry_analytical_seconds(gc[None])[0] == 0.0
    names = F.geometry_names("cpu")
    filled = [i for i, n in enumerate(names) if n]
    assert [names[i] for i in filled] == list(CPU_GEOMETRY_NAMES)
    np.testing.assert_allclose(gc[filled], cpu_geometry_row(kc), rtol=1e-6)
    assert not gc[[i for i, n in enumerate(names) if not n]].any()
    gt = F.geometry_matrix([kt], "tpu")[0]
    assert gt[0] == 1.0 and F.geometry_names("tpu") == F.GEOMETRY_FEATURE_NAMES
    assert F.kernel_graph(kc, "cpu").geom_feat.tolist() == pytest.approx(gc.tolist())


def test_feature_versions_by_target():
    assert F.feature_version("tpu") == F.FEATURE_VERSION == F.feature_version("tpu-v2")
    assert F.feature_version("cpu") == F.CPU_FEATURE_VERSION != F.FEATURE_VERSION
    assert F.geometry_layout("h100") == "none" and F.feature_version("h100") == F.FEATURE_VERSION


def test_cpu_xgboost_file_from_the_old_layout_is_refused(tmp_path):
    from costmodels.xgb import FEATURE_GROUPS, XgbCostModel
    ks = kernels_of("""
  a = f32[64,256]{1,0} parameter(0)
  b = f32[64,256]{1,0} parameter(1)
  ROOT c = f32[64,256]{1,0} add(a, b)""")
    m = XgbCostModel("fusion", "cpu", n_estimators=3)
    from costmodels.xgb import kernel_static_vector
    from costmodels.features import kernel_graphs, TILE_DIM
    X = np.stack([np.concatenate([kernel_static_vector(g), np.zeros(TILE_DIM, np.float32)])
                  for g in kernel_graphs(ks * 4, "cpu")])
    m.fit_matrix(X, np.log([1e-5, 2e-5, 3e-5, 4e-5]), np.arange(4))
    path = tmp_path / "m.json"
    m.save(str(path))
    assert XgbCostModel.load(str(path), "fusion", "cpu").predict(ks)[0] > 0
    doc = json.loads(path.read_text())
    assert doc["feature_version"] == F.CPU_FEATURE_VERSION
    doc["feature_version"] = F.FEATURE_VERSION  # a cpu model trained before the cpu geometry rows
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="retrain") as e:
        XgbCostModel.load(str(path), "fusion", "cpu")
    assert "\n" not in str(e.value) and F.CPU_FEATURE_VERSION in str(e.value)
    # ablation groups name the cpu rows' columns of the same block
    assert set(FEATURE_GROUPS["cpu_dot"]) <= set(range(min(FEATURE_GROUPS["geo_shape"]), max(FEATURE_GROUPS["geo_analytical"]) + 1))


def test_gnn_recipe_leaves_the_tile_encoding_off_on_cpu():
    from autotune import api
    from costmodels.gnn import GnnCostModel
    assert api.gnn_training_options("fusion", {}, "cpu")["ple_bins"] == 0
    assert api.gnn_training_options("fusion", {}, "tpu")["ple_bins"] == 32
    assert api.gnn_training_options("fusion", {"ple_bins": 4}, "cpu")["ple_bins"] == 4  # asked for: refused below
    with pytest.raises(ValueError, match="ple_bins"):  # values are checked on first use (fit, predict, load)
        GnnCostModel("fusion", "cpu", geometry_features=True, ple_bins=4).init_network()


def test_xgboost_feature_groups_by_name_and_prefix():
    from autotune import api
    from costmodels.xgb import FEATURE_GROUPS
    cpu = api.xgboost_feature_groups("cpu_*")
    assert cpu == [g for g in FEATURE_GROUPS if g.startswith("cpu_")] and "cpu_dot" in cpu
    assert api.xgboost_feature_groups("cpu_dot, nodes") == ["cpu_dot", "nodes"]
    with pytest.raises(ValueError, match="unknown XGBoost feature group 'cpu_nope'"):
        api.xgboost_feature_groups("cpu_nope")
