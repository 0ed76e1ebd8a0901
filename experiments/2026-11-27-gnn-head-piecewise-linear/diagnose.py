"""Diagnosis (issue 17): why the shipped GNN misses attention-mask kernels that XGBoost prices well.
Validation split only (DS/fusion_attn: resnet, vae, vit, t5) plus training split for the residual target's
distribution; the test split is not read. Per kernel class (mask: compare and select in the kernel; dot;
reduce; other), kernels >= 5 us: MAPE and signed mean error of the shipped GNN, the shipped XGBoost and the
tiled analytical time `geo_t` (the GNN's residual baseline); and how much of the GNN's prediction moves when
the graph part of its head input is replaced by the training mean (the head on kernel features alone).

    PYTHONPATH=. python experiments/2026-11-27-gnn-head-piecewise-linear/diagnose.py DS [SPLIT [GNN_MODEL]]
(SPLIT default validation; the test split only for a model adopted on validation. GNN_MODEL default: the shipped
file. With a model whose head has more inputs than the graph vector and the kernel features, the last two
columns replace the graph part / the kernel part, piecewise-linear columns included, by its mean.)
"""
import sys
import numpy as np
import torch

from autotune.tuning.dataset import Dataset
from costmodels.features import OPCODE_INDEX, TILE_DIM, geometry_analytical_seconds
from costmodels.gnn.model import GnnCostModel, torch_threads
from costmodels.gnn.layers import collate_prepared
from costmodels.xgb import XgbCostModel

torch.set_num_threads(1)
ds = Dataset.open(sys.argv[1])
gnn = GnnCostModel.load(sys.argv[3] if len(sys.argv) > 3 else "costmodels/shipped/gnn_fusion_tpu.pt")
xgb = XgbCostModel.load("costmodels/shipped/xgb_fusion_tpu.json")
OP = {k: OPCODE_INDEX[k] for k in ("compare", "select", "and", "dot", "convolution", "reduce", "broadcast")}


def klass(g):
    ops = set(int(o) for o in g.opcode)
    if OP["compare"] in ops and OP["select"] in ops:
        return "mask"
    if OP["dot"] in ops or OP["convolution"] in ops:
        return "dot"
    if OP["reduce"] in ops:
        return "reduce"
    return "other"


def head_inputs(model, graphs):
    preps = model.prepare_graphs(graphs)
    return model.forward_prepared(preps, model.scale_tiles(np.zeros((len(graphs), TILE_DIM), np.float32)), readout=True)


def head(model, r):
    with torch.inference_mode(), torch_threads(1):
        return model.net.head(torch.from_numpy(r)).squeeze(-1).double().numpy()


split = sys.argv[2] if len(sys.argv) > 2 else "validation"
s = ds.load(split)
ok = np.isfinite(s.runtime) & (s.runtime >= 5e-6)
s = s.select(np.nonzero(ok)[0]).compact()
graphs = s.sample_graphs()
true = s.runtime
fam = s.family_of_sample()
pg = gnn.predict_graphs(graphs)
px = xgb.predict_graphs(graphs)
pa = geometry_analytical_seconds(np.stack([g.geom_feat for g in graphs]))
cls = np.array([klass(g) for g in graphs])
nn_nodes = np.array([g.num_nodes for g in graphs])
# the graph part of the head input replaced by the mean over these kernels of the same family-less pool
R = head_inputs(gnn, graphs)
H = 2 * int(gnn.config["hidden"])
base = np.log(np.maximum(pa, 1e-300))
r0 = R.copy()
r0[:, :H] = R[:, :H].mean(0)
p_kernel_only = gnn.seconds(head(gnn, r0), base)
# the kernel part replaced by its mean (the head on the graph vector alone)
r1 = R.copy()
r1[:, H:] = R[:, H:].mean(0)
p_graph_only = gnn.seconds(head(gnn, r1), base)


def ape(p):
    return np.abs(p - true) / true


def sgn(p):
    return (p - true) / true


rows = []
print(f"{split}: {len(true)} kernels >= 5 us")
print(f"{'family':8s} {'class':7s} {'n':>5s} {'nodes':>5s} | {'GNN':>6s} {'XGB':>6s} {'geo_t':>6s} | signed: {'GNN':>6s} {'XGB':>6s} {'geo_t':>6s} | GNN head: kern-only graph-only | |log(t/geo_t)| mean")
for f in list(np.unique(fam)) + ["ALL"]:
    for c in ["mask", "dot", "reduce", "other", "ALL"]:
        m = ((fam == f) | (f == "ALL")) & ((cls == c) | (c == "ALL"))
        if not m.any():
            continue
        print(f"{f:8s} {c:7s} {m.sum():5d} {np.median(nn_nodes[m]):5.0f} | {100*ape(pg)[m].mean():5.1f}% {100*ape(px)[m].mean():5.1f}% "
              f"{100*ape(pa)[m].mean():5.1f}% | {100*sgn(pg)[m].mean():+6.1f} {100*sgn(px)[m].mean():+6.1f} {100*sgn(pa)[m].mean():+6.1f} | "
              f"{100*ape(p_kernel_only)[m].mean():6.1f}% {100*ape(p_graph_only)[m].mean():6.1f}% | {np.abs(np.log(true[m]/pa[m])).mean():.3f}")
np.savez("/tmp/gnn17_diag_%s.npz" % split, true=true, pg=pg, px=px, pa=pa, cls=cls, fam=fam, nodes=nn_nodes,
         prog=np.array(s.programs)[s.program])
