"""benchmarks.options_transfer on two made-up runs: the second program's prior (the first's timings) puts
its winner first, so it reaches its gain in fewer trials than the declared order does."""
from __future__ import annotations

import json

from benchmarks import options_transfer as ot

SINGLES = ["xla_backend_optimization_level=2", "xla_backend_optimization_level=1", "xla_cpu_use_fusion_emitters=false",
           "xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE"]


def _run(tmp_path, name, speedups, trace):
    folder = tmp_path / name
    folder.mkdir()
    cands = [{"name": n, "status": "ok", "speedup": s} for n, s in speedups.items()]
    (folder / "report.json").write_text(json.dumps({"verification": {"compiler_options": {
        "candidates": cands, "trace": trace, "prior_programs": 0 if name == "a" else 1}}}))


def test_replay_and_summary(tmp_path):
    fast = {n: 1.0 for n in SINGLES}
    fast["xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE"] = 1.2
    _run(tmp_path, "a", fast, [[1, 1.0], [2, 1.0], [3, 1.0], [4, 1.2]])
    _run(tmp_path, "b", fast, [[1, 1.2], [2, 1.2], [3, 1.2], [4, 1.2]])
    us = tmp_path / "us.json"
    us.write_text(json.dumps({"rows": [{"program": "a", "corpus": "hlo"}, {"program": "b", "corpus": "hlo"}]}))
    out = ot.main(["--runs", str(tmp_path), "--json", str(us)])
    rows = {r["program"]: r for r in out["rows"]}
    assert rows["b"]["cold"] == 4 and rows["b"]["as_run"] == 1 and rows["b"]["leave_one_out"] == 1
    s = out["summary"]["all with a gain"]
    assert s["programs"] == 2 and s["median_cold"] == 4 and s["loo_within_a_third"] == 2


def test_retest_orders_the_second_run_by_the_first_runs_timings(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    first = {n: 1.0 for n in SINGLES}
    first["xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE"] = 1.2
    second = dict(first, **{"xla_backend_optimization_level=1": 1.01})  # the same winner, measured again
    _run(one, "a", first, [[1, 1.0]])
    _run(two, "a", second, [[1, 1.01]])
    for folder in (one, two):
        (folder / "us.json").write_text(json.dumps({"rows": [{"program": "a", "corpus": "hlo"}]}))
    out = ot.main(["--runs", str(one), "--json", str(one / "us.json"), "--retest", str(two), str(two / "us.json")])
    r = out["retest"]["rows"][0]
    assert r["cold"] == 4 and r["own_earlier_order"] == 1 and r["shared_settings"] == 4
    assert out["summary"]["retest"]["own_earlier_within_a_third"] == 1
