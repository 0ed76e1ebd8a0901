"""TPU simulator: determinism, noise, tile effects, MXU padding, failures, budget."""
import numpy as np
import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileConfig, TileSpace
from hardware.base import Measurement
from hardware.simulator import SimConstants, TpuSimulator


def one_kernel(body: str):
    prog = Program.from_text("HloModule m\n\nENTRY e {\n" + body + "\n}\n")
    space = FusionSpace(prog, "tpu")
    ks = [k for k in space.kernels(space.default()) if not k.is_trivial]
    assert len(ks) == 1, ks
    return ks[0]


def dot_kernel(m: int, k: int, n: int):
    return one_kernel(f"""
  a = f32[{m},{k}]{{1,0}} parameter(0)
  w = f32[{k},{n}]{{1,0}} parameter(1)
  ROOT d = f32[{m},{n}]{{1,0}} dot(a, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}""")


ADD = one_kernel("""
  a = f32[2048,2048]{1,0} parameter(0)
  b = f32[2048,2048]{1,0} parameter(1)
  ROOT c = f32[2048,2048]{1,0} add(a, b)""")
EXP = one_kernel("""
  a = f32[512,1024]{1,0} parameter(0)
  ROOT c = f32[512,1024]{1,0} exponential(a)""")


def test_deterministic_for_a_seed():
    tiles = TileSpace(ADD).tiles()
    a = TpuSimulator(seed=3).simulate([ADD] * len(tiles), tiles)
    b = TpuSimulator(seed=3).simulate([ADD] * len(tiles), tiles)
    c = TpuSimulator(seed=4).simulate([ADD] * len(tiles), tiles)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    # the same item gets the same value wherever it sits in a batch
    one = TpuSimulator(seed=3).simulate([ADD], [tiles[-1]])
    assert one[0] == a[-1]


def test_noise_on_off_and_magnitude():
    sp = TileSpace(ADD)
    tiles = sp.tiles()
    quiet = TpuSimulator(noise=0).simulate([ADD] * len(tiles), tiles)
    assert np.array_equal(quiet, TpuSimulator(noise=0, seed=9).simulate([ADD] * len(tiles), tiles))
    noisy = TpuSimulator(seed=1).simulate([ADD] * len(tiles), tiles)
    r = np.log(noisy / quiet)
    assert np.all(np.abs(r) < 0.1)
    # many kernels x tiles: sample sigma near the default 1.5%
    ks = [dot_kernel(128 * i, 256, 128) for i in range(1, 9)]
    items, tl = [], []
    for k in ks:
        for t in TileSpace(k).tiles():
            items.append(k)
            tl.append(t)
    sim = TpuSimulator(seed=0)
    z = np.log(sim.simulate(items, tl) / sim.simulate(items, tl, noise=False))
    assert 0.008 < z.std() < 0.025, z.std()


def test_bigger_tiles_amortize_overheads_elementwise():
    sim = TpuSimulator(noise=0)
    ts = [TileConfig((8, 128)), TileConfig((32, 256)), TileConfig((128, 512)), TileConfig((256, 1024))]
    t = sim.simulate([ADD] * len(ts), ts)
    assert np.all(np.diff(t) < 0), t
    # the default tile is at least as good as the smallest
    assert sim.simulate([ADD])[0] < t[0]


def test_mxu_padding_129_slower_per_flop_than_128():
    sim = TpuSimulator(noise=0)
    k128, k129 = dot_kernel(1024, 128, 128), dot_kernel(1024, 129, 129)
    t = sim.simulate([k128, k129])
    per_flop = t / np.array([k128.cost.flops, k129.cost.flops])
    assert per_flop[1] > 1.3 * per_flop[0]


def test_transcendentals_cost_more_than_adds():
    neg = one_kernel("""
  a = f32[512,1024]{1,0} parameter(0)
  ROOT c = f32[512,1024]{1,0} negate(a)""")
    t = TpuSimulator(noise=0).simulate([EXP, neg], [TileConfig((512, 1024))] * 2)
    assert t[0] > t[1]


def test_v2_slower_than_v3_on_a_dot():
    k = dot_kernel(2048, 2048, 2048)
    assert TpuSimulator("tpu-v2", noise=0).simulate([k])[0] > TpuSimulator("tpu-v3", noise=0).simulate([k])[0]


def test_vectorized_equals_one_at_a_time():
    sim = TpuSimulator(seed=5)
    items = [ADD, EXP, dot_kernel(256, 256, 256)] * 3
    tiles = [TileSpace(k).random(np.random.default_rng(i)) for i, k in enumerate(items)]
    batch = sim.simulate(items, tiles)
    single = np.array([sim.simulate([k], [t])[0] for k, t in zip(items, tiles)])
    assert np.allclose(batch, single, rtol=1e-12)


