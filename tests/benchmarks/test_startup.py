"""benchmarks/startup.py runs both commands in fresh processes and reports the start-up breakdown."""
from benchmarks import startup


def test_one_run_reports_help_and_fusion_startup():
    res = startup.measure(runs=1, budget="20s")  # 10 s is too short once a loaded machine slows start-up to ~9 s
    m = res["median"]
    assert m["help_s"] > 0 and 0 < m["fusion_startup_s"] < m["fusion_wall_s"]
    assert {"parse", "cost_model", "other"} <= set(m["startup_breakdown"])
    assert any("start-up until the search" in line for line in startup.table(res))
