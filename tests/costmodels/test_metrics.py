"""Metrics on inputs small enough to check by hand."""
import math

import numpy as np
import pytest

from costmodels.metrics import (fusion_metrics, kendall, mape, ordered_pair_accuracy, tile_metrics, tile_size_ape,
                              topk_slowdown)


def test_mape_by_hand():
    # |110-100|/100 = 0.10, |150-200|/200 = 0.25 -> mean 0.175 -> 17.5 %
    assert mape([110, 150], [100, 200]) == pytest.approx(17.5)
    assert mape([1, 2, 3], [1, 2, 3]) == 0.0


def test_mape_drops_failed_measurements_and_checks_lengths():
    assert mape([110, 5.0], [100, np.nan]) == pytest.approx(10.0)
    assert math.isnan(mape([1.0], [np.nan]))
    with pytest.raises(ValueError):
        mape([1, 2], [1])


def test_kendall_by_hand():
    assert kendall([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall([4, 3, 2, 1], [10, 20, 30, 40]) == pytest.approx(-1.0)
    # one discordant pair of 6: (5 - 1) / 6
    assert kendall([1, 2, 4, 3], [1, 2, 3, 4]) == pytest.approx(4 / 6)
    assert math.isnan(kendall([1.0], [2.0]))
    assert math.isnan(kendall([1, 1, 1], [1, 2, 3]))


def test_ordered_pair_accuracy_by_hand():
    # pairs: (0,1) ok, (0,2) ok, (1,2) wrong -> 2/3
    assert ordered_pair_accuracy([1, 3, 2], [1, 2, 3]) == pytest.approx(2 / 3)
    # predicted tie counts half; equal true values are skipped
    assert ordered_pair_accuracy([1, 1], [1, 2]) == pytest.approx(0.5)
    assert math.isnan(ordered_pair_accuracy([1, 2], [5, 5]))
    # groups: pairs across groups do not count
    acc = ordered_pair_accuracy([1, 2, 9, 8], [1, 2, 3, 4], groups=["a", "a", "b", "b"])
    assert acc == pytest.approx(0.5)


def test_tile_size_ape_by_hand():
    # kernel a: best true 10, model picks the tile with true 12 -> |12-10| = 2
    # kernel b: best true 30, model picks it -> 0.   APE = 100 * 2 / (10 + 30) = 5 %
    true = [10, 12, 30, 40]
    pred = [2, 1, 1, 2]
    groups = ["a", "a", "b", "b"]
    assert tile_size_ape(pred, true, groups) == pytest.approx(5.0)
    assert tile_size_ape(true, true, groups) == 0.0


def test_topk_slowdown_by_hand():
    true = [10, 12, 15, 30, 40]
    groups = ["a", "a", "a", "b", "b"]
    pred = [3, 1, 2, 2, 1]  # a: top1 is 12 -> 0.2; b: top1 is 40 -> 1/3
    assert topk_slowdown(pred, true, groups, 1) == pytest.approx((0.2 + 1 / 3) / 2)
    # top2: a picks {12, 15} -> 0.2; b picks both -> 0
    assert topk_slowdown(pred, true, groups, 2) == pytest.approx(0.1)
    assert topk_slowdown(pred, true, groups, 10) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        topk_slowdown(pred, true, groups, 0)


def test_nonfinite_predictions_rank_last():
    assert topk_slowdown([np.inf, 1.0], [1.0, 2.0], [0, 0], 1) == pytest.approx(1.0)
    assert tile_size_ape([np.nan, 1.0], [1.0, 2.0], [0, 0]) == pytest.approx(100.0)


def test_metric_bundles():
    f = fusion_metrics([1, 2, 3], [1, 2, 3])
    assert f == {"mape": 0.0, "kendall": pytest.approx(1.0), "n_kernels": 3, "mape_all": 0.0,
                 "kendall_all": pytest.approx(1.0)}
    # The paper's metrics count kernels >= 5 us only: the tiny kernels' 50% errors and inverted order
    # show only in the *_all metrics.
    us = 1e-6
    f = fusion_metrics([3 * us, 1 * us, 10 * us, 20 * us], [1 * us, 2 * us, 10 * us, 22 * us])
    assert f["n_kernels"] == 2 and f["kendall"] == pytest.approx(1.0)
    assert f["mape"] == pytest.approx(100 * (2 / 22) / 2)
    assert f["mape_all"] == pytest.approx(100 * (2 + 0.5 + 0 + 2 / 22) / 4)
    assert f["kendall_all"] < 1.0
    t = tile_metrics([1, 2, 1, 2], [1, 2, 1, 2], [0, 0, 1, 1], absolute=True)
    assert t["tile_ape"] == 0.0 and t["top1"] == 0.0 and t["top5"] == 0.0 and t["top10"] == 0.0
    assert t["kendall"] == pytest.approx(1.0) and t["mape"] == 0.0 and t["pair_acc"] == 1.0
