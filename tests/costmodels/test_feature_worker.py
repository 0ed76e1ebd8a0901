"""Featurization on a forked worker process (costmodels/feature_worker.py): the same graphs and the same
predictions, bit for bit, as one process; a failing worker's chunks are redone by the caller."""
import os
import time
from pathlib import Path

import numpy as np
import pytest

from autotune.compiler import tiles
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from costmodels import feature_worker, features
from costmodels.gnn import GnnCostModel
from costmodels.gnn import model as gnn_model

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.skipif(not hasattr(os, "fork") or not os.sys.platform.startswith("linux"),
                                 reason="needs os.fork (Linux)"),
              pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]


@pytest.fixture(autouse=True)
def _no_jax_check(monkeypatch):
    """These tests fork their workers even where earlier tests loaded JAX (its threads are idle here)."""
    monkeypatch.setattr(feature_worker, "_threaded_runtime_loaded", lambda: False)


def test_no_worker_where_jax_is_loaded(monkeypatch):
    monkeypatch.undo()  # the real check
    monkeypatch.setitem(os.sys.modules, "jax", os)
    assert feature_worker._threaded_runtime_loaded() and not feature_worker.fork_available()


@pytest.fixture(scope="module")
def kernels():
    """The unique non-trivial kernels of the default and a random configuration of a real program."""
    space = FusionSpace(Program.from_file(str(ROOT / "examples/hlo/bert_small_infer.hlo")), "tpu")
    rng = np.random.default_rng(0)
    out: dict = {}
    for c in [space.default(), space.random(rng)]:
        for k in space.kernels(c):
            if not k.is_trivial:
                out.setdefault(k.hash, k)
    ks = list(out.values())
    assert len(ks) >= 40
    return ks


def _cold(model=None):
    feature_worker.close_worker()  # (a worker forked before a monkeypatch would not see it)
    features.clear_cache()
    tiles.clear_caches()
    if model is not None:
        model._prep_cache.clear()


def _same_graph(x, y) -> bool:
    return (np.array_equal(x.node_feat, y.node_feat) and x.node_feat.dtype == y.node_feat.dtype
            and np.array_equal(x.opcode, y.opcode) and np.array_equal(x.edge_index, y.edge_index)
            and np.array_equal(x.kernel_feat, y.kernel_feat) and np.array_equal(x.geom_feat, y.geom_feat)
            and x.tiled_dims == y.tiled_dims and x.hash == y.hash and x.meta == y.meta)


def test_pack_unpack_round_trip(kernels):
    _cold()
    gs = features.kernel_graphs(kernels, "tpu")
    back = feature_worker.unpack_graphs(feature_worker.pack_graphs(gs))
    assert len(back) == len(gs) and all(_same_graph(x, y) for x, y in zip(gs, back))
    assert feature_worker.unpack_graphs(feature_worker.pack_graphs([])) == []


