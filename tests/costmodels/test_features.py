"""Node/kernel featurization (paper section 3.1) on tiny hand-written kernels."""
import math

import numpy as np
import pytest

from costmodels import features as F
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.hlo import OPCODES
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileConfig


def kernels_of(body: str, extra: str = ""):
    prog = Program.from_text("HloModule m\n\n" + extra + "ENTRY e {\n" + body + "\n}\n")
    space = FusionSpace(prog, "tpu")
    return [k for k in space.kernels(space.default()) if not k.is_trivial]


def col(name):
    return F.NODE_FEATURE_NAMES.index(name)


ADD = """
  a = f32[64,256]{1,0} parameter(0)
  b = f32[64,256]{1,0} parameter(1)
  ROOT c = f32[64,256]{1,0} add(a, b)"""

CONV = """
  x = f32[2,16,16,8]{3,2,1,0} parameter(0)
  w = f32[3,3,8,32]{3,2,1,0} parameter(1)
  ROOT c = f32[2,8,8,32]{3,2,1,0} convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"""

REDUCE_EXTRA = """add_f {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT r = f32[] add(p, q)
}

"""
REDUCE = """
  a = f32[32,128]{1,0} parameter(0)
  e = f32[32,128]{1,0} exponential(a)
  z = f32[] constant(0)
  ROOT r = f32[32]{0} reduce(e, z), dimensions={1}, to_apply=add_f"""


def test_vocabulary_is_stable_and_complete():
    assert F.OPCODE_VOCAB[0] == "<unk>"
    assert F.opcode_id("abs") == 1 and F.opcode_id("add") == 2
    assert F.opcode_id("xor") == F.NUM_OPCODES - 1
    assert F.opcode_id("no-such-op") == F.OTHER_OPCODE_ID == 0
    # Every opcode has its own id, except the ones XLA added after the vocabulary was frozen, which
    # share the explicit "other" bucket (the shipped models' embedding size is the vocabulary's).
    assert F.OTHER_BUCKET_OPCODES == set(OPCODES) - set(F.OPCODE_VOCAB) == set(
        "acos acosh asin asinh atan atanh collective-reduce cosh mulhi scan shuffle sinh".split())
    assert all(F.opcode_id(op) == F.OTHER_OPCODE_ID for op in F.OTHER_BUCKET_OPCODES)
    assert len(set(F.OPCODE_VOCAB)) == F.NUM_OPCODES == 126


def test_feature_names_are_unique_and_sized():
    assert len(set(F.NODE_FEATURE_NAMES)) == F.NODE_DIM
    assert len(set(F.TILE_FEATURE_NAMES)) == F.TILE_DIM
    assert F.STATIC_COLUMNS == tuple(range(col("static_flops"), F.NODE_DIM))


def test_add_kernel_graph():
    (k,) = kernels_of(ADD)
    g = F.kernel_graph(k)
    assert g.num_nodes == 3 and g.node_feat.shape == (3, F.NODE_DIM)
    assert g.edge_index.tolist() == [[0, 1], [2, 2]]  # both parameters feed the add
    assert g.opcode.tolist() == [F.opcode_id("parameter")] * 2 + [F.opcode_id("add")]
    x = g.node_feat
    assert x[:2, col("is_parameter")].tolist() == [1, 1] and x[2, col("is_root")] == 1
    assert x[2, col("rank")] == 2
    assert x[2, col("dim_0")] == pytest.approx(math.log2(65))
    assert x[2, col("dim_1")] == pytest.approx(math.log2(257))
    assert x[2, col("elements")] == pytest.approx(math.log2(1 + 64 * 256))
    assert x[2, col("dtype_f32")] == 1 and x[2, col("dtype_bf16")] == 0
    assert x[2, col("minor_to_major_0")] == 2 and x[2, col("minor_to_major_1")] == 1   # {1,0} + 1
    assert x[2, col("default_layout")] == 1
    assert x[2, col("static_flops")] == pytest.approx(math.log2(1 + 64 * 256))
    assert x[0, col("n_users")] == 1
    assert g.tiled_dims == (64, 256)
    assert F.kernel_graph(k) is g  # cached by hash


def test_conv_window_and_dim_labels():
    (k,) = kernels_of(CONV)
    g = F.kernel_graph(k)
    x = g.node_feat[-1]
    assert x[col("window_size_0")] == pytest.approx(2.0)  # log2(1 + 3)
    assert x[col("window_stride_1")] == pytest.approx(math.log2(3))
    assert x[col("window_size_product")] == pytest.approx(math.log2(10))
    assert x[col("window_pad_lo_0")] == pytest.approx(1.0) and x[col("window_pad_hi_1")] == pytest.approx(1.0)
    assert x[col("conv_lhs_batch")] == 1 and x[col("conv_lhs_feature")] == 4   # b01f: b at 0, f at 3
    assert x[col("conv_kernel_in")] == 3 and x[col("conv_kernel_out")] == 4    # 01io
    assert x[col("feature_group_count")] == pytest.approx(1.0)  # log2(1 + 1)


