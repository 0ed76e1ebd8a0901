"""benchmarks/paper_tile_online.py on one kernel with a small trial budget: every method measures
exactly its budget of distinct tiles, best-so-far curves never rise, nothing beats the exhaustive
optimum, and the online XGBoost models find a near-optimal tile where random search does not."""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import paper_tile_online as P


@pytest.fixture(scope="module")
def case():
    # efficientnet_medium_train's depthwise-conv weight gradient: 64 valid tiles, the default tile is
    # 1.31x the optimum, and only one tile is within 5% of it (random search's median after 16
    # trials is ~1.10x): a kernel where learning from the first measurements has to pay off.
    cases = P.find_cases(["efficientnet_medium_train"], per_family=1, max_kernels=1, log=lambda s: None)
    assert len(cases) == 1
    c = cases[0]
    assert c.n >= P.MIN_TILES and len(set(c.tiles)) == c.n
    assert c.features.shape[0] == c.n and np.isfinite(c.features).all()
    assert c.default_ratio >= 1.0
    return c


@pytest.mark.parametrize("method", P.METHODS)
def test_budget_distinct_tiles_and_monotone_curves(case, method):
    budget, batch = 12, 4
    r = P.run_method(case, method, seed=0, budget=budget, batch=batch)
    order = r["order"]
    assert len(order) == budget and len(set(order)) == budget
    assert all(0 <= i < case.n for i in order)
    assert np.all(np.diff(r["best_true"]) <= 0) and np.all(np.diff(r["best_measured"]) <= 0)
    assert len(r["best_true"]) == len(r["pick_true"]) == budget
    opt = case.optimum
    assert opt <= r["best_true"].min() and r["best_true"][-1] == pytest.approx(case.true[order].min())
    assert np.all(r["pick_true"] >= r["best_true"])  # the shipped tile is one of the measured ones
    if method != "genetic":  # random and both model variants share their first (random) batch
        first = P.run_method(case, "random", seed=0, budget=budget, batch=batch)["order"][:batch]
        assert order[:batch] == first


@pytest.mark.parametrize("method", P.METHODS)
def test_small_space_is_measured_completely(case, method):
    """A space smaller than the budget: every tile exactly once (the GA's proposals outside this
    10-tile sub-space are dropped and replaced by random unmeasured tiles)."""
    import dataclasses
    k = 10
    small = dataclasses.replace(case, tiles=case.tiles[:k], features=case.features[:k], true=case.true[:k],
                                default_idx=0)
    r = P.run_method(small, method, seed=1, budget=16, batch=4)
    assert sorted(r["order"]) == list(range(k))
    assert r["best_true"][-1] == pytest.approx(small.true.min())


def test_model_based_search_finds_near_optimal_tile(case):
    budget = 16
    rank = P.run_method(case, "xgb-rank", seed=0, budget=budget, batch=4)
    reg = P.run_method(case, "xgb-reg", seed=0, budget=budget, batch=4)
    assert rank["best_true"][-1] <= 1.02 * case.optimum
    assert reg["best_true"][-1] <= 1.02 * case.optimum
    # and they beat the default tile by a wide margin (it is 1.31x the optimum)
    assert case.true[case.default_idx] / rank["best_true"][-1] > 1.2


def test_report_pieces(case, tmp_path):
    res = P.run_all([case], seeds=[0], budget=8, batch=4, log=lambda s: None)
    assert set(res["curves"]) == set(P.METHODS) and res["curves"]["random"].shape == (1, 8)
    summary = P.summarize(res["curves"], 8, skip=4)
    assert all(math.isfinite(summary[m]["area"]) and summary[m]["area"] >= 1.0 for m in P.METHODS)
    P.plot(summary, 8, case.default_ratio, tmp_path / "t.png", "test")
    assert (tmp_path / "t.png").stat().st_size > 1000
    cfg = {"budget": 8, "batch": 4, "seeds": [0], "noise": P.NOISE, "epsilon": P.EPSILON, "min_tiles": P.MIN_TILES,
           "population": 8}
    speed = {m: [1.0] * 8 for m in P.METHODS}
    md = P.markdown(cfg, [case], summary, {m: 1.0 for m in P.METHODS}, speed, res["per_kernel"], "t.png")
    assert "| XGBoost, rank objective |" in md and "](results/t.png)" in md and case.name in md
