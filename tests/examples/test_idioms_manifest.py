"""Checks on the idiom corpus (examples/idioms/): manifest and files agree, every idiom of issue 16
is exercised (and visible in the HLO text of each program tagged with it), both modes, the four
model families, tiny programs. Needs no jax except the regeneration test (marker ``xla``)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
IDIOMS_DIR = ROOT / "examples" / "idioms"
MANIFEST = IDIOMS_DIR / "manifest.json"
KEYS = {"name", "file", "group", "mode", "idioms", "description", "instructions", "computations",
        "jax_version", "autotune_parse"}
MODEL_FAMILIES = ("vit", "dlrm", "gru", "wavenet")


@pytest.fixture(scope="module")
def manifest():
    assert MANIFEST.is_file(), f"missing {MANIFEST}"
    with open(MANIFEST) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def catalog(example_module):
    return example_module("corpus/idiom_catalog.py")


@pytest.fixture(scope="module")
def texts(manifest):
    return {e["name"]: (IDIOMS_DIR / e["file"]).read_text() for e in manifest}


def test_entries_are_complete_and_unique(manifest, catalog):
    assert len(manifest) >= 40
    assert len({e["name"] for e in manifest}) == len(manifest)
    for e in manifest:
        assert KEYS <= set(e), e
        assert e["mode"] in catalog.MODES, e
        assert e["group"] in catalog.GROUPS, e
        assert e["file"] == e["name"] + ".hlo"
        assert e["idioms"] and set(e["idioms"]) <= set(catalog.IDIOMS), e
        parse = e["autotune_parse"]
        assert parse == "ok" or (parse and "\n" not in parse), e


def test_files_and_manifest_agree(manifest, texts, example_module):
    count_hlo = example_module("hlo_count.py").count_hlo
    on_disk = {p.name for p in IDIOMS_DIR.glob("*.hlo")}
    assert on_disk == {e["file"] for e in manifest}
    for e in manifest:
        text = texts[e["name"]]
        assert text.startswith(f"HloModule jit_{e['name']},"), e["name"]
        assert "ENTRY " in text, e["name"]
        assert count_hlo(text) == (e["instructions"], e["computations"]), e["name"]


def test_every_idiom_is_covered_in_both_senses(manifest, texts, catalog):
    covered = {i for e in manifest for i in e["idioms"]}
    assert covered == set(catalog.IDIOMS), sorted(set(catalog.IDIOMS) - covered)
    for e in manifest:
        for idiom in e["idioms"]:
            assert catalog.evidence(idiom).search(texts[e["name"]]), (e["name"], idiom)


def test_both_modes_and_the_model_families(manifest):
    modes = {e["mode"] for e in manifest}
    assert modes == {"infer", "train"}
    assert sum(e["mode"] == "train" for e in manifest) >= 15
    names = {e["name"] for e in manifest}
    for family in MODEL_FAMILIES:
        assert {f"{family}_small_infer", f"{family}_small_train"} <= names, family


def test_tiny_programs_span_small_instruction_counts(manifest, catalog):
    tiny = [e for e in manifest if e["group"] == "tiny"]
    assert len(tiny) >= 6
    assert all(e["instructions"] <= catalog.TINY_MAX_INSTRUCTIONS for e in tiny), tiny
    assert min(e["instructions"] for e in tiny) == 1  # the output is the parameter itself


def test_corpus_stays_small(manifest):
    total = sum(p.stat().st_size for p in IDIOMS_DIR.iterdir())
    assert total < 3 * 2 ** 20, total
    small = [e for e in manifest if e["instructions"] < 1500]
    assert len(small) >= 0.9 * len(manifest)
    assert max(e["instructions"] for e in manifest) < 5000


def test_readme_lists_every_program(manifest):
    readme = (IDIOMS_DIR / "README.md").read_text()
    for e in manifest:
        assert f"| {e['name']} | {e['group']} | {e['mode']} |" in readme, e["name"]


def test_recorded_parse_outcome_matches_autotune(manifest):
    """``autotune_parse`` says what autotune's parser does with each program today."""
    from autotune.compiler.program import Program
    for e in manifest:
        path = IDIOMS_DIR / e["file"]
        try:
            Program.from_file(str(path))
            outcome = "ok"
        except Exception as exc:  # noqa: BLE001
            outcome = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:300]
        assert outcome == e["autotune_parse"] or (outcome != "ok" and e["autotune_parse"] != "ok"), \
            (e["name"], outcome, e["autotune_parse"])


@pytest.mark.xla
def test_generator_reproduces_committed_programs(tmp_path, manifest):
    """Regenerating a few programs (lowering only) gives the committed text byte for byte."""
    jax = pytest.importorskip("jax")
    if jax.__version__ != manifest[0]["jax_version"]:
        pytest.skip(f"corpus lowered with jax {manifest[0]['jax_version']}, have {jax.__version__}")
    names = ["tiny_identity", "kv_cache_step_donated", "dropout_rbg_train"]
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "generate_idioms.py"), "--no-run",
                        "--out", str(tmp_path), "--only", *names],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert r.returncode == 0, r.stderr[-2000:]
    for name in names:
        assert (tmp_path / f"{name}.hlo").read_text() == (IDIOMS_DIR / f"{name}.hlo").read_text()
    regenerated = json.loads((tmp_path / "manifest.json").read_text())
    committed = {e["name"]: e for e in manifest}
    assert [e["name"] for e in regenerated] == sorted(names)
    for e in regenerated:
        assert e == committed[e["name"]]
