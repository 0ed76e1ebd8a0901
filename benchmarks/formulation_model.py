"""A model of which formulation this machine runs fastest, from the timings of benchmarks/formulation_choices.

Each (convolution site, alternative) is a row: features of the convolution's geometry (flops, batch,
features, groups, window and output positions, strides, dilation, batch groups) and the alternative; the
label is log(alternative's time / the original's time), both timed alone. A gradient-boosted regressor
(xgboost) per fold; a site's pick is the choice with the lowest predicted ratio (the original at 0).

Protocol (docs/evaluation.md): validation = families of the training corpora left out one at a time
(program name up to its size/kind suffix); the test set = the sites of the held-out corpora
(examples/hlo_heldout, hlo_heldout2, hlo_frontends), scored once with the model fitted on every training
row. Metric: the issue's, agreement with the hardware's pick on the sites whose choices differ >= 1.5x, with
a Wilson interval; beside it the geometric-mean slowdown of the model's picks against the hardware's best.

    python -m benchmarks.formulation_model --data benchmarks/results/formulation_choices_all_2026-12-02.json
        [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

CHOICES = ("shifted_multiply_add", "im2col_dot", "window_dot")
TEST_CORPORA = ("hlo_heldout", "hlo_heldout2", "hlo_frontends")
DIFFER = 1.5


def geometry_features(signature: str) -> list:
    """Features of a convolution from its site signature (formulations.space._signature)."""
    from autotune.compiler.formulations import ConvGeometry
    from autotune.compiler.hlo import parse_hlo
    out, rest = signature.split(" convolution(", 1)
    args, attrs = rest.split("), ", 1)
    a, b = re.findall(r"\w+\[[^\]]*\](?:\{[^}]*\})?", args)
    text = (f"HloModule m\nENTRY e {{\n x = {a} parameter(0)\n k = {b} parameter(1)\n"
            f" ROOT c = {out} convolution(x, k), {attrs}\n}}\n")
    entry = parse_hlo(text).entry
    g = ConvGeometry.of(entry.root, entry.by_name["x"].shape, entry.by_name["k"].shape)
    lg = math.log2
    return [lg(g.flops() + 1), lg(g.batch), lg(g.c_in), lg(g.c_out), lg(g.feature_groups), lg(g.in_per_group),
            lg(g.positions), lg(math.prod(g.out_spatial)), lg(math.prod(g.spatial) or 1),
            float(any(w.lhs_dilate > 1 for w in g.window)), float(any(w.stride > 1 for w in g.window)),
            float(g.batch_groups > 1)]


def rows_of(data: dict) -> list:
    """(family, test?, site key, choice, features, label) per timed alternative of a convolution site."""
    out = []
    for r in data["rows"]:
        hw = r["hardware_s"]
        if r["opcode"] != "convolution" or not hw.get("original"):
            continue
        f = geometry_features(r["signature"])
        fam = re.sub(r"_(small|medium|large)?_?(infer|train).*$", "", r["program"])
        for c, s in hw.items():
            if c == "original" or not s:
                continue
            out.append((fam, r["corpus"] in TEST_CORPORA, (r["program"], r["instruction"]), c,
                        f + [float(c == k) for k in CHOICES], math.log(s / hw["original"])))
    return out


def fit(rows: list):
    from xgboost import XGBRegressor
    X = np.array([r[4] for r in rows])
    y = np.array([r[5] for r in rows])
    return XGBRegressor(n_estimators=300, max_depth=4, learning_rate=0.05, subsample=0.9, random_state=0).fit(X, y)


def score(rows: list, predicted: np.ndarray) -> dict:
    """Agreement of the picks with the hardware's, over all sites and those differing >= DIFFER."""
    from benchmarks.formulation_choices import wilson
    sites: dict = defaultdict(list)
    for r, p in zip(rows, predicted):
        sites[r[2]].append((r[3], r[5], float(p)))
    n = agree = n_d = agree_d = 0
    slow = []
    for v in sites.values():
        hw = [("original", 0.0)] + [(c, y) for c, y, _ in v]
        best = min(hw, key=lambda t: t[1])
        pick = min([("original", 0.0)] + [(c, p) for c, _, p in v], key=lambda t: t[1])[0]
        n += 1
        agree += pick == best[0]
        slow.append(math.exp(dict(hw)[pick] - best[1]))
        if max(y for _, y in hw) - min(y for _, y in hw) >= math.log(DIFFER):
            n_d += 1
            agree_d += pick == best[0]
    return {"sites": n, "agreement": round(agree / n, 4) if n else None, "sites_differing": n_d,
            "agreement_differing": round(agree_d / n_d, 4) if n_d else None,
            "agreement_differing_interval": wilson(agree_d, n_d),
            "geomean_slowdown_of_picks": round(math.exp(float(np.mean(np.log(slow)))), 4) if slow else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--json", default="")
    ap.add_argument("--test", action="store_true", help="score the test set (once per shipped model)")
    args = ap.parse_args(argv)
    rows = rows_of(json.loads(Path(args.data).read_text()))
    train = [r for r in rows if not r[1]]
    test = [r for r in rows if r[1]]
    fams = sorted({r[0] for r in train})
    pred = np.zeros(len(train))
    for fam in fams:  # validation: each training family left out once
        idx = [i for i, r in enumerate(train) if r[0] == fam]
        rest = [r for r in train if r[0] != fam]
        pred[idx] = fit(rest).predict(np.array([train[i][4] for i in idx]))
    result = {"data": args.data, "train_rows": len(train), "families": len(fams),
              "validation_leave_family_out": score(train, pred)}
    if args.test:
        model = fit(train)
        result["test"] = score(test, model.predict(np.array([r[4] for r in test]))) if test else None
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
