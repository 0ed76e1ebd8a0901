"""TileSpace / TileConfig: tile counts checked by hand on tiny kernels."""
import numpy as np
import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileConfig, TileSpace, tiling_info


def kernels_of(body: str, target: str = "tpu"):
    prog = Program.from_text("HloModule m\n\nENTRY e {\n" + body + "\n}\n")
    space = FusionSpace(prog, target)
    return [k for k in space.kernels(space.default()) if not k.is_trivial]


def one_kernel(body: str):
    ks = kernels_of(body)
    assert len(ks) == 1, ks
    return ks[0]


ADD = """
  a = f32[64,256]{1,0} parameter(0)
  b = f32[64,256]{1,0} parameter(1)
  ROOT c = f32[64,256]{1,0} add(a, b)"""


def test_tile_config_key_roundtrip_and_frozen():
    t = TileConfig((8, 128))
    assert t.key() == "8x128"
    assert TileConfig.from_key("8x128") == t
    k = TileConfig((4, 32), kernel=(3, 1, 192, 384))
    assert TileConfig.from_key(k.key()) == k
    assert TileConfig(()).key() == "scalar"
    with pytest.raises(Exception):
        t.dims = (1, 1)
    with pytest.raises(ValueError):
        TileConfig((0, 128))


def test_elementwise_counts_by_hand():
    sp = TileSpace(one_kernel(ADD))
    # second-minor 64 = 8 units of 8 -> {8,16,32,64}; minor 256 = 2 units of 128 -> {128,256}
    got = {t.dims for t in sp.tiles()}
    assert got == {(s, l) for s in (8, 16, 32, 64) for l in (128, 256)}
    assert len(sp) == 8


def test_not_divisible_dims_use_full_extent():
    sp = TileSpace(one_kernel("""
  a = f32[20,200]{1,0} parameter(0)
  ROOT c = f32[20,200]{1,0} negate(a)"""))
    # 20 -> 3 units of 8 (ladder 1,2,3) -> {8,16,20}; 200 -> 2 units of 128 -> {128,200}
    assert {t.dims for t in sp.tiles()} == {(s, l) for s in (8, 16, 20) for l in (128, 200)}


def test_layout_decides_minor_dims():
    sp = TileSpace(one_kernel("""
  a = f32[64,256]{0,1} parameter(0)
  ROOT c = f32[64,256]{0,1} negate(a)"""))
    # dim 0 (64) is now minor: one 128-lane unit -> {64}; dim 1 (256) second-minor: 32 units of 8
    assert {t.dims for t in sp.tiles()} == {(64, s) for s in (8, 16, 32, 64, 128, 256)}


def test_major_dims_ladder():
    sp = TileSpace(one_kernel("""
  a = f32[4,16,128]{2,1,0} parameter(0)
  ROOT c = f32[4,16,128]{2,1,0} negate(a)"""))
    assert {t.dims for t in sp.tiles()} == {(m, s, 128) for m in (1, 2, 4) for s in (8, 16)}


def test_reduce_is_tiled_over_its_input():
    k = one_kernel("""
  a = f32[64,256]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[64]{0} reduce(a, z), dimensions={1}, to_apply=add
}

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)""")
    sp = TileSpace(k)
    assert sp.shape == (64, 256)
    assert len(sp) == 8


def test_scratchpad_limit_double_buffered():
    k = one_kernel("""
  a = f32[8192,8192]{1,0} parameter(0)
  b = f32[8192,8192]{1,0} parameter(1)
  ROOT c = f32[8192,8192]{1,0} add(a, b)""")
    sp = TileSpace(k)
    scratch = sp.target.scratchpad_bytes
    assert (8192, 8192) not in {t.dims for t in sp.tiles()}
    for t in sp.tiles():
        assert sp.footprint(t) <= scratch
    # 3 arrays x 4 bytes x 2 buffers: a 512x512 tile takes 6 MiB, 1024x1024 takes 24 MiB
    assert sp.footprint(TileConfig((512, 512))) == pytest.approx(2 * 3 * 512 * 512 * 4)
    assert sp.is_valid(TileConfig((512, 512)))
    assert not sp.is_valid(TileConfig((1024, 1024)))
    assert not sp.is_valid(TileConfig((100, 128)))  # not a multiple of 8 nor the full extent


