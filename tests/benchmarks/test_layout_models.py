"""benchmarks/layout_models.py: runs of several seeds and models merged into one table, mean and spread per model."""
import argparse

from benchmarks import layout_models as lm


def _run(labels_taus: dict) -> dict:
    progs = ["p1", "p2"]
    return {"summary": {k: {"kendall": t, "top1": 0.01} for k, t in labels_taus.items()},
            "median": {k: {"kendall": t} for k, t in labels_taus.items()},
            "programs": {p: {k: {"kendall": t, "top1": 0.0} for k, t in labels_taus.items()} for p in progs},
            "train_s": {k: 10.0 for k in labels_taus if k != "analytical"}, "test_programs": progs}


def test_runs_merge_into_one_row_per_model_with_mean_and_spread():
    merged = lm.merge([_run({"analytical": 0.68, "gnn-listmle-s0": 0.6, "gnn-listmle-s1": 0.5}),
                       _run({"analytical": 0.68, "gnn-listmle-s2": 0.7, "xgboost-s0": 0.55})])
    groups = lm.by_model(merged)
    assert set(groups) == {"analytical", "gnn-listmle", "xgboost"} and len(groups["gnn-listmle"]) == 3
    assert set(merged["programs"]["p1"]) == {"analytical", "gnn-listmle-s0", "gnn-listmle-s1", "gnn-listmle-s2",
                                             "xgboost-s0"}
    args = argparse.Namespace(from_json="a.json,b.json", configs=40, epochs=20, hops=1, segments=8, seeds="0",
                              models="x")
    md = lm.markdown(merged, [], args)
    row = next(line for line in md.splitlines() if line.startswith("| gnn-listmle |"))
    assert "| 3 | 0.600 / 0.500 / 0.700 | 0.600 | 0.200 |" in row and "--from-json a.json,b.json" in md
    assert next(line for line in md.splitlines() if line.startswith("| analytical |")).endswith("| - |")
