"""benchmarks/cpu_cost_models.py: the end-to-end split-half agreement (no jax needed)."""
import math
import sys
from pathlib import Path

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
