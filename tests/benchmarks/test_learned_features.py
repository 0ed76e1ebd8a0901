"""benchmarks/learned_features.py: the XGBoost fusion model's rows (before, seeds, one group ablated) on a tiny
simulator dataset of three programs, the report and its JSON written."""
import json
import shutil
from pathlib import Path

import pytest

from autotune.tuning.dataset import build_dataset
from benchmarks import learned_features

pytest.importorskip("xgboost")

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ["vae_small_infer", "lstm_small_infer", "autoencoder_small_infer"]  # three families: 1/1/1 split


def test_rows_and_one_ablation_on_a_tiny_dataset(tmp_path):
    progs = tmp_path / "progs"
    progs.mkdir()
    for p in PROGRAMS:
        shutil.copy(ROOT / "examples" / "hlo" / f"{p}.hlo", progs / f"{p}.hlo")
    ds = build_dataset(progs, "fusion", "sim", configs_per_program=1, out_dir=tmp_path / "fusion")
    out = tmp_path / "lf.md"
    assert learned_features.main(["--data", str(ds.root), "--seeds", "0", "--rounds", "3",
                                  "--groups", "geo_dot", "--out", str(out)]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert {"before: old features, 300 rounds, depth 6, all kernels", "all features, trained on all kernels, seed 0",
            "without geo_dot", "without geo"} <= set(res)
    assert all("mape_mean" in r and "kendall_pooled" in r for r in res.values())
    assert "| model | MAPE mean |" in out.read_text()
