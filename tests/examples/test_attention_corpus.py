"""The attention corpus of issue 17 (examples/hlo_attention/), the padding-masked encoder corpus
(examples/hlo_encoder/) and the fusion split files that place them (benchmarks/results/fusion_split_attention.json;
fusion_split_attention_enc.json: the same with roberta in training). Needs no jax."""
import json
import pathlib

import pytest

from autotune.tuning.dataset import read_split_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
ATT = ROOT / "examples" / "hlo_attention"
ENC = ROOT / "examples" / "hlo_encoder"
SPLIT = ROOT / "benchmarks" / "results" / "fusion_split_attention.json"
SPLIT_ENC = ROOT / "benchmarks" / "results" / "fusion_split_attention_enc.json"


def _manifest(folder):
    return {e["name"]: e for e in json.loads((folder / "manifest.json").read_text())}


@pytest.mark.parametrize("folder,families", [(ATT, {"gpt", "vit", "t5"}), (ENC, {"roberta"})])
def test_manifest_matches_files_and_counts(example_module, folder, families):
    count_hlo = example_module("hlo_count.py").count_hlo
    entries = _manifest(folder)
    assert {e["family"] for e in entries.values()} == families
    assert sorted(entries) == sorted(p.stem for p in folder.glob("*.hlo"))
    for name, e in entries.items():
        text = (folder / e["file"]).read_text()
        assert text.startswith("HloModule ") and "ENTRY " in text, name
        assert count_hlo(text) == (e["instructions"], e["computations"]), name
        assert e["name"] == f"{e['family']}_{e['size']}_{e['mode']}"


def _families(split):
    fams = {}
    for name, s in split.items():
        fams.setdefault(name.split("_")[0], set()).add(s)
    assert all(len(s) == 1 for s in fams.values()), fams       # a family lies wholly in one split
    return {f: next(iter(s)) for f, s in fams.items()}


def test_split_places_every_program_and_keeps_test_families_out_of_training():
    """The split of B0-B2 places every program of examples/hlo and examples/hlo_attention; the _enc split
    places those the same way and examples/hlo_encoder's (roberta) in training."""
    split = read_split_file(str(SPLIT))
    split_enc = read_split_file(str(SPLIT_ENC))
    programs = {p.stem for p in (ROOT / "examples" / "hlo").glob("*.hlo")} | {p.stem for p in ATT.glob("*.hlo")}
    roberta = {p.stem for p in ENC.glob("*.hlo")}
    assert len(roberta) == 4 and all(p.startswith("roberta_") for p in roberta)
    assert programs == set(split)
    assert programs | roberta == set(split_enc)
    assert {p: s for p, s in split_enc.items() if p not in roberta} == split
    for by in (_families(split), _families(split_enc)):
        assert {f for f, s in by.items() if s == "test"} == {"bert", "recommender"}
        assert {f for f, s in by.items() if s == "validation"} == {"resnet", "vae", "vit", "t5"}
        assert by["gpt"] == "train"
    assert _families(split_enc)["roberta"] == "train"


def test_attention_families_show_their_idioms():
    """gpt: causal iota compare combined with the padding mask by `and`; t5: cross-attention (a dot of
    decoder queries with encoder keys of another length) and RMS norm (rsqrt); vit: strided patch conv."""
    gpt = (ATT / "gpt_small_infer.hlo").read_text()
    assert "iota(" in gpt and "compare(" in gpt and " and(" in gpt and "select(" in gpt
    t5 = (ATT / "t5_small_infer.hlo").read_text()
    assert "rsqrt(" in t5 and "f32[4,4,12,20]" in t5             # (batch, heads, target, source) logits
    vit = (ATT / "vit_small_infer.hlo").read_text()
    assert "convolution(" in vit and "window={size=8x8 stride=8x8}" in vit


def test_roberta_has_bert_like_padding_mask_only():
    """roberta: the padding mask alone selects the (batch, heads, query, key) logits: 5 heads of 20
    positions (bert small: 2 heads of 16), with no causal iota compare and no 4-d `and` of masks as in
    gpt; no token-type embedding (bert's gather from a (2, d) segment table)."""
    rob = (ENC / "roberta_small_infer.hlo").read_text()
    assert "f32[6,5,20,20]{3,2,1,0} select(" in rob
    assert "iota(" not in rob and "pred[6,1,20,20]" not in rob
    gpt = (ATT / "gpt_small_infer.hlo").read_text()
    assert "pred[4,1,24,24]{3,2,1,0} and(" in gpt                # gpt: causal and padding, combined
    assert "f32[2,80]" not in rob
