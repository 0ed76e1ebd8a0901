"""Diagnosis (issue 17), part 6: log(t / geo_t), the residual the GNN learns, per family and split, for mask kernels
(compare, select and and in the kernel) and the rest; kernels >= 5 us; train and validation splits only."""
import sys, numpy as np
from autotune.tuning.dataset import Dataset
from costmodels.features import OPCODE_INDEX, geometry_analytical_seconds
ds = Dataset.open(sys.argv[1])
for split in ("train", "validation"):
    s = ds.load(split)
    ok = np.isfinite(s.runtime) & (s.runtime >= 5e-6)
    s = s.select(np.nonzero(ok)[0])
    G = s.graphs
    base = geometry_analytical_seconds(np.stack([g.geom_feat for g in G]))[s.graph]
    mask = np.array([(OPCODE_INDEX["compare"] in set(g.opcode.tolist())) and (OPCODE_INDEX["select"] in set(g.opcode.tolist())) and (OPCODE_INDEX["and"] in set(g.opcode.tolist())) for g in G])[s.graph]
    nn = np.array([g.num_nodes for g in G])[s.graph]
    fam = s.family_of_sample()
    r = np.log(s.runtime / base)
    for f in np.unique(fam):
        for nm, m in (("mask&and", mask), ("rest", ~mask)):
            sel = (fam == f) & m
            if sel.sum():
                print(f"{split:10s} {f:12s} {nm:9s} n={sel.sum():5d} nodes med {np.median(nn[sel]):4.0f} log(t/geo_t) mean {r[sel].mean():+.3f} sd {r[sel].std():.3f}")
