"""The tables of docs/lab-notes/2026-11-27-gnn-head-piecewise-linear.md, from `autotune evaluate
--json` files: per file, MAPE mean / median / pooled and Kendall mean / median / pooled of kernels >= 5 us, MAPE
of every kernel (mean over programs), and the per-family MAPE means; then the mean and spread (max - min) of the
rows named in a group.     python tables.py LABEL=FILE.json[#MODEL] ... [--group NAME=LABEL,LABEL,...]
(#MODEL picks one model of a file that scored several.)
"""
import json
import math
import statistics
import sys


def row(spec):
    path, _, m = spec.partition("#")
    d = json.load(open(path))
    if not m:
        (m,) = d["summary"]
    fam = {}
    for p, r in d["programs"].items():
        v = r[m].get("mape")
        if v is not None and math.isfinite(v) and r[m].get("n_kernels", 0):
            fam.setdefault(p.split("_")[0], []).append(v)
    return {"mape_mean": d["summary"][m]["mape"], "mape_median": d["median"][m]["mape"],
            "mape_pooled": d["pooled"][m]["mape"], "k_mean": d["summary"][m]["kendall"],
            "k_median": d["median"][m]["kendall"], "k_pooled": d["pooled"][m]["kendall"],
            "mape_all": d["summary"][m]["mape_all"], **{f: statistics.mean(v) for f, v in sorted(fam.items())}}


rows, groups = {}, {}
args = sys.argv[1:]
while args:
    a = args.pop(0)
    if a == "--group":
        name, labels = args.pop(0).split("=")
        groups[name] = labels.split(",")
    else:
        label, path = a.split("=", 1)
        rows[label] = row(path)
keys = list(next(iter(rows.values())).keys())
print("| model | " + " | ".join(keys) + " |")
print("|---|" + "---:|" * len(keys))
for label, r in rows.items():
    print(f"| {label} | " + " | ".join(f"{r[k]:.3f}" if k.startswith("k_") else f"{r[k]:.2f}%" for k in keys) + " |")
for name, labels in groups.items():
    vals = {k: [rows[lab][k] for lab in labels] for k in keys}
    print(f"| **{name}** (spread) | " + " | ".join(
        (f"{statistics.mean(v):.3f} ({max(v) - min(v):.3f})" if k.startswith("k_") else
         f"{statistics.mean(v):.2f}% ({max(v) - min(v):.2f})") for k, v in vals.items()) + " |")
