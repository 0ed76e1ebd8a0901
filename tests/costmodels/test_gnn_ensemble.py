"""Seed ensembles of the GNN cost model (`GnnCostModel.ensemble`, `autotune ensemble`): tiny models, seconds."""
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from autotune.api import load_model_file
from autotune.cli.learn import ensemble, evaluate
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from costmodels.features import kernel_graph
from costmodels.gnn import GnnCostModel
from costmodels.gnn.model import GnnEnsembleNet

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(hidden=8, embedding=4, layers=1, geometry_features=True, residual=True, ple_bins=2)


@pytest.fixture(scope="module")
def kernels():
    space = FusionSpace(Program.from_file(str(ROOT / "examples/hlo/lstm_small_infer.hlo")), "tpu")
    return [k for k in space.kernels(space.default()) if not k.is_trivial]


@pytest.fixture(scope="module")
def seeds(fusion_ds, tmp_path_factory):
    """Three seeds of one tiny recipe, trained on fusion_ds and saved: [(path, model)]."""
    d = tmp_path_factory.mktemp("seeds")
    out = []
    for s in range(3):
        m = GnnCostModel("fusion", seed=s, **TINY).fit(fusion_ds, epochs=1, batch_size=32, progress=False)
        m.save(str(d / f"s{s}.pt"))
        out.append((str(d / f"s{s}.pt"), m))
    return out


def test_ensemble_predicts_the_mean_log_time_of_its_members(seeds, kernels, tmp_path):
    models = [m for _, m in seeds]
    e = GnnCostModel.ensemble(models)
    assert e.members == 3 and isinstance(e.net_, GnnEnsembleNet)
    member_logs = np.log([m.predict(kernels) for m in models])
    assert member_logs.std(0).max() > 1e-4  # the seeds differ, so the mean is a real test
    assert np.allclose(np.log(e.predict(kernels)), member_logs.mean(0), atol=1e-5)
    # predict_graphs (features cached) agrees; member i is model i
    graphs = [kernel_graph(k, "tpu") for k in kernels]
    assert np.allclose(e.predict_graphs(graphs), e.predict(kernels), rtol=1e-6)
    assert np.allclose(e.member(1).predict(kernels), models[1].predict(kernels), rtol=1e-6)
    # save and load: the same predictions, the members' seeds kept
    e.save(str(tmp_path / "e.pt"))
    back = load_model_file(str(tmp_path / "e.pt"), task="fusion", target="tpu")
    assert back.members == 3 and [h["seed"] for h in back.history_] == [0, 1, 2]
    assert np.allclose(back.predict(kernels), e.predict(kernels), rtol=1e-6)
    with pytest.raises(ValueError, match="no single readout"):
        back.net_.readout(None)
    # the model-based strategy's fine-tuning needs one head: a clear error, not an AttributeError
    from costmodels.gnn.finetune import GnnFineTune
    space = FusionSpace(Program.from_file(str(ROOT / "examples/hlo/lstm_small_infer.hlo")), "tpu")
    with pytest.raises(ValueError, match="not an ensemble of 3"):
        GnnFineTune(space, gnn=back)


def test_ensemble_members_must_match(seeds, fusion_ds, tmp_path):
    a, b = seeds[0][1], seeds[1][1]
    with pytest.raises(ValueError, match="at least two"):
        GnnCostModel.ensemble([a])
    other = GnnCostModel("fusion", seed=0, **dict(TINY, hidden=12)).fit(fusion_ds, epochs=1, batch_size=32,
                                                                       progress=False)
    with pytest.raises(ValueError, match=r"^B and A differ in configuration \(hidden\)"):
        GnnCostModel.ensemble([a, other], names=["A", "B"])
    shifted = GnnCostModel.load(seeds[1][0])
    shifted.y_mu_ += 0.5
    with pytest.raises(ValueError, match="different training data"):
        GnnCostModel.ensemble([a, shifted])
    with pytest.raises(ValueError, match="not trained"):
        GnnCostModel.ensemble([a, GnnCostModel("fusion", seed=5, **TINY)])
    e = GnnCostModel.ensemble([a, b])
    with pytest.raises(ValueError, match="already an ensemble"):
        GnnCostModel.ensemble([a, e])


def test_cli_ensemble_and_evaluate(seeds, fusion_ds, tmp_path):
    r = CliRunner()
    paths = [p for p, _ in seeds]
    out = tmp_path / "e.pt"
    res = r.invoke(ensemble, [*paths, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "ensemble of 3" in res.output and out.is_file()
    res = r.invoke(evaluate, ["--cost-model", str(out), "--cost-model", paths[0], "--data", str(fusion_ds.root),
                              "--split", "all", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc["summary"]) == {"e.pt", "s0.pt"} and np.isfinite(doc["summary"]["e.pt"]["mape"])
    # bad members: one line each, exit status 2
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a model")
    for args, msg in [([paths[0]], "at least two"),
                      ([paths[0], str(bad)], "not a GNN cost model file"),
                      ([paths[0], str(tmp_path / "missing.pt")], "does not exist"),
                      ([paths[0], str(out)], "already an ensemble"),
                      ([paths[0], paths[1], "--out", paths[0]], "is one of the members"),
                      ([paths[0], paths[1], "--out", str(tmp_path / "no" / "e.pt")], "does not exist")]:
        argv = args if "--out" in args else [*args, "--out", str(tmp_path / "x.pt")]
        res = r.invoke(ensemble, argv)
        assert res.exit_code == 2, (args, res.output)
        assert msg in res.output and len(res.output.strip().splitlines()) == 1, res.output
