"""Issue 17 (a), 2026-11-27: see README.md beside this file (a record of what was run)."""
import sys, numpy as np
import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
W = os.environ.get("CPUQ", "/tmp/cpuq")  # the work folder: DS/, m/ (new models), old/ (models of the parent commit)
from autotune import api
from autotune.tuning.dataset import Dataset
from autotune.tuning.evaluation import _graph_kind, KERNEL_KINDS
from costmodels.features import OPCODE_INDEX
INV={v:k for k,v in OPCODE_INDEX.items()}
ds=Dataset.open(f"{W}/DS")
models={"xgb":api.load_model_file(f"{W}/m/xgb_fusion_cpu.json"),"gnn":api.load_model_file(f"{W}/m/gnn_recipe_cpu.pt")}
for split in ("validation","test"):
    rows=[]
    for name,s in ds.iter_programs(split):
        ok=np.isfinite(s.runtime)&(s.runtime>=5e-6)
        if not ok.any(): continue
        s=s.select(np.nonzero(ok)[0])
        preds={m:np.asarray(mm.predict_graphs(s.sample_graphs(), s.tile_feat),float) for m,mm in models.items()}
        for i in range(len(s)):
            g=s.graphs[int(s.graph[i])]
            ops=set(INV[o] for o in np.asarray(g.opcode).tolist())
            kind=KERNEL_KINDS[_graph_kind(g)]
            big="dot" if "dot" in ops else "conv" if "convolution" in ops else "reduce" if "reduce" in ops else "other"
            rows.append((name,big,len(np.asarray(g.opcode)),float(s.runtime[i]),preds["xgb"][i],preds["gnn"][i]))
    print("##",split,len(rows))
    import collections
    by=collections.defaultdict(list)
    for r in rows: by[r[1]].append(r)
    for k,v in sorted(by.items()):
        y=np.array([r[3] for r in v]); px=np.array([r[4] for r in v]); pg=np.array([r[5] for r in v])
        print(f"{k:7s} n={len(v):4d} median label {np.median(y)*1e6:7.1f}us  xgb MAPE {np.mean(abs(px-y)/y)*100:5.1f}% bias(med log2 p/y) {np.median(np.log2(px/y)):+.2f}  gnn MAPE {np.mean(abs(pg-y)/y)*100:5.1f}% bias {np.median(np.log2(pg/y)):+.2f}")
    for name in sorted(set(r[0] for r in rows)):
        v=[r for r in rows if r[0]==name]; y=np.array([r[3] for r in v]); px=np.array([r[4] for r in v])
        print("  ",name,len(v),"xgb MAPE %.1f%%"%(np.mean(abs(px-y)/y)*100), "bias %+.2f"%np.median(np.log2(px/y)))
