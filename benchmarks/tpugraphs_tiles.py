"""Learned tile ranker on the TpuGraphs TPU v3 tile sample, leave-one-kernel-out (LOKO).

Metrics (same definitions as benchmarks/calibrate_tpugraphs.py): tile-size APE is
costmodels.metrics.tile_size_ape (runtime-weighted: 100 * sum |t(picked) - t(best)| / sum t(best)
over the kernels with >= 2 tiles); XLA's reference is its is_default tile scored the same way.
Hyper-parameters are fixed up front (no tuning on held-out kernels)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from autotune.compiler.tiles import default_tile, tiling_info  # noqa: E402
from costmodels.analytical import AnalyticalCostModel  # noqa: E402
from costmodels.features import tile_feature_matrix  # noqa: E402
from costmodels.metrics import ordered_pair_accuracy, tile_size_ape, topk_slowdown, kendall  # noqa: E402
from costmodels.tile_ranker import TileRanker  # noqa: E402
from hardware.simulator import TpuSimulator  # noqa: E402
import calibrate_tpugraphs as cal  # noqa: E402


def feature_rows(r: dict, sim: TpuSimulator, am: AnalyticalCostModel) -> np.ndarray:
    """Per tile: tile features, log sim/analytical time and their log ratios to the default tile, is_default."""
    k = r["kernel"]
    tiles = [t if t is not None else default_tile(k, "tpu") for t in r["tiles"]]
    dims = tuple(int(d) for d in tiling_info(k, "tpu").dims)
    tf = tile_feature_matrix(dims, tiles)
    ks = [k] * len(tiles)
    s = np.log(np.maximum(sim.simulate(ks, r["tiles"], noise=False), 1e-12))
    a = np.log(np.maximum(am.predict(ks, r["tiles"]), 1e-12))
    d = r["default"]
    isd = np.zeros(len(tiles))
    isd[d] = 1.0
    rank_s = np.argsort(np.argsort(s)) / max(len(s) - 1, 1)
    rank_a = np.argsort(np.argsort(a)) / max(len(a) - 1, 1)
    return np.column_stack([tf, s - s[d], a - a[d], rank_s, rank_a, isd,
                            np.full(len(s), np.log2(len(s)))]).astype(np.float32)


MARGINS = (0.0, 0.5, 1.0, 2.0, float("inf"))  # fixed grid; inf = always keep XLA's default


def _fit(train: list, feats: dict, seed: int) -> TileRanker:
    X = np.concatenate([feats[q["name"]] for q in train])
    y = np.concatenate([q["y"] for q in train])
    g = sum(([q["name"]] * len(q["y"]) for q in train), [])
    return TileRanker(seed=seed).fit(X, y, g)


def _scored(m: TileRanker, r: dict, feats: dict, margin: float) -> np.ndarray:
    """Predicted order of one kernel's tiles (lower = faster), the picked tile first."""
    dm = np.zeros(len(r["y"]), bool)
    dm[r["default"]] = True
    m.margin = margin
    pred = -m.predict(feats[r["name"]])
    pred[m.pick(feats[r["name"]], dm)] = pred.min() - 1.0
    return pred


def _inner_margin(train: list, feats: dict, seed: int) -> float:
    """Nested LOKO on the training kernels only: the margin of MARGINS with the lowest tile-size APE."""
    preds = {m: {} for m in MARGINS}
    for r in train:
        if len(r["y"]) < 2:
            continue
        model = _fit([q for q in train if q["name"] != r["name"]], feats, seed)
        for mg in MARGINS:
            preds[mg][r["name"]] = _scored(model, r, feats, mg)
    apes = [_metrics(train, preds[mg])["tile_ape"] for mg in MARGINS]
    return MARGINS[int(np.argmin(apes))]


def loko(recs, feats, seed: int, margin: Optional[float]) -> dict:
    """Each kernel with >= 2 tiles scored by a ranker trained on all OTHER kernels; margin None =
    chosen by nested LOKO on those other kernels."""
    scores, margins = {}, {}
    for r in recs:
        if len(r["y"]) < 2:
            continue
        train = [q for q in recs if q["name"] != r["name"]]
        m = _fit(train, feats, seed)
        assert r["name"] not in m.train_groups_
        mg = margin if margin is not None else _inner_margin(train, feats, seed)
        scores[r["name"]], margins[r["name"]] = _scored(m, r, feats, mg), mg
    slow = {r["name"]: float(r["y"][int(np.argmin(scores[r["name"]]))] / r["y"][r["default"]])
            for r in recs if r["name"] in scores}
    return {**_metrics(recs, scores), "margins": margins, "vs_default": slow}


def _metrics(recs, preds: dict) -> dict:
    rr = [r for r in recs if r["name"] in preds]
    P = np.concatenate([preds[r["name"]] for r in rr])
    T = np.concatenate([r["y"] for r in rr])
    G = sum(([r["name"]] * len(r["y"]) for r in rr), [])
    taus = [kendall(preds[r["name"]], r["y"]) for r in rr]
    return {"tile_ape": tile_size_ape(P, T, G), "top1": 1 + topk_slowdown(P, T, G, 1),
            "kendall": float(np.nanmean(taus)), "pair_acc": ordered_pair_accuracy(P, T, G)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=cal.DATA)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--margin", type=float, default=None,
                    help="fixed score margin to leave XLA's default (default: nested LOKO over a fixed grid)")
    ap.add_argument("--md", action="store_true")
    a = ap.parse_args(argv)
    recs = cal.load(a.data)
    sim, am = TpuSimulator("tpu", noise=0.0), AnalyticalCostModel("tpu")
    feats = {r["name"]: feature_rows(r, sim, am) for r in recs}
    xla = {r["name"]: np.where(np.arange(len(r["y"])) == r["default"], 0.0, 1.0) for r in recs if len(r["y"]) >= 2}
    ref = _metrics(recs, xla)
    runs = [loko(recs, feats, s, a.margin) for s in range(a.seeds)]
    out = {"xla_default": ref, "ranker": {k: (float(np.mean([r[k] for r in runs])), float(np.std([r[k] for r in runs])))
                                          for k in runs[0] if k not in ("margins", "vs_default")},
           "margins": [r["margins"] for r in runs], "vs_default": [r["vs_default"] for r in runs]}
    if a.md:
        print("| model | tile-size APE | top-1 slowdown | Kendall | ordered pairs |\n|---|---:|---:|---:|---:|")
        rk = out["ranker"]
        print(f"| learned ranker (LOKO, {a.seeds} seeds, mean ± sd) | {rk['tile_ape'][0]:.2f}% ± {rk['tile_ape'][1]:.2f} | "
              f"{rk['top1'][0]:.3f} ± {rk['top1'][1]:.3f} | {rk['kendall'][0]:.3f} | {rk['pair_acc'][0]:.3f} |")
        mode = "nested LOKO" if a.margin is None else f"fixed {a.margin}"
        print(f"\nmargin ({mode}) per held-out kernel, seed 0: {out['margins'][0]}")
        moved = {k: round(v, 3) for k, v in out["vs_default"][0].items() if v != 1.0}
        print(f"kernels where the pick left XLA's default (time of pick / time of default), seed 0: {moved}")
        print(f"| XLA's default tile | {ref['tile_ape']:.2f}% | {ref['top1']:.3f} | - | - |")
    else:
        print(out)
    return out


if __name__ == "__main__":
    main()
