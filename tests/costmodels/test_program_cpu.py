"""costmodels/program_cpu.py: configuration totals of the kernel geometry, and the model's fit, predict,
save and load (every kind, bagged and blended)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost as xgb

from costmodels.program_cpu import ProgramModel, program_features, relative_costs


def _space():
    from pathlib import Path

    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    root = Path(__file__).resolve().parents[2]
    return FusionSpace(Program.from_file(str(root / "examples" / "hlo" / "vae_small_infer.hlo")), "cpu")


def test_features_are_program_totals():
    space = _space()
    ks = space.kernels(space.default())
    one, two = program_features([ks, ks + ks])
    assert one.shape == two.shape and np.all(two >= one)
    # doubling every kernel adds one to log2(1 + total) of each count column, roughly (log2(1 + 2x))
    i = np.argmax(one)
    assert two[i] == pytest.approx(np.log2(1 + 2 * (2 ** one[i] - 1)))
    sums = program_features([ks], {"unit": lambda kk: np.full(len(kk), 1e-9)})
    assert sums.shape[1] == one.shape[0] + 1 and sums[0, -1] == pytest.approx(np.log2(1 + len(ks)), rel=0.2)


@pytest.mark.parametrize("kind", ["ridge", "xgboost", "rank"])
def test_fit_predict_save_load(tmp_path, kind):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = 0.3 * X[:, 0] - 0.2 * X[:, 1]
    m = ProgramModel(kind=kind, n_estimators=50).fit(X, y, groups=np.arange(200) // 20)
    p = m.predict(X)
    assert np.corrcoef(p, y)[0, 1] > 0.9
    m.save(str(tmp_path / "m.json"))
    again = ProgramModel.load(str(tmp_path / "m.json"))
    assert np.allclose(again.predict(X), p, atol=1e-5)
    with pytest.raises(ValueError, match="feature differences"):
        m.predict(X[:, :3])


@pytest.mark.parametrize("kind", ["xgboost", "rank"])
def test_bagged_boosters_average_consecutive_seeds_and_round_trip(tmp_path, kind):
    """n_bags fits that many boosters (seeds seed..seed+n-1) and averages their scores; a file of one
    booster (round 2's format, "booster") still loads."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 5))
    y = 0.3 * X[:, 0] - 0.2 * X[:, 1] + 0.05 * rng.normal(size=200)
    groups = np.arange(200) // 20
    bag = ProgramModel(kind=kind, n_estimators=30, n_bags=3, seed=4).fit(X, y, groups=groups)
    assert len(bag.boosters_) == 3
    singles = [ProgramModel(kind=kind, n_estimators=30, seed=s).fit(X, y, groups=groups) for s in (4, 5, 6)]
    raw = np.mean([s.boosters_[0].predict(xgb.DMatrix(X)) for s in singles], axis=0)
    assert np.allclose(bag._raw(X), raw, atol=1e-6)
    bag.save(str(tmp_path / "bag.json"))
    assert np.allclose(ProgramModel.load(str(tmp_path / "bag.json")).predict(X), bag.predict(X), atol=1e-5)
    one = singles[0]
    one.save(str(tmp_path / "one.json"))
    doc = json.loads((tmp_path / "one.json").read_text())
    doc["booster"] = doc.pop("boosters")[0]
    del doc["params"]["n_bags"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert np.allclose(ProgramModel.load(str(tmp_path / "old.json")).predict(X), one.predict(X), atol=1e-5)
    with pytest.raises(ValueError, match="n_bags"):
        ProgramModel(kind=kind, n_bags=0).fit(X, y, groups=groups)


@pytest.mark.parametrize("kind", ["sums", "rank"])
def test_blend_averages_scaled_kernel_sums_with_the_trees(tmp_path, kind):
    """blend=True: the trailing kernel-sum columns are not the trees' features; each is scaled to the labels by a
    least-squares slope through the origin and averaged with the trees' prediction (kind "sums": without trees);
    the slopes and the blend survive save and load."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 6))  # columns 4, 5: two kernel models' sums
    y = 0.2 * X[:, 0] + 0.5 * X[:, 4] + 0.05 * rng.normal(size=200)
    groups = np.arange(200) // 20
    m = ProgramModel(kind=kind, n_estimators=40, kernel_models=("a", "b"), blend=True).fit(X, y, groups=groups)
    b = [float(c @ y / (c @ c)) if float(c @ y) > 0 else 1e-6 for c in X[:, 4:].T]
    assert m.sum_scales_ == pytest.approx(b)
    parts = [b[0] * X[:, 4], b[1] * X[:, 5]]
    if kind == "rank":
        assert m.n_features_ == 6 and m.boosters_[0].num_features() == 4
        parts.append(m._trees(X[:, :4]))
    assert np.allclose(m.predict(X), np.mean(parts, axis=0))
    m.save(str(tmp_path / "m.json"))
    again = ProgramModel.load(str(tmp_path / "m.json"))
    assert again.blend and np.allclose(again.predict(X), m.predict(X), atol=1e-5)
    with pytest.raises(ValueError, match="sums kind"):
        ProgramModel(kind="sums", kernel_models=("a",)).fit(X, y)


def test_rank_kind_learns_orders_within_programs_and_predicts_zero_at_the_default():
    """The pairwise kind sees only which configuration of a program is faster: each program's own offset
    does not reach it, its calibrated prediction of the default (no difference) is 0, and it needs the
    programs."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    groups = np.arange(300) // 30
    y = 0.5 * X[:, 2] + 3.0 * groups  # a per-program offset no feature explains
    m = ProgramModel(kind="rank", n_estimators=60).fit(X, y, groups=groups)
    within = [np.corrcoef(m.predict(X[groups == g]), y[groups == g])[0, 1] for g in range(10)]
    assert min(within) > 0.8
    assert m.predict(np.zeros((1, 4)))[0] == pytest.approx(0.0, abs=1e-6)
    assert m.calibration_["scale"] > 0
    with pytest.raises(ValueError, match="groups"):
        ProgramModel(kind="rank").fit(X, y)


def test_relative_costs_of_the_default_is_its_prediction_at_zero():
    space = _space()
    ks = space.kernels(space.default())
    d = program_features([ks]).shape[1]
    m = ProgramModel(kind="ridge").fit(np.zeros((4, d)) + np.arange(4)[:, None], np.arange(4) * 0.1)
    c = relative_costs(m, [ks], ks)
    assert c.shape == (1,) and c[0] == pytest.approx(float(np.exp(m.predict(np.zeros((1, d)))[0])))


def test_learned_program_cost_prices_whole_configurations():
    """The pricer (autotune/tuning/program_cost.py): the default costs the reference, every configuration
    reference * exp(prediction of its feature difference), memoized; kernels' rows cached by hash."""
    from autotune.tuning.program_cost import LearnedProgramCost
    space = _space()
    ks = space.kernels(space.default())
    unit = {"unit": lambda kk: np.full(len(kk), 1e-6)}
    d = program_features([ks], unit).shape[1]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, d))
    m = ProgramModel(kind="ridge").fit(X, 0.1 * X[:, 0])
    pricer = LearnedProgramCost(space, m, unit)
    assert pricer.reference_s == pytest.approx(1e-6 * sum(k.multiplicity for k in ks))
    cfgs = [space.default(), space.random(rng), space.random(rng)]
    costs = pricer(cfgs)
    assert costs[0] == pytest.approx(pricer.reference_s * np.exp(m.predict(np.zeros((1, d)))[0]))
    want = relative_costs(m, [space.kernels(c) for c in cfgs[1:]], ks, unit) * pricer.reference_s
    assert np.allclose(costs[1:], want)
    assert all(pricer.is_priced(c) for c in cfgs) and pricer.kernels_priced == 3
    pricer(cfgs)
    assert pricer.kernels_priced == 3  # memoized


