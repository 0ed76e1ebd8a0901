"""XLA:CPU cost models against in-program kernel times and end-to-end runtimes (issue 17, cpu goals).

(a) Kernels: `autotune evaluate`'s metrics (MAPE and Kendall on kernels >= 5 us, per program, then mean,
    median, pooled) of each model on the test split of an in-program dataset
    (`autotune dataset build --evaluator xla-inprogram --target cpu`).
(b) Whole programs: per program, our default configuration, `--random` random
    configurations and `--searched` searched ones (the best distinct predictions of an annealing search
    of `--search-seconds` with each learned model, split evenly between them). Each is emitted, compiled
    once (EMITTED_CPU_COMPILE_OPTIONS) and timed end to end in `--rounds` interleaved rounds (the order
    rotates each round; each round's time is the mean of enough runs to last `--min-repeat-ms`); the
    median over rounds is its runtime (a second table ranks by the fastest round). Each model's whole-program prediction is what the search minimizes
    (`space_cost`: the sum of predicted kernel costs, times their multiplicity); reported: Kendall's tau
    between it and the measured runtime, per program. Beside the models, from each configuration
    profiled once (`profile_answer` + `attribute_thunks`): the measured in-program kernel sum with each
    thunk's preceding gap charged to its kernel (the dataset's labels; how well *any* additive kernel
    model could rank), the same without the gaps, and the thunk executor's run; and the analytical model.
    The end-to-end times' agreement with themselves (`split_half_kendall`: even rounds against odd ones)
    bounds what any of these can reach.
    The drift-cancelling reference (`paired_reference`, on by default: `--paired-rounds`,
    `--paired-seconds`): the VM's speed drifts over seconds, so each configuration is also timed as a ratio
    to our default run right beside it (`hardware.xla.paired_ratios`: R C R C ... R in blocks of
    `--block-ms`) in many short interleaved rounds; every predictor is judged against it too, with its
    own split-half agreement (`paired_summary`). `--from-json` re-prints those tables from a saved run.
(c) `autotune fusion --target cpu --cost-model <shipped>` against XLA's default compile:
    `python -m benchmarks.xla_cpu_tuning --cost-model xgboost|gnn`.

    python -m benchmarks.cpu_cost_models --data DS [--programs P ...] [--random 25] [--searched 25]
        [--rounds 7] [--paired-seconds 90] [--models xgboost gnn] [--json OUT]
    python -m benchmarks.cpu_cost_models --data x --from-json OUT.json [--also-price LABEL=MODEL ...]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Measured columns of (b): the in-program kernel sum with each thunk's preceding gap charged to its
# kernel (what the dataset's labels are), the thunks' own time only, and the executor's whole run.
MEASURED_CHARGED = "kernel sum, gaps charged (measured)"
MEASURED_THUNKS = "kernel sum, thunks only (measured)"
MEASURED_SPAN = "executor run (measured)"

DEFAULT_PROGRAMS = ["bert_small_infer", "bert_small_train", "recommender_small_infer", "recommender_small_train",
                    "vae_small_infer"]


def _load_avg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def kernel_accuracy(data: str, models: list[str]) -> dict:
    """(a): evaluate_models on the dataset's test split, shipped models by name and analytical."""
    from autotune.cli.learn import load_evaluated_models
    from autotune.tuning.dataset import Dataset
    from autotune.tuning.evaluation import evaluate_models
    ds = Dataset.open(data)
    specs = [f"shipped:{m}" for m in models] + ["analytical"]
    loaded = load_evaluated_models(ds, specs, ["analytical"])
    return evaluate_models(loaded, ds, "test")


def label_consistency(data: str) -> dict:
    """What the in-program dataset's labels can support, per program: the mean absolute deviation of a
    kernel's in-program time in each configuration holding it from its median over them (kernels >= 5
    us held by >= 2 configurations; gaps charged and thunks only), Kendall's tau of each configuration's
    kernel sum (times multiplicity; gaps charged and thunks only) against its end-to-end time (median
    and fastest repeat), and the end-to-end time over the charged kernel sum."""
    from autotune.tuning.dataset import Dataset
    from costmodels.metrics import kendall
    ds = Dataset.open(data)
    rows = {}
    for name in sorted(ds.programs):
        s = ds.load_program(name)
        c = s.config
        if not c or c.get("thunk_runtime") is None:
            continue
        g, cid = np.asarray(c["graph"]), np.asarray(c["cfg"])
        row: dict = {"split": ds.programs[name]["split"]}
        for label, key in (("charged", "runtime"), ("thunks", "thunk_runtime")):
            v = np.asarray(c[key], np.float64)
            dev = []
            for k in np.unique(g):
                x = v[g == k]
                med = np.nanmedian(x) if np.isfinite(x).any() else np.nan
                if np.sum(np.isfinite(x)) >= 2 and med >= 5e-6:
                    dev.append(np.nanmean(np.abs(x - med)) / med)
            row[f"deviation_{label}"] = float(np.mean(dev)) if dev else float("nan")
            total = np.array([np.nansum((v * s.multiplicity[g])[cid == i]) for i in range(len(c["end_to_end"]))])
            ok = np.isfinite(c["end_to_end"]) & (total > 0)
            row[f"kendall_{label}"] = kendall(total[ok], c["end_to_end"][ok]) if ok.sum() >= 3 else float("nan")
            row[f"kendall_{label}_min"] = (kendall(total[ok], c["end_to_end_min"][ok]) if ok.sum() >= 3
                                           else float("nan"))
            if label == "charged":
                row["end_to_end_over_sum"] = float(np.median(c["end_to_end"][ok] / total[ok])) if ok.any() else float("nan")
        rows[name] = row
    return rows


def _builds(data) -> list:
    """One dataset path, a comma-separated list of them or a sequence: builds of the same programs and seed."""
    return [p for p in data.split(",") if p] if isinstance(data, str) else list(data)