def test_reduce_dimensions_and_constant_node():
    (k,) = kernels_of(REDUCE, REDUCE_EXTRA)
    g = F.kernel_graph(k)
    ops = [F.OPCODE_VOCAB[o] for o in g.opcode]
    assert ops[-1] == "reduce" and "exponential" in ops
    x = g.node_feat[-1]
    assert x[col("dimensions_0")] == 2 and x[col("dimensions_count")] == 1   # dimensions={1}
    e = g.node_feat[ops.index("exponential")]
    assert e[col("static_transcendentals")] == pytest.approx(math.log2(1 + 32 * 128))
    assert g.tiled_dims == (32, 128)  # a reduce kernel is tiled over its input
    # topological: every edge goes forward in node order
    assert (g.edge_index[0] < g.edge_index[1]).all()


def test_tile_features():
    v = F.tile_features((64, 256), TileConfig((8, 128)))
    names = F.TILE_FEATURE_NAMES
    assert v[names.index("has_tile")] == 1
    assert v[names.index("tile_log2_0")] == 3 and v[names.index("tile_log2_1")] == 7
    assert v[names.index("tile_elements")] == 10
    assert v[names.index("n_tiles")] == pytest.approx(math.log2(8 * 2))
    assert v[names.index("tile_fraction")] == pytest.approx(1 / 16)
    assert v[names.index("tile_ratio_1")] == pytest.approx(0.5)
    assert not F.tile_features((64, 256), None).any()
    k = F.tile_features((64, 256), TileConfig((8, 128), kernel=(3, 3)))
    assert k[names.index("has_kernel_tile")] == 1 and k[names.index("kernel_tile_elements")] == pytest.approx(math.log2(9))
    m = F.tile_feature_matrix((64, 256), [TileConfig((8, 128)), None, (64, 256)])
    assert m.shape == (3, F.TILE_DIM) and m[2, names.index("tile_fraction")] == 1.0
    # rank > 6: leading dims folded into the first
    big = F.tile_features((2, 2, 2, 2, 2, 8, 128), (1, 1, 1, 1, 1, 8, 128))
    assert big[names.index("tile_log2_5")] == 7


def test_feature_scaler_roundtrip():
    a = np.array([[0.0, 5.0, 1.0], [10.0, 5.0, 3.0]], np.float32)
    s = F.FeatureScaler().fit([a])
    out = s.transform(a)
    assert out[:, 0].tolist() == [0.0, 1.0] and out[:, 1].tolist() == [0.0, 0.0] and out[:, 2].tolist() == [0.0, 1.0]
    s2 = F.FeatureScaler.from_state(s.state_dict())
    assert np.allclose(s2.transform(np.array([[5.0, 5.0, 2.0]])), [[0.5, 0.0, 0.5]])
    with pytest.raises(ValueError):
        F.FeatureScaler().transform(a)
    p = F.FeatureScaler().partial_fit(a[:1]).partial_fit(a[1:])
    assert np.allclose(p.lo, s.lo) and np.allclose(p.hi, s.hi)


def test_tpugraphs_features():
    (k,) = kernels_of(CONV)
    feat, ops, edges = F.tpugraphs_node_features(k)
    assert feat.shape == (3, F.TPUGRAPHS_NODE_DIM) == (3, 140)
    root = feat[-1]
    assert root[0] == 1 and feat[0, 0] == 0           # is_root
    assert root[13] == 1                               # f32 one-hot
    assert root[21:25].tolist() == [2, 8, 8, 32]       # shape dims
    assert root[27] == 50 and root[28] == 2 * 8 * 8 * 32
    assert root[39:41].tolist() == [3, 3] and root[45] == 6 and root[46] == 9   # window size, sum, product
    assert root[47:49].tolist() == [2, 2]              # stride
    assert root[105] == 1                              # feature_group_count
    assert root[134:138].tolist() == [3, 2, 1, 0]      # minor_to_major
    assert feat[1, 30] == 1                            # second parameter's number
    assert sorted(edges.tolist()) == [[2, 0], [2, 1]]  # [consumer, producer]
    assert ops.tolist() == [F.opcode_id("parameter")] * 2 + [F.opcode_id("convolution")]


def test_real_program_features_are_finite():
    prog = Program.from_file("examples/hlo/vae_small_infer.hlo")
    space = FusionSpace(prog, "tpu")
    for k in space.kernels(space.default()):
        g = F.kernel_graph(k)
        assert np.isfinite(g.node_feat).all() and np.isfinite(g.kernel_feat).all()
        assert g.edge_index.shape[0] == 2 and (g.edge_index < g.num_nodes).all()
        assert F.tpugraphs_node_features(k)[0].shape[1] == 140


