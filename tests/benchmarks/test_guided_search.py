"""benchmarks/guided_search.py: the section-7 experiment (hardware only, B, against model + B/10)."""
from pathlib import Path

import pytest

from benchmarks import guided_search
from benchmarks.tables import md_table

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = str(ROOT / "examples" / "hlo" / "autoencoder_small_infer.hlo")


def test_hardware_clock_charges_compile_and_runs():
    c = guided_search.HardwareClock(compile_s=1.0, repeats=10)
    c.charge(0.01)
    c.charge(float("inf"))  # a failed configuration costs its compile only
    assert c.now() == pytest.approx(1.0 + 0.1 + 1.0) and c.measured == 2


@pytest.mark.parametrize("start", ["default", "random"])
def test_sim_job_rows_are_speedups_of_real_configurations(start):
    job = {"program": PROGRAM, "seed": 0, "start": start, "hw_budget": 30.0, "model_seconds": 0.5,
           "compile_s": 1.0, "repeats": 10, "cost_model": "analytical"}
    row = guided_search.run_sim_job(job)
    assert row["program"] == "autoencoder_small_infer" and row["start"] == start
    assert row["hw_only_configs"] >= 1 and row["guided_configs"] >= 1
    # B/10 of hardware: the guided arm measured no more than about a tenth of the hardware-only arm
    assert row["guided_configs"] <= row["hw_only_configs"]
    for arm in ("hw_only", "guided"):
        assert row[f"{arm}_speedup"] == pytest.approx(row["default_s"] / row[f"{arm}_s"])
    if start == "default":  # the default is measured first: neither arm ends worse than it (noise-free truth
        assert row["guided_speedup"] > 0.97 and row["hw_only_speedup"] > 0.97  # vs 1.5% measurement noise)
    again = guided_search.run_sim_job(job)
    assert again["hw_only_s"] == row["hw_only_s"]  # the hardware-only arm is seeded and budgeted in simulated time


def test_guided_candidates_start_with_the_default():
    from autotune import api
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(api.load_program(PROGRAM), "tpu")
    model = guided_search.search_model("analytical", "tpu")
    cands = guided_search.guided_candidates(space, model, 0, "default", 0.3, 5)
    assert cands[0] == space.default() and 2 <= len(cands) <= 6
    costs = [float(model.predict(space.kernels(c)).sum()) for c in cands[1:]]
    assert costs == sorted(costs)  # the model's best first


def test_summary_table_counts_wins_per_program_and_start():
    rows = [{"program": p, "start": s, "seed": k, "hw_only_speedup": hw, "guided_speedup": gd}
            for p, s, hw, gd in (("a", "default", 1.10, 1.20), ("b", "default", 1.30, 1.00), ("a", "random", 1.0, 1.0))
            for k in range(3)]
    table, wins, n = guided_search.summary_table(rows)
    assert (wins, n) == (2, 3)
    lines = table.splitlines()
    assert lines[0].startswith("| program | hardware only, B (from default)") and "(from random)" in lines[0]
    assert lines[2].startswith("| a | 1.100x (1.100-1.100) | 1.200x (1.200-1.200) | yes | 1.000x")
    assert lines[3].startswith("| b | 1.300x") and "| no | - | - | - |" in lines[3]
    assert lines[-1].startswith("| **median** | **1.200x** | **1.100x** |")


def test_md_table():
    assert md_table(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---:|\n| 1 | x |"
    assert md_table(["a"], [], [":-:"]).splitlines()[1] == "|:-:|"
