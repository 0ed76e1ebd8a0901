"""Dataset generation, storage, splits, resumption and TpuGraphs npz interop (tiny programs)."""
import json
from pathlib import Path

import numpy as np
import pytest

from autotune.tuning.dataset import (Dataset, DatasetOptions, Samples, build_dataset, make_split, program_family, read_split_file,
                              read_tpugraphs_npz, write_tpugraphs_tile)
from costmodels.features import NODE_DIM, TILE_DIM
from hardware.simulator import TpuSimulator

ROOT = Path(__file__).resolve().parents[3]


class CountingSim(TpuSimulator):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.items = 0

    def _measure_batch(self, kernels, tiles):
        self.items += len(kernels)
        return super()._measure_batch(kernels, tiles)


def test_families_and_split_keep_families_apart():
    assert program_family("resnet_small_train") == "resnet"
    assert program_family("x_y", {"x_y": "fam"}) == "fam"
    fams = {f"{f}_{i}": f for f in "abcdefghij" for i in range(3)}
    split = make_split(fams, seed=3)
    by_family = {}
    for p, s in split.items():
        by_family.setdefault(fams[p], set()).add(s)
    assert all(len(v) == 1 for v in by_family.values())
    assert set(split.values()) == {"train", "validation", "test"}
    assert make_split(fams, seed=3) == split
    two = make_split({"a_1": "a", "b_1": "b"})
    assert sorted(two.values()) == ["test", "train"]


def test_fusion_dataset_layout(fusion_ds, corpus_names):
    ds = fusion_ds
    m = json.loads((ds.root / "manifest.json").read_text())
    assert m["task"] == "fusion" and m["target"] == "tpu" and set(m["programs"]) == set(corpus_names)
    assert {r["split"] for r in m["programs"].values()} == {"train", "validation", "test"}
    for name, rec in m["programs"].items():
        assert (ds.root / rec["file"]).is_file()
        assert rec["family"] == name.split("_")[0]
    s = ds.load_program("vae_small_infer")
    assert len(s) == len(s.graphs) == m["programs"]["vae_small_infer"]["n_kernels"] > 0
    assert len({g.hash for g in s.graphs}) == len(s.graphs)  # each unique kernel once
    assert np.isfinite(s.runtime).all() and (s.runtime > 0).all()
    assert np.isfinite(s.analytical).all()
    assert s.graphs[0].node_feat.shape[1] == NODE_DIM
    assert s.tile_feat.shape == (len(s), TILE_DIM) and not s.tile_feat.any()
    assert len(s.config["cfg"]) == len(s.config["graph"]) > 0
    all_ = ds.load("all")
    assert len(all_) == len(ds) and len(all_.programs) == 3
    assert sorted(all_.families) == ["autoencoder", "lstm", "vae"]
    # per-program iteration gives back the pieces
    parts = dict(all_.by_program())
    assert sum(len(p) for p in parts.values()) == len(all_)
    with pytest.raises(ValueError, match="no program"):
        ds.load_program("nope")
    with pytest.raises(ValueError, match="unknown split"):
        ds.programs_in("bogus")


def test_graphs_roundtrip_through_storage(fusion_ds):
    from costmodels.features import kernel_graph
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    prog = Program.from_file(str(ROOT / "examples/hlo/vae_small_infer.hlo"))
    space = FusionSpace(prog, "tpu")
    live = {k.hash: kernel_graph(k) for k in space.kernels(space.default())}
    s = fusion_ds.load_program("vae_small_infer")
    stored = {g.hash: g for g in s.graphs}
    common = set(live) & set(stored)
    assert common
    for h in common:
        a, b = live[h], stored[h]
        assert np.array_equal(a.node_feat, b.node_feat) and np.array_equal(a.opcode, b.opcode)
        assert np.array_equal(a.edge_index, b.edge_index) and a.tiled_dims == b.tiled_dims


def test_resume_skips_finished_programs(progs, corpus_names, tmp_path):
    ev = CountingSim("tpu")
    build_dataset(progs, "fusion", ev, configs_per_program=2, out_dir=tmp_path,
                  options=DatasetOptions(programs=corpus_names[:1]))
    first = ev.items
    assert first > 0
    ev2 = CountingSim("tpu")
    ds = build_dataset(progs, "fusion", ev2, configs_per_program=2, out_dir=tmp_path)
    assert set(ds.programs) == set(corpus_names)
    again = CountingSim("tpu")
    build_dataset(progs, "fusion", again, configs_per_program=2, out_dir=tmp_path)
    assert again.items == 0  # everything on disk already
    with pytest.raises(ValueError, match="task"):
        build_dataset(progs, "tile", "sim", out_dir=tmp_path)


