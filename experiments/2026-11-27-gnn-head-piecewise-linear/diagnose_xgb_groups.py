"""Diagnosis (issue 17), part 3: which of XGBoost's feature groups carry its predictions (SHAP contributions,
`pred_contribs`, in standardized log-runtime units: mean |contribution| per kernel, summed over a group's
columns), on validation kernels >= 5 us, mask kernels (compare and select) against the rest. The groups the GNN
head does not get as such: `opcodes` (opcode histogram) and `nodes` (mean and max of the raw node features).
    PYTHONPATH=. python experiments/2026-11-27-gnn-head-piecewise-linear/diagnose_xgb_groups.py DS
"""
import sys
import numpy as np
import xgboost as xgb

from autotune.tuning.dataset import Dataset
from costmodels.features import OPCODE_INDEX
from costmodels.xgb import FEATURE_GROUPS, XgbCostModel, _matrix

ds = Dataset.open(sys.argv[1])
m = XgbCostModel.load("costmodels/shipped/xgb_fusion_tpu.json")
s = ds.load("validation")
ok = np.isfinite(s.runtime) & (s.runtime >= 5e-6)
s = s.select(np.nonzero(ok)[0]).compact()
graphs = s.sample_graphs()
fam = s.family_of_sample()
OPC, OPS = OPCODE_INDEX["compare"], OPCODE_INDEX["select"]
mask = np.array([(OPC in set(g.opcode.tolist())) and (OPS in set(g.opcode.tolist())) for g in graphs])
X = _matrix(graphs, None, m.params["static_features"], m.params["drop_groups"])
kw = {"iteration_range": (0, int(m.best_iteration) + 1)} if m.best_iteration is not None else {}
C = m.booster.predict(xgb.DMatrix(X, nthread=1), pred_contribs=True, **kw)[:, :-1]
print(f"validation kernels >= 5 us: {len(graphs)}; mean |SHAP| per group (standardized log runtime)")
rows = [("mask, t5", mask & (fam == "t5")), ("mask, all", mask), ("rest", ~mask), ("all", np.ones_like(mask))]
print(f"{'group':14s} " + " ".join(f"{r[0]:>10s}" for r in rows))
for gname, cols in FEATURE_GROUPS.items():
    vals = [np.abs(C[sel][:, cols].sum(1)).mean() for _, sel in rows]
    print(f"{gname:14s} " + " ".join(f"{v:10.3f}" for v in vals))