def test_noise_independent_of_batch_composition():
    rank4 = one_kernel("""
  a = f32[4,8,16,128]{3,2,1,0} parameter(0)
  ROOT c = f32[4,8,16,128]{3,2,1,0} negate(a)""")
    sim = TpuSimulator(seed=2)
    alone = sim.simulate([ADD], [TileConfig((32, 256))])[0]
    mixed = sim.simulate([rank4, ADD], [None, TileConfig((32, 256))])[1]
    assert alone == mixed


def test_failures_never_raise():
    sim = TpuSimulator(noise=0)
    huge = TileConfig((2048, 2048))  # 3 x 16 MiB: does not fit even single-buffered

    class Broken:
        hash = "broken"

        def to_hlo_module(self):
            return ""

    ms = sim.measure([ADD, ADD, Broken()], [huge, TileConfig((8, 128)), None])
    assert len(ms) == 3 and all(isinstance(m, Measurement) for m in ms)
    assert not ms[0].ok and "scratchpad" in ms[0].status
    assert ms[1].ok and ms[1].seconds > 0
    assert not ms[2].ok


def test_zero_budget():
    sim = TpuSimulator(budget=0)
    ms = sim.measure([ADD, EXP])
    assert [m.status for m in ms] == ["budget_exhausted"] * 2
    assert sim.budget_exhausted


def test_measure_uses_default_tile_and_reports_it():
    sim = TpuSimulator(noise=0)
    m = sim.measure([EXP])[0]
    assert m.ok and m.extra["tile"] == TileSpace(EXP).default().key()
    assert m.seconds == pytest.approx(sim.simulate([EXP])[0])


def test_rejects_non_tpu_target():
    with pytest.raises(ValueError):
        TpuSimulator("h100")


def test_constants_are_overridable():
    slow = SimConstants(launch_s=1e-3, noise=0.0)
    assert TpuSimulator(constants=slow).simulate([EXP])[0] > 1e-3


def test_calibration_on_tpugraphs_v3():
    """Regression guard for the calibrated constants, on the vendored data/tpugraphs sample."""
    import importlib.util
    import os
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(repo, "data", "tpugraphs", "tile_kernels.json")
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "calibrate_tpugraphs", os.path.join(here, "..", "..", "benchmarks", "calibrate_tpugraphs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    recs = mod.load(path)
    assert len(recs) == 15 and sum(len(r["tiles"]) for r in recs) > 700
    from costmodels.analytical import AnalyticalCostModel
    table = mod.summarize(recs, mod.predict_all(recs, TpuSimulator(noise=0), AnalyticalCostModel()))
    sim, an = table["sim"]["mean"], table["analytical"]["mean"]
    assert sim["kendall"] > 0.8 and sim["kendall"] > an["kendall"]
    assert sim["top5"] < 1.05
    assert sim["mean_abs_log10_err_default"] < 0.1  # within ~25% of real v3 runtimes
    # Every tile a real TPU v3 ran fits the scratchpad double buffered (the tile space's validity
    # rule, tiles.scratchpad_fit), some of them nearly full: the rule neither admits too much nor too little.
    use = mod.scratchpad_use(recs)
    assert use["double_buffered"] == sum(len(r["tiles"]) for r in recs) and use["max_footprint_fraction"] > 0.8


@pytest.mark.parametrize("body,in_bytes", [
    # a reduction to 4 values of 28 MB of input (TpuGraphs' layout module has such kernels)
    ("""  x = f32[2,96,96,96,4]{4,3,2,1,0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4]{0} reduce(x, z), dimensions={0,1,2,3}, to_apply=add""", 2 * 96 ** 3 * 4 * 4),
    # a weight gradient: contraction over 64 MB of activations into a small output
    ("""  a = f32[4096,4096]{1,0} parameter(0)
  b = f32[4096,64]{1,0} parameter(1)
  ROOT d = f32[4096,64]{1,0} dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}""",
     4096 * 4096 * 4)], ids=["reduce", "weight-gradient"])
def test_inputs_larger_than_the_scratchpad_stream_instead_of_failing(body, in_bytes):
    prog = Program.from_text("HloModule m\n\nadd {\n  p = f32[] parameter(0)\n  q = f32[] parameter(1)\n"
                             "  ROOT s = f32[] add(p, q)\n}\n\nENTRY e {\n" + body + "\n}\n")
    space = FusionSpace(prog, "tpu")
    k = next(k for k in space.kernels(space.default()) if not k.is_trivial)
    ts = TileSpace(k, "tpu")
    assert ts.is_valid(ts.default())
    sim = TpuSimulator("tpu")
    t = sim.simulate([k], [ts.default()], noise=False)[0]
    assert np.isfinite(t)
    assert t >= in_bytes / sim.spec.hbm_bytes_per_s  # every input byte is read at least once
