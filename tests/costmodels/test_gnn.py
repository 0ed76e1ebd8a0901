"""GNN cost model: layers, batching, reductions, losses, training, save/load (tiny sizes)."""
from pathlib import Path

import numpy as np
import pytest
import torch

from costmodels.features import NODE_DIM, TILE_DIM, kernel_graph
from autotune.compiler.fusion import FusionSpace
from costmodels.metrics import ordered_pair_accuracy
from autotune.compiler.program import Program
from costmodels.gnn import GnnCostModel, GnnNet, listmle_loss, pairwise_rank_loss, rank_loss
from costmodels.gnn.layers import (DirectedSAGEConv, GATConv, collate, scatter_max, scatter_mean, scatter_sum,
                                   segment_softmax)
from costmodels.gnn.model import normalize_config
from costmodels.gnn.train import family_weights

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(hidden=16, embedding=8, layers=2)


@pytest.fixture(scope="module")
def kernels():
    prog = Program.from_file(str(ROOT / "examples/hlo/lstm_small_infer.hlo"))
    space = FusionSpace(prog, "tpu")
    return [k for k in space.kernels(space.default()) if not k.is_trivial]


def test_scatter_ops():
    src = torch.tensor([[1.0, -1.0], [3.0, 5.0], [2.0, 0.0]])
    idx = torch.tensor([0, 0, 2])
    assert scatter_sum(src, idx, 3).tolist() == [[4.0, 4.0], [0.0, 0.0], [2.0, 0.0]]
    assert scatter_mean(src, idx, 3).tolist() == [[2.0, 2.0], [0.0, 0.0], [2.0, 0.0]]
    assert scatter_max(src, idx, 3).tolist() == [[3.0, 5.0], [0.0, 0.0], [2.0, 0.0]]
    sm = segment_softmax(torch.tensor([[0.0], [0.0], [1.0]]), torch.tensor([1, 1, 0]), 2)
    assert sm.squeeze(1).tolist() == pytest.approx([0.5, 0.5, 1.0])


def test_collate_offsets_edges_and_early_join():
    x1, x2 = np.ones((2, 3), np.float32), np.zeros((3, 3), np.float32)
    e1, e2 = np.array([[0], [1]]), np.array([[0, 1], [2, 2]])
    b = collate([x1, x2], [np.array([1, 2]), np.array([3, 4, 5])], [e1, e2], np.array([[7.0], [9.0]]))
    assert b.num_graphs == 2 and b.num_nodes == 5
    assert b.edge_index.tolist() == [[0, 2, 3], [1, 4, 4]]
    assert b.graph.tolist() == [0, 0, 1, 1, 1] and b.pos.tolist() == [0, 1, 0, 1, 2]
    assert b.x[:, 3].tolist() == [7, 7, 9, 9, 9]  # tile features on every node


def test_directed_sage_respects_direction():
    ei = torch.tensor([[0], [1]])  # 0 -> 1
    for direction, dep in (("in", (1, 0)), ("out", (0, 1))):
        torch.manual_seed(0)
        conv = DirectedSAGEConv(4, 4, direction=direction)
        x = torch.randn(2, 4, requires_grad=True)
        out = conv(x, ei)
        node, other = dep  # `node` may depend on `other`; the reverse must not hold
        g = torch.autograd.grad(out[other].sum(), x, retain_graph=True)[0]
        assert torch.all(g[node] == 0)
    out = DirectedSAGEConv(4, 8)(torch.randn(5, 4), torch.tensor([[0, 1, 2], [1, 2, 3]]))
    assert out.shape == (5, 8)
    assert torch.allclose(out.norm(dim=1)[out.norm(dim=1) > 0], torch.ones(1), atol=1e-5)
    with pytest.raises(ValueError):
        DirectedSAGEConv(4, 4, direction="sideways")


def test_gat_shapes_and_heads():
    conv = GATConv(6, 8, heads=2)
    out = conv(torch.randn(4, 6), torch.tensor([[0, 1], [2, 3]]))
    assert out.shape == (4, 8) and torch.isfinite(out).all()
    with pytest.raises(ValueError):
        GATConv(6, 7, heads=2)


