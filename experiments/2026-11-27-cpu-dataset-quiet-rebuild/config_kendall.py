"""Issue 17 (a), 2026-11-27: see README.md beside this file (a record of what was run)."""
import sys, numpy as np
import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
W = os.environ.get("CPUQ", "/tmp/cpuq")  # the work folder: DS/, m/ (new models), old/ (models of the parent commit)
from autotune import api
from autotune.tuning.dataset import Dataset
from costmodels.metrics import kendall
ds=Dataset.open(sys.argv[1])
models={"xgb shipped":f"{W}/old/xgb_fusion_cpu.json","xgb new":f"{W}/m/xgb_fusion_cpu.json","xgb min5":f"{W}/m/xgb_min5.json",
        "gnn shipped":f"{W}/old/gnn_fusion_cpu.pt","gnn shipcmd":f"{W}/m/gnn_fusion_cpu.pt","gnn recipe":f"{W}/m/gnn_recipe_cpu.pt"}
if len(sys.argv) > 2:  # NAME=PATH ... instead (used again by ../cpu_geometry_2026-11-27)
    models=dict(a.split("=",1) for a in sys.argv[2:])
models={k:api.load_model_file(v) for k,v in models.items()}
res={k:[] for k in list(models)+["analytical","measured sum"]}
sub={}  # (split, subset, predictor) -> Kendalls, where the dataset marks searched configurations
for split in ("validation","test"):
  for name,s in ds.iter_programs(split):
    c=s.config; g=np.asarray(c["graph"]); cid=np.asarray(c["cfg"]); e2e=np.asarray(c["end_to_end"])
    n=len(e2e); ok=np.isfinite(e2e)
    srch=np.asarray(c["searched"],bool) if c.get("searched") is not None else np.zeros(n,bool)
    preds={k:np.asarray(m.predict_graphs(s.sample_graphs(), s.tile_feat),float) for k,m in models.items()}
    preds["analytical"]=np.asarray(s.analytical,float)
    totals={}
    for k,p in preds.items():
        pg=np.zeros(len(s.graphs)); pg[np.asarray(s.graph)]=p
        totals[k]=np.array([np.sum((pg[g]*s.multiplicity[g])[cid==i]) for i in range(n)])
    v=np.asarray(c["runtime"]); totals["measured sum"]=np.array([np.nansum((v*s.multiplicity[g])[cid==i]) for i in range(n)])
    out=[]
    for k,tot in totals.items():
        t=kendall(tot[ok],e2e[ok]); res[k].append(t); out.append(f"{'measured' if k=='measured sum' else k} {t:.2f}")
        for label,m in (("sampled",ok&~srch),("searched",ok&srch)) if srch.any() else ():
            if m.sum()>=3: sub.setdefault((split,label,k),[]).append(kendall(tot[m],e2e[m]))
    print(split,name,ok.sum(),"; ".join(out))
print("mean:", "; ".join(f"{k} {np.nanmean(v):.3f}" for k,v in res.items()))
for split in ("validation","test"):
  for label in ("sampled","searched"):
    row=[f"{k} {np.nanmean(sub[(split,label,k)]):.3f}" for k in res if (split,label,k) in sub]
    if row: print(f"{split}, {label} configurations only (mean over programs):", "; ".join(row))
