"""The held-out test sets (examples/hlo_heldout/ and examples/hlo_heldout2/, docs/evaluation.md) are frozen
and apart from every other corpus: each file's SHA-256 is the manifest's, no family name is shared with
another corpus (the other held-out set included), and no split file of the project puts a held-out program
anywhere but in test."""
import hashlib
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# held-out corpus -> (programs, families)
HELDOUT = {"hlo_heldout": (16, 8), "hlo_heldout2": (12, 6)}
OTHER_CORPORA = ["hlo", "hlo_attention", "hlo_encoder", "hlo_library", "idioms"]


def _entries(corpus):
    path = EXAMPLES / corpus / "manifest.json"
    if not path.exists():
        return []
    entries = json.loads(path.read_text())
    entries = entries if isinstance(entries, list) else list(entries.values())
    return [e for e in entries if isinstance(e, dict) and "name" in e]


def _family(entry):
    return entry.get("family") or entry["name"].split("_", 1)[0]


@pytest.fixture(scope="module", params=sorted(HELDOUT))
def heldout(request):
    """(corpus name, its folder, its manifest entries)."""
    return request.param, EXAMPLES / request.param, _entries(request.param)


def test_files_are_the_frozen_ones(heldout):
    corpus, folder, manifest = heldout
    assert len(manifest) == HELDOUT[corpus][0]
    on_disk = sorted(p.name for p in folder.glob("*.hlo"))
    assert on_disk == sorted(e["file"] for e in manifest)
    for e in manifest:
        digest = hashlib.sha256((folder / e["file"]).read_bytes()).hexdigest()
        assert digest == e["sha256"], f"{corpus}/{e['file']} changed: a frozen test set is replaced, not edited"


def test_every_family_has_inference_and_training(heldout):
    corpus, _, manifest = heldout
    modes = {}
    for e in manifest:
        modes.setdefault(_family(e), set()).add(e["mode"])
    assert len(modes) == HELDOUT[corpus][1]
    assert all(m == {"infer", "train"} for m in modes.values()), modes


def test_families_appear_in_no_other_corpus(heldout):
    corpus, _, manifest = heldout
    held = {_family(e) for e in manifest}
    names = {e["name"] for e in manifest}
    others = OTHER_CORPORA + [c for c in sorted(HELDOUT) if c != corpus]
    for other in others:
        entries = _entries(other)
        assert not held & {_family(e) for e in entries}, (other, held & {_family(e) for e in entries})
        assert not names & {e["name"] for e in entries}, (other, names & {e["name"] for e in entries})


def test_split_files_keep_heldout_programs_in_test(heldout):
    _, folder, manifest = heldout
    names = {e["name"] for e in manifest}
    split = json.loads((folder / "split.json").read_text())
    assert sorted(split["test"]) == sorted(names) and not split["train"] and not split["validation"]
    for path in list((ROOT / "benchmarks").rglob("*split*.json")) + list(EXAMPLES.rglob("split*.json")):
        if path.parent == folder:
            continue
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            continue
        for role in ("train", "validation", "valid", "val"):
            leaked = names & set(data.get(role, []))
            assert not leaked, f"{path}: held-out programs in {role}: {sorted(leaked)}"
