"""Checks on the real HLO corpus manifest (examples/hlo/manifest.json). Needs no jax."""
import collections
import json
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
HLO_DIR = EXAMPLES / "hlo"
MANIFEST = HLO_DIR / "manifest.json"
KEYS = {"name", "file", "family", "size", "mode", "instructions", "computations", "jax_version"}


@pytest.fixture(scope="module")
def manifest():
    assert MANIFEST.is_file(), f"missing {MANIFEST}"
    with open(MANIFEST) as f:
        return json.load(f)


def test_entries_are_complete_and_unique(manifest):
    assert len(manifest) >= 40
    for e in manifest:
        assert KEYS <= set(e), e
        assert e["mode"] in ("infer", "train")
        assert e["name"] == f"{e['family']}_{e['size']}_{e['mode']}"
        assert e["file"] == e["name"] + ".hlo"
    assert len({e["name"] for e in manifest}) == len(manifest)


def test_families_sizes_and_modes(manifest):
    sizes = collections.defaultdict(set)
    modes = collections.defaultdict(set)
    for e in manifest:
        sizes[e["family"]].add(e["size"])
        modes[e["family"]].add(e["mode"])
    assert len(sizes) >= 12, sorted(sizes)
    for family, s in sizes.items():
        assert len(s) >= 2, (family, s)
    assert {e["mode"] for e in manifest} == {"infer", "train"}
    both = [f for f, m in modes.items() if m == {"infer", "train"}]
    assert len(both) >= len(modes) // 2 + 1, modes


def test_has_a_large_program(manifest):
    assert max(e["instructions"] for e in manifest) >= 10_000


def test_files_exist_and_counts_match(manifest, example_module):
    count_hlo = example_module("hlo_count.py").count_hlo
    for e in manifest:
        path = HLO_DIR / e["file"]
        assert path.is_file(), path
        text = path.read_text()
        assert text.startswith("HloModule "), path
        assert "ENTRY " in text, path
        assert count_hlo(text) == (e["instructions"], e["computations"]), e["name"]