@pytest.mark.parametrize("encoder,reduction", [("sage", "column"), ("sage", "node"), ("sage", "lstm"),
                                               ("sage", "transformer"), ("gat", "column"), ("none", "lstm")])
def test_batching_is_invariant(encoder, reduction, kernels):
    torch.manual_seed(0)
    cfg = normalize_config(dict(TINY, encoder=encoder, reduction=reduction))
    net = GnnNet(cfg).eval()
    gs = [kernel_graph(k) for k in kernels[:6]]
    feats = [np.random.default_rng(i).random((g.num_nodes, NODE_DIM)).astype(np.float32) for i, g in enumerate(gs)]
    tiles = np.zeros((len(gs), TILE_DIM), np.float32)
    with torch.no_grad():
        together = net(collate(feats, [g.opcode for g in gs], [g.edge_index for g in gs], tiles))
        alone = [float(net(collate([f], [g.opcode], [g.edge_index], tiles[:1]))[0]) for f, g in zip(feats, gs)]
    assert together.shape == (len(gs),)
    assert together.tolist() == pytest.approx(alone, rel=1e-4, abs=1e-5)


def test_config_validation():
    with pytest.raises(ValueError, match="encoder"):
        normalize_config({"encoder": "gcn"})
    with pytest.raises(ValueError, match="reduction"):
        normalize_config({"reduction": "sum"})
    assert normalize_config({"task": "tile"})["loss"] == "rank"
    assert normalize_config({"task": "fusion"})["loss"] == "mse"
    assert normalize_config({"reduction": "per-node"})["reduction"] == "node"


def test_pairwise_rank_loss_by_hand():
    y = torch.tensor([1.0, 2.0, 1.0, 5.0])
    g = torch.tensor([0, 0, 1, 2])
    s = torch.tensor([0.0, 1.0, 3.0, 3.0])
    # one pair (0, 1): s1 - s0 = 1 >= margin -> 0
    assert float(pairwise_rank_loss(s, y, g, "hinge", 0.1)) == 0.0
    s2 = torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert float(pairwise_rank_loss(s2, y, g, "hinge", 0.1)) == pytest.approx(1.1)
    assert float(pairwise_rank_loss(s2, y, g, "logistic")) == pytest.approx(np.log1p(np.e))
    assert float(pairwise_rank_loss(s2, y, torch.arange(4))) == 0.0  # no pairs


def test_listmle_loss_by_hand():
    # one group of three (true order: item 1, item 2, item 0), utilities u = -scores
    y = torch.tensor([3.0, 1.0, 2.0])
    s = torch.tensor([0.5, -1.0, 0.0])
    g = torch.zeros(3, dtype=torch.long)
    u = [1.0, 0.0, -0.5]  # -s in the true order
    want = (np.log(np.exp(u).sum()) - u[0]) + (np.log(np.exp(u[1:]).sum()) - u[1])
    assert float(listmle_loss(s, y, g)) == pytest.approx(want, rel=1e-6)
    # the right order scores lower than the reversed one; singleton groups add nothing
    assert float(listmle_loss(s, y, g)) < float(listmle_loss(-s, y, g))
    y2, s2 = torch.cat([y, torch.tensor([7.0])]), torch.cat([s, torch.tensor([100.0])])
    g2 = torch.tensor([0, 0, 0, 1])
    assert float(listmle_loss(s2, y2, g2)) == pytest.approx(want, rel=1e-6)
    assert float(listmle_loss(s2, y2, torch.arange(4))) == 0.0
    # two groups: the mean of their losses
    two = listmle_loss(torch.cat([s, s]), torch.cat([y, y]), torch.tensor([0, 0, 0, 1, 1, 1]))
    assert float(two) == pytest.approx(want, rel=1e-6)
    assert float(rank_loss(s, y, g, "listmle")) == float(listmle_loss(s, y, g))
    assert float(rank_loss(s, y, g, "hinge")) == float(pairwise_rank_loss(s, y, g, "hinge"))