def test_chunks_from_two_processes_are_the_graphs_of_one(kernels):
    _cold()
    ref = features.kernel_graphs(kernels, "tpu")
    _cold()
    seen = np.zeros(len(kernels), int)
    got = [None] * len(kernels)
    for a, b, gs in feature_worker.graphs_in_chunks(kernels, "tpu", 5):
        seen[a:b] += 1
        got[a:b] = gs
    st = feature_worker.WorkerStats
    assert (seen == 1).all() and st.failure is None
    assert st.chunks_worker >= 1 and st.chunks_here + st.chunks_worker == -(-len(kernels) // 5)
    assert all(_same_graph(x, y) for x, y in zip(ref, got))
    # the worker's graphs are cached here like graphs built here
    assert all(features.graphs._GRAPH_CACHE.get((k.hash, "tpu-v3")) is not None for k in kernels)
    # the worker stays for the next batch of the same space, and empties its caches with ours
    pid = feature_worker._WORKER.pid
    features.clear_cache()
    tiles.clear_caches()
    again = [None] * len(kernels)
    for a, b, gs in feature_worker.graphs_in_chunks(kernels, "tpu", 5):
        again[a:b] = gs
    assert feature_worker._WORKER.pid == pid and feature_worker.WorkerStats.chunks_worker >= 1
    assert feature_worker.WorkerStats.worker_cpu_s > 0
    assert all(_same_graph(x, y) for x, y in zip(ref, again))
    feature_worker.close_worker()
    assert feature_worker._WORKER is None


@pytest.mark.parametrize("how", ["raises", "exits", "hangs", "file lost"])
def test_a_failing_worker_is_replaced_by_the_caller(kernels, monkeypatch, how):
    parent = os.getpid()
    real = features.kernel_graphs
    monkeypatch.setattr(feature_worker, "STALL_SECONDS", 1.0)

    def flaky(ks, target="tpu"):
        if os.getpid() != parent:
            if how == "raises":
                raise RuntimeError("boom")
            if how == "hangs":
                time.sleep(60)
            if how == "file lost":
                return []  # packs to an empty chunk; the file is removed before it is read
            os._exit(3)
        return real(ks, target)
    _cold()
    ref = real(kernels, "tpu")
    _cold()
    monkeypatch.setattr(features, "kernel_graphs", flaky)
    if how == "file lost":
        real_result = feature_worker._Worker.result

        def lost(self, path):
            os.unlink(path)
            return real_result(self, path)
        monkeypatch.setattr(feature_worker._Worker, "result", lost)
    got = [None] * len(kernels)
    for a, b, gs in feature_worker.graphs_in_chunks(kernels, "tpu", 4):
        got[a:b] = gs
    st = feature_worker.WorkerStats
    assert st.chunks_worker == 0 and st.chunks_here == -(-len(kernels) // 4)
    assert {"raises": "boom", "exits": "ended early", "hangs": "no result in 1 s",
            "file lost": "could not be read"}[how] in st.failure
    assert all(_same_graph(x, y) for x, y in zip(ref, got))
    assert feature_worker._WORKER is None
    assert kernels[0].space in feature_worker._FAILED  # no other worker for this space
    again = list(feature_worker.graphs_in_chunks(kernels, "tpu", 4))
    assert len(again) == -(-len(kernels) // 4) and feature_worker.WorkerStats.chunks_worker == 0
    feature_worker._FAILED.clear()


def test_kernels_of_no_fusion_space_are_featurized_here(kernels):
    """Duck-typed kernels (no fusion space to fork a worker with) are featurized in this process."""
    _cold()

    class Duck:
        def __init__(self, k):
            self.__dict__.update({n: getattr(k, n) for n in ("hash", "comp", "root", "members", "space", "inputs",
                                                             "cost", "output_shape", "input_shapes",
                                                             "fusion_kind", "is_trivial", "computation")})
    ducks = [Duck(k) for k in kernels[:12]]
    got = list(feature_worker.graphs_in_chunks(ducks, "tpu", 4))
    assert [g[:2] for g in got] == [(0, 4), (4, 8), (8, 12)] and feature_worker.WorkerStats.chunks_worker == 0


def test_predict_on_two_processes_is_the_serial_predict_bit_for_bit(kernels, monkeypatch):
    """A fusion predict of many uncached kernels featurizes on a worker process; the network's batches
    are those of one process: the same predictions, bit for bit, cold and warm."""
    m = GnnCostModel.load(str(ROOT / "costmodels/shipped/gnn_fusion_tpu.pt"))
    m.batch_size = 4
    monkeypatch.setattr(gnn_model, "_usable_cores", lambda: 2)
    out = {}
    for workers in (False, True):
        _cold(m)
        m.featurize_workers = workers
        m.WORKER_CHUNK, m.WORKER_MIN_NEW, m.PIPELINE_CHUNK = 8, 16, 10 ** 6
        feature_worker.WorkerStats.chunks_worker = 0
        out[workers] = (m.predict(kernels), m.predict(kernels))
        assert (feature_worker.WorkerStats.chunks_worker > 0) == workers
    feature_worker.close_worker()
    assert np.array_equal(out[True][0], out[False][0]) and np.array_equal(out[True][1], out[False][1])
    assert GnnCostModel.WORKER_CHUNK % 256 == 0


@pytest.mark.parametrize("load, forks", [(0.3, True), (1.7, False)])
def test_auto_uses_the_worker_only_when_a_core_is_free(kernels, monkeypatch, load, forks):
    m = GnnCostModel.load(str(ROOT / "costmodels/shipped/gnn_fusion_tpu.pt"))
    m.batch_size = 4
    m.WORKER_CHUNK, m.WORKER_MIN_NEW, m.PIPELINE_CHUNK = 8, 16, 10 ** 6
    assert m.featurize_workers == "auto"
    monkeypatch.setattr(gnn_model, "_usable_cores", lambda: 2)
    monkeypatch.setattr(gnn_model.os, "getloadavg", lambda: (load, load, load))
    _cold(m)
    feature_worker.WorkerStats.chunks_worker = 0
    m.predict(kernels)
    assert (feature_worker.WorkerStats.chunks_worker > 0) == forks
    feature_worker.close_worker()


def test_scaling_in_place_is_the_scaling_expression_bit_for_bit(kernels):
    """FeatureScaler.transform's float32 path (one array, no temporaries) and the batched kernel rows give
    the values of the original expressions on a real program's graphs."""
    m = GnnCostModel.load(str(ROOT / "costmodels/shipped/gnn_fusion_tpu.pt"))
    _cold(m)
    gs = features.kernel_graphs(kernels, "tpu")
    a = np.concatenate([g.node_feat for g in gs])
    sc, mask = m.node_scaler_, m._static_mask()
    rng = np.where(sc.hi - sc.lo > 0, sc.hi - sc.lo, 1.0).astype(np.float32)
    ref = ((a - sc.lo) / rng).astype(np.float32) * mask
    got = sc.transform(a, mask)
    assert got.dtype == np.float32 and np.array_equal(got, ref)
    assert np.array_equal(sc.transform(a.astype(np.float64)), ((a.astype(np.float64) - sc.lo) / rng).astype(np.float32))
    rows = m._kernel_rows(gs)
    assert np.array_equal(rows, np.stack([m._kernel_row(g) for g in gs])) and rows.dtype == np.float32
    preps = m.prepare_graphs(gs)
    m._prep_cache.clear()
    one = [m.prepare_graph(g) for g in gs]
    assert all(np.array_equal(p[0], q[0]) and np.array_equal(p[3], q[3]) for p, q in zip(preps, one))
