"""benchmarks/cpu_cost_models.py: the end-to-end split-half agreement and the paired reference (no jax needed)."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import cpu_cost_models  # noqa: E402


def test_split_half_kendall_agrees_on_stable_times_and_not_on_swapped_ones():
    stable = [[1.0, 1.1, 1.0, 1.1], [2.0, 2.1, 2.0, 2.1], [3.0, 3.1, 3.0, 3.1], [4.0, 4.1, 4.0, 4.1]]
    assert cpu_cost_models.split_half_kendall(stable) == 1.0
    # odd rounds rank the configurations in reverse: the measurement disagrees with itself completely
    swapped = [[1.0, 4.0, 1.0, 4.0], [2.0, 3.0, 2.0, 3.0], [3.0, 2.0, 3.0, 2.0], [4.0, 1.0, 4.0, 1.0]]
    assert cpu_cost_models.split_half_kendall(swapped) == -1.0


def test_split_half_kendall_needs_two_rounds_and_three_configurations():
    assert math.isnan(cpu_cost_models.split_half_kendall([[1.0], [2.0], [3.0]]))
    assert math.isnan(cpu_cost_models.split_half_kendall([[1.0, 2.0], [2.0, 3.0]]))


class _Clock:
    t = 0


class _FakeRun:
    """A PreparedRun stand-in on a machine whose speed drifts by up to 2x over a few rounds: every
    block advances one clock tick and takes base x speed(tick)."""

    def __init__(self, base):
        self.base, self.number = base, 1

    def calibrate(self, min_block_ms):
        return 1

    def block(self, n=None, warmup=0):
        _Clock.t += 1
        return self.base * (1.5 + 0.5 * math.sin(_Clock.t / 60.0))


def test_paired_reference_cancels_drift_and_agrees_with_itself():
    import numpy as np
    true = [1.0, 1.15, 1.3, 1.45, 1.6]
    runs = [_FakeRun(1e-4 * t) for t in true] + [None]  # the last configuration did not compile
    p = cpu_cost_models.paired_reference(runs, rounds=8, pairs=3, block_ms=0.5)
    assert p["rounds"] == 8 and p["reference"] == 0 and math.isnan(p["ratio"][-1])
    absolute = [b for t in p["blocks"][0] for b in t[1]]
    assert max(absolute) / min(absolute) > 1.5  # the drift: the same program's blocks differ by > 1.5x
    np.testing.assert_allclose(p["ratio"][:5], true, rtol=0.03)  # local ratio: the drift cancels
    np.testing.assert_allclose(p["pair_ratio"][:5], true, rtol=0.01)
    row = {"paired": p, "measured_s": [1e-4 * t for t in true] + [float("nan")],
           "predicted_s": {"right": true + [0.0], "reversed": true[::-1] + [0.0]},
           "origin": ["default", "random", "random", "searched:xgboost", "searched:gnn", "random"]}
    cpu_cost_models.paired_summary(row)
    assert row["split_half_by_reference"]["local ratio"] == pytest.approx(1.0)
    assert row["split_half_by_reference"]["pair ratio"] == pytest.approx(1.0)
    assert row["kendall_paired"]["right"] == pytest.approx(1.0)
    assert row["kendall_paired"]["reversed"] == pytest.approx(-1.0)
    assert abs(row["paired_spread"] - 1.6) < 0.05
    by = row["by_origin"]  # the configuration that did not compile counts in neither subset
    assert by["default and random"]["configurations"] == 3 and by["searched"]["configurations"] == 2
    assert by["default and random"]["kendall"]["right"] == pytest.approx(1.0)
    assert by["default and random"]["kendall"]["reversed"] == pytest.approx(-1.0)
    assert math.isnan(by["searched"]["split_half"])  # too few configurations to rank


def test_cross_program_floor_is_the_best_single_value_per_shared_kernel(monkeypatch):
    """A kernel measured at 10 us in one program and 20 us in another: no single value does better than
    MAPE 0.25 (10 us: 0 and 0.5; 20 us: 1 and 0); kernels in one program only, or all faster than 5 us,
    do not count."""
    from types import SimpleNamespace
    from autotune.tuning import dataset as dataset_mod

    def program(pairs):
        graphs = [SimpleNamespace(hash=h) for h, _ in pairs]
        return SimpleNamespace(graph=np.arange(len(pairs)), runtime=np.array([y for _, y in pairs]), graphs=graphs)

    progs = {"a": program([("k", 10e-6), ("tiny", 1e-6), ("only_a", 30e-6)]),
             "b": program([("k", 20e-6), ("tiny", 2e-6)])}
    fake = SimpleNamespace(programs={n: {} for n in progs}, load_program=lambda n: progs[n])
    monkeypatch.setattr(dataset_mod.Dataset, "open", classmethod(lambda cls, root: fake))
    fl = cpu_cost_models.cross_program_floor("x")
    assert fl["kernels"] == 1 and fl["labels"] == 2
    assert fl["floor_mape_mean"] == pytest.approx(0.25) and fl["ratio_median"] == pytest.approx(2.0)
    assert fl["pairs"] == [{"programs": ["a", "b"], "kernels": 1, "ratio_median": pytest.approx(2.0)}]
