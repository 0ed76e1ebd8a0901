"""Every shipped tpu cost model is held to its recorded accuracy on a validation slice
(benchmarks/shipped_accuracy.py; the simulator and the models are deterministic, so the figures
reproduce to rounding): a change that moves a shipped model's accuracy fails here until it is
re-recorded on purpose."""
import json

import pytest

from benchmarks import shipped_accuracy

REFERENCE = json.loads(shipped_accuracy.REFERENCE.read_text())


@pytest.fixture(scope="module")
def figures():
    return shipped_accuracy.measure()


@pytest.mark.parametrize("task", sorted(REFERENCE["figures"]))
def test_shipped_models_keep_their_recorded_accuracy(task, figures):
    recorded, now = REFERENCE["figures"][task], figures[task]
    assert set(now) == set(recorded), f"{task}: models {sorted(now)} against recorded {sorted(recorded)}"
    for model, value in recorded.items():
        assert now[model] == pytest.approx(value, rel=1e-3, abs=1e-4), \
            f"{task}/{model}: {REFERENCE['metric'][task]} {now[model]} against the recorded {value}"


def test_learned_models_beat_the_analytical_one_where_recorded_so(figures):
    """The ordering the results page states for fusion and tiles holds on the slice too."""
    for task in ("fusion", "tile"):
        learned = [v for k, v in figures[task].items() if k != "analytical"]
        assert max(learned) < figures[task]["analytical"], task
