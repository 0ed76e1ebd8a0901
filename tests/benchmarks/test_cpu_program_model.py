"""benchmarks.cpu_program_model on a made-up cpu_cost_models record of two real programs (three
configurations each, invented paired rounds): features, labels, leave-one-family-out, the test guard."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import cpu_program_model as cpm
from benchmarks.cpu_cost_models import encode_config


def _record(tmp_path, programs):
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    rows = []
    rng = np.random.default_rng(0)
    for name in programs:
        space = FusionSpace(Program.from_file(str(cpm.ROOT / "examples" / "hlo" / f"{name}.hlo")), "cpu")
        cfgs = [space.default(), space.random(rng), space.random(rng)]
        enc = [encode_config(space, c) for c in cfgs]
        ratios = [1.0, 1.1, 0.9]
        rounds = [[[r * (1 + 0.01 * k), r] for k in range(4)] for r in ratios]
        rows.append({"program": name, "path": f"examples/hlo/{name}.hlo", "configs": enc,
                     "origin": ["default", "random", "random"], "predicted_s": {"xgboost": [1.0, 1.2, 0.8]},
                     "paired": {"local_ratio_rounds": rounds}})
    path = tmp_path / f"{programs[0]}.json"
    path.write_text(json.dumps({"programs": rows}))
    return str(path)


def test_family_names():
    assert cpm.family("bert_small_infer") == "bert" and cpm.family("mlp_mixer_medium_train") == "mlp_mixer"


def test_rows_validation_and_the_test_guard(tmp_path):
    train = _record(tmp_path, ["vae_small_infer", "autoencoder_small_infer"])
    rows = cpm.program_rows([train])
    assert [r["family"] for r in rows] == ["vae", "autoencoder"]
    for r in rows:
        assert np.allclose(r["delta_sums"][0], 0) and r["y"][0] == pytest.approx(0.0, abs=0.02)
        assert r["delta_sums"].shape[1] == r["delta"].shape[1] + len(cpm.KERNEL_MODELS)
    val = cpm.validate(rows, ("ridge", "rank"), seeds=(0, 1))
    assert set(val["ridge"]["mean"]) >= {"model", "kernel sum: xgboost (shipped)", "split-half (labels)"}
    assert set(val["rank"]["seed_means"]) == {"0", "1"}  # the pairwise kind fits per program group
    assert val["ridge"]["mean_over_seeds"] == pytest.approx(np.mean(list(val["ridge"]["seed_means"].values())))
    # the variant names build what they say: trees alone, averaged with the kernel sums, the sums alone
    for name, kind, blend, n in (("rank-bag3+sums", "rank", False, 3), ("rank~blend", "rank", True, 1),
                                 ("sums~blend", "sums", True, 1)):
        m = cpm._model(name)
        assert (m.kind, m.blend, m.n_bags, m.kernel_models) == (kind, blend, n, cpm.KERNEL_MODELS)
    blended = cpm.validate(rows, ("sums~blend",), seeds=(0, 1))["sums~blend"]
    assert blended["seed_means"]["0"] == blended["seed_means"]["1"]  # no trees: nothing depends on the seed
    with pytest.raises(SystemExit):  # a test program of a training family is refused
        cpm.main(["--train", train, "--test", train, "--variant", "ridge"])


def test_a_model_file_is_scored_once_on_the_ledger(tmp_path, monkeypatch):
    from benchmarks import heldout
    monkeypatch.setattr(heldout, "LEDGER", tmp_path / "ledger.json")
    train = _record(tmp_path, ["vae_small_infer"])
    test = _record(tmp_path, ["autoencoder_small_infer"])
    args = ["--train", train, "--test", test, "--variant", "ridge", "--model-out", str(tmp_path / "m.json"),
            "--json", str(tmp_path / "score.json"), "--ledger"]
    with pytest.raises(SystemExit):  # test programs that are not of a held-out test set: no ledger entry
        cpm.main(args)
    assert not (tmp_path / "ledger.json").exists()
    # examples/hlo stands in for a held-out set here (the real ones are never read by tests)
    corpus = cpm.ROOT / "examples" / "hlo"
    monkeypatch.setattr(heldout, "HELDOUT_SETS", (heldout.HELDOUT, corpus))
    out = cpm.main(args)
    entry = json.loads((tmp_path / "ledger.json").read_text())["scores"][-1]
    assert entry["task"] == cpm.LEDGER_TASK and entry["model_sha256"] == {"m.json": out["test"]["model_sha256"]}
    assert entry["test_set"] == heldout.test_set_digest(corpus) != heldout.test_set_digest()
    assert entry["test_set_folder"] == "examples/hlo"
    with pytest.raises(SystemExit):  # the same model file again, on the same test set: refused
        cpm.main(args)
