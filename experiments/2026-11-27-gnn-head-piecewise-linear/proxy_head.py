"""Diagnosis (issue 17), part 4 (a cheap proxy, not a product model): an MLP head alone (2 layers of 256, as the
recipe's) on the kernel-level features the GNN head gets (KERNEL_FEATURE_NAMES + GEOMETRY_FEATURE_NAMES, min-max
scaled on the training split), residual target over `geo_t`, kernels >= 5 us weighted 10x, draws balanced across
families, Adam with cosine lr 2e-3, E epochs. Variants: the scaled features as they are (`minmax`), or with a
piecewise-linear encoding of every column on training quantile bins appended (`ple`: Gorishniy et al., NeurIPS
2022, "On Embeddings for Numerical Features in Tabular Deep Learning"). Scored on validation kernels >= 5 us:
MAPE mean over programs, pooled, and on mask kernels (compare and select).
    PYTHONPATH=. python experiments/2026-11-27-gnn-head-piecewise-linear/proxy_head.py DS EPOCHS
"""
import sys
import time
import numpy as np
import torch
from torch import nn

from autotune.tuning.dataset import Dataset
from costmodels.features import OPCODE_INDEX, FeatureScaler, geometry_analytical_seconds
from costmodels.gnn.train import family_weights

torch.set_num_threads(1)
torch.set_flush_denormal(True)
ds = Dataset.open(sys.argv[1])
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
BINS = 8


def rows(split):
    s = ds.load(split)
    ok = np.isfinite(s.runtime) & (s.runtime > 0)
    s = s.select(np.nonzero(ok)[0])
    G = s.graphs
    K = np.stack([np.concatenate([g.kernel_feat, g.geom_feat]) for g in G]).astype(np.float32)[s.graph]
    base = np.log(np.maximum(geometry_analytical_seconds(np.stack([g.geom_feat for g in G])), 1e-300))[s.graph]
    mask = np.array([(OPCODE_INDEX["compare"] in set(g.opcode.tolist())) and
                     (OPCODE_INDEX["select"] in set(g.opcode.tolist())) for g in G])[s.graph]
    return K, base, s.runtime, s.family_of_sample(), np.array(s.programs)[s.program], mask


Ktr, btr, ttr, ftr, _, _ = rows("train")
Kva, bva, tva, fva, pva, mva = rows("validation")
sc = FeatureScaler().fit(Ktr)
Xtr, Xva = sc.transform(Ktr), sc.transform(Kva)
q = np.quantile(Xtr, np.linspace(0, 1, BINS + 1), axis=0).T  # [C, BINS+1]
lo, w = q[:, :-1], np.maximum(np.diff(q, axis=1), 1e-6)


def ple(X):
    return np.clip((X[:, :, None] - lo[None]) / w[None], 0, 1).reshape(len(X), -1).astype(np.float32)


ytr = np.log(ttr) - btr
mu, sd = ytr.mean(), ytr.std()
ytr = ((ytr - mu) / sd).astype(np.float32)
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
        pr = np.exp(mu + sd * net(torch.from_numpy(Xv)).squeeze(-1).double().numpy() + bva)
    big = tva >= 5e-6
    ape = np.abs(pr - tva) / tva
    per = [ape[big & (pva == pn)].mean() for pn in np.unique(pva[big])]
    fams = {f: ape[big & (fva == f)].mean() for f in np.unique(fva)}
    print(f"{name:8s} seed {seed}: val MAPE mean {100*np.mean(per):.2f}% pooled {100*ape[big].mean():.2f}% "
          f"mask {100*ape[big & mva].mean():.2f}% t5 mask {100*ape[big & mva & (fva == 't5')].mean():.2f}% | "
          + " ".join(f"{f} {100*v:.1f}" for f, v in fams.items()) + f" | {time.time()-t0:.0f} s", flush=True)


print(f"train {len(Xtr)} rows, validation {len(Xva)}; {Xtr.shape[1]} columns, PLE {BINS} bins; {EPOCHS} epochs")
for seed in (0, 1):
    run("minmax", Xtr, Xva, seed)
    run("ple", np.concatenate([Xtr, ple(Xtr)], 1), np.concatenate([Xva, ple(Xva)], 1), seed)
