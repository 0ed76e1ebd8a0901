"""Analytical model: roofline per kernel, per tile, kind scales, persistence."""
import numpy as np
import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileConfig, TileSpace
from costmodels.analytical import AnalyticalCostModel
from costmodels.base import get_cost_model
from autotune.compiler.targets import get_spec


def one_kernel(body: str):
    prog = Program.from_text("HloModule m\n\nENTRY e {\n" + body + "\n}\n")
    space = FusionSpace(prog, "tpu")
    ks = [k for k in space.kernels(space.default()) if not k.is_trivial]
    assert len(ks) == 1, ks
    return ks[0]


DOT = one_kernel("""
  a = f32[4096,4096]{1,0} parameter(0)
  w = f32[4096,4096]{1,0} parameter(1)
  ROOT d = f32[4096,4096]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")
ADD = one_kernel("""
  a = f32[2048,2048]{1,0} parameter(0)
  b = f32[2048,2048]{1,0} parameter(1)
  ROOT c = f32[2048,2048]{1,0} add(a, b)""")
EXP = one_kernel("""
  a = f32[1024,1024]{1,0} parameter(0)
  ROOT c = f32[1024,1024]{1,0} exponential(a)""")
V3 = get_spec("tpu-v3")


def test_untiled_roofline():
    m = AnalyticalCostModel("tpu")
    t = m.predict([DOT, ADD])
    flops = 2 * 4096 ** 3
    assert t[0] == pytest.approx(flops / V3.peak_flops + V3.kernel_launch_s, rel=1e-6)  # compute bound
    assert t[1] == pytest.approx(3 * 2048 * 2048 * 4 / V3.hbm_bytes_per_s + V3.kernel_launch_s, rel=1e-6)
    assert m.predict([]).shape == (0,)


def test_transcendental_throughput_used():
    m = AnalyticalCostModel("tpu")
    t = m.predict([EXP])[0]
    comp = 1024 * 1024 / V3.transcendental_per_s
    xfer = 2 * 1024 * 1024 * 4 / V3.hbm_bytes_per_s
    assert t == pytest.approx(max(comp, xfer) + V3.kernel_launch_s, rel=1e-6)


def test_tiled_small_tiles_cost_more():
    m = AnalyticalCostModel("tpu")
    t = m.predict([ADD, ADD], [TileConfig((8, 128)), TileConfig((256, 2048))])
    assert t[0] > t[1]
    # a tiled prediction is never below the untiled roofline
    assert t.min() >= m.predict([ADD])[0] * 0.999


def test_dot_small_tiles_reread_operands():
    m = AnalyticalCostModel("tpu")
    t = m.predict([DOT, DOT], [TileConfig((128, 128)), TileConfig((512, 512))])
    assert t[0] > t[1]


def test_none_entries_use_default_tile():
    m = AnalyticalCostModel("tpu")
    d = TileSpace(ADD).default()
    assert m.predict([ADD], [None])[0] == pytest.approx(m.predict([ADD], [d])[0])


def test_fit_scales_recovers_kind_scale(tmp_path):
    m = AnalyticalCostModel("tpu")
    ks = [ADD, EXP, DOT]
    base = m.predict(ks)
    y = base * np.array([2.5, 2.5, 0.5])  # kLoop x2.5, kOutput x0.5
    scales = m.fit_scales(ks, y)
    assert scales["kLoop"] == pytest.approx(2.5)
    assert scales["kOutput"] == pytest.approx(0.5)
    assert scales["kInput"] == 1.0
    assert np.allclose(m.predict(ks), y)
    p = tmp_path / "an.json"
    m.save(str(p))
    m2 = AnalyticalCostModel.load(str(p))
    assert np.allclose(m2.predict(ks), y)
    m3 = AnalyticalCostModel("tpu").fit((ks, y))
    assert m3.scales_ == pytest.approx(scales) and m3.scales is None  # fitted state; the parameter as given


def test_registry_and_batch_speed():
    m = get_cost_model("analytical", target="tpu-v2")
    assert isinstance(m, AnalyticalCostModel) and m.target == "tpu-v2"
    tiles = TileSpace(ADD).tiles()
    items = [ADD] * 5000
    tl = [tiles[i % len(tiles)] for i in range(5000)]
    out = m.predict(items, tl)
    assert out.shape == (5000,) and np.all(np.isfinite(out)) and np.all(out > 0)