def test_listmle_gradient_descent_learns_the_order():
    torch.manual_seed(0)
    y = torch.rand(12)
    g = torch.tensor([0] * 6 + [1] * 6)
    s = torch.randn(12, requires_grad=True)
    opt = torch.optim.Adam([s], lr=0.3)
    for _ in range(80):
        opt.zero_grad()
        listmle_loss(s, y, g).backward()
        opt.step()
    for k in (0, 1):
        idx = slice(6 * k, 6 * k + 6)
        assert torch.equal(torch.argsort(s.detach()[idx]), torch.argsort(y[idx]))


def test_family_weights_are_even():
    w = family_weights(np.array(["a", "a", "a", "b"]))
    assert w.tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])


def test_fusion_training_save_load(fusion_ds, kernels, tmp_path):
    m = GnnCostModel("fusion", **TINY)
    m.fit(fusion_ds, epochs=4, batch_size=32, progress=False)
    assert m.history_[-1]["best_epoch"] >= 1
    p = m.predict(kernels)
    assert p.shape == (len(kernels),) and np.all(p > 0) and np.all(np.isfinite(p))
    assert m.predicts_absolute
    # predictions from kernels equal predictions from their graphs
    assert np.allclose(p, m.predict_graphs([kernel_graph(k) for k in kernels]))
    path = tmp_path / "m.pt"
    m.save(str(path))
    m2 = GnnCostModel.load(str(path), task="fusion", target="tpu")
    assert np.allclose(m2.predict(kernels), p)
    with pytest.raises(ValueError, match="task fusion, target tpu; this needs task tile"):
        GnnCostModel.load(str(path), task="tile")
    with pytest.raises(ValueError, match="target"):
        GnnCostModel.load(str(path), target="cpu")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a GNN"):
        GnnCostModel.load(str(bad))
    with pytest.raises(ValueError, match="cannot read"):
        GnnCostModel.load(str(tmp_path / "missing.pt"))
    st = m.state()
    st["version"] = 99
    torch.save(st, tmp_path / "v.pt")
    with pytest.raises(ValueError, match="version"):
        GnnCostModel.load(str(tmp_path / "v.pt"))


def test_geometry_features_join_the_kernel_input(fusion_ds, kernels, tmp_path):
    """geometry_features=True widens the kernel-level input by the featurizer's geometry row, is saved
    with the layout version, and a file from another layout is refused."""
    from costmodels.features import GEOMETRY_DIM
    from costmodels.gnn.model import KDIM
    m = GnnCostModel("fusion", geometry_features=True, **TINY)
    assert m.init_network().gdim == KDIM + GEOMETRY_DIM
    m.fit(fusion_ds, epochs=1, batch_size=32, progress=False)
    assert m.kernel_scaler_.lo.shape == (KDIM + GEOMETRY_DIM,)
    p = m.predict(kernels)
    assert np.isfinite(p).all() and (p > 0).all()
    path = tmp_path / "g.pt"
    m.save(str(path))
    assert np.allclose(GnnCostModel.load(str(path)).predict(kernels), p)
    st = torch.load(str(path), weights_only=True)
    st["feature_version"] = "0123456789ab"
    torch.save(st, str(path))
    with pytest.raises(ValueError, match="feature layout 0123456789ab"):
        GnnCostModel.load(str(path))


def test_untrained_model_refuses_to_predict(kernels):
    with pytest.raises(ValueError, match="not trained"):
        GnnCostModel("fusion", **TINY).predict(kernels[:1])


def test_wrong_dataset_task(tile_ds):
    with pytest.raises(ValueError, match="task"):
        GnnCostModel("fusion", **TINY).fit(tile_ds, epochs=1)