def test_cli_program_model(tmp_path):
    import json

    from click.testing import CliRunner

    from autotune.cli.app import main
    from pathlib import Path
    prog = str(Path(__file__).resolve().parents[2] / "examples" / "hlo" / "vae_small_infer.hlo")
    r = CliRunner().invoke(main, ["fusion", prog, "--target", "tpu", "--cost-model", "program"])
    assert r.exit_code == 2 and "trained on XLA:CPU" in r.output
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["fusion", prog, "--target", "cpu", "--cost-model", "program", "--budget", "4s",
                                  "--hw-budget", "0", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["cost_model"].endswith("program_fusion_cpu.json") and rep["evaluations"] > 1


def test_a_model_without_kernel_sums_prices_on_the_given_scale():
    """A whole-program model that reads no kernel model (the rank kind shipped on 2026-11-29) takes its scale
    from the default's kernel sum by the caller's ``scale_model`` (the CLI gives the analytical model): the
    default costs that scale times exp(f(0)), 0 for the rank kind."""
    from autotune.tuning.program_cost import LearnedProgramCost
    space = _space()
    d = program_features([space.kernels(space.default())]).shape[1]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, d))
    m = ProgramModel(kind="rank", n_estimators=20).fit(X, 0.1 * X[:, 0], groups=np.arange(60) // 10)
    executions = sum(k.multiplicity or 1 for k in space.kernels(space.default()))
    pricer = LearnedProgramCost(space, m, {}, scale_model=lambda ks: np.full(len(ks), 2e-3 / executions))
    assert pricer(([space.default()]))[0] == pytest.approx(2e-3)
    assert LearnedProgramCost(space, m, {}).reference_s == 1.0


def test_a_kernel_of_hundreds_of_members_has_finite_features():
    """Some geometry columns are plain counts: a kernel of 200 members once overflowed 2^g to inf in float32,
    and xgboost refused the features (round 4's test programs: HF train steps)."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.fusion.space import FusionConfig
    from autotune.compiler.program import Program
    from costmodels.program_cpu import kernel_rows
    chain = [f"  n{i} = f32[64]{{0}} negate({'p0' if i == 0 else f'n{i - 1}'})" for i in range(200)]
    text = ("HloModule chain\n\nENTRY main {\n  p0 = f32[64]{0} parameter(0)\n" + "\n".join(chain[:-1])
            + "\n  ROOT " + chain[-1].strip() + "\n}\n")
    space = FusionSpace(Program.from_text(text), "cpu")
    fused = space.kernels(FusionConfig(bytearray([1] * space.n_edges)))
    assert [len(k.members) for k in fused] == [200]
    assert np.isfinite(kernel_rows(fused)).all()
    phi = program_features([fused, space.kernels(space.unfused())])
    assert np.isfinite(phi).all()
    m = ProgramModel(kind="rank", n_estimators=5, max_depth=2).fit(
        phi - phi[1], np.array([0.1, 0.0]), groups=np.zeros(2))
    assert np.isfinite(m.predict(phi - phi[1])).all()