def test_split_file(progs, tmp_path):
    sf = tmp_path / "split.json"
    sf.write_text(json.dumps({"train": ["vae_small_infer", "lstm_small_infer"], "valid": [],
                              "test": ["autoencoder_small_infer.hlo"]}))
    assert read_split_file(str(sf))["autoencoder_small_infer"] == "test"
    ds = build_dataset(progs, "fusion", "sim", configs_per_program=1, out_dir=tmp_path / "d",
                       options=DatasetOptions(split_file=str(sf)))
    assert ds.programs_in("train") == ["lstm_small_infer", "vae_small_infer"]
    assert ds.programs_in("test") == ["autoencoder_small_infer"]
    with pytest.raises(ValueError, match="no programs in the validation"):
        ds.load("validation")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train": ["vae_small_infer"]}))
    with pytest.raises(ValueError, match="does not place"):
        build_dataset(progs, "fusion", "sim", out_dir=tmp_path / "e", options=DatasetOptions(split_file=str(bad)))
    bad.write_text(json.dumps({"train": ["a"], "test": ["a"]}))
    with pytest.raises(ValueError, match="both"):
        read_split_file(str(bad))
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        read_split_file(str(bad))


def test_open_errors(tmp_path):
    with pytest.raises(ValueError, match="not a dataset"):
        Dataset.open(tmp_path)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match="corrupt"):
        Dataset.open(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "autotune-dataset", "version": 1,
                                                        "feature_version": "old", "task": "fusion"}))
    with pytest.raises(ValueError, match="feature layout"):
        Dataset.open(tmp_path)


def test_tile_dataset(tile_ds):
    s = tile_ds.load("all")
    assert len(s) > len(s.graphs)  # several tiles per kernel
    assert all(k for k in s.tile_keys)
    assert s.tile_feat[:, 0].all()  # has_tile
    assert s.is_default.sum() == len(s.graphs)  # one default tile per kernel
    per_kernel = np.bincount(s.graph)
    assert per_kernel.max() <= 8
    assert s.tg_feat is not None and s.tg_feat[0].shape[1] == 140


def test_tpugraphs_write_and_read(tile_ds, tmp_path):
    s = tile_ds.load_program("vae_small_infer")
    paths = write_tpugraphs_tile(s, tmp_path)
    assert len(paths) == len(s.graphs)
    rec = read_tpugraphs_npz(paths[0])
    assert rec.kind == "tile"
    g = [g for g in s.graphs if g.hash in paths[0].name][0]
    assert rec.node_feat.shape == (g.num_nodes, 140) and rec.edge_index.shape == (g.num_edges, 2)
    assert rec.config_feat.shape[1] == 24
    n = rec.num_configs
    assert rec.config_runtime.dtype == np.int64 and rec.config_runtime_normalizers.shape == (n,)
    norm = rec.normalized_runtime()
    assert np.isclose(norm, 1.0).any()  # the default tile normalizes to 1
    with pytest.raises(ValueError, match="not a tile dataset"):
        write_tpugraphs_tile(Samples([], np.zeros(0, int), [], np.zeros(0), np.zeros(0, int), [], []), tmp_path)


def test_read_tpugraphs_layout_and_errors(tmp_path):
    p = tmp_path / "layout.npz"
    np.savez(p, node_feat=np.zeros((4, 140), np.float32), node_opcode=np.zeros(4, np.uint8),
             edge_index=np.array([[1, 0], [2, 1], [3, 2]]), node_config_ids=np.array([1, 2]),
             node_config_feat=np.zeros((5, 2, 18), np.float32), config_runtime=np.arange(5))
    rec = read_tpugraphs_npz(p)
    assert rec.kind == "layout" and rec.num_configs == 5 and rec.node_config_ids.tolist() == [1, 2]
    q = tmp_path / "bad.npz"
    np.savez(q, node_feat=np.zeros((2, 140)), node_opcode=np.zeros(2), edge_index=np.array([[5, 0]]),
             config_feat=np.zeros((1, 24)), config_runtime=np.ones(1), config_runtime_normalizers=np.ones(1))
    with pytest.raises(ValueError, match="edge_index"):
        read_tpugraphs_npz(q)
    r = tmp_path / "other.npz"
    np.savez(r, x=np.zeros(2))
    with pytest.raises(ValueError, match="not a TpuGraphs"):
        read_tpugraphs_npz(r)
    with pytest.raises(ValueError, match="cannot read"):
        read_tpugraphs_npz(tmp_path / "missing.npz")