def test_tile_rank_training_learns(tile_ds, kernels):
    torch.manual_seed(0)
    m = GnnCostModel("tile", **TINY)
    train = tile_ds.load("all")
    m.fit(train, None, epochs=6, batch_size=64, lr=3e-3, progress=False)
    assert not m.predicts_absolute
    s = m.predict_graphs(train.sample_graphs(), train.tile_feat)
    acc = ordered_pair_accuracy(s, train.runtime, train.graph)
    assert acc > 0.6, acc
    # predict on live kernels: default tiles when none are given
    assert np.isfinite(m.predict(kernels[:3])).all()


def test_tile_listmle_training_learns(tile_ds):
    torch.manual_seed(0)
    m = GnnCostModel("tile", rank_loss="listmle", **TINY)
    assert m.config["loss"] == "rank" and m.config["rank_loss"] == "listmle"
    train = tile_ds.load("all")
    m.fit(train, None, epochs=6, batch_size=64, lr=3e-3, progress=False)
    s = m.predict_graphs(train.sample_graphs(), train.tile_feat)
    acc = ordered_pair_accuracy(s, train.runtime, train.graph)
    assert acc > 0.6, acc


def test_early_stopping_keeps_best(fusion_ds):
    m = GnnCostModel("fusion", encoder="none", **TINY)
    hist = m.fit(fusion_ds, epochs=50, batch_size=16, lr=0.5, patience=2, progress=False).history_
    epochs = [h for h in hist if "epoch" in h]
    assert len(epochs) < 50
    best = hist[-1]
    assert best["best_val"] == min(h["val"] for h in epochs)


