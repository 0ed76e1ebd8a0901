"""Learned tile pickers on the TpuGraphs TPU v3 tile sample, leave-one-kernel-out (LOKO).

Metrics (same definitions as benchmarks/calibrate_tpugraphs.py): tile-size APE is
costmodels.metrics.tile_size_ape (runtime-weighted: 100 * sum |t(picked) - t(best)| / sum t(best)
over the kernels with >= 2 tiles); XLA's reference is its is_default tile scored the same way.

Variants, fixed before any of them was scored (all are reported; none is dropped):
  ranker            TileRanker (costmodels/tile_ranker.py) on the simulator's and the analytical
                    model's log time ratios to the default tile and their ranks, `tile_feature_matrix`,
                    is-default, log2 #tiles; margin to leave the default by nested LOKO over MARGINS
  ranker+geometry   the same, plus each tile's `tile_geometry_features` minus the default tile's
  residual          SimulatorResidual: log(measured / simulated) relative to the default tile learned
                    from the other kernels' tiles, ranks by corrected simulator time; leaves the
                    default for any predicted gain (threshold 0)
  residual+nested   the same, leaving the default only for a corrected gain above a threshold chosen
                    from THRESHOLDS by nested LOKO on the training kernels (lowest tile-size APE)
  residual+error    the same, the threshold being the training kernels' nested-LOKO mean absolute error
                    of the predicted log gain of their pick over their default (not tuned on APE)
Every hyper-parameter, margin and threshold of a held-out kernel comes from the other kernels only.

    python benchmarks/tpugraphs_tiles.py --md --seeds 3
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from autotune.compiler.tiles import default_tile, tiling_info  # noqa: E402
from costmodels.analytical import AnalyticalCostModel  # noqa: E402
from costmodels.features import tile_feature_matrix  # noqa: E402
from costmodels.metrics import ordered_pair_accuracy, tile_size_ape, topk_slowdown, kendall  # noqa: E402
from costmodels.tile_ranker import (RESIDUAL_FEATURE_NAMES, KernelTiles, SimulatorResidual, TileRanker, loko_corrected, loko_gain_error,  # noqa: E402
                                    pick_with_threshold, relative_rows, tile_geometry_features)
from hardware.simulator import TpuSimulator  # noqa: E402
import calibrate_tpugraphs as cal  # noqa: E402

MARGINS = (0.0, 0.5, 1.0, 2.0, float("inf"))  # ranker score margins; inf = always keep XLA's default
THRESHOLDS = (0.0, 0.01, 0.02, 0.05, float("inf"))  # residual: corrected log-time gain needed to leave it
VARIANTS = ("ranker", "ranker+geometry", "residual", "residual+nested", "residual+error")


def kernel_inputs(r: dict, sim: TpuSimulator, am: AnalyticalCostModel, drop: Sequence[str] = ()) -> dict:
    """Per kernel: simulated log times, ranker rows (with and without geometry), residual rows; `drop`
    names `RESIDUAL_FEATURE_NAMES` left out of the geometry (an ablation)."""
    k = r["kernel"]
    info = tiling_info(k, "tpu")
    tiles = [t if t is not None else default_tile(k, "tpu") for t in r["tiles"]]
    tf = tile_feature_matrix(tuple(int(d) for d in info.dims), tiles)
    ks = [k] * len(tiles)
    s = np.log(np.maximum(sim.simulate(ks, r["tiles"], noise=False), 1e-12))
    a = np.log(np.maximum(am.predict(ks, r["tiles"]), 1e-12))
    d = r["default"]
    isd = np.zeros(len(tiles))
    isd[d] = 1.0
    rank_s = np.argsort(np.argsort(s)) / max(len(s) - 1, 1)
    rank_a = np.argsort(np.argsort(a)) / max(len(a) - 1, 1)
    base = np.column_stack([tf, s - s[d], a - a[d], rank_s, rank_a, isd, np.full(len(s), np.log2(len(s)))])
    geo = tile_geometry_features(k, r["tiles"])
    geo = geo[:, [i for i, n in enumerate(RESIDUAL_FEATURE_NAMES) if n not in drop]]
    resid = relative_rows(geo, s, d, (float(info.hero is not None), float(info.kind)))
    return {"sim_log": s, "ranker": base.astype(np.float32),
            "ranker+geometry": np.column_stack([base, geo - geo[d]]).astype(np.float32), "residual": resid}


def _ranked(recs) -> list:
    return [r for r in recs if len(r["y"]) >= 2]


def _order(pred: np.ndarray, pick: int) -> np.ndarray:
    """Predicted order of one kernel's tiles (lower = faster) with the picked tile first."""
    pred = np.array(pred, float)
    pred[pick] = pred.min() - 1.0
    return pred


