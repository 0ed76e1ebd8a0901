"""Fixtures shared across test packages: a three-program corpus and its small simulator datasets.

Built once per test session (building them is most of the cost of the dataset and model tests);
tests only read them.
"""
import shutil
from pathlib import Path

import pytest

from autotune.tuning.dataset import DatasetOptions, build_dataset

ROOT = Path(__file__).resolve().parents[1]
SMALL_CORPUS = ("vae_small_infer", "lstm_small_infer", "autoencoder_small_infer")


@pytest.fixture(scope="session")
def corpus_names() -> list:
    """The program names of the small corpus, in SMALL_CORPUS order."""
    return list(SMALL_CORPUS)


@pytest.fixture(scope="session")
def progs(tmp_path_factory) -> Path:
    """A directory holding the three small example programs of SMALL_CORPUS."""
    d = tmp_path_factory.mktemp("progs")
    for p in SMALL_CORPUS:
        shutil.copy(ROOT / "examples" / "hlo" / f"{p}.hlo", d / f"{p}.hlo")
    return d


@pytest.fixture(scope="session")
def fusion_ds(progs, tmp_path_factory):
    """Fusion dataset of the small corpus on the simulator: 3 configurations per program."""
    return build_dataset(progs, "fusion", "sim", configs_per_program=3, out_dir=tmp_path_factory.mktemp("fus"),
                         options=DatasetOptions(seed=1))


@pytest.fixture(scope="session")
def tile_ds(progs, tmp_path_factory):
    """Tile dataset of the small corpus on the simulator: at most 8 tiles per kernel."""
    return build_dataset(progs, "tile", "sim", configs_per_program=1, out_dir=tmp_path_factory.mktemp("tile"),
                         options=DatasetOptions(max_tiles_per_kernel=8))