def test_concurrent_build_into_one_directory_is_refused(progs, tmp_path):
    """A second build into a directory another build is writing is refused with the holder's pid;
    once the first releases it, the directory builds."""
    import fcntl
    import os

    (tmp_path / "shards").mkdir(parents=True)
    with open(tmp_path / ".build.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242")
        held.flush()
        with pytest.raises(ValueError, match=r"another dataset build \(pid 4242\)"):
            build_dataset(progs, "fusion", "sim", configs_per_program=1, out_dir=tmp_path,
                          options=DatasetOptions(programs=["vae_small_infer"]))
        assert not (tmp_path / "manifest.json").exists()
    ds = build_dataset(progs, "fusion", "sim", configs_per_program=1, out_dir=tmp_path,
                       options=DatasetOptions(programs=["vae_small_infer"]))
    assert list(ds.programs) == ["vae_small_infer"]
    assert (tmp_path / ".build.lock").read_text() == str(os.getpid())


def test_searched_configurations_join_the_sampled_ones(progs, corpus_names, tmp_path):
    """--searched: each program also holds a search's best distinct predictions, marked per configuration,
    recorded in the manifest; the same seed gives the same picks; resuming with other search settings is refused."""
    from costmodels.analytical import AnalyticalCostModel
    model = AnalyticalCostModel("tpu")
    kw = dict(programs=corpus_names[:1], searched=3, search_model=model, search_evaluations=300,
              search_model_name="analytical")
    ds = build_dataset(progs, "fusion", "sim", configs_per_program=2, out_dir=tmp_path / "a",
                       options=DatasetOptions(**kw))
    (name,) = ds.programs
    s = ds.load_program(name)
    flags = np.asarray(s.config["searched"])
    assert flags.dtype == bool and not flags[:2].any() and 1 <= flags[2:].sum() <= 3
    assert len(flags) == ds.programs[name]["n_configs"] and set(np.unique(s.config["cfg"])) == set(range(len(flags)))
    assert ds.manifest["searched"] == {"n": 3, "evaluations": 300, "model": "analytical"}
    again = build_dataset(progs, "fusion", "sim", configs_per_program=2, out_dir=tmp_path / "b",
                          options=DatasetOptions(**kw))
    assert np.array_equal(np.load(again.root / again.programs[name]["file"])["hashes"],
                          np.load(ds.root / ds.programs[name]["file"])["hashes"])
    with pytest.raises(ValueError, match="searched"):
        build_dataset(progs, "fusion", "sim", configs_per_program=2, out_dir=tmp_path / "a",
                      options=DatasetOptions(**dict(kw, searched=5)))
    with pytest.raises(ValueError, match="search cost model"):
        build_dataset(progs, "fusion", "sim", out_dir=tmp_path / "c", configs_per_program=2,
                      options=DatasetOptions(searched=2))
    two_models = dict(kw, search_model=[model, AnalyticalCostModel("tpu", scales={"kLoop": 3.0})],
                      search_model_name=["analytical", "scaled"])
    two = build_dataset(progs, "fusion", "sim", configs_per_program=2, out_dir=tmp_path / "e",
                        options=DatasetOptions(**two_models))
    assert two.manifest["searched"]["model"] == "analytical+scaled"
    flags2 = np.asarray(two.load_program(name).config["searched"])
    assert flags2.sum() >= flags.sum()  # the first model's picks, and the second's that are new
    plain = build_dataset(progs, "fusion", "sim", out_dir=tmp_path / "d", configs_per_program=2,
                          options=DatasetOptions(programs=corpus_names[:1]))
    assert plain.manifest["searched"] is None and not np.asarray(plain.load_program(name).config["searched"]).any()
