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

    python -m benchmarks.tpugraphs_tiles --md --seeds 3

--full-loko: leave-one-kernel-out all the way. Without it, the simulator that builds the pickers' inputs
has the shipped constants, fitted on all 15 kernels (held-out ones included). With it, in each fold the
simulator's constants are fitted first (calibrate_tpugraphs.fit_constants, the --fit grid search, the
same grid in every fold) on the 14 other kernels, and in each nested fold (margins, thresholds) on the
13 others; the pickers' inputs, the held-out kernel's included, are built with that fold's simulator.
Reported side by side with the old way (constants fitted once on all 15), for XLA's default tile, the
simulator alone and every variant, each with the full geometry and without the post-hoc contraction-step
features (POSTHOC: `feature_steps`; all three contraction-step features):

    python -m benchmarks.tpugraphs_tiles --full-loko --seeds 3 --json out.json --md-out out.md
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import replace
from typing import Callable, Optional, Sequence

import numpy as np

from autotune.compiler.tiles import default_tile, tiling_info
from costmodels.analytical import AnalyticalCostModel
from costmodels.features import tile_feature_matrix
from costmodels.metrics import ordered_pair_accuracy, tile_size_ape, topk_slowdown, kendall
from costmodels.tile_ranker import (RESIDUAL_FEATURE_NAMES, KernelTiles, SimulatorResidual, TileRanker, loko_gain_error,
                                    pick_with_threshold, relative_rows, tile_geometry_features)
from benchmarks import calibrate_tpugraphs as cal
from hardware.simulator import DEFAULTS, TpuSimulator

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


def _inputs_of(inp) -> Callable[[frozenset], dict]:
    """`inp` as a provider: exclude (names of kernels a fit must not see) -> picker inputs of every
    kernel. A plain dict (inputs built once, with one simulator) serves every exclusion."""
    return inp if callable(inp) else (lambda exclude: inp)


def _inner_margin(train: list, inp, key: str, seed: int, outer: frozenset = frozenset()) -> float:
    """Nested LOKO on the training kernels only: the margin of MARGINS with the lowest tile-size APE.
    Each inner held-out kernel's inputs come from `inp(outer | {it})`."""
    inp_of = _inputs_of(inp)
    preds = {m: {} for m in MARGINS}
    for r in _ranked(train):
        ii = inp_of(outer | {r["name"]})
        model = _fit_ranker([q for q in train if q["name"] != r["name"]], ii, key, seed)
        for mg in MARGINS:
            preds[mg][r["name"]] = _ranker_order(model, r, ii, key, mg)
    return MARGINS[int(np.argmin([_metrics(train, preds[mg])["tile_ape"] for mg in MARGINS]))]


def _folds(recs, folds: Optional[Sequence[str]]) -> list:
    return [r for r in _ranked(recs) if folds is None or r["name"] in folds]


def loko_ranker(recs, inp, key: str, seed: int, folds: Optional[Sequence[str]] = None) -> dict:
    """Held-out order per kernel and the margin each one used (from its 14 training kernels). `inp`:
    the inputs dict, or a provider exclude -> inputs (`_inputs_of`)."""
    inp_of = _inputs_of(inp)
    orders, chosen = {}, {}
    for r in _folds(recs, folds):
        out = frozenset({r["name"]})
        ii = inp_of(out)
        train = [q for q in recs if q["name"] != r["name"]]
        m = _fit_ranker(train, ii, key, seed)
        assert r["name"] not in m.train_groups_
        chosen[r["name"]] = _inner_margin(train, inp_of, key, seed, out)
        orders[r["name"]] = _ranker_order(m, r, ii, key, chosen[r["name"]])
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


