"""benchmarks/paper_ablations.py: the subsampled dataset view and a tiny end-to-end ablation run
(two variants per task, one short epoch) on datasets built from three small corpus programs."""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autotune.tuning.dataset import DatasetOptions, build_dataset
from benchmarks.joblog import JobLog

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ["vae_small_infer", "lstm_small_infer", "autoencoder_small_infer"]  # three families: 1/1/1 split


@pytest.fixture(scope="module")
def pa():
    from benchmarks import paper_ablations
    return paper_ablations


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    progs = tmp_path_factory.mktemp("progs")
    for p in PROGRAMS:
        shutil.copy(ROOT / "examples" / "hlo" / f"{p}.hlo", progs / f"{p}.hlo")
    fusion = build_dataset(progs, "fusion", "sim", configs_per_program=2, out_dir=tmp_path_factory.mktemp("f"))
    tile = build_dataset(progs, "tile", "sim", configs_per_program=1, out_dir=tmp_path_factory.mktemp("t"),
                         options=DatasetOptions(max_tiles_per_kernel=8))
    return fusion, tile


def test_variants_one_change_each(pa):
    for task, loss in (("fusion", "mse"), ("tile", "rank")):
        vs = pa.variants(task, seed_repeats=1)
        assert vs[0].key == "baseline" and vs[0].opts == {} and loss in vs[0].label.lower().replace("log", "")
        assert vs[1].seed_offset == 1
        assert {v.key for v in vs} >= {"reduction=node", "reduction=lstm", "reduction=transformer", "encoder=gat",
                                       "encoder=none", "static=off", "edges=in", "edges=out",
                                       "loss=rank" if loss == "mse" else "loss=mse"}
        assert all(len(v.opts) <= 1 for v in vs)


def test_subset_view_caps_are_seeded(pa, data):
    _, tile = data
    st = pa.Settings(epochs=1, train_kernels_per_program=3, tiles_per_kernel=2)
    a, b = pa.SubsetDataset(tile, st, seed=0), pa.SubsetDataset(tile, st, seed=0)
    s, s2 = a.load("train"), b.load("train")
    assert s.tile_keys == s2.tile_keys and len(s.graphs) <= 3
    counts = np.bincount(s.graph)
    assert counts.max() <= 2
    # every kept kernel keeps its default tile
    assert all(s.is_default[s.graph == g].any() for g in range(len(s.graphs)))
    assert a.programs_in("test") == tile.programs_in("test")


def test_tiny_ablation_run(pa, data, tmp_path):
    fusion, tile = data
    st = pa.Settings(epochs=1, steps_per_epoch=4, hidden=8, batch_size=16, fusion_min_runtime_s=0.0)
    res = pa.run(tmp_path / "results", quick=True, seed=0, fusion_data=fusion.root, tile_data=tile.root,
                 log=lambda s: None, only=["baseline", "loss=rank", "loss=mse"],
                 settings={"fusion": st, "tile": st})
    assert res["name"] == "ablations" and set(res) >= {"title", "markdown", "data", "plots"}
    json.dumps(res["data"])
    for p in res["plots"]:
        assert (tmp_path / "results" / p).is_file()
        assert f"results/{p}" in res["markdown"]
    md = res["markdown"]
    assert "### Fusion task" in md and "### Tile task" in md and "**baseline**" in md
    tasks = res["data"]["tasks"]
    fz = {r["key"]: r for r in tasks["fusion"]["rows"]}
    tl = {r["key"]: r for r in tasks["tile"]["rows"]}
    assert set(fz) == {"baseline", "loss=rank"} and set(tl) == {"baseline", "loss=mse"}
    # a rank-trained fusion model has no MAPE ("-" in the table); the MSE one has one
    assert fz["loss=rank"]["metrics"]["main"]["mape_summary"] is None
    assert "| loss: pairwise rank | - | - |" in md
    assert fz["baseline"]["metrics"]["main"]["mape_summary"] >= 0
    # the rank loss on fusion has pairs (kernels of one program): its validation score is defined
    assert fz["loss=rank"]["best_epoch"] == 1
    for rows in (fz, tl):
        for r in rows.values():
            assert r["train_s"] >= 0 and r["epochs_run"] == 1
            for view in r["metrics"].values():
                k = view["kendall_summary"]
                assert k is not None and math.isfinite(k) and -1 <= k <= 1
    for r in tl.values():
        m = r["metrics"]["main"]
        assert m["tile_ape_summary"] >= 0 and m["top1_summary"] >= 0