# ---- ranker variants
def _fit_ranker(train: list, inp: dict, key: str, seed: int) -> TileRanker:
    X = np.concatenate([inp[q["name"]][key] for q in train])
    y = np.concatenate([q["y"] for q in train])
    g = sum(([q["name"]] * len(q["y"]) for q in train), [])
    return TileRanker(seed=seed).fit(X, y, g)


def _ranker_order(m: TileRanker, r: dict, inp: dict, key: str, margin: float) -> np.ndarray:
    X = inp[r["name"]][key]
    dm = np.zeros(len(r["y"]), bool)
    dm[r["default"]] = True
    m.margin = margin
    return _order(-m.predict(X), m.pick(X, dm))


def _inner_margin(train: list, inp: dict, key: str, seed: int) -> float:
    """Nested LOKO on the training kernels only: the margin of MARGINS with the lowest tile-size APE."""
    preds = {m: {} for m in MARGINS}
    for r in _ranked(train):
        model = _fit_ranker([q for q in train if q["name"] != r["name"]], inp, key, seed)
        for mg in MARGINS:
            preds[mg][r["name"]] = _ranker_order(model, r, inp, key, mg)
    return MARGINS[int(np.argmin([_metrics(train, preds[mg])["tile_ape"] for mg in MARGINS]))]


def loko_ranker(recs, inp: dict, key: str, seed: int) -> dict:
    """Held-out order per kernel and the margin each one used (from its 14 training kernels)."""
    orders, chosen = {}, {}
    for r in _ranked(recs):
        train = [q for q in recs if q["name"] != r["name"]]
        m = _fit_ranker(train, inp, key, seed)
        assert r["name"] not in m.train_groups_
        chosen[r["name"]] = _inner_margin(train, inp, key, seed)
        orders[r["name"]] = _ranker_order(m, r, inp, key, chosen[r["name"]])
    return {"orders": orders, "rule": chosen}


# ---- residual variants
def _kernel_tiles(r: dict, inp: dict) -> KernelTiles:
    return KernelTiles(r["name"], inp[r["name"]]["residual"], inp[r["name"]]["sim_log"], r["y"], r["default"])


def _inner_threshold(train: list, corrected: dict) -> float:
    """The threshold of THRESHOLDS with the lowest tile-size APE over the training kernels' nested-LOKO
    corrected predictions."""
    apes = [_metrics(train, {r["name"]: _order(c, pick_with_threshold(c, r["default"], t))
                             for r in train for c in [corrected.get(r["name"])] if c is not None})["tile_ape"]
            for t in THRESHOLDS]
    return THRESHOLDS[int(np.argmin(apes))]


def loko_residual(recs, inp: dict, seed: int) -> dict:
    """The three residual variants: held-out orders per kernel and the threshold each used."""
    out = {v: {"orders": {}, "rule": {}} for v in ("residual", "residual+nested", "residual+error")}
    for r in _ranked(recs):
        train = [_kernel_tiles(q, inp) for q in recs if q["name"] != r["name"]]
        m = SimulatorResidual(seed=seed).fit(train)
        assert r["name"] not in m.train_groups_
        c = m.predict(inp[r["name"]]["residual"], inp[r["name"]]["sim_log"], r["default"])
        inner = loko_corrected(train, seed=seed)  # nested LOKO: the 14 training kernels only
        th_nested = _inner_threshold([q for q in recs if q["name"] != r["name"]], inner)
        th_error = loko_gain_error(train, inner)
        for v, th in (("residual", 0.0), ("residual+nested", th_nested), ("residual+error", th_error)):
            out[v]["orders"][r["name"]] = _order(c, pick_with_threshold(c, r["default"], th))
            out[v]["rule"][r["name"]] = round(th, 4)
    return out


