"""The budget model (autotune/tuning/budget.py): the plot cost is measured once per machine and read
back from its cache; a budget that leaves the search nothing is refused naming the budget needed."""
import pytest

from autotune.tuning import budget


def test_plot_cost_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(budget, "_PLOT_COST", [])
    calls = []
    monkeypatch.setattr(budget, "_measure_plot_cost", lambda: calls.append(1) or budget.PlotCost(0.5, 0.1))
    assert budget.plot_cost() == budget.PlotCost(0.5, 0.1)
    monkeypatch.setattr(budget, "_PLOT_COST", [])   # a new process
    assert budget.plot_cost() == budget.PlotCost(0.5, 0.1)
    assert calls == [1], "measured again although the cache holds it"
    assert list((tmp_path / "autotune").glob("plot-cost-*.json"))
    budget.plot_cost(refresh=True)
    assert calls == [1, 1]


def test_a_budget_that_leaves_nothing_names_the_one_needed(monkeypatch):
    monkeypatch.setattr(budget, "_PLOT_COST", [budget.PlotCost(0.4, 0.1)])
    with pytest.raises(budget.BudgetTooShort) as e:
        budget.split_budget(2.0, 0.2, "gnn", startup_s=1.9, load_s=0.01, budget_text="2s")
    assert e.value.needed >= 3 and f"give it --budget {e.value.needed}s or more" in str(e.value)
    seconds, note = budget.split_budget(20.0, 2.0, "gnn", startup_s=1.0, load_s=0.01, budget_text="20s")
    reserve = budget.OUTPUT_FIXED_SECONDS + 0.4 + (budget.OUTPUT_PLOTS - 1) * 0.1 + budget.OUTPUT_SECONDS_PER_LOAD_SECOND * 0.01
    assert seconds == pytest.approx(20.0 - 1.0 - 2.0 - reserve)
    assert note["output_reserve_s"] == pytest.approx(reserve, abs=1e-3)
    with pytest.raises(budget.BudgetTooShort, match="start-up alone took"):
        budget.check_after_parse(1.0, 0.1, "gnn", used_s=0.9, load_s=0.5, budget_text="1s")
    assert budget.verification_seconds(5.0, "hardware") == 0.0