def test_cli_train_and_evaluate_gnn(fusion_ds, tmp_path):
    import json
    from click.testing import CliRunner
    from autotune.cli.learn import evaluate, train
    out = tmp_path / "g.pt"
    r = CliRunner()
    res = r.invoke(train, ["--model", "gnn", "--task", "fusion", "--data", str(fusion_ds.root), "--out", str(out),
                           "--epochs", "1", "--hidden", "8", "--layers", "1", "--reduction", "per-node",
                           "--encoder", "gat", "--no-static-features", "--edge-direction", "in",
                           "--no-kernel-features"])
    assert res.exit_code == 0, res.output
    m = GnnCostModel.load(str(out))
    assert m.config["reduction"] == "node" and m.config["encoder"] == "gat"
    assert m.config["static_features"] is False and m.config["edge_direction"] == "in"
    assert m.config["graph_features"] is False
    res = r.invoke(evaluate, ["--model", str(out), "--data", str(fusion_ds.root), "--split", "all", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc["summary"]["g.pt"]) == {"mape", "kendall", "n_kernels", "mape_all", "kendall_all"}
    res = r.invoke(train, ["--model", "gnn", "--task", "fusion", "--data", str(fusion_ds.root), "--out", str(out),
                           "--loss", "rank", "--epochs", "1", "--hidden", "8"])
    assert res.exit_code == 0, res.output
    assert not GnnCostModel.load(str(out)).predicts_absolute


def test_thread_setting_is_restored(fusion_ds, kernels):
    from costmodels.gnn.model import torch_threads
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    m = GnnCostModel("fusion", **TINY)
    m.fit(fusion_ds, epochs=1, progress=False)
    m.predict(kernels[:2])
    assert torch.get_num_threads() == before


def test_pipelined_predict_is_the_serial_predict_bit_for_bit(kernels):
    """More than PIPELINE_CHUNK kernels: the network runs on a second thread while the next chunk is
    featurized, in the same batches, so the predictions are exactly those of one thread (fusion and
    tile task, cold and warm), and the main thread's torch setting is left as it was."""
    from autotune.compiler import tiles
    from costmodels import features
    from costmodels.gnn import model as gnn_model
    assert len(kernels) > 8
    m = GnnCostModel.load(str(ROOT / "costmodels/shipped/gnn_fusion_tpu.pt"))
    m.batch_size = 4
    before = torch.get_num_threads()
    for task in ("fusion", "tile"):
        m.task = task
        out = {}
        for chunk in (10 ** 6, 8, 5):  # serial; two batches a chunk; rounded to one batch a chunk
            features.clear_cache()
            tiles.clear_caches()
            m._prep_cache.clear()
            m.PIPELINE_CHUNK = chunk
            out[chunk] = (m.predict(kernels), m.predict(kernels))  # cold, warm
        assert np.array_equal(out[8][0], out[10 ** 6][0]) and np.array_equal(out[5][0], out[10 ** 6][0])
        assert np.array_equal(out[8][1], out[10 ** 6][1])
    assert torch.get_num_threads() == before
    assert gnn_model.GnnCostModel.PIPELINE_CHUNK % 256 == 0


def test_length_bucketing_keeps_order(fusion_ds, kernels):
    m = GnnCostModel("fusion", reduction="lstm", batch_size=4, **TINY)
    m.fit(fusion_ds, epochs=1, progress=False)
    gs = [kernel_graph(k) for k in kernels[:10]]
    together = m.predict_graphs(gs)
    alone = [float(m.predict_graphs([g])[0]) for g in gs]
    assert together.tolist() == pytest.approx(alone, rel=1e-4)


def test_analytical_baseline_scales_fitted_on_train(fusion_ds):
    from autotune.tuning.evaluation import (KERNEL_KINDS, FittedAnalytical, _graph_kind, evaluate_models,
                                            fit_analytical_scales)
    scales = fit_analytical_scales(fusion_ds, "train")
    assert set(scales) == set(KERNEL_KINDS) and all(v > 0 for v in scales.values())
    fitted = FittedAnalytical(scales)
    # On the split the scales were fitted on, each kind's mean log residual is zero.
    resid: dict = {}
    for _, s in fusion_ds.iter_programs("train"):
        pred = fitted.apply(s)
        for i in range(len(s)):
            y, p = s.runtime[i], pred[i]
            if np.isfinite(y) and y > 0 and np.isfinite(p) and p > 0:
                resid.setdefault(_graph_kind(s.graphs[int(s.graph[i])]), []).append(np.log(y) - np.log(p))
    assert resid and all(abs(np.mean(v)) < 1e-9 for v in resid.values())
    out = evaluate_models({"analytical": fitted, "analytical-raw": "analytical"}, fusion_ds, "all")
    assert set(out["summary"]) == {"analytical", "analytical-raw"}
    assert set(out["summary"]["analytical"]) == {"mape", "kendall", "n_kernels", "mape_all", "kendall_all"}


def test_validation_scores_follow_sample_order(fusion_ds):
    """Validation batches by kernel size, but every output still belongs to its own sample."""
    from costmodels.gnn.train import _Prepared, _score_outputs
    m = GnnCostModel("fusion", reduction="transformer", batch_size=8, **TINY)
    m.fit(fusion_ds, epochs=1, progress=False)
    val = fusion_ds.load("validation")
    data = _Prepared(m, val)
    idx, out = _score_outputs(m, data)
    assert len(idx) == data.n > 8
    sizes = [len(data.graphs[g][0]) for g in data.graph[idx]]
    assert sizes != sorted(sizes)  # the stored order is not already by size, so the reorder is exercised
    one_by_one = m.predict_graphs([val.graphs[g] for g in data.graph[idx]])
    assert np.allclose(np.exp(out * m.y_sigma_ + m.y_mu_), one_by_one, rtol=1e-4)


def test_residual_learns_over_the_analytical_time(fusion_ds, kernels, tmp_path):
    """residual=True: the output is the standardized log ratio to the tiled analytical time (geo_t), the
    standardization is fitted on that ratio, and the setting survives save/load."""
    from costmodels.features import geometry_analytical_seconds
    m = GnnCostModel("fusion", residual=True, geometry_features=True, **TINY)
    m.fit(fusion_ds, epochs=2, batch_size=32, progress=False)
    gs = [kernel_graph(k) for k in kernels]
    t_an = geometry_analytical_seconds(np.stack([g.geom_feat for g in gs]))
    assert (t_an > 0).all()
    assert np.allclose(m.log_baseline(gs), np.log(t_an))
    raw = m.forward_graphs(gs)
    assert np.allclose(m.predict(kernels), np.exp(m.y_mu_ + m.y_sigma_ * raw) * t_an, rtol=1e-6)
    train = fusion_ds.load("train")
    ok = np.isfinite(train.runtime) & (train.runtime > 0)
    ratio = np.log(train.runtime[ok]) - m.log_baseline(train.graphs)[train.graph[ok]]
    assert m.y_mu_ == pytest.approx(ratio.mean()) and m.y_sigma_ == pytest.approx(ratio.std())
    path = tmp_path / "r.pt"
    m.save(str(path))
    m2 = GnnCostModel.load(str(path))
    assert m2.config["residual"] is True
    assert np.allclose(m2.predict(kernels), m.predict(kernels))
    # without residual the baseline is zero: the output is the log runtime itself
    assert not GnnCostModel("fusion", residual=False, **TINY).log_baseline(gs).any()
    with pytest.raises(ValueError, match="residual"):  # values are checked on first use (fit, predict, load)
        GnnCostModel("tile", residual=True, **TINY).fit(fusion_ds.load("train"), epochs=1)


def test_files_saved_before_residual_and_head_layers_load_as_before(fusion_ds, kernels, tmp_path):
    m = GnnCostModel("fusion", residual=False, head_layers=1, **TINY)
    m.fit(fusion_ds, epochs=1, batch_size=32, progress=False)
    st = m.state()
    st["config"] = {k: v for k, v in st["config"].items() if k not in ("residual", "head_layers")}
    torch.save(st, tmp_path / "old.pt")
    old = GnnCostModel.load(str(tmp_path / "old.pt"))
    assert old.config["residual"] is False and old.config["head_layers"] == 1
    assert np.allclose(old.predict(kernels), m.predict(kernels))


def test_head_layers_deepen_the_head():
    linear = lambda net: sum(isinstance(x, torch.nn.Linear) for x in net.head)  # noqa: E731
    for red in ("column", "node"):
        assert linear(GnnNet(normalize_config(dict(TINY, reduction=red, head_layers=1)))) == 2
        assert linear(GnnNet(normalize_config(dict(TINY, reduction=red, head_layers=3)))) == 4
    with pytest.raises(ValueError, match="head layers"):
        normalize_config(dict(head_layers=0))
    # head_hidden widens the head only (it runs once per kernel), not the encoder
    net = GnnNet(normalize_config(dict(TINY, head_layers=2, head_hidden=40)))
    assert [x.out_features for x in net.head if isinstance(x, torch.nn.Linear)] == [40, 40, 1]
    assert net.inp.out_features == TINY["hidden"]


def test_mape_checkpoint_selection_scores_the_kept_weights(fusion_ds):
    """select="mape": every epoch's validation value is the family-mean MAPE of the validation kernels
    >= min_runtime_s, and the kept weights are the best epoch's (re-scoring them gives best_val)."""
    from costmodels.gnn.train import _Prepared, _validate
    m = GnnCostModel("fusion", residual=True, **TINY)
    hist = m.fit(fusion_ds, epochs=3, batch_size=32, progress=False, select="mape", min_runtime_s=0.0,
                 large_weight=4.0, lr_schedule="cosine").history_
    epochs = [h for h in hist if "epoch" in h]
    assert hist[-1]["best_val"] == min(h["val"] for h in epochs)
    val = fusion_ds.load("validation")
    ok = np.isfinite(val.runtime) & (val.runtime > 0)
    pred = m.predict_graphs([val.graphs[g] for g in val.graph[ok]])
    ape = np.abs(pred - val.runtime[ok]) / val.runtime[ok]
    fam = np.asarray(val.family_of_sample())[ok]
    by_family = np.mean([ape[fam == f].mean() for f in np.unique(fam)])
    assert hist[-1]["best_val"] == pytest.approx(by_family, rel=1e-4)
    assert _validate(m, _Prepared(m, val, 0.0), "mape") == pytest.approx(by_family, rel=1e-4)
    for bad in (dict(select="r2"), dict(lr_schedule="step"), dict(large_weight=0.0), dict(draws="programs")):
        with pytest.raises(ValueError):
            GnnCostModel("fusion", **TINY).fit(fusion_ds, epochs=1, progress=False, **bad)


def test_large_kernel_weight_weighs_the_loss(fusion_ds):
    """Kernels >= min_runtime_s carry weight large_weight in the batch loss, the others 1."""
    from costmodels.gnn.train import _Prepared
    m = GnnCostModel("fusion", **TINY)
    m.fit(fusion_ds, epochs=1, progress=False)
    train = fusion_ds.load("train")
    cut = float(np.nanmedian(train.runtime))
    data = _Prepared(m, train, cut, 3.0)
    _, _, _, w = data.batch(data.keep)
    assert set(np.unique(w.numpy()).tolist()) == {1.0, 3.0}
    assert np.array_equal(w.numpy() == 3.0, train.runtime[data.keep] >= cut)


def test_draws_balance_families_or_kernels(fusion_ds):
    """draws "families": every family equally likely per draw; "kernels": every training example."""
    from costmodels.gnn.train import _Prepared, _batches_fusion
    m = GnnCostModel("fusion", **TINY)
    m.fit(fusion_ds, epochs=1, progress=False)
    data = _Prepared(m, fusion_ds.load("all"))  # three families (the train split alone has one)
    fam = data.family
    counts = {}
    for draws in ("families", "kernels"):
        idx = np.concatenate(list(_batches_fusion(data, 512, np.random.default_rng(0), 40, draws)))
        counts[draws] = {f: float(np.mean(fam[idx] == f)) for f in np.unique(fam[data.keep])}
    share = {f: float(np.mean(fam[data.keep] == f)) for f in counts["kernels"]}
    assert len(share) >= 2 and max(share.values()) - min(share.values()) > 0.1  # unequal families
    for f in share:
        assert counts["families"][f] == pytest.approx(1 / len(share), abs=0.03)
        assert counts["kernels"][f] == pytest.approx(share[f], abs=0.03)


def test_dropout_acts_in_training_only(fusion_ds):
    """config dropout: training forward passes differ (the reduced graph vector is dropped out too, also
    with no encoder layers), inference is deterministic."""
    from costmodels.gnn.layers import collate_prepared
    m = GnnCostModel("fusion", dropout=0.5, **dict(TINY, layers=0))
    m.fit(fusion_ds, epochs=1, progress=False)
    train = fusion_ds.load("train")
    preps = m.prepare_graphs(train.graphs[:8])
    b = collate_prepared(preps, np.zeros((len(preps), TILE_DIM), np.float32))
    m.net_.train()
    with torch.no_grad():
        assert not torch.equal(m.net_(b), m.net_(b))
    m.net_.eval()
    with torch.no_grad():
        assert torch.equal(m.net_(b), m.net_(b))


def test_training_is_reproducible(fusion_ds):
    """The same seed and options give the same weights (shipped models are retrainable bit for bit)."""
    a, b = (GnnCostModel("fusion", residual=True, seed=3, **TINY) for _ in range(2))
    for m in (a, b):
        m.fit(fusion_ds, epochs=2, progress=False, seed=3, select="mape", lr_schedule="cosine", large_weight=10.0)
    for (k, x), (_, y) in zip(a.net_.state_dict().items(), b.net_.state_dict().items()):
        assert torch.equal(x, y), k


def _flushing() -> bool:
    """Whether this thread flushes subnormal floats to zero now (a subnormal times one reads as zero)."""
    tiny = torch.tensor([1e-40], dtype=torch.float32)
    return bool((tiny * 1.0)[0] == 0)


def test_subnormals_flushed_in_training_and_inference_only(fusion_ds, kernels):
    """Weight decay drives weights and Adam moments into the subnormal range, where CPU arithmetic is many
    times slower: training and inference flush them to zero, and leave the setting off afterwards."""
    from costmodels.gnn.model import torch_threads
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormal floats")
    assert not _flushing()
    with torch_threads(1):
        assert _flushing()
        with torch_threads(1):
            assert _flushing()
        assert _flushing()  # the inner block does not switch it off under the outer one
    assert not _flushing()
    with torch_threads(1, flush_denormal=False):
        assert not _flushing()
    seen = []
    m = GnnCostModel("fusion", **TINY)
    m.fit(fusion_ds, epochs=1, progress=False, weight_decay=1e-4, log=lambda rec: seen.append(_flushing()))
    assert seen == [True]
    assert not _flushing()
    m.predict(kernels[:2])
    assert not _flushing()


def test_piecewise_linear_geometry_in_the_head(fusion_ds, kernels, tmp_path):
    """ple_bins > 0 appends to the head's input, per encoded geometry column, ple_bins values
    clip((x - lo) / w, 0, 1) on bins between the training split's quantiles; saved and loaded with the model;
    off by default (files without it load as before); bad settings are one-line errors."""
    from costmodels.features import GEOMETRY_DIM, GEOMETRY_GROUPS
    from costmodels.gnn.model import KDIM, PLE_GROUPS, ple_columns
    cfg = normalize_config(dict(TINY, geometry_features=True, ple_bins=4))
    cols = ple_columns(cfg)
    assert len(cols) == sum(len(GEOMETRY_GROUPS[g]) for g in PLE_GROUPS) and min(cols) >= KDIM
    m = GnnCostModel("fusion", geometry_features=True, ple_bins=4, **TINY)
    assert m.init_network().gdim == KDIM + GEOMETRY_DIM + 4 * len(cols)
    m.fit(fusion_ds, epochs=1, batch_size=32, progress=False)
    # the bins: lower edges ascending from each column's training minimum, widths summing to its range
    lo, w = m.net_.ple_lo.numpy(), m.net_.ple_w.numpy()
    rows = m.kernel_scaler_.transform(m._kernel_rows(fusion_ds.load("train").graphs))[:, cols]
    assert np.allclose(lo[:, 0], rows.min(0), atol=1e-6)
    assert (np.diff(lo, axis=1) >= -1e-7).all() and (w > 0).all()
    # the encoding of one batch, by hand
    from costmodels.gnn.layers import collate_prepared
    preps = m.prepare_graphs([kernel_graph(k, "tpu") for k in kernels[:3]])
    b = collate_prepared(preps, np.zeros((3, TILE_DIM), np.float32))
    g = m.net_._gfeat(b).numpy()
    x = np.stack([p[3] for p in preps])[:, cols]
    assert np.allclose(g[:, KDIM + GEOMETRY_DIM:], np.clip((x[:, :, None] - lo) / w, 0, 1).reshape(3, -1), atol=1e-6)
    p = m.predict(kernels)
    assert np.isfinite(p).all() and (p > 0).all()
    m.save(str(tmp_path / "ple.pt"))
    back = GnnCostModel.load(str(tmp_path / "ple.pt"))
    assert back.config["ple_bins"] == 4 and np.allclose(back.net_.ple_lo.numpy(), lo)
    assert np.allclose(back.predict(kernels), p)
    # off by default: no extra inputs, no saved bins
    plain = GnnCostModel("fusion", geometry_features=True, **TINY).init_network()
    assert plain.gdim == KDIM + GEOMETRY_DIM and "ple_lo" not in plain.state_dict()
    with pytest.raises(ValueError, match="needs geometry_features"):
        normalize_config(dict(ple_bins=4))
    with pytest.raises(ValueError, match="unknown geometry group 'nope'"):
        normalize_config(dict(geometry_features=True, ple_bins=4, ple_groups=["nope"]))
    with pytest.raises(ValueError, match=">= 0"):
        normalize_config(dict(geometry_features=True, ple_bins=-1))