def test_default_random_neighbor_repair_encode():
    sp = TileSpace(one_kernel(ADD))
    tiles = set(sp.tiles())
    assert sp.default() in tiles
    rng = np.random.default_rng(0)
    for _ in range(20):
        t = sp.random(rng)
        assert t in tiles
        n = sp.neighbor(t, rng)
        assert n in tiles
    t = TileConfig((16, 128))
    assert sp.decode(sp.encode(t)) == t
    assert sp.repair(TileConfig((17, 130))) in tiles
    assert sp.crossover(TileConfig((8, 128)), TileConfig((64, 256)), rng) in tiles


def test_default_prefers_large_tiles_for_elementwise():
    sp = TileSpace(one_kernel(ADD))
    assert sp.default().dims == (64, 256)  # whole array fits: one step, no per-tile overhead


def test_dot_roles_and_tpugraphs_bounds():
    k = one_kernel("""
  a = f32[256,512]{1,0} parameter(0)
  w = f32[512,384]{1,0} parameter(1)
  ROOT d = f32[256,384]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")
    info = tiling_info(k)
    assert info.hero == "dot" and info.K == 512
    assert list(info.m_mask) == [True, False] and list(info.n_mask) == [False, True]
    # bounds are physical major-to-minor in (8,128) units: [4, 2] -> 32 rows x 256 columns
    assert info.bounds_to_tile([4, 2]).dims == (32, 256)
    assert info.bounds_to_tile([], []) is None


def test_copy_bounds_follow_layout():
    k = one_kernel("""
  a = f32[32,5,5,256]{3,2,1,0} parameter(0)
  ROOT c = f32[32,5,5,256]{3,0,2,1} copy(a)""")
    info = tiling_info(k)
    # layout {3,0,2,1}: major-to-minor dims 1,2,0,3; units 1,1,8,128 (TpuGraphs copy.25 default)
    assert info.bounds_to_tile([5, 5, 4, 2]).dims == (32, 5, 5, 256)
    assert info.bounds_to_tile([1, 1, 2, 1]).dims == (16, 1, 1, 128)


def test_other_targets_use_their_vector_shape():
    k = one_kernel(ADD)
    for target in ("h100", "cpu", "tpu-v2"):
        sp = TileSpace(k, target)
        lanes = sp.target.vector_shape[1]
        assert len(sp) >= 1
        for t in sp.tiles():
            assert t.dims[1] % lanes == 0 or t.dims[1] == 256
            assert sp.footprint(t) <= sp.target.scratchpad_bytes
        assert sp.default() in set(sp.tiles())


def test_scalar_output_kernel():
    k = one_kernel("""
  a = f32[1024]{0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(a, z), dimensions={0}, to_apply=add
}

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)""")
    sp = TileSpace(k)
    assert sp.shape == (1024,)
    assert {t.dims for t in sp.tiles()} == {(1024,)}


# An LSTM cell's shape: a dot whose result is sliced and written into a loop buffer, so the tiled shape
# (the dynamic-update-slice output, 32x4x128) is not the dot's output (4x512).
CELL = """
  h = f32[4,128]{1,0} parameter(0)
  w = f32[128,512]{1,0} parameter(1)
  bias = f32[4,512]{1,0} parameter(2)
  buf = f32[32,4,128]{2,1,0} parameter(3)
  i = s32[] parameter(4)
  z = s32[] constant(0)
  d = f32[4,512]{1,0} dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[4,512]{1,0} add(d, bias)
  s = f32[4,128]{1,0} slice(a), slice={[0:4], [0:128]}
  r = f32[1,4,128]{2,1,0} reshape(s)
  ROOT u = f32[32,4,128]{2,1,0} dynamic-update-slice(buf, r, i, z, z)"""


def fused_as_one(body: str):
    """All non-trivial default kernels of body as one kernel, as XLA:TPU may fuse them (TpuGraphs
    holds such fusions), beyond what the tpu fusion rules form (a dot's epilogue stays elementwise)."""
    from autotune.compiler.emission import Kernel
    ks = kernels_of(body)
    members = tuple(sorted({m for k in ks for m in k.members}))
    root = max(k.root for k in ks)
    return Kernel(ks[0].space, ks[0].comp, root, members)


def test_hero_not_aligned_with_the_tiled_shape_counts_its_own_rows():
    from autotune.compiler.tiles import TileRows, io_geometry
    k = fused_as_one(CELL)
    assert {"dot", "slice", "dynamic-update-slice"} <= set(k.opcodes)
    info = tiling_info(k, "tpu")
    assert info.hero == "dot" and info.shape.dims == (32, 4, 128) and not info.n_mask.any()
    assert info.m_scale == pytest.approx(4 / (32 * 4 * 128))
    space = TileSpace(k, "tpu")
    tiles = space.tiles()
    g = io_geometry(TileRows.stack([info.row] * len(tiles)), space.to_array(tiles))
    total = g["mxu_tile"] * g["n"]
    # the whole dot is 2*4*128*512 flops; a tile pads its rows to 8 sublanes and recomputes at most
    # its share (version 1 of the model counted every one of the 16384 tiled elements as a row: 4096x)
    assert np.all(total >= info.hero_flops)
    assert total[tiles.index(space.default())] <= 2.0 * info.hero_flops
    assert np.all(total <= 2.0 * info.hero_flops * g["n"])


DOT = """
  a = f32[256,512]{1,0} parameter(0)
  b = f32[512,384]{1,0} parameter(1)
  ROOT d = f32[256,384]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""


def test_tiling_info_is_a_frozen_typed_record():
    import dataclasses
    info = tiling_info(one_kernel(ADD), "tpu")
    assert dataclasses.is_dataclass(info) and not hasattr(info, "__dict__")  # slots
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.dims = (1, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.row.D = np.ones(8)
    with pytest.raises(ValueError):  # the arrays it holds are read-only too
        info.row.D[0] = 5.0
    assert info.dims == (64, 256) and info.unit == (8, 128) and info.row.D[:2].tolist() == [64.0, 256.0]
    assert [r.role for r in info.inputs] == [1, 1]  # ROLE_SAME: both operands are shaped like the output
    assert sum(r.bytes for r in info.inputs) == 2 * 64 * 256 * 4


def test_tile_rows_stack_take_and_cut_dims():
    from autotune.compiler.tiles import R_MAX, TileRows
    a, b = tiling_info(one_kernel(ADD), "tpu").row, tiling_info(one_kernel(DOT), "tpu").row
    rows = TileRows.stack([a, b, a])
    assert rows.D.shape == (3, R_MAX) and rows.sl_perm.shape[0] == 3 and rows.kind.shape == (3,)
    assert rows.in_role.dtype.kind == "i" and rows.lhs_mult.tolist() == [1.0, 1.0, 1.0]
    picked = rows.take(np.array([1, 1]))
    assert picked.is_mxu.tolist() == [1.0, 1.0] and picked.hero_flops[0] == b.hero_flops
    cut = rows.first_dims(2)
    assert cut.D.shape == (3, 2) and cut.sl_perm.shape[-1] == 2 and cut.in_bytes.shape == rows.in_bytes.shape


def test_default_tile_is_the_analytical_models_argmin_and_needs_no_cost_model_package():
    """The compiler layer picks the default tile with its own roofline (no costmodels import), and
    the analytical cost model ranks the valid tiles by the same numbers."""
    import subprocess
    import sys
    from costmodels.analytical import AnalyticalCostModel
    k = one_kernel(DOT)
    sp = TileSpace(k)
    tiles = sp.tiles()
    pred = AnalyticalCostModel("tpu").predict([k] * len(tiles), tiles)
    assert sp.default() == min(zip(pred, tiles), key=lambda p: (p[0], -p[1].elements))[1]
    code = ("import sys; from autotune.compiler.program import Program; from autotune.compiler.fusion import "
            "FusionSpace; from autotune.compiler.tiles import default_tile, TileSpace\n"
            f"p = Program.from_text({('HloModule m' + chr(10) + chr(10) + 'ENTRY e {' + DOT + chr(10) + '}' + chr(10))!r})\n"
            "s = FusionSpace(p, 'tpu'); k = [k for k in s.kernels(s.default()) if not k.is_trivial][0]\n"
            "print(default_tile(k, 'tpu').key(), len(TileSpace(k).tiles()))\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('costmodels', 'hardware', 'search'))\n"
            "assert not bad, bad")
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [sp.default().key(), str(len(tiles))]


BIG_ADD = """
  a = f32[2048,1024]{1,0} parameter(0)
  b = f32[2048,1024]{1,0} parameter(1)
  ROOT c = f32[2048,1024]{1,0} add(a, b)"""


# (rows of a full-width tile, how it fits 16 MiB): 3 arrays x 4 bytes x rows x 1024, twice when double buffered
@pytest.mark.parametrize("rows,fits", [(512, "double"), (1024, "single"), (2048, "none")])
def test_one_memory_fit_rule_for_the_tile_space_and_the_simulator(rows, fits):
    """A tile is valid when it fits double buffered; the simulator also runs a tile that fits only
    single buffered (transfers and compute without overlap), and fails one that does not fit at all."""
    from hardware.simulator import TpuSimulator
    k = one_kernel(BIG_ADD)
    sp = TileSpace(k)
    tile = TileConfig((rows, 1024))
    scratch = sp.target.scratchpad_bytes
    assert sp.footprint(tile) == pytest.approx(2 * 3 * rows * 1024 * 4)
    assert sp.is_valid(tile) == (fits == "double") == (tile in sp.tiles())
    sim = TpuSimulator("tpu", noise=0.0)
    t = sim.simulate([k], [tile])[0]
    assert np.isfinite(t) == (fits != "none")
    if fits != "none":  # every byte crosses HBM once, with no overlap when single buffered
        assert t >= 3 * 2048 * 1024 * 4 / sim.spec.hbm_bytes_per_s
    ms = sim.measure([k], [tile])[0]
    assert ms.ok == (fits != "none") and (fits != "none" or "scratchpad" in ms.status)
    assert all(sp.footprint(x) <= scratch for x in sp.tiles())


def test_default_tiles_of_many_kernels_match_one_at_a_time():
    """The batched default (issue 21) is each kernel's analytical argmin over its valid tiles, ties to
    the larger tile, exactly as TileSpace.default picks it."""
    from pathlib import Path

    from autotune.compiler import tiles as T
    from costmodels.analytical import AnalyticalCostModel
    root = Path(__file__).resolve().parents[3] / "examples" / "hlo"
    kernels: dict = {}
    rng = np.random.default_rng(0)
    for name in ("vae_small_train", "gnn_small_infer", "mlp_mixer_small_infer"):
        space = FusionSpace(Program.from_file(str(root / f"{name}.hlo")), "tpu")
        for cfg in [space.default(), space.random(rng)]:
            for k in space.kernels(cfg):
                kernels.setdefault(k.hash, k)
    ks = list(kernels.values())
    T.roofline._DEFAULT_TILES.clear()
    batch = T.default_tiles(ks, "tpu")
    one_at_a_time = []
    for k in ks:
        T.roofline._DEFAULT_TILES.clear()
        one_at_a_time.append(TileSpace(k, "tpu").default())
    assert batch == one_at_a_time
    model = AnalyticalCostModel("tpu")
    for k, t in zip(ks, batch):
        sp = TileSpace(k, "tpu")
        tiles = sp.tiles()
        pred = model.predict([k] * len(tiles), tiles)
        best = min(pred)
        assert pred[tiles.index(t)] == best
        assert t.elements == max(x.elements for x, p in zip(tiles, pred) if p == best)
    assert T.default_tiles(ks[:3], "tpu") == batch[:3]  # cached


def test_tiling_caches_key_targets_by_their_canonical_spec_name():
    """"tpu", its alias "tpu-v3", the Target and the TargetSpec share one cache entry per kernel."""
    from autotune.compiler import tiles as T
    from autotune.compiler.targets import get_spec, get_target
    k = one_kernel(DOT)
    T.roofline._DEFAULT_TILES.clear()
    first = T.default_tile(k, "tpu")
    assert list(T.roofline._DEFAULT_TILES) == [(k.hash, get_spec("tpu").name)]
    for target in ("tpu-v3", "TPU", get_target("tpu"), get_spec("tpu")):
        assert T.default_tile(k, target) is first
        assert T.default_tiles([k], target) == [first] and TileSpace(k, target).default() is first
        assert tiling_info(k, target) is tiling_info(k, "tpu")
    assert len(T.roofline._DEFAULT_TILES) == 1