def _metrics(recs, preds: dict) -> dict:
    rr = [r for r in recs if r["name"] in preds]
    P = np.concatenate([preds[r["name"]] for r in rr])
    T = np.concatenate([r["y"] for r in rr])
    G = sum(([r["name"]] * len(r["y"]) for r in rr), [])
    taus = [kendall(preds[r["name"]], r["y"]) for r in rr]
    return {"tile_ape": tile_size_ape(P, T, G), "top1": 1 + topk_slowdown(P, T, G, 1),
            "kendall": float(np.nanmean(taus)), "pair_acc": ordered_pair_accuracy(P, T, G)}


def _summary(recs, runs: list) -> dict:
    """Metrics per seed, their mean and sd, and per seed the kernels whose pick left XLA's default."""
    per_seed = [_metrics(recs, run["orders"]) for run in runs]
    moved = []
    for run in runs:
        mv = {}
        for r in _ranked(recs):
            p = int(np.argmin(run["orders"][r["name"]]))
            if p != r["default"]:
                mv[r["name"]] = round(float(r["y"][p] / r["y"][r["default"]]), 3)
        moved.append(mv)
    return {"mean": {k: float(np.mean([m[k] for m in per_seed])) for k in per_seed[0]},
            "sd": {k: float(np.std([m[k] for m in per_seed])) for k in per_seed[0]},
            "per_seed_ape": [m["tile_ape"] for m in per_seed], "moved": moved, "rules": [run["rule"] for run in runs]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=cal.DATA)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {VARIANTS}")
    ap.add_argument("--drop-geometry", default="",
                    help=f"ablation: comma-separated geometry features to leave out, of {RESIDUAL_FEATURE_NAMES}")
    ap.add_argument("--md", action="store_true")
    a = ap.parse_args(argv)
    wanted = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [v for v in wanted if v not in VARIANTS]
    if bad:
        ap.error(f"--variants: unknown {bad}; choose from {VARIANTS}")
    drop = [n.strip() for n in a.drop_geometry.split(",") if n.strip()]
    if any(n not in RESIDUAL_FEATURE_NAMES for n in drop):
        ap.error(f"--drop-geometry: unknown {[n for n in drop if n not in RESIDUAL_FEATURE_NAMES]}; "
                 f"choose from {RESIDUAL_FEATURE_NAMES}")
    recs = cal.load(a.data)
    sim, am = TpuSimulator("tpu", noise=0.0), AnalyticalCostModel("tpu")
    inp = {r["name"]: kernel_inputs(r, sim, am, drop) for r in recs}
    xla = {r["name"]: np.where(np.arange(len(r["y"])) == r["default"], 0.0, 1.0) for r in _ranked(recs)}
    runs: dict = {v: [] for v in wanted}
    for seed in range(a.seeds):
        for v in ("ranker", "ranker+geometry"):
            if v in wanted:
                runs[v].append(loko_ranker(recs, inp, v, seed))
        if any(v.startswith("residual") for v in wanted):
            res = loko_residual(recs, inp, seed)
            for v in res:
                if v in wanted:
                    runs[v].append(res[v])
    out = {"xla_default": _metrics(recs, xla), "variants": {v: _summary(recs, runs[v]) for v in wanted}}
    if a.md:
        if drop:
            print(f"geometry features left out: {drop}\n")
        print(f"| picker (LOKO, {a.seeds} seeds: mean ± sd) | tile-size APE | APE per seed | top-1 slowdown "
              f"| Kendall | ordered pairs |\n|---|---:|---|---:|---:|---:|")
        for v in wanted:
            m, s = out["variants"][v]["mean"], out["variants"][v]["sd"]
            seeds = ", ".join(f"{x:.2f}" for x in out["variants"][v]["per_seed_ape"])
            print(f"| {v} | {m['tile_ape']:.2f}% ± {s['tile_ape']:.2f} | {seeds} | {m['top1']:.3f} ± {s['top1']:.3f} "
                  f"| {m['kendall']:.3f} | {m['pair_acc']:.3f} |")
        ref = out["xla_default"]
        print(f"| XLA's default tile | {ref['tile_ape']:.2f}% | - | {ref['top1']:.3f} | - | - |\n")
        for v in wanted:
            print(f"- {v}: left XLA's default (time of pick / time of default) per seed: "
                  f"{out['variants'][v]['moved']}; margin/threshold per held-out kernel, seed 0: "
                  f"{out['variants'][v]['rules'][0]}")
    else:
        print(out)
    return out


if __name__ == "__main__":
    main()
