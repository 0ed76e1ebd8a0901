"""benchmarks/budget_floor.py: a budget start-up uses up is refused in one line naming the budget needed (exit 2);
a budget with room runs (a tiny program, each run a fresh process)."""
import json

from benchmarks import budget_floor

PROGRAM = "tests/fixtures/hlo/small/two_outputs.hlo"


def test_a_budget_too_small_is_refused_and_one_with_room_runs(tmp_path):
    res = budget_floor.main(["--programs", PROGRAM, "--budgets", "0.2", "60", "--md", str(tmp_path / "b.md"),
                             "--json", str(tmp_path / "b.json")])
    refused, ran = res["runs"]
    assert refused["exit"] == 2 and "--budget 0.2s is too short" in refused["stderr"] and "\n" not in refused["stderr"]
    assert ran["exit"] == 0 and ran["evaluations"] >= 1 and ran["budget_split"]
    assert json.loads((tmp_path / "b.json").read_text())["runs"][0]["exit"] == 2
    assert (tmp_path / "b.md").read_text().startswith("| program | model | --budget |")
