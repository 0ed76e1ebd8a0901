"""Diagnosis (issue 17), part 5 (a proxy, not a product model): the shipped GNN's encoder frozen, its head
(2 layers of 256) retrained from scratch on the head's inputs (the reduced graph vector and the min-max scaled
kernel-level features), with the recipe's loss (residual over geo_t, kernels >= 5 us weighted 10x, draws balanced
across families, Adam, cosine lr 2e-3, E epochs), and variants that add columns to the head's input:
  ple     a piecewise-linear encoding of every kernel-level column on 8 training-quantile bins
  opcodes log2(1 + count) of each opcode in the kernel (XGBoost's `opcodes` group)
  ple-xgb the same encoding of the geometry groups XGBoost's predictions come from (geo_tile, geo_dot,
          geo_analytical: diagnose_xgb_groups.py) only
VARIANTS (argv[3], comma-separated; default all) picks the variants.
Validation kernels >= 5 us: MAPE mean over programs, pooled, mask kernels (compare and select), t5's mask kernels.
    PYTHONPATH=. python experiments/2026-11-27-gnn-head-piecewise-linear/proxy_frozen.py DS EPOCHS
"""
import sys
import time
import numpy as np
import torch
from torch import nn

from autotune.tuning.dataset import Dataset
from costmodels.features import GEOMETRY_GROUPS, KERNEL_FEATURE_NAMES, NUM_OPCODES, OPCODE_INDEX, TILE_DIM, geometry_analytical_seconds
from costmodels.gnn.model import GnnCostModel
from costmodels.gnn.train import family_weights

torch.set_num_threads(1)
torch.set_flush_denormal(True)
ds = Dataset.open(sys.argv[1])
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
BINS = 8
gnn = GnnCostModel.load("costmodels/shipped/gnn_fusion_tpu.pt")
H = 2 * int(gnn.config["hidden"])


def rows(split):
    s = ds.load(split)
    ok = np.isfinite(s.runtime) & (s.runtime > 0)
    s = s.select(np.nonzero(ok)[0])
    G = s.graphs
    R = gnn.forward_prepared(gnn.prepare_graphs(G), np.zeros((len(G), TILE_DIM), np.float32), readout=True)
    base = np.log(np.maximum(geometry_analytical_seconds(np.stack([g.geom_feat for g in G])), 1e-300))
    ops = np.stack([np.log2(1 + np.bincount(g.opcode, minlength=NUM_OPCODES)[:NUM_OPCODES]) for g in G]).astype(np.float32)
    mask = np.array([(OPCODE_INDEX["compare"] in set(g.opcode.tolist())) and
                     (OPCODE_INDEX["select"] in set(g.opcode.tolist())) for g in G])
    j = s.graph
    return R[j], base[j], s.runtime, s.family_of_sample(), np.array(s.programs)[s.program], mask[j], ops[j]


t0 = time.time()
Rtr, btr, ttr, ftr, _, _, Otr = rows("train")
Rva, bva, tva, fva, pva, mva, Ova = rows("validation")
print(f"head inputs computed in {time.time()-t0:.0f} s", flush=True)
q = np.quantile(Rtr[:, H:], np.linspace(0, 1, BINS + 1), axis=0).T
lo, w = q[:, :-1], np.maximum(np.diff(q, axis=1), 1e-6)
omax = np.maximum(Otr.max(0), 1.0)


def ple(K):
    return np.clip((K[:, :, None] - lo[None]) / w[None], 0, 1).reshape(len(K), -1).astype(np.float32)


ytr = ((np.log(ttr) - btr - gnn.y_mu) / gnn.y_sigma).astype(np.float32)
wtr = np.where(ttr >= 5e-6, 10.0, 1.0).astype(np.float32)
p = family_weights(ftr)


def run(name, Xa, Xv, seed=0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = nn.Sequential(nn.Linear(Xa.shape[1], 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    steps = int(np.ceil(len(Xa) / 64))
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, EPOCHS * steps, eta_min=2e-5)
    XA, YA, WA = torch.from_numpy(Xa), torch.from_numpy(ytr), torch.from_numpy(wtr)
    t0 = time.time()
    for ep in range(EPOCHS):
        for _ in range(steps):
            i = torch.from_numpy(rng.choice(len(Xa), 64, p=p))
            out = net(XA[i]).squeeze(-1)
            loss = (WA[i] * (out - YA[i]) ** 2).sum() / WA[i].sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
            opt.step()
            sch.step()
    with torch.no_grad():
        pr = gnn.seconds(net(torch.from_numpy(Xv)).squeeze(-1).double().numpy(), bva)
    report(f"{name} seed {seed}", pr, f"{time.time()-t0:.0f} s")


def report(name, pr, extra=""):
    big = tva >= 5e-6
    ape = np.abs(pr - tva) / tva
    per = [ape[big & (pva == pn)].mean() for pn in np.unique(pva[big])]
    fams = {f: ape[big & (fva == f)].mean() for f in np.unique(fva)}
    print(f"{name:22s}: val MAPE mean {100*np.mean(per):.2f}% pooled {100*ape[big].mean():.2f}% "
          f"mask {100*ape[big & mva].mean():.2f}% t5 mask {100*ape[big & mva & (fva == 't5')].mean():.2f}% | "
          + " ".join(f"{f} {100*v:.1f}" for f, v in fams.items()) + f" | {extra}", flush=True)


with torch.no_grad():
    report("shipped head", gnn.seconds(gnn.net.head(torch.from_numpy(Rva)).squeeze(-1).double().numpy(), bva))
names = list(KERNEL_FEATURE_NAMES) + [n for g in GEOMETRY_GROUPS.values() for n in g]
sel = np.array([names.index(n) for grp in ("tile", "dot", "analytical") for n in GEOMETRY_GROUPS[grp]])


def ple_sel(R):
    P = ple(R[:, H:]).reshape(len(R), -1, BINS)
    return P[:, sel].reshape(len(R), -1)


V = sys.argv[3].split(",") if len(sys.argv) > 3 else ["base", "ple", "opcodes", "ple-xgb"]
for seed in (0, 1):
    if "base" in V:
        run("head retrained", Rtr, Rva, seed)
    if "ple" in V:
        run("+ple", np.concatenate([Rtr, ple(Rtr[:, H:])], 1), np.concatenate([Rva, ple(Rva[:, H:])], 1), seed)
    if "opcodes" in V:
        run("+opcodes", np.concatenate([Rtr, Otr / omax], 1), np.concatenate([Rva, Ova / omax], 1), seed)
    if "ple-xgb" in V:
        run("+ple-xgb", np.concatenate([Rtr, ple_sel(Rtr)], 1), np.concatenate([Rva, ple_sel(Rva)], 1), seed)