def loko_residual(recs, inp, seed: int, folds: Optional[Sequence[str]] = None) -> dict:
    """The three residual variants: held-out orders per kernel and the threshold each used. `inp`: the
    inputs dict, or a provider exclude -> inputs (`_inputs_of`); the nested LOKO that sets the
    thresholds takes each inner held-out kernel's inputs from `inp(outer | {it})`."""
    inp_of = _inputs_of(inp)
    out = {v: {"orders": {}, "rule": {}} for v in ("residual", "residual+nested", "residual+error")}
    for r in _folds(recs, folds):
        outer = frozenset({r["name"]})
        ii = inp_of(outer)
        train_recs = [q for q in recs if q["name"] != r["name"]]
        train = [_kernel_tiles(q, ii) for q in train_recs]
        m = SimulatorResidual(seed=seed).fit(train)
        assert r["name"] not in m.train_groups_
        c = m.predict(ii[r["name"]]["residual"], ii[r["name"]]["sim_log"], r["default"])
        inner = {}  # nested LOKO: the 14 training kernels only (as costmodels.tile_ranker.loko_corrected)
        for q in _ranked(train_recs):
            qi = inp_of(outer | {q["name"]})
            mq = SimulatorResidual(seed=seed).fit([_kernel_tiles(t, qi) for t in train_recs if t["name"] != q["name"]])
            inner[q["name"]] = mq.predict(qi[q["name"]]["residual"], qi[q["name"]]["sim_log"], q["default"])
        th_nested = _inner_threshold(train_recs, inner)
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
            if r["name"] not in run["orders"]:
                continue
            p = int(np.argmin(run["orders"][r["name"]]))
            if p != r["default"]:
                mv[r["name"]] = round(float(r["y"][p] / r["y"][r["default"]]), 3)
        moved.append(mv)
    return {"mean": {k: float(np.mean([m[k] for m in per_seed])) for k in per_seed[0]},
            "sd": {k: float(np.std([m[k] for m in per_seed])) for k in per_seed[0]},
            "per_seed_ape": [m["tile_ape"] for m in per_seed], "moved": moved, "rules": [run["rule"] for run in runs]}


# ---- leave-one-kernel-out all the way: the simulator fitted without the held-out kernel
# The contraction-step geometry (RESIDUAL_FEATURE_NAMES) came in one commit (8454449), written after the diagnosis
# that the simulator favours feature-splitting tiles on fusion.191 (docs/simulator.md) and after looking at that
# kernel's measured tiles grouped by contraction steps (docs/lab-notes/2026-11-25-tile-ranker-loko.md, "The design
# saw the held-out kernel"). `feature_steps` is the feature that record names; `window_steps` (steps over window
# positions, the other half of the same split, non-zero only on fusion.191 of the 15 kernels) and `k_pad_factor`
# (the padding waste of a split K) come from the same look. Both readings are reported.
POSTHOC = {"all": (), "no-feature_steps": ("feature_steps",),
           "no-contraction": ("feature_steps", "window_steps", "k_pad_factor")}
SIMS = ("fold", "all15")  # fold: fitted on the other kernels of each (nested) fold; all15: on all 15 (the old way)
SMALL_GRID = {"launch_s": [0.05e-6, 0.2e-6], "step_overhead_s": [0.04e-6, 0.1e-6], "dma_r0_bytes": [1024.0, 4096.0]}


class FoldInputs:
    """Picker inputs (`kernel_inputs`) of every kernel, built with a simulator whose constants are
    fitted (`fit(train_recs, grid, cache)`, calibrate_tpugraphs.fit_constants) on every kernel except
    `exclude`; with sim="all15" the exclusion is ignored (constants fitted on all kernels). Memoized by
    exclusion and by constants (the dicts can be shared between providers of different `drop`)."""

    def __init__(self, recs, grid: dict, am: AnalyticalCostModel, sim: str = "fold", drop: Sequence[str] = (),
                 fit: Callable = cal.fit_constants, losses: Optional[dict] = None, consts: Optional[dict] = None,
                 store: Optional[dict] = None):
        self.recs, self.grid, self.am, self.sim, self.drop, self.fit = recs, grid, am, sim, tuple(drop), fit
        self.losses = {} if losses is None else losses  # (kernel, grid) -> losses: one kernel's data each
        self.consts = {} if consts is None else consts  # frozenset(exclude) -> constants
        self.store = {} if store is None else store     # (constants, drop) -> inputs

    def constants(self, exclude: frozenset) -> dict:
        key = frozenset(exclude) if self.sim == "fold" else frozenset()
        if key not in self.consts:
            train = [r for r in self.recs if r["name"] not in key]
            self.consts[key] = dict(self.fit(train, self.grid, self.losses))
        return self.consts[key]

    def __call__(self, exclude: frozenset) -> dict:
        c = self.constants(exclude)
        key = (tuple(sorted(c.items())), self.drop)
        if key not in self.store:
            sim = TpuSimulator("tpu", constants=replace(DEFAULTS, noise=0.0, **c))
            self.store[key] = {r["name"]: kernel_inputs(r, sim, self.am, self.drop) for r in self.recs}
        return self.store[key]