# ---- geometry features (the kernel at its default tile; issue 17)
DOT = """
  x = f32[128,256]{1,0} parameter(0)
  w = f32[256,64]{1,0} parameter(1)
  ROOT d = f32[128,64]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""


def geo(g, name):
    return float(g.geom_feat[F.GEOMETRY_FEATURE_NAMES.index(name)])


def test_geometry_layout_and_version():
    assert len(set(F.GEOMETRY_FEATURE_NAMES)) == F.GEOMETRY_DIM
    assert sum(len(v) for v in F.GEOMETRY_GROUPS.values()) == F.GEOMETRY_DIM
    assert len(F.FEATURE_VERSION) == 12


def test_geometry_of_a_dot_by_hand():
    """f32[128,256] x f32[256,64]: K = 256, M = 128, N = 64; the output's minor dim (64) pads to 128 lanes."""
    (k,) = kernels_of(DOT)
    g = F.kernel_graph(k)
    assert g.geom_feat.shape == (F.GEOMETRY_DIM,) and g.geom_feat.dtype == np.float32
    assert geo(g, "geo_has_geometry") == 1.0 and geo(g, "geo_rank") == 2.0
    assert geo(g, "geo_has_hero") == 1.0 and geo(g, "geo_hero_conv") == 0.0
    assert geo(g, "geo_K") == pytest.approx(math.log2(257))
    assert geo(g, "geo_M") == pytest.approx(math.log2(129))
    assert geo(g, "geo_N") == pytest.approx(math.log2(65))
    assert geo(g, "geo_padded_elements") == pytest.approx(math.log2(1 + 128 * 128))
    assert geo(g, "geo_shape_pad_factor") == pytest.approx(2.0)
    # inputs by bytes: the lhs (128 KiB) first, then the rhs (64 KiB)
    assert geo(g, "geo_in0_lhs") == 1.0 and geo(g, "geo_in0_bytes") == pytest.approx(math.log2(1 + 128 * 256 * 4))
    assert geo(g, "geo_in1_rhs") == 1.0 and geo(g, "geo_in1_bytes") == pytest.approx(math.log2(1 + 256 * 64 * 4))
    assert geo(g, "geo_in2_bytes") == 0.0 and geo(g, "geo_n_inputs") == 2.0
    # one tile holds it all (16 MiB scratchpad): the default tile is the whole shape
    assert geo(g, "geo_n_tiles") == pytest.approx(1.0) and geo(g, "geo_tile_fraction") == 1.0
    # the analytical model's own prediction is one of the features
    from costmodels.analytical import AnalyticalCostModel
    t = AnalyticalCostModel("tpu").predict([k], [None])[0]
    assert geo(g, "geo_t") == pytest.approx(math.log2(1 + t * 1e9), rel=1e-5)


def test_geometry_is_deterministic_and_target_aware():
    (k,) = kernels_of(REDUCE, REDUCE_EXTRA)
    a = F.geometry_features(k, "tpu")
    F.clear_cache()
    b = F.kernel_graph(k).geom_feat
    assert np.array_equal(a, b) and np.isfinite(a).all()
    # a reduce kernel is tiled over the reduce's input f32[32,128]: no padding, no matrix unit
    assert geo(F.kernel_graph(k), "geo_elements") == pytest.approx(math.log2(1 + 32 * 128))
    assert geo(F.kernel_graph(k), "geo_has_hero") == 0.0
    assert not F.geometry_features(k, "h100").any()  # targets with neither tiles nor cpu rows: all zero
    cpu = F.geometry_features(k, "cpu")  # cpu: XLA:CPU's view in the same block, no tile geometry
    assert cpu[0] == 0.0 and cpu.any() and not np.array_equal(cpu, a)


def test_geometry_on_a_real_program_dot():
    """Every dot kernel of a real example program: K is the product of the dot's contracting dims."""
    prog = Program.from_file("examples/hlo/bert_small_infer.hlo")
    space = FusionSpace(prog, "tpu")
    seen = 0
    for k in space.kernels(space.default()):
        comp = k.computation
        dots = [m for m in k.members if comp.instructions[m].opcode == "dot"]
        g = F.kernel_graph(k)
        assert np.isfinite(g.geom_feat).all()
        if not dots:
            continue
        ins = comp.instructions[dots[0]]
        lhs = comp.instructions[comp.operands[dots[0]][0]].shape
        K = math.prod(lhs.dims[d] for d in ins.parsed["lhs_contracting_dims"])
        assert geo(g, "geo_K") == pytest.approx(math.log2(1 + K))
        seen += 1
    assert seen > 0


def test_geometry_analytical_seconds_is_the_tiled_roofline():
    """geo_t read back in seconds is the analytical model's tiled time; zero rows (no geometry) give 0."""
    from autotune.compiler.tiles import roofline_seconds
    ks = kernels_of(DOT) + kernels_of(REDUCE, REDUCE_EXTRA)
    rows = np.stack([F.geometry_features(k) for k in ks])
    t = F.geometry_analytical_seconds(rows)
    assert t.shape == (len(ks),) and (t > 0).all()
    assert t == pytest.approx(roofline_seconds(ks, None, "tpu"), rel=1e-5)
    assert F.geometry_analytical_seconds(np.zeros((2, F.GEOMETRY_DIM))).tolist() == [0.0, 0.0]