def _sampled_times(s) -> dict:
    """A program's sampled configurations (searched picks left out), keyed by their kernel sets (and a count, for
    two configurations with the same kernels): per kernel its in-program times (one per place it runs at, in
    order), and the configuration's end-to-end time."""
    c = s.config
    if not c:
        return {}
    cid, g, rt = np.asarray(c["cfg"]), np.asarray(c["graph"]), np.asarray(c["runtime"], np.float64)
    searched = np.asarray(c["searched"], bool) if c.get("searched") is not None else None
    out: dict = {}
    for i in np.unique(cid):
        if searched is not None and searched[i]:
            continue
        sel = cid == i
        times: dict = {}
        for k, y in zip(g[sel], rt[sel]):
            times.setdefault(str(s.graphs[k].hash), []).append(float(y))
        kernels = frozenset(times)
        n = sum(1 for key in out if key[0] == kernels)
        out[(kernels, n)] = ({h: np.array(v) for h, v in times.items()}, float(np.asarray(c["end_to_end"])[i]))
    return out


def _geomean(values, axis=None):
    v = np.asarray(values, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.exp(np.mean(np.log(np.where(v > 0, v, np.nan)), axis=axis))
    return float(m) if np.ndim(m) == 0 else m


def averaged_times(datasets: list, name: str) -> dict:
    """`_sampled_times` of one program over several builds: the configurations every build holds, each time the
    geometric mean over the builds (one build: its own times)."""
    per = [_sampled_times(ds.load_program(name)) for ds in datasets]
    keys = set.intersection(*(set(p) for p in per)) if per else set()
    out = {}
    for key in keys:
        times = {h: _geomean(np.stack([p[key][0][h] for p in per]), axis=0) for h in per[0][key][0]}
        out[key] = (times, _geomean([p[key][1] for p in per]))
    return out


def averaged_labels(data, split: str = "all") -> dict:
    """Per program of the split, each kernel's label from several builds: its median time over the sampled
    configurations all builds hold, with each time the geometric mean over the builds."""
    from autotune.tuning.dataset import Dataset
    dss = [Dataset.open(p) for p in _builds(data)]
    out = {}
    for name in dss[0].programs_in(split):
        if not all(name in d.programs for d in dss):
            continue
        by: dict = {}
        for times, _ in averaged_times(dss, name).values():
            for h, ys in times.items():
                by.setdefault(h, []).extend(ys)
        out[name] = {h: float(np.nanmedian(v)) for h, v in by.items() if np.isfinite(v).any()}
    return out


def cross_program_floor(data) -> dict:
    """How far a kernel's label depends on the program around it: kernels (by canonical hash) measured in
    two or more programs of the dataset, >= 5 us in one. Per such kernel, the best any function of the kernel
    alone can do is one value for all its programs: the MAPE of the best single value (among its labels; the
    optimum of a sum of |c - y| / y lies at one of them) is a floor on a kernel-level model's MAPE over these
    kernels. Also the median label ratio between program pairs sharing kernels (most shared first). Several
    builds (`data` a list or "DS1,DS2"): the labels of `averaged_labels`, whose measurement noise is lower."""
    from autotune.tuning.dataset import Dataset
    by_hash: dict = {}
    if len(_builds(data)) == 1:
        ds = Dataset.open(_builds(data)[0])
        for name in sorted(ds.programs):
            s = ds.load_program(name)
            for gi, y in zip(s.graph, s.runtime):
                if np.isfinite(y) and y > 0:
                    by_hash.setdefault(str(s.graphs[gi].hash), []).append((name, float(y)))
    else:
        for name, labels in sorted(averaged_labels(data).items()):
            for h, y in labels.items():
                if y > 0:
                    by_hash.setdefault(h, []).append((name, y))
    shared = {h: v for h, v in by_hash.items() if len({n for n, _ in v}) > 1 and max(y for _, y in v) >= 5e-6}
    floors, ratios, pairs = [], [], {}
    for v in shared.values():
        ys = np.array([y for _, y in v])
        floors.append(min(float(np.mean(np.abs(c - ys) / ys)) for c in ys))
        ratios.append(float(ys.max() / ys.min()))
        for i in range(len(v)):
            for j in range(i + 1, len(v)):
                (a, ya), (b, yb) = sorted([v[i], v[j]])
                if a != b:
                    pairs.setdefault((a, b), []).append(np.log2(yb / ya))
    top = sorted(pairs.items(), key=lambda t: -len(t[1]))[:8]
    return {"kernels": len(shared), "labels": int(sum(len(v) for v in shared.values())),
            "floor_mape_mean": float(np.mean(floors)) if floors else float("nan"),
            "floor_mape_median": float(np.median(floors)) if floors else float("nan"),
            "ratio_median": float(np.median(ratios)) if ratios else float("nan"),
            "ratio_over_1_5": float(np.mean(np.array(ratios) > 1.5)) if ratios else float("nan"),
            "pairs": [{"programs": list(k), "kernels": len(r), "ratio_median": float(2 ** np.median(r))} for k, r in top]}


def model_mape_by_builds(data, models: dict, split: str, min_seconds: float = 5e-6) -> dict:
    """Each model's kernel MAPE (`fusion_metrics` over labels >= `min_seconds`, per program, then the mean) against
    the first build's labels and against the labels averaged over all the builds (`averaged_labels`): how much of
    a model's error is the labels' noise. Each model prices each program once."""
    from autotune.tuning.dataset import Dataset
    from costmodels.metrics import fusion_metrics
    builds = _builds(data)
    first = Dataset.open(builds[0])
    label_sets = {"one build": averaged_labels(builds[:1], split),
                  f"mean of {len(builds)} builds": averaged_labels(builds, split)}
    per: dict = {(m, label): [] for m in models for label in label_sets}
    for name in sorted(set().union(*label_sets.values())):
        s = first.load_program(name)
        index = {str(gr.hash): i for i, gr in enumerate(s.graphs)}
        for mname, model in models.items():
            pred = np.full(len(s.graphs), np.nan)
            pred[np.asarray(s.graph)] = np.asarray(model.predict_graphs(s.sample_graphs(), s.tile_feat), float)
            for label, labels in label_sets.items():
                lab = {h: y for h, y in labels.get(name, {}).items() if h in index}
                m = fusion_metrics(pred[[index[h] for h in lab]], list(lab.values()), min_seconds)["mape"]
                if np.isfinite(m):
                    per[(mname, label)].append(m / 100.0)
    return {m: {label: float(np.mean(per[(m, label)])) if per[(m, label)] else float("nan") for label in label_sets}
            for m in models}


def _symmetric_ape(a: float, b: float) -> float:
    """The mean of |a - b| / b and |a - b| / a: one measurement's APE as a prediction of the other, each way."""
    return 0.5 * (abs(a - b) / b + abs(a - b) / a)


def label_retest(data_a, data_b, min_seconds: float = 5e-6) -> dict:
    """The labels measured twice: two in-program datasets built with the same programs and seed (so the same
    sampled configurations, measured at different times). Per program, each kernel's time in each sampled
    configuration the two builds share (matched by the configuration's kernel set), kernels >= `min_seconds`
    in either: the MAPE of one build's times as predictions of the other's (each way, then the mean of the two:
    the measurement's own disagreement, which no model can beat against either build's labels), per program,
    then mean, median and pooled; the same for each kernel's median over those configurations (what a label is:
    `median_mape`); the same after scaling one build by the program's median ratio between the builds (an oracle
    for a drift of the whole machine: `mape_program_scaled`); and the Kendall of the two builds' end-to-end times.
    Either side may be several builds (a list or "DS1,DS2"): its times are the geometric means over them."""
    from autotune.tuning.dataset import Dataset
    from costmodels.metrics import kendall
    a_ds, b_ds = [Dataset.open(p) for p in _builds(data_a)], [Dataset.open(p) for p in _builds(data_b)]
    rows, pooled = {}, []
    for name in sorted(set.intersection(*(set(d.programs) for d in a_ds + b_ds))):
        ca, cb = averaged_times(a_ds, name), averaged_times(b_ds, name)
        apes, e2e, per_kernel = [], [], {}
        for key in set(ca) & set(cb):
            (ta, ea), (tb, eb) = ca[key], cb[key]
            e2e.append((ea, eb))
            for h, yas in ta.items():
                ybs = tb.get(h)
                if ybs is None or len(ybs) != len(yas):
                    continue
                for ya, yb in zip(yas, ybs):
                    if np.isfinite(ya) and np.isfinite(yb) and max(ya, yb) >= min_seconds and min(ya, yb) > 0:
                        apes.append(_symmetric_ape(ya, yb))
                        per_kernel.setdefault(h, []).append((ya, yb))
        if not apes:
            continue
        e = np.array(e2e)
        ok = np.isfinite(e).all(axis=1)
        med = [_symmetric_ape(*np.median(np.array(v), axis=0)) for v in per_kernel.values()]
        both = np.array([t for v in per_kernel.values() for t in v])
        scale = float(np.exp(np.median(np.log(both[:, 1] / both[:, 0]))))  # an oracle per-program speed ratio
        rows[name] = {"configurations": len(e2e), "kernel_times": len(apes), "mape": float(np.mean(apes)),
                      "mape_program_scaled": float(np.mean([_symmetric_ape(a * scale, b) for a, b in both])),
                      "kernels": len(med), "median_mape": float(np.mean(med)),
                      "end_to_end_kendall": kendall(e[ok, 0], e[ok, 1]) if ok.sum() >= 3 else float("nan")}
        pooled.extend(apes)
    mapes = [r["mape"] for r in rows.values()]
    return {"programs": rows, "mape_mean": float(np.mean(mapes)) if mapes else float("nan"),
            "median_mape_mean": float(np.mean([r["median_mape"] for r in rows.values()])) if rows else float("nan"),
            "mape_program_scaled_mean": (float(np.mean([r["mape_program_scaled"] for r in rows.values()])) if rows
                                         else float("nan")),
            "mape_median": float(np.median(mapes)) if mapes else float("nan"),
            "mape_pooled": float(np.mean(pooled)) if pooled else float("nan"),
            "end_to_end_kendall_mean": float(np.nanmean([r["end_to_end_kendall"] for r in rows.values()]))
            if rows else float("nan")}


def split_half_kendall(rounds_s: list) -> float:
    """Kendall tau between the configurations' median end-to-end times over the even and over the odd
    rounds: how well the end-to-end measurement ranks the configurations against itself (a ceiling for any
    predictor's Kendall against it); nan with fewer than 2 rounds or 3 configurations."""
    from costmodels.metrics import kendall
    pairs = [(statistics.median(t[0::2]), statistics.median(t[1::2])) for t in rounds_s if len(t) >= 2]
    if len(pairs) < 3:
        return float("nan")
    even, odd = (np.array(v, np.float64) for v in zip(*pairs))
    return float(kendall(even, odd))


LOCAL_WINDOW = 10


def paired_reference(runs: list, rounds: int, pairs: int, block_ms: float, seconds: float = 0.0) -> dict:
    """The drift-cancelling end-to-end reference: each configuration's time as a ratio to the first
    compiled one (our default) timed beside it (`hardware.xla.paired_ratios`: R C R C ... R, blocks of
    about `block_ms`, so a pair lasts a few milliseconds), in interleaved rounds (rotating order) of
    `pairs` pairs per configuration: at least `rounds` rounds, more while the rounds so far took less
    than `seconds`. A configuration's ratio is the median over all its candidate blocks of the block's
    time over the local reference level (the median of the LOCAL_WINDOW reference blocks before and
    after it; `local_ratio_rounds`); `pair_ratio` is the median of the plain pair ratios (the block over
    the mean of the two reference blocks around it).
    Also kept per round: the pair ratios, min(candidate blocks) / min(reference blocks), the candidate
    blocks' absolute seconds (median; the same blocks without the division) and the raw blocks. The
    default is paired with itself (its ratio is measured, about 1). `runs`: one
    `hardware.xla.PreparedRun` per configuration (None where it did not compile)."""
    from hardware import xla as X
    order = [i for i, r in enumerate(runs) if r is not None]
    empty: list = [[] for _ in runs]
    if not order:
        return {"ratio": [float("nan")] * len(runs), "ratio_rounds": empty, "seconds_rounds": empty,
                "min_ratio_rounds": empty, "local_ratio_rounds": empty, "pair_ratio": [float("nan")] * len(runs),
                "blocks": empty, "reference": None, "rounds": 0, "seconds": 0.0}
    for i in order:
        runs[i].calibrate(block_ms)
    ref = runs[order[0]]
    ratio_rounds: list = [[] for _ in runs]
    seconds_rounds: list = [[] for _ in runs]
    min_ratio_rounds: list = [[] for _ in runs]
    blocks: list = [[] for _ in runs]
    ref_series: list = []            # every reference block, in time order
    cand_at: list = [[] for _ in runs]  # (round, seconds, index of the reference block before it)
    t0 = time.time()
    r = 0
    while r < rounds or time.time() - t0 < seconds:
        shift = (r * 7919) % len(order)  # rotate the order by a large prime stride each round
        for i in order[shift:] + order[:shift]:
            pt = X.paired_ratios(ref, runs[i], pairs)
            ratio_rounds[i].append(pt.ratios)
            min_ratio_rounds[i].append(min(pt.seconds) / min(pt.reference_seconds))
            seconds_rounds[i].append(float(statistics.median(pt.seconds)))
            blocks[i].append([pt.reference_seconds, pt.seconds])
            for k, c in enumerate(pt.seconds):  # candidate block k lies between reference blocks k and k+1
                cand_at[i].append((r, c, len(ref_series) + k))
            ref_series.extend(pt.reference_seconds)
        r += 1
    # The local reference level: the median of the 2 * LOCAL_WINDOW reference blocks around a candidate
    # block (the reference runs every other block, tens of milliseconds in all): it follows the drift
    # but, unlike the two bracketing blocks alone, not one interrupted block.
    ref_arr = np.asarray(ref_series)
    local_rounds: list = [[[] for _ in range(r)] if cand_at[i] else [] for i in range(len(runs))]
    for i in order:
        for rr, c, at in cand_at[i]:
            lo, hi = max(0, at + 1 - LOCAL_WINDOW), min(len(ref_arr), at + 1 + LOCAL_WINDOW)
            local_rounds[i][rr].append(c / float(np.median(ref_arr[lo:hi])))
    return {"ratio": [float(np.median(np.concatenate(t))) if t else float("nan") for t in local_rounds],
            "local_ratio_rounds": local_rounds,
            "pair_ratio": [float(np.median(np.concatenate(t))) if t else float("nan") for t in ratio_rounds],
            "ratio_rounds": ratio_rounds, "seconds_rounds": seconds_rounds, "min_ratio_rounds": min_ratio_rounds,
            "blocks": blocks, "reference": order[0], "numbers": [x.number if x is not None else None for x in runs],
            "rounds": r, "pairs": pairs, "block_ms": block_ms, "seconds": time.time() - t0}


def split_half_pooled(ratio_rounds: list) -> float:
    """Kendall tau between the configurations' median pair ratio over the even rounds and over the odd
    rounds (each configuration's pairs pooled within a half): how well the paired reference ranks the
    configurations against itself, each half with half the data of the full reference."""
    from costmodels.metrics import kendall
    pairs = [(np.median(np.concatenate(t[0::2])), np.median(np.concatenate(t[1::2])))
             for t in ratio_rounds if len(t) >= 2]
    if len(pairs) < 3:
        return float("nan")
    even, odd = (np.array(v, np.float64) for v in zip(*pairs))
    return float(kendall(even, odd))


def encode_config(space, cfg) -> str:
    """A fusion configuration as text for the JSON record ("0"/"1" per fusible edge), so that any model can
    price the measured configurations later (`--from-json ... --also-price`)."""
    return "".join("1" if b else "0" for b in space.encode(cfg))


def decode_config(space, text: str):
    return space.decode(bytes(1 if ch == "1" else 0 for ch in text))


def reprice(rows: list, models: dict) -> list:
    """Each saved run's configurations priced by more models (their predictions join `predicted_s`), so that
    models are compared on the same measured configurations without measuring again."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.tuning.pricing import space_cost
    for row in rows:
        if "configs" not in row:
            raise SystemExit(f"error: the saved run of {row['program']} has no configuration encodings "
                             "(runs before 2026-11-27 15:00 UTC); it cannot be re-priced")
        space = FusionSpace(Program.from_file(os.path.join(ROOT, row["path"])), "cpu")
        cfgs = [decode_config(space, t) for t in row["configs"]]
        for label, model in models.items():
            row["predicted_s"][label] = np.asarray(space_cost(space, model)(cfgs), np.float64).tolist()
    return rows


class MappingLimitError(RuntimeError):
    """Compiling one more configuration would come near the kernel's limit on a process's memory mappings."""


def check_mapping_headroom(program: str, compiled: int, total: int, margin: float = 0.8) -> None:
    """(b) keeps every configuration of a program compiled for its interleaved rounds; each XLA:CPU executable
    holds its own memory mappings (a large train step: ~1,000-2,000 each), and a process past
    ``vm.max_map_count`` is aborted by LLVM ("Unable to allocate section memory"). Refuse before that, in one
    line, while the earlier programs' results can still be written (Linux; elsewhere nothing is checked)."""
    try:
        with open("/proc/self/maps") as f:
            used = sum(1 for _ in f)
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
    except (OSError, ValueError):
        return
    if used > margin * limit:
        raise MappingLimitError(
            f"{program}: {compiled} of {total} configurations compiled hold {used} of the {limit} memory mappings "
            f"a process may have (vm.max_map_count); raise it (sysctl -w vm.max_map_count=262144) or measure "
            f"fewer configurations (--random, --searched)")


def program_ranking(path: str, models: dict, n_random: int, n_searched: int, rounds: int, min_repeat_ms: float,
                    search_seconds: float, seed: int, paired_rounds: int = 0, pairs: int = 3,
                    block_ms: float = 1.0, paired_seconds: float = 0.0, also_price: Optional[dict] = None) -> dict:
    """(b) for one program: measured end-to-end runtimes and each model's Kendall tau against them (the
    searched configurations come from `models`; `also_price` models only price them)."""
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
    from autotune.compiler.program import Program
    from autotune.tuning.dataset import searched_configurations
    from autotune.tuning.pricing import space_cost
    from costmodels.metrics import kendall
    from hardware import xla as X

    name = os.path.basename(path)[:-4]
    space = FusionSpace(Program.from_file(path), "cpu")
    rng = np.random.default_rng(seed)
    cfgs, origin, seen = [], [], set()

    def add(cfg, how: str) -> None:
        key = space.encode(cfg)
        if key not in seen:
            seen.add(key)
            cfgs.append(cfg)
            origin.append(how)

    add(space.default(), "default")
    learned = [m for m in models if m != "analytical"]
    for i, m in enumerate(learned):
        share = n_searched // len(learned) + (i < n_searched % len(learned))
        for c in searched_configurations(space, models[m], share, max_evaluations=None, seconds=search_seconds,
                                         seed=seed):
            add(c, f"searched:{m}")
    tries = 0
    while sum(o == "random" for o in origin) < n_random and tries < 20 * n_random:
        tries += 1
        add(space.random(rng), "random")
    t0 = time.time()
    compiled, inputs, failed = [], None, []
    sums: dict[str, list] = {MEASURED_CHARGED: [], MEASURED_THUNKS: [], MEASURED_SPAN: []}
    for c in cfgs:
        check_mapping_headroom(name, len(compiled), len(cfgs))
        text = X.strip_metadata(emit_fused_text(space, c))
        try:
            comp = X.compile_hlo(text, **EMITTED_CPU_COMPILE_OPTIONS)
        except Exception as exc:  # noqa: BLE001 - reported, the configuration is left out
            failed.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
            compiled.append(None)
            for v in sums.values():
                v.append(np.nan)
            continue
        inputs = inputs if inputs is not None else X.verification_inputs(text)
        members = [k for k in space.kernels(c) if not k.is_trivial]
        ans = X.profile_answer(comp, inputs, 10, X.TimingOptions(repeat=2, min_repeat_ms=min_repeat_ms))
        for label, charge in ((MEASURED_CHARGED, True), (MEASURED_THUNKS, False)):
            per_kernel, _ = X.attribute_thunks(members, ans["thunks"], charge_gaps=charge)
            sums[label].append(X.InProgramTiming(X.Measurement(ans["seconds"]), per_kernel).kernel_sum)
        sums[MEASURED_SPAN].append(float(np.median(ans["run_seconds"])))
        compiled.append(comp)
    compile_s = time.time() - t0
    times = [[] for _ in cfgs]
    order = [i for i, c in enumerate(compiled) if c is not None]
    timing = X.TimingOptions(repeat=1, min_repeat_ms=min_repeat_ms, warmup=1)
    for r in range(rounds):  # interleaved, rotating: every configuration sees the same machine states
        shift = (r * len(order)) // max(rounds, 1)
        for i in order[shift:] + order[:shift]:
            times[i].append(X.time_compiled(compiled[i], inputs, timing).seconds)
    measured = np.array([statistics.median(t) if t else np.nan for t in times])
    fastest = np.array([min(t) if t else np.nan for t in times])
    paired = (paired_reference([X.PreparedRun(c, inputs) if c is not None else None for c in compiled],
                                paired_rounds, pairs, block_ms, paired_seconds)
              if paired_rounds or paired_seconds else None)
    ok = np.isfinite(measured)
    row = {"program": name, "path": os.path.relpath(path, ROOT), "configs": [encode_config(space, c) for c in cfgs],
           "configurations": int(ok.sum()), "origins": {o: origin.count(o) for o in set(origin)},
           "compile_failures": failed, "compile_and_profile_s": compile_s,
           "measured_s": measured.tolist(), "measured_min_s": fastest.tolist(), "rounds_s": times, "origin": origin,
           "spread": float(np.nanmax(measured) / np.nanmin(measured)), "kendall": {}, "kendall_vs_min": {},
           "predicted_s": {}}
    for label, v in sums.items():
        row["kendall"][label] = kendall(np.asarray(v)[ok], measured[ok])
        row["kendall_vs_min"][label] = kendall(np.asarray(v)[ok], fastest[ok])
        row["predicted_s"][label] = list(map(float, v))
    row["end_to_end_split_half_kendall"] = split_half_kendall(times)
    if paired is not None:
        row["paired"] = paired
    row["end_to_end_over_charged_sum"] = float(np.nanmedian(measured / np.asarray(sums[MEASURED_CHARGED])))
    for label, model in {**models, **(also_price or {})}.items():
        pred = np.asarray(space_cost(space, model)(cfgs), np.float64)
        row["predicted_s"][label] = pred.tolist()
        row["kendall"][label] = kendall(pred[ok], measured[ok])
        row["kendall_vs_min"][label] = kendall(pred[ok], fastest[ok])
    d = measured[0]
    row["default_s"] = float(d)
    if paired is not None:
        paired_summary(row)
    return row


# The references of the paired measurement, each from the same blocks: the primary one (a candidate
# block over the local reference level), the plain pair ratio, and the candidate blocks' absolute time
# (median over all rounds: "many short rounds" without the division).
PAIRED_REFERENCES = {"local ratio": "local_ratio_rounds", "pair ratio": "ratio_rounds",
                     "absolute, many short rounds": "abs_rounds"}


def pooled(rounds: list, sel: slice = slice(None)) -> float:
    """A configuration's pooled paired ratio: the median of every block ratio of the rounds `sel` picks."""
    part = [x for t in rounds[sel] for x in t]
    return float(np.median(part)) if part else float("nan")


def _split_half_pooled(rounds: list) -> float:
    """Kendall between each configuration's pooled median over its even and over its odd paired rounds
    (`rounds`: per configuration, its rounds of block ratios); nan for fewer than 3 configurations."""
    from costmodels.metrics import kendall
    if len(rounds) < 3:
        return float("nan")
    even = np.array([pooled(t, slice(0, None, 2)) for t in rounds])
    odd = np.array([pooled(t, slice(1, None, 2)) for t in rounds])
    return kendall(even, odd)


def split_half_by_rounds(paired: dict, fractions=(0.25, 0.5, 1.0)) -> list:
    """(rounds, split-half Kendall of the local ratio on the first `rounds` rounds) per fraction: how the
    paired reference's self-agreement grows with measuring time."""
    out = []
    for frac in fractions:
        k = max(2, int(paired["rounds"] * frac))
        out.append((k, _split_half_pooled([t[:k] for t in paired["local_ratio_rounds"] if t])))
    return out


# Subsets of a program's configurations by where they came from: the random ones (with our default) are what
# the models were trained on; the searched ones are each model's own best predictions, where a search exploits
# whatever the model gets wrong and where the configurations lie close together.
ORIGIN_SUBSETS = {"default and random": lambda o: o in ("default", "random"),
                  "searched": lambda o: o.startswith("searched")}


def paired_summary(row: dict) -> dict:
    """Kendall of every predictor (the measured columns and the models: `row["predicted_s"]`) and of the
    old absolute end-to-end reference against the paired reference, and the split-half agreement of each
    reference of the paired measurement (`PAIRED_REFERENCES`); stored in `row`."""
    from costmodels.metrics import kendall
    p = row["paired"]
    p["abs_rounds"] = [[b[1] for b in t] for t in p["blocks"]]
    measured = np.asarray(row["measured_s"], np.float64)
    refs = {name: np.array([pooled(t, slice(None)) for t in p[key]]) for name, key in PAIRED_REFERENCES.items()}
    ok = np.isfinite(measured) & np.isfinite(refs["local ratio"])
    ratio = refs["local ratio"]
    row["paired_spread"] = float(np.nanmax(ratio[ok]) / np.nanmin(ratio[ok]))
    preds = dict(row["predicted_s"])
    preds["end to end, absolute (median of rounds)"] = measured.tolist()
    row["kendall_paired"] = {label: kendall(np.asarray(v, np.float64)[ok], ratio[ok]) for label, v in preds.items()}
    row["kendall_by_reference"] = {name: {label: kendall(np.asarray(v, np.float64)[ok], ref[ok])
                                          for label, v in preds.items()} for name, ref in refs.items()}
    row["split_half_by_reference"] = {}
    for name, key in PAIRED_REFERENCES.items():
        row["split_half_by_reference"][name] = _split_half_pooled([t for t, o in zip(p[key], ok) if o])
    row["paired_split_half_kendall"] = row["split_half_by_reference"]["local ratio"]
    row["by_origin"] = {}
    for subset, keep in ORIGIN_SUBSETS.items():
        sel = ok & np.array([keep(o) for o in row["origin"]], bool)
        row["by_origin"][subset] = {
            "configurations": int(sel.sum()),
            "spread": float(ratio[sel].max() / ratio[sel].min()) if sel.any() else float("nan"),
            "split_half": _split_half_pooled([t for t, s in zip(p["local_ratio_rounds"], sel) if s]),
            "kendall": {label: kendall(np.asarray(v, np.float64)[sel], ratio[sel]) if sel.sum() >= 3 else float("nan")
                        for label, v in preds.items()}}
    row["paired_min_ratio_split_half_kendall"] = split_half_kendall(
        [t for t, o in zip(p["min_ratio_rounds"], ok) if o])
    return row


def print_paired(rows: list, args: argparse.Namespace) -> None:
    """The tables of (b) against the paired reference."""
    plabels = list(rows[0]["kendall_paired"])
    p0 = rows[0]["paired"]
    print(f"\n# (b) against the drift-cancelling reference: each configuration's end-to-end time as a ratio to "
          f"our default timed beside it (rounds of {p0['pairs']} pairs, blocks of {p0['block_ms']:g} ms; a "
          f"candidate block over the median of the {2 * LOCAL_WINDOW} reference blocks around it; median over "
          f"all blocks)\n")
    print("| program | configurations | rounds | ratio spread | " + " | ".join(plabels)
          + " | reference, even vs odd rounds | old absolute reference, even vs odd |")
    print("|---|---:|---:|---:|" + "---:|" * (len(plabels) + 2))
    for r in rows:
        print(f"| {r['program']} | {r['configurations']} | {r['paired']['rounds']} | x{r['paired_spread']:.2f} | "
              + " | ".join(f"{r['kendall_paired'][k]:.3f}" for k in plabels)
              + f" | {r['paired_split_half_kendall']:.3f} | {r['end_to_end_split_half_kendall']:.3f} |")
    keys = ["paired_split_half_kendall", "end_to_end_split_half_kendall"]
    print("| **mean** | | | | " + " | ".join(f"**{np.nanmean([r['kendall_paired'][k] for r in rows]):.3f}**"
                                           for k in plabels)
          + " | " + " | ".join(f"**{np.nanmean([r[k] for r in rows]):.3f}**" for k in keys) + " |")
    print("\nthe same blocks read as other references (mean over programs): split-half agreement, and each "
          "predictor's Kendall against it\n")
    names = list(PAIRED_REFERENCES)
    print("| | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names))
    print("| reference, even vs odd rounds | " + " | ".join(
        f"{np.nanmean([r['split_half_by_reference'][n] for r in rows]):.3f}" for n in names) + " |")
    for k in plabels:
        print(f"| {k} | " + " | ".join(
            f"{np.nanmean([r['kendall_by_reference'][n][k] for r in rows]):.3f}" for n in names) + " |")
    print("\nper program, split-half: " + "; ".join(
        f"{r['program']} " + ", ".join(f"{n} {r['split_half_by_reference'][n]:.3f}" for n in names)
        + f", min/min per round {r['paired_min_ratio_split_half_kendall']:.3f}" for r in rows))
    print("\nsplit-half of the local ratio on the first quarter, half and all of the rounds: " + "; ".join(
        f"{r['program']} " + ", ".join(f"{k} rounds {v:.3f}" for k, v in split_half_by_rounds(r["paired"]))
        for r in rows))
    print("\nby origin of the configurations: the reference's split-half and each predictor's Kendall against it, "
          "on the default and random configurations, and on the searched ones only\n")
    print("| program | subset | configurations | ratio spread | reference, even vs odd | " + " | ".join(plabels)
          + " |\n|---|---|---:|---:|---:|" + "---:|" * len(plabels))
    for subset in ORIGIN_SUBSETS:
        for r in rows:
            b = r["by_origin"][subset]
            print(f"| {r['program']} | {subset} | {b['configurations']} | x{b['spread']:.2f} | {b['split_half']:.3f} | "
                  + " | ".join(f"{b['kendall'][k]:.3f}" for k in plabels) + " |")
        print(f"| **mean** | {subset} | | | **{np.nanmean([r['by_origin'][subset]['split_half'] for r in rows]):.3f}** | "
              + " | ".join(f"**{np.nanmean([r['by_origin'][subset]['kendall'][k] for r in rows]):.3f}**"
                           for k in plabels) + " |")
    print("\npaired reference per program: " + ", ".join(
        f"{r['program']} {r['paired']['rounds']} rounds in {r['paired']['seconds']:.0f} s" for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="in-program fusion dataset (dataset build --evaluator xla-inprogram)")
    ap.add_argument("--programs", nargs="*", default=None)
    ap.add_argument("--models", nargs="*", default=["xgboost", "gnn"])
    ap.add_argument("--random", type=int, default=25)
    ap.add_argument("--searched", type=int, default=25)
    ap.add_argument("--search-seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-repeat-ms", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paired-rounds", type=int, default=12,
                    help="at least this many rounds of the drift-cancelling reference (ratio to the default "
                         "timed beside it); 0 with --paired-seconds 0: off")
    ap.add_argument("--paired-seconds", type=float, default=0.0,
                    help="and more paired rounds while the paired rounds of a program took less than this")
    ap.add_argument("--pairs", type=int, default=4, help="reference/candidate block pairs per paired round")
    ap.add_argument("--block-ms", type=float, default=1.0, help="length of one timed block of the paired reference")
    ap.add_argument("--skip-kernels", action="store_true", help="only (b)")
    ap.add_argument("--labels-only", action="store_true",
                    help="only what the dataset's labels support (label_consistency), then stop")
    ap.add_argument("--retest", default=None, metavar="DS2",
                    help="with --labels-only: a second build of the same programs and seed; the labels' "
                         "test-retest MAPE (label_retest). --data and --retest may each be several builds, "
                         "comma-separated: their times are averaged (geometric mean), and the cross-program floor "
                         "and the shipped models' MAPE are also computed on --data's averaged labels")
    ap.add_argument("--json", default=None, help="the record, rewritten after each program")
    ap.add_argument("--resume", action="store_true",
                    help="with --json: keep the programs an interrupted run of the same arguments measured there")
    ap.add_argument("--from-json", default=None,
                    help="print the paired tables of (b) again from a --json file (or its .gz) of an earlier run, "
                         "measuring nothing")
    ap.add_argument("--also-price", nargs="*", default=[], metavar="LABEL=MODEL",
                    help="more cost models (gnn, xgboost, analytical or a file) that price the configurations "
                         "without searching; with --from-json, re-prices a saved run's configurations")
    args = ap.parse_args()
    from autotune import api
    also = {}
    for item in args.also_price:
        label, _, spec = item.partition("=")
        if not spec:
            label, spec = item, item
        also[label] = api.make_cost_model(spec, "fusion", "cpu")
    if args.from_json:
        import gzip
        with (gzip.open if args.from_json.endswith(".gz") else open)(args.from_json, "rt") as f:
            rows = [r for r in json.load(f)["programs"] if "paired" in r]
        if not rows:
            sys.exit(f"error: {args.from_json} has no paired measurements")
        rows = [paired_summary(r) for r in (reprice(rows, also) if also else rows)]
        print_paired(rows, args)
        return

    from hardware.xla import jaxlib_version

    t0 = time.time()
    loads = [_load_avg()]
    out: dict = {"args": vars(args), "jaxlib": jaxlib_version(), "cores": os.cpu_count()}
    if args.labels_only:
        rows = label_consistency(_builds(args.data)[0])
        keys = ["deviation_charged", "deviation_thunks", "kendall_charged", "kendall_thunks", "kendall_charged_min",
                "kendall_thunks_min", "end_to_end_over_sum"]
        print("| program | split | " + " | ".join(keys) + " |\n|---|---|" + "---:|" * len(keys))
        for name, r in rows.items():
            print(f"| {name} | {r['split']} | " + " | ".join(f"{r[k]:.3f}" for k in keys) + " |")
        print("| **mean** | | " + " | ".join(f"**{np.nanmean([r[k] for r in rows.values()]):.3f}**" for k in keys)
              + " |")
        print(f"\nmedian end_to_end_over_sum {np.nanmedian([r['end_to_end_over_sum'] for r in rows.values()]):.2f}; "
              f"load average {_load_avg()}")
        fl = cross_program_floor(args.data)
        nb = len(_builds(args.data))
        print(f"\nthe same kernel in different programs{f' (labels averaged over {nb} builds)' if nb > 1 else ''}: "
              f"{fl['kernels']} kernels measured in >= 2 programs "
              f"({fl['labels']} labels); the best single value per kernel has MAPE {fl['floor_mape_mean']:.1%} mean, "
              f"{fl['floor_mape_median']:.1%} median (a floor for any kernel-level model on them); max/min label "
              f"ratio median {fl['ratio_median']:.2f}, > 1.5x for {fl['ratio_over_1_5']:.0%}")
        print("| programs | shared kernels | label ratio, median (second / first) |\n|---|---:|---:|")
        for p in fl["pairs"]:
            print(f"| {p['programs'][0]} / {p['programs'][1]} | {p['kernels']} | {p['ratio_median']:.2f} |")
        if nb > 1:
            shipped = {m: api.make_cost_model(m, "fusion", "cpu") for m in args.models}
            print(f"\nthe shipped models' kernel MAPE (>= 5 us, per-program mean) against one build's labels and "
                  f"against the labels averaged over the {nb} builds of --data\n")
            for split in ("validation", "test"):
                for m, r in model_mape_by_builds(args.data, shipped, split).items():
                    print(f"- {split}, shipped {m}: " + ", ".join(f"{k} {v:.1%}" for k, v in r.items()))
        if args.retest:
            rt = label_retest(args.data, args.retest)
            print(f"\nthe labels measured twice ({args.data} and {args.retest}, the sampled configurations both hold; "
                  "kernels >= 5 us): test-retest MAPE per program, and Kendall of the two builds' end-to-end times\n")
            print("| program | configurations | kernel times | test-retest MAPE | after a per-program scale | kernels | "
                  "of their medians | end-to-end Kendall |\n|---|---:|---:|---:|---:|---:|---:|---:|")
            for name, r in rt["programs"].items():
                print(f"| {name} | {r['configurations']} | {r['kernel_times']} | {r['mape']:.1%} | "
                      f"{r['mape_program_scaled']:.1%} | {r['kernels']} | {r['median_mape']:.1%} | "
                      f"{r['end_to_end_kendall']:.3f} |")
            print(f"| **mean** (median {rt['mape_median']:.1%}, pooled {rt['mape_pooled']:.1%}) | | | "
                  f"**{rt['mape_mean']:.1%}** | **{rt['mape_program_scaled_mean']:.1%}** | | "
                  f"**{rt['median_mape_mean']:.1%}** | **{rt['end_to_end_kendall_mean']:.3f}** |")
        return
    if not args.skip_kernels:
        res = kernel_accuracy(args.data, args.models)
        out["kernels"] = {"summary": res["summary"], "median": res["median"], "pooled": res.get("pooled")}
        print("# (a) kernels >= 5 us, test split of", args.data)
        print("| model | MAPE mean | MAPE median | MAPE pooled | Kendall mean | Kendall pooled |")
        print("|---|---:|---:|---:|---:|---:|")
        for m, s in res["summary"].items():
            pooled = (res.get("pooled") or {}).get(m, {})
            print(f"| {m} | {s.get('mape', float('nan')):.1f}% | {res['median'][m].get('mape', float('nan')):.1f}% | "
                  f"{pooled.get('mape', float('nan')):.1f}% | {s.get('kendall', float('nan')):.3f} | "
                  f"{pooled.get('kendall', float('nan')):.3f} |")
        sys.stdout.flush()
    models = {m: api.make_cost_model(m, "fusion", "cpu") for m in args.models}
    models["analytical"] = api.make_cost_model("analytical", "fusion", "cpu")
    paths = [p if p.endswith(".hlo") else os.path.join(ROOT, "examples", "hlo", p + ".hlo")
             for p in (args.programs or DEFAULT_PROGRAMS)]
    rows = resumed_rows(args, paths) if args.resume else []
    if rows:
        print(f"resuming {args.json}: {len(rows)} of {len(paths)} programs measured", file=sys.stderr)
    for path in paths[len(rows):]:
        try:
            row = program_ranking(path, models, args.random, args.searched, args.rounds, args.min_repeat_ms,
                                  args.search_seconds, args.seed, args.paired_rounds, args.pairs, args.block_ms,
                                  args.paired_seconds, also)
        except MappingLimitError as exc:
            sys.exit(f"error: {exc}" + (f"; the {len(rows)} programs before it are in {args.json} (--resume)"
                                        if args.json and rows else ""))
        loads.append(_load_avg())
        rows.append(row)
        print(f"{row['program']}: {row['configurations']} configurations ({row['origins']}), runtime spread "
              f"x{row['spread']:.2f}, Kendall " + ", ".join(f"{k} {v:.3f}" for k, v in row["kendall"].items()),
              file=sys.stderr)
        if args.json:  # after every program: a crash or a kill loses only the program being measured
            write_json(args.json, {**out, "programs": rows, "load_average": loads})
    out["programs"] = rows
    out["load_average"] = loads
    labels = list(rows[0]["kendall"]) if rows else []
    print(f"\n# (b) whole programs: Kendall tau of predicted program cost against the end-to-end runtime "
          f"(median of {args.rounds} interleaved rounds); jaxlib {out['jaxlib']}, {os.cpu_count()} cores, "
          f"load average {loads[0]} -> {loads[-1]}; {time.time() - t0:.0f} s\n")
    print("| program | configurations | runtime spread | " + " | ".join(labels) + " |")
    print("|---|---:|---:|" + "---:|" * len(labels))
    for r in rows:
        print(f"| {r['program']} | {r['configurations']} | x{r['spread']:.2f} | "
              + " | ".join(f"{r['kendall'][k]:.3f}" for k in labels) + " |")
    if rows:
        print("| **mean** | | | " + " | ".join(f"**{np.nanmean([r['kendall'][k] for r in rows]):.3f}**"
                                             for k in labels) + " |")
        print(f"\nthe same against the fastest of the {args.rounds} rounds (interference only slows a run down):\n")
        print("| program | " + " | ".join(labels) + " |")
        print("|---|" + "---:|" * len(labels))
        for r in rows:
            print(f"| {r['program']} | " + " | ".join(f"{r['kendall_vs_min'][k]:.3f}" for k in labels) + " |")
        print("| **mean** | " + " | ".join(f"**{np.nanmean([r['kendall_vs_min'][k] for r in rows]):.3f}**"
                                         for k in labels) + " |")
        print("\nend to end against itself (Kendall, median of the even rounds vs of the odd rounds): "
              + ", ".join(f"{r['program']} {r['end_to_end_split_half_kendall']:.3f}" for r in rows)
              + f"; mean {np.nanmean([r['end_to_end_split_half_kendall'] for r in rows]):.3f}")
        print("\nend to end / charged kernel sum (median over configurations): "
              + ", ".join(f"{r['program']} x{r['end_to_end_over_charged_sum']:.2f}" for r in rows))
    if rows and "paired" in rows[0]:
        print_paired(rows, args)
    if args.json:
        write_json(args.json, out)


def write_json(path: str, out: dict) -> None:
    """The run's record, written whole or not at all (a temporary file renamed over the old one)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(compact(out), f, default=str)
    os.replace(tmp, path)


RESUME_IGNORED = ("json", "resume")  # the arguments a resumed run may change


def resumed_rows(args: argparse.Namespace, paths: list) -> list:
    """The programs an interrupted run of the same command already measured into ``--json`` (each written as it
    finished), which a ``--resume`` keeps; the rest are measured. Refuses a record of other arguments."""
    if not args.json or not os.path.exists(args.json):
        return []
    with open(args.json) as f:
        old = json.load(f)
    mine = {k: v for k, v in vars(args).items() if k not in RESUME_IGNORED}
    theirs = {k: v for k, v in old.get("args", {}).items() if k not in RESUME_IGNORED}
    if mine != theirs:
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        sys.exit(f"error: --resume: {args.json} was measured with other arguments ({', '.join(differ)})")
    rows = old.get("programs", [])
    done = [r["path"] for r in rows]
    if done != [os.path.relpath(p, ROOT) for p in paths[:len(done)]]:
        sys.exit(f"error: --resume: {args.json} holds programs {done}, not the first of --programs")
    return rows


def compact(obj, digits: int = 6):
    """The record with every float to `digits` significant digits (timer resolution is far coarser), so that
    a run's per-block data stay a few MB."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: compact(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [compact(v, digits) for v in obj]
    return obj


if __name__ == "__main__":
    main()
