"""Issue 17, round 2 pre-screen (a proxy, not a product model; as ../proxy_frozen.py): the shipped GNN's
(P2: --ple-bins 8 on tile, dot, analytical) encoder frozen, a head (2 layers of 256) retrained from scratch for
EPOCHS epochs with the recipe's loss on [graph vector | 140 scaled kernel columns | a piecewise-linear encoding
VARIANT], validation split only. Variants (argv[3], comma-separated):
  b8        the shipped encoding: 8 bins on tile, dot, analytical (34 columns)
  b4, b16, b32  4 / 16 / 32 bins on the same groups
  b8+output 8 bins on tile, dot, analytical, output (38 columns)
  b8+work   8 bins on tile, dot, analytical, work (40 columns)
  b8+shape  8 bins on tile, dot, analytical, shape (48 columns)
  b8all     8 bins on every geometry group (126 columns)
  b8all-wd  the same with Adam weight decay 1e-4
    PYTHONPATH=. python experiments/2026-11-27-gnn-head-more-bins/proxy_round2.py DS EPOCHS VARIANTS SEEDS
"""
import sys
import time
import numpy as np
import torch
from torch import nn

from autotune.tuning.dataset import Dataset
from costmodels.features import GEOMETRY_GROUPS, KERNEL_FEATURE_NAMES, TILE_DIM, geometry_analytical_seconds
from costmodels.gnn.model import GnnCostModel
from costmodels.gnn.train import family_weights

torch.set_num_threads(1)
torch.set_flush_denormal(True)
ds = Dataset.open(sys.argv[1])
EPOCHS = int(sys.argv[2])
V = sys.argv[3].split(",")
SEEDS = [int(s) for s in sys.argv[4].split(",")] if len(sys.argv) > 4 else [0, 1]
gnn = GnnCostModel.load("costmodels/shipped/gnn_fusion_tpu.pt")
H = 2 * int(gnn.config["hidden"])
NK = len(KERNEL_FEATURE_NAMES) + sum(len(g) for g in GEOMETRY_GROUPS.values())  # 140


def rows(split):
    s = ds.load(split)
    ok = np.isfinite(s.runtime) & (s.runtime > 0)
    s = s.select(np.nonzero(ok)[0])
    G = s.graphs
    R = gnn.forward_prepared(gnn.prepare_graphs(G), np.zeros((len(G), TILE_DIM), np.float32), readout=True)
    R = R[:, :H + NK]  # drop the shipped model's own encoding
    base = np.log(np.maximum(geometry_analytical_seconds(np.stack([g.geom_feat for g in G])), 1e-300))
    j = s.graph
    return R[j], base[j], s.runtime, s.family_of_sample(), np.array(s.programs)[s.program]


t0 = time.time()
Rtr, btr, ttr, ftr, _ = rows("train")
Rva, bva, tva, fva, pva = rows("validation")
print(f"head inputs computed in {time.time()-t0:.0f} s; width {Rtr.shape[1]}", flush=True)
names = list(KERNEL_FEATURE_NAMES) + [n for g in GEOMETRY_GROUPS.values() for n in g]
ytr = ((np.log(ttr) - btr - gnn.y_mu) / gnn.y_sigma).astype(np.float32)
wtr = np.where(ttr >= 5e-6, 10.0, 1.0).astype(np.float32)
p = family_weights(ftr)


def encoding(groups, bins):
    sel = np.array([H + names.index(n) for grp in groups for n in GEOMETRY_GROUPS[grp]])
    q = np.quantile(Rtr[:, sel], np.linspace(0, 1, bins + 1), axis=0).T
    lo, w = q[:, :-1], np.maximum(np.diff(q, axis=1), 1e-6)

    def enc(R):
        return np.concatenate([R, np.clip((R[:, sel, None] - lo[None]) / w[None], 0, 1).reshape(len(R), -1)],
                              1).astype(np.float32)
    return enc(Rtr), enc(Rva)


def report(name, pr, extra=""):
    big = tva >= 5e-6
    ape = np.abs(pr - tva) / tva
    per = [ape[big & (pva == pn)].mean() for pn in np.unique(pva[big])]
    fams = {f: ape[big & (fva == f)].mean() for f in np.unique(fva)}
    print(f"{name:22s}: val MAPE mean {100*np.mean(per):.2f}% pooled {100*ape[big].mean():.2f}% | "
          + " ".join(f"{f} {100*v:.1f}" for f, v in fams.items()) + f" | {extra}", flush=True)


def run(name, Xa, Xv, seed, wd=0.0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = nn.Sequential(nn.Linear(Xa.shape[1], 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    steps = int(np.ceil(len(Xa) / 64))
    opt = torch.optim.Adam(net.parameters(), lr=2e-3, weight_decay=wd)
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
    report(f"{name} seed {seed}", pr, f"width {Xa.shape[1]}, {time.time()-t0:.0f} s")


T3 = ("tile", "dot", "analytical")
SPEC = {"b8": (T3, 8, 0.0), "b4": (T3, 4, 0.0), "b8+output": (T3 + ("output",), 8, 0.0), "b16": (T3, 16, 0.0), "b32": (T3, 32, 0.0),
        "b8+work": (T3 + ("work",), 8, 0.0), "b8+shape": (T3 + ("shape",), 8, 0.0),
        "b8all": (tuple(GEOMETRY_GROUPS), 8, 0.0), "b8all-wd": (tuple(GEOMETRY_GROUPS), 8, 1e-4)}
for v in V:
    groups, bins, wd = SPEC[v]
    Xa, Xv = encoding(groups, bins)
    for seed in SEEDS:
        run(v, Xa, Xv, seed, wd)