def _per_kernel(recs, orders: dict) -> dict:
    """Per held-out kernel: the picked tile, its time / the best tile's, / XLA's default's, Kendall."""
    out = {}
    for r in _ranked(recs):
        if r["name"] not in orders:
            continue
        o = orders[r["name"]]
        p = int(np.argmin(o))
        out[r["name"]] = {"pick": p, "slowdown": float(r["y"][p] / r["y"].min()),
                          "vs_default": float(r["y"][p] / r["y"][r["default"]]), "kendall": kendall(o, r["y"])}
    return out


def _full_summary(recs, runs: list) -> dict:
    s = _summary(recs, runs)
    per = [_per_kernel(recs, run["orders"]) for run in runs]
    s["per_kernel"] = {k: {m: float(np.nanmean([p[k][m] for p in per])) for m in ("slowdown", "vs_default", "kendall")}
                       for k in per[0]}
    s["per_kernel_per_seed"] = per
    return s


def _vname(v: str, ph: str) -> str:
    return v if ph == "all" else f"{v} {ph}"


def full_loko(recs, seeds: int = 3, grid: Optional[dict] = None, sims: Sequence[str] = SIMS,
              variants: Sequence[str] = VARIANTS, posthoc: Sequence[str] = tuple(POSTHOC),
              folds: Optional[Sequence[str]] = None, fit: Callable = cal.fit_constants, log=None) -> dict:
    """Every picker LOKO with the simulator fitted, per fold, without the held-out kernel (sim "fold":
    the outer fold's on the 14 others, each nested fold's on the 13 others) and, for comparison, with
    the simulator fitted on all 15 ("all15"). Everything else as `loko_ranker` / `loko_residual`."""
    grid = cal.GRID if grid is None else grid
    am = AnalyticalCostModel("tpu")
    losses: dict = {}
    xla = {r["name"]: np.where(np.arange(len(r["y"])) == r["default"], 0.0, 1.0) for r in _folds(recs, folds)}
    out: dict = {"xla_default": {"metrics": _metrics(recs, xla), "per_kernel": _per_kernel(recs, xla)},
                 "sims": {}, "timing_s": {}}
    for sim in sims:
        t0 = time.perf_counter()
        consts: dict = {}
        store: dict = {}
        prov = {ph: FoldInputs(recs, grid, am, sim, POSTHOC[ph], fit, losses, consts, store) for ph in posthoc}
        base = prov[posthoc[0]]
        simalone = {r["name"]: base(frozenset({r["name"]}))[r["name"]]["sim_log"] for r in _folds(recs, folds)}
        res: dict = {"constants": {r["name"]: base.constants(frozenset({r["name"]})) for r in _folds(recs, folds)},
                     "simulator": {"metrics": _metrics(recs, simalone), "per_kernel": _per_kernel(recs, simalone)},
                     "pickers": {}}
        runs: dict = {}
        for seed in range(seeds):
            for ph in posthoc:
                for v in ("ranker", "ranker+geometry"):
                    if v in variants and (v != "ranker" or ph == posthoc[0]):  # ranker: no geometry
                        name = v if v == "ranker" else _vname(v, ph)
                        runs.setdefault(name, []).append(loko_ranker(recs, prov[ph], v, seed, folds))
                if any(v.startswith("residual") for v in variants):
                    r3 = loko_residual(recs, prov[ph], seed, folds)
                    for v in r3:
                        if v in variants:
                            runs.setdefault(_vname(v, ph), []).append(r3[v])
            if log:
                log(f"{sim}: seed {seed} done, {time.perf_counter() - t0:.0f} s")
        res["pickers"] = {v: _full_summary(recs, runs[v]) for v in runs}
        res["fits"] = len(consts)
        res["distinct_constants"] = len({tuple(sorted(c.items())) for c in consts.values()})
        out["sims"][sim] = res
        out["timing_s"][sim] = time.perf_counter() - t0
    return out


def _fmt(m: dict, sd: Optional[dict] = None) -> str:
    ape = f"{m['tile_ape']:.2f}%" + (f" ± {sd['tile_ape']:.2f}" if sd else "")
    tau = "-" if m.get("kendall") is None or not np.isfinite(m["kendall"]) else f"{m['kendall']:.3f}"
    return f"{ape} | {m['top1']:.3f} | {tau}"