def test_finished_variants_are_kept_for_a_resumed_run(pa, data, tmp_path, monkeypatch):
    fusion, _ = data
    st = pa.Settings(epochs=1, steps_per_epoch=2, hidden=8, batch_size=16, fusion_min_runtime_s=0.0)
    done = JobLog(tmp_path / "jobs.jsonl")
    first = pa.run(tmp_path / "r1", quick=True, fusion_data=fusion.root, log=lambda s: None, only=["baseline"],
                   settings={"fusion": st}, done=done)

    def no_training(*a, **k):
        raise AssertionError("a finished variant was trained again")

    monkeypatch.setattr(pa, "train_and_evaluate", no_training)
    again = pa.run(tmp_path / "r2", quick=True, fusion_data=fusion.root, log=lambda s: None, only=["baseline"],
                   settings={"fusion": st}, done=JobLog(tmp_path / "jobs.jsonl"))
    assert again["data"]["tasks"]["fusion"]["rows"] == first["data"]["tasks"]["fusion"]["rows"]
    assert first["data"]["tasks"]["fusion"]["resumed"] == 0 and "interrupted start" not in first["markdown"]
    assert again["data"]["tasks"]["fusion"]["resumed"] == 1  # the text says the time is not this run's alone
    assert "1 of 1 variants kept from an earlier, interrupted start" in again["markdown"]
    # a kept row whose model no longer matches the task's defaults (they changed) is trained again
    real_default = pa.default_config
    monkeypatch.setattr(pa, "default_config", lambda task: dict(real_default(task), loss="rank"))
    with pytest.raises(AssertionError, match="trained again"):
        pa.run(tmp_path / "r4", quick=True, fusion_data=fusion.root, log=lambda s: None, only=["baseline"],
               settings={"fusion": st}, done=JobLog(tmp_path / "jobs.jsonl"))
    monkeypatch.setattr(pa, "default_config", real_default)
    with pytest.raises(AssertionError, match="trained again"):  # other settings: a new job
        pa.run(tmp_path / "r3", quick=True, fusion_data=fusion.root, log=lambda s: None, only=["baseline"],
               settings={"fusion": replace(st, steps_per_epoch=3)}, done=JobLog(tmp_path / "jobs.jsonl"))


def test_reading_names_variants_outside_every_seed_but_inside_the_band(pa):
    def row(key, ape):
        return {"key": key, "label": key, "metrics": {"main": {"tile_ape_summary": ape}}}
    res = {"task": "tile", "rows": [row("baseline", 4.5), row("baseline+seed1", 5.7), row("baseline+seed2", 4.1),
                                    row("loss=mse", 2.2), row("encoder=gat", 4.8), row("reduction=node", 9.0),
                                    row("edges=in", 3.9)]}
    assert pa._seed_range(res) == pytest.approx((-1.2, 0.4))
    text = pa._reading({"tile": res}, quick=False)
    assert "noise band ±3.2 pp" in text  # twice the seeds' spread of 1.6 pp
    assert "worse than the baseline beyond noise: reduction=node (+4.50 pp)" in text
    assert "beyond every seed's result by at least 0.5 pp but inside the band: loss=mse (-2.30 pp)" in text
    assert "encoder=gat" not in text  # inside the seeds' range
    assert "edges=in" not in text  # below every seed, by less than the 0.5 pp floor


def test_the_loss_is_repeated_with_seeds_and_judged_on_every_seed(pa):
    vs = {v.key: v for v in pa.variants("tile", seed_repeats=2)}
    assert vs["loss=mse+seed2"].opts == {"loss": "mse"} and vs["loss=mse+seed2"].seed_offset == 2

    def row(key, ape):
        return {"key": key, "label": key, "metrics": {"main": {"tile_ape_summary": ape}}}
    rank = [row("baseline", 4.5), row("baseline+seed1", 5.7), row("baseline+seed2", 4.1)]
    mse = [row("loss=mse", 2.2), row("loss=mse+seed1", 2.6), row("loss=mse+seed2", 2.2)]
    res = {"task": "tile", "rows": rank + mse}
    d, noise = pa._effects(res)
    assert set(d) == {"loss=mse"}  # seed repeats are not separate variants
    claims = dict(pa._claims("tile", d, noise, pa._loss_seeds(res)))
    assert claims["rank loss beats MSE"] == "worse"  # every MSE seed beats every rank seed: contradicted
    assert dict(pa._claims("tile", d, noise))["rank loss beats MSE"] == "same"  # one seed each: within the band
    text = pa._reading({"tile": res}, quick=False)
    assert "MSE (log runtime) mean 2.33% (range 2.20-2.60%)" in text
    assert "Contradicted: rank loss beats MSE (tile)" in text
    overlap = {"task": "tile", "rows": rank + [row("loss=mse", 4.0), row("loss=mse+seed1", 4.8)]}
    d, noise = pa._effects(overlap)
    assert dict(pa._claims("tile", d, noise, pa._loss_seeds(overlap)))["rank loss beats MSE"] == "same"
