"""Fixtures shared by the layout model tests: a small sim-priced layout dataset of four example programs."""
import shutil
from pathlib import Path

import pytest

from autotune.tuning.dataset import Dataset, build_dataset

ROOT = Path(__file__).resolve().parents[2]
LAYOUT_PROGRAMS = ["vae_small_infer", "lstm_small_infer", "bert_small_infer", "mlp_mixer_small_infer"]


@pytest.fixture(scope="session")
def layout_ds(tmp_path_factory) -> Dataset:
    d = tmp_path_factory.mktemp("progs")
    for p in LAYOUT_PROGRAMS:
        shutil.copy(ROOT / "examples" / "hlo" / f"{p}.hlo", d / f"{p}.hlo")
    return build_dataset(d, "layout", "sim", configs_per_program=12, out_dir=tmp_path_factory.mktemp("lay"))