def full_markdown(out: dict, meta: dict) -> str:
    sims = list(out["sims"])
    lines = [f"# TpuGraphs tiles, leave-one-kernel-out all the way ({meta['date']})", "",
             f"Command: `{meta['command']}`", "",
             f"Machine: {meta['machine']}. Wall time {meta['wall_s'] / 60:.1f} min. Seeds: {meta['seeds']} "
             f"(XGBoost subsampling only). Simulator grid: {meta['grid_points']} points "
             f"({', '.join(meta['grid'])}), the same in every fold.", "",
             "`fold`: in each fold the simulator's constants are fitted on the 14 other kernels (each nested "
             "fold's on the 13 others), then the picker's inputs are built with it; `all15`: fitted once on all "
             f"15 kernels (the old protocol; {'the shipped constants' if meta.get('all15_equals_shipped') else 'not the shipped constants'}). Tile-size APE: runtime-weighted "
             "(costmodels.metrics.tile_size_ape) over the held-out kernels with >= 2 tiles; top-1: mean over "
             "kernels of t(pick) / t(best); Kendall: mean over kernels of the picker's order against the "
             "measured times. Pickers: mean ± sd over seeds.", ""]
    head = " | ".join(f"{sm}: tile-size APE | {sm}: top-1 | {sm}: Kendall" for sm in sims)
    lines += [f"| picker | {head} | APE per seed ({', '.join(sims)}) |",
              "|---|" + "---:|---:|---:|" * len(sims) + "---|"]
    x = out["xla_default"]["metrics"]
    lines.append("| XLA's default tile | " + " | ".join(_fmt({**x, "kendall": None}) for _ in sims) + " | - |")
    lines.append("| simulator alone | " + " | ".join(_fmt(out["sims"][sm]["simulator"]["metrics"]) for sm in sims) + " | - |")
    for v in out["sims"][sims[0]]["pickers"]:
        cells = " | ".join(_fmt(out["sims"][sm]["pickers"][v]["mean"], out["sims"][sm]["pickers"][v]["sd"]) for sm in sims)
        seeds = "; ".join(", ".join(f"{a:.2f}" for a in out["sims"][sm]["pickers"][v]["per_seed_ape"]) for sm in sims)
        lines.append(f"| {v} | {cells} | {seeds} |")
    for sm in sims:
        res = out["sims"][sm]
        names = list(out["xla_default"]["per_kernel"])
        lines += ["", f"Per held-out kernel, `{sm}` simulator: t(pick) / t(best), mean over seeds", "",
                  "| picker | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        rows = [("XLA's default tile", out["xla_default"]["per_kernel"]), ("simulator alone", res["simulator"]["per_kernel"])]
        rows += [(v, res["pickers"][v]["per_kernel"]) for v in res["pickers"]]
        for v, pk in rows:
            lines.append(f"| {v} | " + " | ".join(f"{pk[n]['slowdown']:.3f}" for n in names) + " |")
        lines += ["", f"Where the pickers left XLA's default (`{sm}`; t(pick) / t(default), per seed):", ""]
        for v in res["pickers"]:
            lines.append(f"- {v}: {res['pickers'][v]['moved']}")
    if "fold" in out["sims"]:
        fc, a15 = out["sims"]["fold"]["constants"], out["sims"].get("all15", {}).get("constants")
        lines += ["", "Simulator constants fitted without each kernel (`fold`, outer folds)"
                  + (" where they differ from the all-15 fit " + str(next(iter(a15.values()))) if a15 else "") + ":", ""]
        for n, c in fc.items():
            ref = next(iter(a15.values())) if a15 else {}
            diff = {k: v for k, v in c.items() if ref.get(k) != v}
            lines.append(f"- {n}: {diff if a15 else c}")
        lines.append(f"\n{out['sims']['fold']['fits']} fits (outer and nested exclusions), "
                     f"{out['sims']['fold']['distinct_constants']} distinct constant sets.")
    return "\n".join(lines) + "\n"


def _machine(note: str) -> str:
    la = os.getloadavg() if hasattr(os, "getloadavg") else ()
    return (f"{note + '; ' if note else ''}{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"load average at the end {', '.join(f'{x:.1f}' for x in la)}")


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.ndarray):
        return _jsonable(o.tolist())
    if isinstance(o, (np.floating, float)):
        return None if not np.isfinite(o) else float(o)  # json has no inf: `inf` thresholds are None
    if isinstance(o, np.integer):
        return int(o)
    return o


def run_full(a, ap) -> dict:
    sims = [x.strip() for x in a.sims.split(",") if x.strip()]
    posthoc = [x.strip() for x in a.posthoc.split(",") if x.strip()]
    if [x for x in sims if x not in SIMS]:
        ap.error(f"--sims: unknown {[x for x in sims if x not in SIMS]}; choose from {SIMS}")
    if [x for x in posthoc if x not in POSTHOC]:
        ap.error(f"--posthoc: unknown {[x for x in posthoc if x not in POSTHOC]}; choose from {tuple(POSTHOC)}")
    recs = cal.load(a.data)
    folds = [x.strip() for x in a.folds.split(",") if x.strip()] or None
    if folds and [f for f in folds if f not in {r["name"] for r in _ranked(recs)}]:
        ap.error(f"--folds: unknown or single-tile kernels {[f for f in folds if f not in {r['name'] for r in _ranked(recs)}]}")
    grid = cal.GRID if a.grid == "full" else SMALL_GRID
    wanted = [v.strip() for v in a.variants.split(",") if v.strip()]
    t0 = time.perf_counter()
    out = full_loko(recs, a.seeds, grid, sims, wanted, posthoc, folds,
                    log=lambda m: print(f"[{time.perf_counter() - t0:.0f} s] {m}", file=sys.stderr, flush=True))
    meta = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "command": "python -m benchmarks.tpugraphs_tiles "
            + shlex.join(a.argv), "machine": _machine(a.note), "wall_s": time.perf_counter() - t0, "seeds": a.seeds,
            "grid": {k: list(v) for k, v in grid.items()}, "grid_points": len(cal.grid_points(grid)[1]),
            "posthoc": {p: list(POSTHOC[p]) for p in posthoc},
            "shipped_constants": {k: getattr(DEFAULTS, k) for k in grid}}
    if "all15" in out["sims"]:
        c15 = next(iter(out["sims"]["all15"]["constants"].values()))
        meta["all15_constants"] = c15
        meta["all15_equals_shipped"] = all(c15[k] == getattr(DEFAULTS, k) for k in c15)
    out = {"meta": meta, **out}
    md = full_markdown(out, meta)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(_jsonable(out), fh, indent=1)
    if a.md_out:
        with open(a.md_out, "w") as fh:
            fh.write(md)
    print(md)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=cal.DATA)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {VARIANTS}")
    ap.add_argument("--drop-geometry", default="",
                    help=f"ablation: comma-separated geometry features to leave out, of {RESIDUAL_FEATURE_NAMES}")
    ap.add_argument("--md", action="store_true")
    ap.add_argument("--full-loko", action="store_true",
                    help="fit the simulator's constants without the held-out kernel in every (nested) fold; "
                         "report fold-fitted and all-15 simulators, with and without the post-hoc geometry")
    ap.add_argument("--grid", choices=("full", "small"), default="full",
                    help="--full-loko: calibrate_tpugraphs.GRID (2250 points) or SMALL_GRID (8, for smoke runs)")
    ap.add_argument("--sims", default=",".join(SIMS), help=f"--full-loko: comma-separated subset of {SIMS}")
    ap.add_argument("--posthoc", default=",".join(POSTHOC),
                    help=f"--full-loko: geometry sets, comma-separated subset of {tuple(POSTHOC)}")
    ap.add_argument("--folds", default="", help="--full-loko: held-out kernels to score (default: all with >= 2 tiles)")
    ap.add_argument("--json", help="--full-loko: write the raw result here")
    ap.add_argument("--md-out", help="--full-loko: write the markdown report here")
    ap.add_argument("--note", default="", help="--full-loko: a line about the machine for the report")
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    wanted = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [v for v in wanted if v not in VARIANTS]
    if bad:
        ap.error(f"--variants: unknown {bad}; choose from {VARIANTS}")
    drop = [n.strip() for n in a.drop_geometry.split(",") if n.strip()]
    if any(n not in RESIDUAL_FEATURE_NAMES for n in drop):
        ap.error(f"--drop-geometry: unknown {[n for n in drop if n not in RESIDUAL_FEATURE_NAMES]}; "
                 f"choose from {RESIDUAL_FEATURE_NAMES}")
    if a.full_loko:
        if drop:
            ap.error("--drop-geometry does not apply to --full-loko (it reports --posthoc sets)")
        return run_full(a, ap)
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
