"""Diagnosis (issue 17), part 2: are the head's kernel-level inputs of validation kernels outside the range the
min-max scaler saw in training (where the MLP head extrapolates linearly and trees saturate)? And what does the
shipped GNN predict when those inputs are clipped to the training range at inference (no retraining)?
Validation split only.   PYTHONPATH=. python experiments/2026-11-27-gnn-head-piecewise-linear/diagnose_range.py DS
"""
import sys
import numpy as np
import torch

from autotune.tuning.dataset import Dataset
from costmodels.features import (GEOMETRY_FEATURE_NAMES, KERNEL_FEATURE_NAMES, OPCODE_INDEX, TILE_DIM,
                                 geometry_analytical_seconds)
from costmodels.gnn.model import GnnCostModel, torch_threads

torch.set_num_threads(1)
ds = Dataset.open(sys.argv[1])
gnn = GnnCostModel.load("costmodels/shipped/gnn_fusion_tpu.pt")
names = list(KERNEL_FEATURE_NAMES) + list(GEOMETRY_FEATURE_NAMES)
OPC, OPS = OPCODE_INDEX["compare"], OPCODE_INDEX["select"]
split = sys.argv[2] if len(sys.argv) > 2 else "validation"
s = ds.load(split)
ok = np.isfinite(s.runtime) & (s.runtime >= 5e-6)
s = s.select(np.nonzero(ok)[0]).compact()
graphs = s.sample_graphs()
true, fam = s.runtime, s.family_of_sample()
mask = np.array([(OPC in set(g.opcode.tolist())) and (OPS in set(g.opcode.tolist())) for g in graphs])
preps = gnn.prepare_graphs(graphs)
R = gnn.forward_prepared(preps, np.zeros((len(graphs), TILE_DIM), np.float32), readout=True)
H = 2 * int(gnn.config["hidden"])
K = R[:, H:]
out = (K < -1e-6) | (K > 1 + 1e-6)
excess = np.maximum(K - 1, 0) + np.maximum(-K, 0)
base = np.log(np.maximum(geometry_analytical_seconds(np.stack([g.geom_feat for g in graphs])), 1e-300))


def pred(r):
    with torch.inference_mode(), torch_threads(1):
        return gnn.seconds(gnn.net.head(torch.from_numpy(r)).squeeze(-1).double().numpy(), base)


p0 = pred(R)
Rc = R.copy()
Rc[:, H:] = np.clip(K, 0, 1)
p1 = pred(Rc)
ape0, ape1 = np.abs(p0 - true) / true, np.abs(p1 - true) / true
print(f"{split}: {len(true)} kernels >= 5 us; kernels with any head input out of the training range: "
      f"{out.any(1).mean():.1%}")
for f in list(np.unique(fam)) + ["ALL"]:
    for c, cm in (("mask", mask), ("rest", ~mask), ("ALL", np.ones_like(mask))):
        m = ((fam == f) | (f == "ALL")) & cm
        if not m.any():
            continue
        o = out[m].any(1)
        print(f"{f:7s} {c:5s} n={m.sum():5d} out-of-range kernels {o.mean():6.1%}  cols/kernel {out[m].sum(1).mean():5.2f}  "
              f"max excess {excess[m].max():6.2f} | GNN MAPE {100*ape0[m].mean():5.1f}% (in range {100*ape0[m][~o].mean() if (~o).any() else float('nan'):5.1f}%, "
              f"out {100*ape0[m][o].mean() if o.any() else float('nan'):5.1f}%) | clipped at inference {100*ape1[m].mean():5.1f}%")
cnt = out.sum(0)
top = np.argsort(-cnt)[:15]
print("columns most often out of range (validation kernels >= 5 us):")
for j in top:
    if cnt[j]:
        print(f"  {names[j]:28s} {cnt[j]:5d} kernels, max excess {excess[:, j].max():.2f}, mask kernels {out[mask, j].sum()}")
