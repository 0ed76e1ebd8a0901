"""benchmarks/autotvm_transfer.py in its quick form on tile spaces: every arm measures its trials
(the default first), curves never rise, nothing beats the exhaustive optimum, the transfer arm's
history never holds the family it tunes, and the tables and plot are written."""
from __future__ import annotations

import importlib.util
import math
import os
import sys

import pytest

pytest.importorskip("xgboost")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


sys.path.insert(0, os.path.join(REPO, "benchmarks"))
B = importlib.import_module("autotvm_transfer")


@pytest.mark.slow
def test_quick_tile_run(tmp_path, capsys):
    out = B.main(["--quick", "--spaces", "tile", "--json", str(tmp_path / "r.json"),
                  "--plot", str(tmp_path / "p.png")])
    res = out["tile"]
    assert set(res["arms"]) == set(B.ARMS)
    for arm, v in res["arms"].items():
        curve = v["median_curve"]
        assert len(curve) == res["trials"] and all(a >= b for a, b in zip(curve, curve[1:]))
        assert min(curve) >= 1.0 - 1e-12 and v["runs"] == 2 * len(res["problems"])
        assert 1 <= v["median_trials"] <= res["trials"] or math.isinf(v["median_trials"])
    for fam, hist in res["history"].items():  # leave-family-out
        assert not any(name.startswith(fam) for name in hist["program_names"]) and hist["rows"] > 0
    assert (tmp_path / "p.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "| model-based + transfer |" in printed and "transfer / random" in printed
    again = B.main(["--load", str(tmp_path / "r.json")])
    assert again["tile"]["arms"]["random"]["median_trials"] == res["arms"]["random"]["median_trials"]


def test_trials_to_near_and_censored_median():
    assert B.trials_to_near([3.0, 2.1, 2.03], 2.0) == 3 and B.trials_to_near([2.0], 2.0) == 1
    assert B.trials_to_near([3.0, 2.5], 2.0) is None
    assert math.isinf(B.median_trials([None, None, 4], 10)) and B.median_trials([1, None, 4], 10) == 4


@pytest.mark.slow
def test_arms_and_slow_arms_on_fusion_spaces():
    """run_space with a chosen set of arms; the GNN arm only on the program it is given."""
    probs = B.fusion_problems(["vae_small_infer", "autoencoder_small_infer"])
    res = B.run_space("fusion", probs, 1, 10, lambda m: None,
                      arms=("random", "model-based (gnn)", "model-based (gnn) + transfer"),
                      slow_arms=("model-based (gnn)", "model-based (gnn) + transfer"),
                      slow_problems={"vae_small_infer"})
    assert set(res["arms"]) == {"random", "model-based (gnn)", "model-based (gnn) + transfer"}
    assert res["arms"]["random"]["runs"] == 2
    for arm in ("model-based (gnn)", "model-based (gnn) + transfer"):
        assert [r["problem"] for r in res["arms"][arm]["per_run"]] == ["vae_small_infer"]
    assert res["history"]["vae"]["program_names"] == ["autoencoder_small_infer"]
