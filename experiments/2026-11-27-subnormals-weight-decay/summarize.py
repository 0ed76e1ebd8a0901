"""Summaries of `autotune evaluate --json` files (kernels >= 5 us): MAPE mean / median over programs, pooled
(kernel-weighted mean of the per-program MAPEs, which is the pooled MAPE), Kendall mean / median, optionally
over a subset of programs given by family prefixes, and per-family means.

    python summarize.py [--families resnet vae vit] FILE.json ...
"""
import argparse
import json
import math
import statistics


def summary(path, families=None):
    d = json.load(open(path))
    (model,) = d["summary"]
    rows = {p: r[model] for p, r in d["programs"].items()
            if families is None or p.split("_")[0] in families}
    ok = {p: r for p, r in rows.items() if r.get("mape") is not None and math.isfinite(r["mape"])}
    mape = [r["mape"] for r in ok.values()]
    ken = [r["kendall"] for r in ok.values() if r.get("kendall") is not None and math.isfinite(r["kendall"])]
    n = sum(r["n_kernels"] for r in ok.values())
    fam = {}
    for p, r in ok.items():
        fam.setdefault(p.split("_")[0], []).append(r["mape"])
    return {"file": path, "programs": len(ok), "kernels": n, "mape_mean": statistics.mean(mape),
            "mape_median": statistics.median(mape), "mape_pooled": sum(r["n_kernels"] * r["mape"] for r in ok.values()) / n,
            "kendall_mean": statistics.mean(ken), "kendall_median": statistics.median(ken),
            "family_mape_mean": {f: statistics.mean(v) for f, v in sorted(fam.items())}}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", nargs="*")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    for f in a.files:
        s = summary(f, set(a.families) if a.families else None)
        fam = " ".join(f"{k} {v:.2f}" for k, v in s["family_mape_mean"].items())
        print(f"{f}: n={s['programs']} programs/{s['kernels']} kernels  MAPE mean {s['mape_mean']:.2f} median "
              f"{s['mape_median']:.2f} pooled {s['mape_pooled']:.2f}  Kendall mean {s['kendall_mean']:.3f} median "
              f"{s['kendall_median']:.3f}  | {fam}")
