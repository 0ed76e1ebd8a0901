"""benchmarks/tpugraphs_tiles.py: the residual picker beats XLA's default tile LOKO on the vendored sample."""
import numpy as np
import pytest

pytest.importorskip("xgboost")


def _bench():
    from benchmarks import tpugraphs_tiles
    return tpugraphs_tiles


@pytest.mark.slow
def test_residual_picker_beats_xla_default_leave_one_kernel_out():
    """Each kernel picked by a SimulatorResidual fitted on the 14 others (threshold 0, seed 0): a lower
    tile-size APE than XLA's own default tile (3.55%), with fusion.191's fastest tile found."""
    from costmodels.analytical import AnalyticalCostModel
    from costmodels.metrics import tile_size_ape
    from costmodels.tile_ranker import SimulatorResidual
    from hardware.simulator import TpuSimulator
    b = _bench()
    recs = b.cal.load(b.cal.DATA)
    inp = {r["name"]: b.kernel_inputs(r, TpuSimulator("tpu", noise=0.0), AnalyticalCostModel("tpu")) for r in recs}
    ranked = [r for r in recs if len(r["y"]) >= 2]
    picks, xla = {}, {}
    for r in ranked:
        m = SimulatorResidual(seed=0).fit([b._kernel_tiles(q, inp) for q in recs if q["name"] != r["name"]])
        picks[r["name"]] = m.pick(inp[r["name"]]["residual"], inp[r["name"]]["sim_log"], r["default"])
        xla[r["name"]] = r["default"]

    def ape(chosen):
        pred = np.concatenate([np.where(np.arange(len(r["y"])) == chosen[r["name"]], 0.0, 1.0) for r in ranked])
        return tile_size_ape(pred, np.concatenate([r["y"] for r in ranked]),
                             sum(([r["name"]] * len(r["y"]) for r in ranked), []))
    assert ape(xla) == pytest.approx(3.55, abs=0.01)
    assert ape(picks) < 2.5
    f191 = next(r for r in ranked if r["name"] == "fusion.191")
    assert picks["fusion.191"] == int(np.argmin(f191["y"]))


@pytest.mark.parametrize("args", [["--variants", "ranker,magic"], ["--drop-geometry", "colour"],
                                  ["--full-loko", "--sims", "fold,magic"], ["--full-loko", "--posthoc", "all,colour"]])
def test_bad_flags_are_user_errors(args, capsys):
    with pytest.raises(SystemExit) as e:
        _bench().main(args)
    assert e.value.code == 2 and "choose from" in capsys.readouterr().err


TINY_GRID = {"launch_s": [0.05e-6, 0.4e-6], "dma_r0_bytes": [1024.0, 4096.0]}


def test_full_loko_fits_the_simulator_without_the_held_out_kernel():
    """--full-loko, 2 folds, a 4-point grid, the residual variants: every simulator fit of a fold gets
    the other kernels only (the outer fit the 14 others, each nested fit 13), and the held-out kernel's
    inputs are simulated with the constants fitted on the 14 others."""
    from dataclasses import replace
    from costmodels.analytical import AnalyticalCostModel
    from hardware.simulator import DEFAULTS, TpuSimulator
    b = _bench()
    recs = b.cal.load(b.cal.DATA)
    names = [r["name"] for r in recs]
    assert len(names) == 15
    calls, cache = [], {}

    def fit(train, grid, losses):
        calls.append([r["name"] for r in train])
        return b.cal.fit_constants(train, grid, losses)

    for held in ("fusion.181", "fusion.250"):
        calls.clear()
        out = b.full_loko(recs, seeds=1, grid=TINY_GRID, sims=("fold",), variants=("residual", "residual+nested"),
                          posthoc=("all",), folds=[held], fit=fit)
        assert calls and all(held not in c for c in calls)
        outer = [c for c in calls if len(c) == 14]
        assert outer == [[n for n in names if n != held]]
        assert all(len(c) == 13 for c in calls if len(c) != 14)  # nested folds: 13 each
        res = out["sims"]["fold"]
        assert set(res["pickers"]["residual"]["per_kernel"]) == {held}
        c14 = b.cal.fit_constants([r for r in recs if r["name"] != held], TINY_GRID, cache)
        assert res["constants"][held] == c14
        r = next(q for q in recs if q["name"] == held)
        inp = b.FoldInputs(recs, TINY_GRID, AnalyticalCostModel("tpu"), "fold", (), fit)(frozenset({held}))
        sim = TpuSimulator("tpu", constants=replace(DEFAULTS, noise=0.0, **c14))
        np.testing.assert_allclose(inp[held]["sim_log"], np.log(sim.simulate([r["kernel"]] * len(r["tiles"]), r["tiles"],
                                                                              noise=False)))


def test_fit_constants_reads_only_the_kernels_it_is_given():
    """A poisoned cache entry of a kernel outside the fit changes nothing."""
    b = _bench()
    recs = b.cal.load(b.cal.DATA)
    train = [r for r in recs if r["name"] != "fusion.191"]
    clean = b.cal.fit_constants(train, TINY_GRID, {})
    names, combos = b.cal.grid_points(TINY_GRID)
    poison = np.full(len(combos), 1e9)
    poison[next(i for i, c in enumerate(combos) if dict(zip(names, c)) != clean)] = -1e9
    cache = {("fusion.191", b.cal._grid_key(TINY_GRID)): poison}
    assert b.cal.fit_constants(train, TINY_GRID, cache) == clean
