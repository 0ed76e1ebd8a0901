"""TpuGraphs layout npz format (autotune/tuning/dataset.py): the vendored real sample written, read
back and decoded into layout configurations; our own configurations round-tripped."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.compiler.layouts import LayoutSpace
from autotune.compiler.program import Program, load_program
from autotune.tuning.dataset import (layout_config_features, layout_configs, prune_layout_graph, read_tpugraphs_layout,
                                     read_tpugraphs_npz, tpugraphs_layout_sample, write_tpugraphs_layout)

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "tpugraphs"


@pytest.fixture(scope="module")
def sample():
    return tpugraphs_layout_sample(SAMPLE / "tile_layout_summary.json", SAMPLE / "layout_module.hlo")


def test_sample_npz_has_the_tpugraphs_layout_arrays(sample, tmp_path):
    path = write_tpugraphs_layout(tmp_path / "sample.npz", sample["module"], sample["node_names"],
                                  sample["node_config_feat"], sample["runtimes_s"])
    rec = read_tpugraphs_npz(path)
    assert rec.kind == "layout"
    assert rec.node_feat.shape == (3163, 140) and rec.node_opcode.shape == (3163,)
    assert rec.edge_index.shape[1] == 2 and len(rec.edge_index) > 3000
    # node numbering is tpu_graphs' (computation, instruction) order: the recorded node ids come back
    assert rec.node_config_ids.tolist() == sample["config_index_to_node"].tolist()
    assert rec.node_config_feat.shape == (112, 62, 18)  # 122 runs, 10 of them errors without a runtime
    assert rec.config_runtime.dtype == np.int64
    assert rec.config_runtime.min() == 910876401 and rec.config_runtime.max() == 925642328
    default = rec.config_runtime[np.nonzero(sample["is_default"])[0][0]]
    assert default == 910903932
    conv = rec.node_config_feat[0, 4]  # convolution.1043 in the default run: [4,0], [4,0], [4,3]
    assert conv.tolist() == [4, 0, -1, -1, -1, -1, 4, 0, -1, -1, -1, -1, 4, 3, -1, -1, -1, -1]


def test_sample_npz_decodes_into_the_layout_space(sample, tmp_path):
    path = write_tpugraphs_layout(tmp_path / "s.npz", sample["module"], sample["node_names"],
                                  sample["node_config_feat"], sample["runtimes_s"])
    space = LayoutSpace(load_program(SAMPLE / "layout_module.hlo"), "tpu")
    rec, cfgs = read_tpugraphs_layout(path, space)
    assert len(cfgs) == rec.num_configs == 112
    summary = json.loads((SAMPLE / "tile_layout_summary.json").read_text())
    runs = [r for r in summary["runs"] if not r["error"]]
    assert cfgs == [space.from_layouts(r["layout_nodes"]) for r in runs]


def test_our_configurations_round_trip(tmp_path):
    prog = load_program(ROOT / "examples" / "hlo" / "vae_small_infer.hlo")
    space = LayoutSpace(prog, "tpu")
    rng = np.random.default_rng(0)
    cfgs = [space.default()] + [space.random(rng) for _ in range(5)]
    feat = np.stack([layout_config_features(space, c) for c in cfgs])
    names = [(n.computation, n.instruction) for n in space.nodes]
    rt = np.linspace(1e-3, 2e-3, len(cfgs))
    path = write_tpugraphs_layout(tmp_path / "vae.npz", prog.module, names, feat, rt)
    rec, back = read_tpugraphs_layout(path, space)
    assert back == cfgs
    assert np.array_equal(rec.node_config_feat, feat)
    assert np.array_equal(rec.config_runtime, np.round(rt * 1e9).astype(np.int64))
    assert layout_configs(space, rec.node_config_feat) == cfgs


def test_bad_layout_files_fail_with_one_clear_error(tmp_path, sample):
    prog = Program.from_text("""HloModule m
ENTRY e {
  p = f32[4,8]{1,0} parameter(0)
  ROOT r = f32[8,4]{1,0} reshape(p)
}
""")
    space = LayoutSpace(prog, "tpu")
    with pytest.raises(ValueError, match="shape"):
        layout_configs(space, np.zeros((1, 2, 18)))
    bad = np.full((1, 1, 18), -1.0)
    bad[0, 0, :3] = [0, 0, 1]
    with pytest.raises(ValueError, match="not a minor-to-major order"):
        layout_configs(space, bad)
    with pytest.raises(ValueError, match="not in the module"):
        write_tpugraphs_layout(tmp_path / "x.npz", prog.module, [("e", "nope")], np.zeros((1, 1, 18)), [1.0])
    with pytest.raises(ValueError, match="runtimes"):
        write_tpugraphs_layout(tmp_path / "x.npz", prog.module, [("e", "r")], np.zeros((2, 1, 18)), [1.0])
    np.savez(tmp_path / "tile.npz", node_feat=np.zeros((1, 140)), node_opcode=np.zeros(1), edge_index=np.zeros((0, 2)),
             config_feat=np.zeros((1, 24)), config_runtime=np.ones(1), config_runtime_normalizers=np.ones(1))
    with pytest.raises(ValueError, match="not a layout file"):
        read_tpugraphs_layout(tmp_path / "tile.npz")


def test_pruning_to_configurable_neighbourhoods(sample, tmp_path):
    path = write_tpugraphs_layout(tmp_path / "s.npz", sample["module"], sample["node_names"],
                                  sample["node_config_feat"], sample["runtimes_s"])
    rec = read_tpugraphs_npz(path)
    zero = prune_layout_graph(rec.arrays, hops=0)
    assert zero["node_feat"].shape[0] == 62 and zero["node_config_ids"].tolist() == list(range(62))
    one, two = prune_layout_graph(rec.arrays, hops=1), prune_layout_graph(rec.arrays, hops=2)
    n1, n2, n = one["node_feat"].shape[0], two["node_feat"].shape[0], rec.node_feat.shape[0]
    assert 62 < n1 < n2 < n
    for p in (one, two):
        ids = p["node_config_ids"]
        # the configurable nodes are the same nodes (features) and their configurations are untouched
        assert np.array_equal(p["node_feat"][ids], rec.node_feat[rec.node_config_ids])
        assert p["node_config_feat"] is rec.arrays["node_config_feat"]
        assert p["edge_index"].min() >= 0 and p["edge_index"].max() < p["node_feat"].shape[0]
    # 1 hop: every kept node is a configurable node or touches one
    cfg = set(one["node_config_ids"].tolist())
    touching = {int(a) for a, b in one["edge_index"] if int(b) in cfg} | \
               {int(b) for a, b in one["edge_index"] if int(a) in cfg}
    assert set(range(n1)) == cfg | touching
    with pytest.raises(ValueError, match="hops"):
        prune_layout_graph(rec.arrays, hops=-1)
