"""The held-out test families (examples/hlo_heldout/, docs/evaluation.md) are frozen and apart from
every other corpus: each file's SHA-256 is the manifest's, no family name is shared with another
corpus, and no split file of the project puts a held-out program anywhere but in test."""
import hashlib
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "examples" / "hlo_heldout"
OTHER_CORPORA = ["hlo", "hlo_attention", "hlo_encoder", "hlo_library", "idioms"]


@pytest.fixture(scope="module")
def manifest():
    with open(HELDOUT / "manifest.json") as f:
        return json.load(f)


def _family(entry):
    return entry.get("family") or entry["name"].split("_", 1)[0]


def test_files_are_the_frozen_ones(manifest):
    assert len(manifest) == 16
    on_disk = sorted(p.name for p in HELDOUT.glob("*.hlo"))
    assert on_disk == sorted(e["file"] for e in manifest)
    for e in manifest:
        digest = hashlib.sha256((HELDOUT / e["file"]).read_bytes()).hexdigest()
        assert digest == e["sha256"], f"{e['file']} changed: a frozen test set is replaced, not edited"


def test_every_family_has_inference_and_training(manifest):
    modes = {}
    for e in manifest:
        modes.setdefault(_family(e), set()).add(e["mode"])
    assert len(modes) == 8
    assert all(m == {"infer", "train"} for m in modes.values()), modes


def test_families_appear_in_no_other_corpus(manifest):
    held = {_family(e) for e in manifest}
    names = {e["name"] for e in manifest}
    for corpus in OTHER_CORPORA:
        path = ROOT / "examples" / corpus / "manifest.json"
        if not path.exists():
            continue
        entries = json.loads(path.read_text())
        entries = entries if isinstance(entries, list) else list(entries.values())
        others = {_family(e) for e in entries if isinstance(e, dict) and "name" in e}
        assert not held & others, (corpus, held & others)
        assert not names & {e["name"] for e in entries if isinstance(e, dict) and "name" in e}


def test_split_files_keep_heldout_programs_in_test(manifest):
    names = {e["name"] for e in manifest}
    split = json.loads((HELDOUT / "split.json").read_text())
    assert sorted(split["test"]) == sorted(names) and not split["train"] and not split["validation"]
    for path in list((ROOT / "benchmarks").rglob("*split*.json")) + list((ROOT / "examples").rglob("split*.json")):
        if path.parent == HELDOUT:
            continue
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            continue
        for role in ("train", "validation", "valid", "val"):
            leaked = names & set(data.get(role, []))
            assert not leaked, f"{path}: held-out programs in {role}: {sorted(leaked)}"
