"""Training data for learned cost models: generation, on-disk format, program-level splits, and
TpuGraphs npz import/export: tile files (`write_tpugraphs_tile`) and layout files
(`write_tpugraphs_layout`, `read_tpugraphs_layout`, `tpugraphs_layout_sample`), read by
`read_tpugraphs_npz`.

Generation (`build_dataset`), as Kaufman et al. (MLSys 2021, section 4):
* fusion task: per program, the default fusion configuration, random configurations and a short
  annealing-like walk of neighbors from the default; every configuration is decomposed into
  kernels and every *unique* (non-trivial) kernel is measured once through the evaluator (whose
  store memoizes measurements), at its default tile. An in-program evaluator (`xla-inprogram`, XLA:CPU)
  measures every configuration as a whole program instead: a kernel's runtime is the median of its
  in-program times over the configurations holding it (a kernel XLA runs no thunk for is stored as
  `NO_THUNK_SECONDS`), and each configuration's end-to-end time is kept (`Samples.config["end_to_end"]`,
  with `"runtime"`: each member kernel's in-program time there), so whole-program ranking can be evaluated.
* tile task: the unique kernels of the default and some random configurations; every valid tile of
  each kernel (a random subset with the default tile included when there are more than
  `max_tiles_per_kernel`) is measured.
* layout task: per program, the default layout configuration, a neighbour walk and random ones, each
  priced as the whole rewritten program (`LayoutCost`); the shard is a TpuGraphs layout npz file
  (`tpugraphs_layout_arrays`) plus `config_analytical`, `config_analytical_terms` (by kernel class) and
  `config_is_default` (`Dataset.load_layout`).
* split by *program*, with model families kept apart (a family lies wholly in one split). The family
  comes from examples/hlo/manifest.json-style manifests next to the programs, else it is the file
  name before the first '_'. A JSON split file {"train": [...], "validation": [...], "test": [...]}
  (program names) overrides the automatic split.

Storage: `out_dir/manifest.json` plus one `shards/<program>.npz` per program (raw features, so the
scaler can be fitted on the training split later). A build is resumable: programs already recorded
in the manifest with their shard on disk are skipped. `Dataset.open(dir)` reads the manifest and loads
shards lazily (`load(split)`, `iter_programs(split)`).

Every sample also stores the analytical model's prediction, so the analytical baseline can be
evaluated on a dataset without the programs.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

import numpy as np

from costmodels.base import CostModel
from costmodels.features import (FEATURE_VERSION, feature_version, GEOMETRY_DIM, KERNEL_FEATURE_NAMES, NODE_DIM, TILE_DIM,
                       TPUGRAPHS_NODE_DIM, KernelGraph, kernel_graphs, prune_layout_graph, tile_features,
                       tpugraphs_node_features)

from hardware.base import Evaluator
from autotune.tuning.tpugraphs import (LAYOUT_DIMS, LAYOUT_TENSORS,  # re-exported: the dataset API of before
                                      TpuGraphsRecord, layout_config_features, layout_configs, read_tpugraphs_layout,
                                      read_tpugraphs_npz, tpugraphs_layout_arrays, tpugraphs_layout_sample,
                                      write_tpugraphs_layout, write_tpugraphs_tile)

__all__ = ["Samples", "Dataset", "DatasetOptions", "build_dataset", "make_split", "program_family", "read_split_file",
           "FEATURE_VERSION", "DATASET_VERSION", "read_tpugraphs_npz", "TpuGraphsRecord", "write_tpugraphs_tile",
           "write_tpugraphs_layout", "read_tpugraphs_layout", "layout_config_features", "layout_configs",
           "tpugraphs_layout_sample", "prune_layout_graph", "tpugraphs_layout_arrays", "LAYOUT_TENSORS", "LAYOUT_DIMS",
           "SPLITS", "resolve_evaluator", "split_name", "NO_THUNK_SECONDS", "add_layout_analytical_terms"]

DATASET_VERSION = 1
SPLITS = ("train", "validation", "test")
_SPLIT_ALIASES = {"train": "train", "training": "train", "validation": "validation", "valid": "validation",
                  "val": "validation", "test": "test"}
RD = 8  # stored padded rank of tiled shapes


def split_name(split: str) -> str:
    """The canonical name of a split (train, validation, test) for it or an alias (valid, val, training)."""
    s = _SPLIT_ALIASES.get(str(split).strip().lower())
    if s is None:
        raise ValueError(f"unknown split {split!r} (use train, validation, test or all)")
    return s


# --------------------------------------------------------------------------------------------------
@dataclass
class Samples:
    """Samples of one or more programs: unique kernel graphs and (graph, tile, runtime) rows."""

    graphs: list                    # KernelGraph per unique kernel (per program)
    graph: np.ndarray               # [S] graph index of each sample
    tile_keys: list                 # [S] TileConfig.key() or "" (default tile)
    runtime: np.ndarray             # [S] seconds (nan: failed measurement)
    program: np.ndarray             # [S] index into `programs`
    programs: list                  # program names
    families: list                  # family per program
    analytical: Optional[np.ndarray] = None   # [S] the analytical model's prediction (seconds)
    multiplicity: Optional[np.ndarray] = None  # [G] runs per program execution of each graph
    config: dict = field(default_factory=dict)  # fusion: {"cfg": [M], "graph": [M]} kernel membership
    tg_feat: Optional[list] = None  # tile task: TpuGraphs 140-dim node features per graph
    _tile_feat: Optional[np.ndarray] = None
    is_default: Optional[np.ndarray] = None     # [S] tile task: the sample is the kernel's default tile

    def __len__(self) -> int:
        return int(len(self.graph))

    @property
    def tile_feat(self) -> np.ndarray:
        """[S, TILE_DIM] raw tile features (zero rows for samples without an explicit tile)."""
        if self._tile_feat is None:
            out = np.zeros((len(self.graph), TILE_DIM), np.float32)
            cache: dict = {}
            from autotune.compiler.tiles import TileConfig
            for i, (g, k) in enumerate(zip(self.graph, self.tile_keys)):
                if not k:
                    continue
                key = (int(g), k)
                r = cache.get(key)
                if r is None:
                    r = cache[key] = tile_features(self.graphs[g].tiled_dims, TileConfig.from_key(k))
                out[i] = r
            self._tile_feat = out
        return self._tile_feat

    def family_of_sample(self) -> np.ndarray:
        fam = np.array(self.families, dtype=object)
        return fam[self.program] if len(self.program) else np.zeros(0, dtype=object)

    def sample_graphs(self) -> list:
        return [self.graphs[g] for g in self.graph]

    def select(self, idx: np.ndarray) -> "Samples":
        idx = np.asarray(idx, np.int64)
        return Samples(self.graphs, self.graph[idx], [self.tile_keys[i] for i in idx], self.runtime[idx],
                       self.program[idx], self.programs, self.families,
                       None if self.analytical is None else self.analytical[idx], self.multiplicity, {},
                       self.tg_feat, None if self._tile_feat is None else self._tile_feat[idx],
                       None if self.is_default is None else self.is_default[idx])

    def compact(self) -> "Samples":
        """The same samples holding only the kernel graphs they use (fewer graphs to prepare or scale)."""
        u, inv = np.unique(self.graph, return_inverse=True)
        return Samples([self.graphs[i] for i in u], inv.astype(np.int64), list(self.tile_keys), self.runtime,
                       self.program, self.programs, self.families, self.analytical,
                       None if self.multiplicity is None else self.multiplicity[u], {},
                       None if self.tg_feat is None else [self.tg_feat[i] for i in u], self._tile_feat,
                       self.is_default)

    def by_program(self) -> Iterator[tuple]:
        for p, name in enumerate(self.programs):
            idx = np.nonzero(self.program == p)[0]
            if len(idx):
                yield name, self.select(idx)

    @staticmethod
    def concat(parts: Sequence["Samples"]) -> "Samples":
        graphs: list = []
        g_all, keys, rt, prog, ana, mult, tg, dflt = [], [], [], [], [], [], [], []
        programs: list = []
        families: list = []
        for s in parts:
            off, poff = len(graphs), len(programs)
            graphs.extend(s.graphs)
            g_all.append(s.graph + off)
            keys.extend(s.tile_keys)
            rt.append(s.runtime)
            prog.append(s.program + poff)
            programs.extend(s.programs)
            families.extend(s.families)
            ana.append(s.analytical if s.analytical is not None else np.full(len(s), np.nan))
            mult.append(s.multiplicity if s.multiplicity is not None else np.ones(len(s.graphs)))
            tg.extend(s.tg_feat if s.tg_feat is not None else [None] * len(s.graphs))
            dflt.append(s.is_default if s.is_default is not None else np.zeros(len(s), bool))
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
        return Samples(graphs, cat(g_all, np.int64), keys, cat(rt, np.float64), cat(prog, np.int64), programs,
                       families, cat(ana, np.float64), cat(mult, np.float64), {},
                       tg if any(t is not None for t in tg) else None, None, cat(dflt, bool))


# --------------------------------------------------------------------------------------------------
# Families and splits
def _manifest_families(programs_dir: Path) -> dict:
    out: dict = {}
    m = programs_dir / "manifest.json"
    if m.is_file():
        try:
            data = json.loads(m.read_text())
            for e in data if isinstance(data, list) else data.get("programs", []):
                if isinstance(e, dict) and "family" in e:
                    name = e.get("name") or Path(e.get("file", "")).stem
                    out[name] = e["family"]
        except (OSError, ValueError):
            pass
    return out


def program_family(name: str, families: Optional[dict] = None) -> str:
    """A program's model family: from a manifest when known, else its name before the first '_'."""
    if families and name in families:
        return str(families[name])
    return name.split("_", 1)[0]


def make_split(families: dict, seed: int = 0, fractions: tuple = (0.7, 0.15, 0.15)) -> dict:
    """program -> split, whole families per split (seeded). With fewer than three families the
    validation split stays empty; with one family, programs are split instead (and families mix)."""
    fams = sorted(set(families.values()))
    rng = np.random.default_rng(seed)
    order = [fams[i] for i in rng.permutation(len(fams))]
    n = len(order)
    out: dict = {}
    if n >= 3:
        n_val = max(1, int(round(fractions[1] * n)))
        n_test = max(1, int(round(fractions[2] * n)))
        n_train = max(1, n - n_val - n_test)
        fam_split = {}
        for i, f in enumerate(order):
            fam_split[f] = "train" if i < n_train else ("validation" if i < n_train + n_val else "test")
        return {p: fam_split[f] for p, f in families.items()}
    if n == 2:
        return {p: ("train" if f == order[0] else "test") for p, f in families.items()}
    progs = sorted(families)
    perm = [progs[i] for i in rng.permutation(len(progs))]
    for i, p in enumerate(perm):
        out[p] = "train" if i < max(1, int(0.7 * len(perm))) else ("validation" if i % 2 else "test")
    return out


def read_split_file(path: str) -> dict:
    """program -> split from a JSON file {"train": [...], "validation": [...], "test": [...]}."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"cannot read split file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ValueError(f"split file {path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"split file {path}: expected an object with train/validation/test lists")
    out: dict = {}
    for k, names in data.items():
        split = _SPLIT_ALIASES.get(str(k).lower())
        if split is None:
            raise ValueError(f"split file {path}: unknown split {k!r} (use train, validation, test)")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"split file {path}: {k!r} must be a list of program names")
        for n in names:
            n = Path(n).stem if n.endswith(".hlo") else n
            if n in out and out[n] != split:
                raise ValueError(f"split file {path}: program {n!r} is in both {out[n]} and {split}")
            out[n] = split
    return out


# --------------------------------------------------------------------------------------------------
def resolve_evaluator(evaluator: Any, target: str = "tpu", store: Any = None) -> Any:
    """An Evaluator from a name (sim, xla, a plug-in: hardware.base.create_evaluator), or an instance as is."""
    if not isinstance(evaluator, str):
        return evaluator
    from hardware.base import create_evaluator
    return create_evaluator(evaluator, target, store=store)


def _seconds(ms: Sequence[Any]) -> np.ndarray:
    return np.array([float(m.seconds) if m is not None and getattr(m, "ok", False) else np.nan for m in ms])


def _sampled_configs(space: Any, n: int, rng: np.random.Generator) -> list:
    """The default, a walk of neighbours from it (a quarter of n) and random configurations, deduplicated."""
    cfgs = [space.default()]
    n_walk = max(0, min(n - 1, n // 4))
    cur = cfgs[0]
    for _ in range(n_walk):
        cur = space.neighbor(cur, rng)
        cfgs.append(cur)
    while len(cfgs) < n:
        cfgs.append(space.random(rng))
    seen: set = set()
    out = []
    for c in cfgs:
        k = space.encode(c)
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out


def searched_configurations(space: Any, cost_model: Any, n: int, max_evaluations: Optional[int] = 2000,
                            seconds: Optional[float] = None, seed: int = 0) -> list:
    """The n best distinct predictions of a simulated-annealing search priced by `cost_model`, the default
    configuration excluded: what a search with that model would pick (AutoTVM trains on such picks). Bounded
    by `max_evaluations` (reproducible for a seed) and/or `seconds`."""
    from autotune.tuning.options import TunerOptions, VerifyOptions
    from autotune.tuning.tuner import Tuner
    from search.annealing import SimulatedAnnealing
    if n <= 0:
        return []
    budget = float(seconds) if seconds else "1h"
    tuner = Tuner(space, cost_model, SimulatedAnnealing(space, seed=seed), budget=budget,
                  options=TunerOptions(progress=False, max_evaluations=max_evaluations),
                  verify=VerifyOptions(top_k=n + 1))
    tuner.run()
    default = space.encode(space.default())
    return [c for _, c in tuner.top_predicted() if space.encode(c) != default][:n]


def _unique_kernels(space: Any, cfgs: Sequence[Any]) -> tuple:
    kernels: dict = {}
    membership: list = []
    for ci, cfg in enumerate(cfgs):
        for k in space.kernels(cfg):
            if getattr(k, "is_trivial", False):
                continue
            if k.hash not in kernels:
                kernels[k.hash] = k
            membership.append((ci, k.hash))
    return list(kernels.values()), membership


# In-program kernel times (XLA:CPU): a kernel no thunk ran for (a reshape XLA made a bitcast) costs
# nothing; it is stored as this floor, below any measured thunk (~0.2 us at least), so that models
# fitted on log runtime learn it as free instead of dropping it.
NO_THUNK_SECONDS = 1e-9


def _measure_in_program(evaluator: Any, space: Any, cfgs: Sequence[Any], kernels: Sequence[Any]) -> tuple:
    """Every configuration measured as a whole program by an in-program evaluator
    (`XlaEvaluator.measure_in_program`): each unique kernel's runtime is the median of its in-program
    times over the configurations that hold it, and per configuration the end-to-end time, the
    unattributed thunk time and each member kernel's in-program time are kept (arrays `cfg_end_to_end`:
    median of the end-to-end repeats, `cfg_end_to_end_min`: their minimum, `cfg_unattributed`,
    `cfg_runtime`, and `cfg_thunk_runtime`: the same without the idle time before its thunks that
    `cfg_runtime` charges to it (`attribute_thunks`); the last two aligned with `cfg_id`/`cfg_graph`)."""
    times: dict = {k.hash: [] for k in kernels}
    end_to_end = np.full(len(cfgs), np.nan)
    end_to_end_min = np.full(len(cfgs), np.nan)
    unattributed = np.full(len(cfgs), np.nan)
    cfg_runtime: list = []
    cfg_thunk_runtime: list = []
    for ci, cfg in enumerate(cfgs):
        members = [k for k in space.kernels(cfg) if not getattr(k, "is_trivial", False)]
        timing = evaluator.measure_in_program(space, cfg, members)
        if timing.end_to_end.ok:
            end_to_end[ci] = timing.end_to_end.seconds
            end_to_end_min[ci] = min(timing.end_to_end.extra.get("repeats") or [timing.end_to_end.seconds])
            unattributed[ci] = sum(timing.unattributed.values())
        for k, m in zip(members, timing.kernels):
            v = (m.seconds if m.seconds > 0 else NO_THUNK_SECONDS) if m.ok else np.nan
            times[k.hash].append(v)
            cfg_runtime.append(v)
            cfg_thunk_runtime.append(m.extra.get("thunk_seconds", m.seconds) if m.ok else np.nan)
    rt = np.array([np.nanmedian(times[k.hash]) if np.isfinite(times[k.hash]).any() else np.nan for k in kernels])
    return rt, {"cfg_end_to_end": end_to_end, "cfg_end_to_end_min": end_to_end_min, "cfg_unattributed": unattributed,
                "cfg_runtime": np.asarray(cfg_runtime, np.float64),
                "cfg_thunk_runtime": np.asarray(cfg_thunk_runtime, np.float64)}


def _build_program(path: Path, task: str, evaluator: Any, target: str, n_cfgs: int, rng: np.random.Generator,
                   max_tiles: int, searched: Optional["_Search"] = None) -> dict:
    from costmodels.analytical import AnalyticalCostModel
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from autotune.compiler.tiles import TileSpace

    program = Program.from_file(str(path))
    space = FusionSpace(program, target)
    analytical = AnalyticalCostModel(target)
    if task == "fusion":
        cfgs = _sampled_configs(space, max(1, n_cfgs), rng)
        n_sampled = len(cfgs)
        if searched is not None:  # each search model's picks beside the samples (a pick made twice is kept once)
            seen = {space.encode(c) for c in cfgs}
            for model in searched.models:
                for c in searched_configurations(space, model, searched.n, searched.evaluations,
                                                 seed=int(rng.integers(2 ** 31))):
                    key = space.encode(c)
                    if key not in seen:
                        seen.add(key)
                        cfgs.append(c)
    else:
        cfgs = [space.default()] + [space.random(rng) for _ in range(max(0, min(n_cfgs, 4) - 1))]
    kernels, membership = _unique_kernels(space, cfgs)
    index = {k.hash: i for i, k in enumerate(kernels)}
    graphs = kernel_graphs(kernels, target)
    arrays: dict = {}
    if task == "fusion":
        s_graph = np.arange(len(kernels))
        s_tiles: list = [""] * len(kernels)
        if evaluator.in_program:
            rt, in_program = _measure_in_program(evaluator, space, cfgs, kernels)
            arrays.update(in_program)
        else:
            rt = _seconds(evaluator.measure(kernels)) if kernels else np.zeros(0)
        ana = analytical.predict(kernels) if kernels else np.zeros(0)
        arrays["cfg_searched"] = np.arange(len(cfgs)) >= n_sampled  # per configuration: a search's pick
        arrays["cfg_id"] = np.array([c for c, _ in membership], np.int64)
        arrays["cfg_graph"] = np.array([index[h] for _, h in membership], np.int64)
    else:
        items_k, items_t, s_graph_l, s_tiles, s_default = [], [], [], [], []
        for gi, k in enumerate(kernels):
            ts = TileSpace(k, target)
            tiles = ts.tiles()
            d = ts.default()
            if len(tiles) > max_tiles:
                rest = [t for t in tiles if t != d]
                pick = rng.choice(len(rest), max_tiles - 1, replace=False)
                tiles = [d] + [rest[i] for i in sorted(pick)]
            for t in tiles:
                items_k.append(k)
                items_t.append(t)
                s_graph_l.append(gi)
                s_tiles.append(t.key())
                s_default.append(t == d)
        arrays["s_default"] = np.array(s_default, bool)
        s_graph = np.array(s_graph_l, np.int64)
        rt = _seconds(evaluator.measure(items_k, items_t)) if items_k else np.zeros(0)
        ana = analytical.predict(items_k, items_t) if items_k else np.zeros(0)
        tg = [tpugraphs_node_features(k)[0] for k in kernels]
        arrays["tg_feat"] = np.concatenate(tg) if tg else np.zeros((0, TPUGRAPHS_NODE_DIM), np.float32)
        arrays["tg_ptr"] = np.concatenate([[0], np.cumsum([len(t) for t in tg])]).astype(np.int64)
    n_nodes = [g.num_nodes for g in graphs]
    n_edges = [g.num_edges for g in graphs]
    tdims = np.zeros((len(graphs), RD), np.int64)
    trank = np.zeros(len(graphs), np.int64)
    for i, g in enumerate(graphs):
        d = list(g.tiled_dims)
        if len(d) > RD:
            d = [math.prod(d[:len(d) - RD + 1])] + d[len(d) - RD + 1:]
        trank[i] = len(d)
        tdims[i, :len(d)] = d
    arrays.update(
        node_feat=np.concatenate([g.node_feat for g in graphs]) if graphs else np.zeros((0, NODE_DIM), np.float32),
        opcode=np.concatenate([g.opcode for g in graphs]).astype(np.int16) if graphs else np.zeros(0, np.int16),
        node_ptr=np.concatenate([[0], np.cumsum(n_nodes)]).astype(np.int64),
        edge_index=(np.concatenate([g.edge_index for g in graphs], axis=1) if graphs else np.zeros((2, 0))).astype(np.int32),
        edge_ptr=np.concatenate([[0], np.cumsum(n_edges)]).astype(np.int64),
        tiled_dims=tdims, tiled_rank=trank,
        kernel_feat=np.stack([g.kernel_feat for g in graphs]) if graphs else np.zeros((0, len(KERNEL_FEATURE_NAMES)), np.float32),
        geom_feat=np.stack([g.geom_feat for g in graphs]) if graphs else np.zeros((0, GEOMETRY_DIM), np.float32),
        hashes=np.array([k.hash for k in kernels], dtype="U32"),
        multiplicity=np.array([float(k.multiplicity) for k in kernels], np.float64),
        s_graph=np.asarray(s_graph, np.int64), s_tile=np.array(s_tiles, dtype="U64"),
        s_runtime=np.asarray(rt, np.float64), s_analytical=np.asarray(ana, np.float64),
        n_configs=np.array(len(cfgs)))
    return arrays


def _build_layout_program(path: Path, evaluator: Any, target: str, n_cfgs: int,
                          rng: np.random.Generator) -> Optional[dict]:
    """Layout task: the default layout configuration, a neighbour walk from it and random ones
    (`_sampled_configs`), each priced as its whole rewritten program (`LayoutCost`: the sum of the
    kernels' measured runtimes, copies included) and by the analytical model; the arrays of a TpuGraphs
    layout npz file plus `config_analytical` (seconds), `config_analytical_terms` (its split by kernel class,
    autotune.compiler.layouts.KERNEL_CLASSES) and `config_is_default`. None when the program has
    no configurable node with a choice of layout on the target (nothing to rank)."""
    from costmodels.analytical import AnalyticalCostModel
    from autotune.compiler.layouts import LayoutSpace
    from autotune.compiler.program import Program
    from autotune.tuning.pricing import LayoutCost

    program = Program.from_file(str(path))
    space = LayoutSpace(program, target)
    if not space.free_slots:
        return None
    cfgs = _sampled_configs(space, max(2, n_cfgs), rng)
    runtime = LayoutCost(space, lambda ks: _seconds(evaluator.measure(ks)))(cfgs)
    analytical_cost = LayoutCost(space, AnalyticalCostModel(target).predict)
    analytical, terms = analytical_cost(cfgs), analytical_cost.terms(cfgs)
    ok = np.isfinite(runtime) & (runtime > 0)
    cfeat = np.stack([layout_config_features(space, c) for c in cfgs])
    arrays = tpugraphs_layout_arrays(program.module, [(nd.computation, nd.instruction) for nd in space.nodes],
                                     cfeat[ok], runtime[ok])
    arrays.update(config_analytical=analytical[ok], config_analytical_terms=terms[ok],
                  config_is_default=(np.arange(len(cfgs)) == 0)[ok],
                  n_failed=np.array(int((~ok).sum())))
    return arrays


def add_layout_analytical_terms(ds: "Dataset", log=None) -> int:
    """Give every program of a layout dataset built before `config_analytical_terms` existed its terms:
    the stored configurations decoded on the program's `source` file and priced by the analytical
    model split by kernel class (their sum must equal the stored `config_analytical`); shards rewritten
    in place. Returns the number of programs updated."""
    from costmodels.analytical import AnalyticalCostModel
    from autotune.compiler.layouts import LayoutSpace
    from autotune.compiler.program import Program
    from autotune.tuning.pricing import LayoutCost
    done = 0
    for name, rec in ds.programs.items():
        shard = ds.root / rec["file"]
        r = ds.load_layout(name)
        if "config_analytical_terms" in r.arrays:
            continue
        space = LayoutSpace(Program.from_file(rec["source"]), ds.target)
        cost = LayoutCost(space, AnalyticalCostModel(ds.target).predict)
        terms = cost.terms(layout_configs(space, r.arrays["node_config_feat"]))
        if not np.allclose(terms.sum(axis=1), r.arrays["config_analytical"], rtol=1e-6):
            raise ValueError(f"{shard}: the analytical prices of {name} changed since the dataset was built; rebuild it")
        arrays = dict(r.arrays, config_analytical_terms=terms)
        tmp = shard.with_name(shard.stem + f".tmp{os.getpid()}.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, shard)
        ds._cache.pop(name, None)
        done += 1
        if log is not None:
            log(f"{name}: analytical terms added")
    return done


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


@dataclass(frozen=True)
class DatasetOptions:
    """What `build_dataset` measures beyond the task, evaluator, target and configurations per program."""

    split_file: Optional[str] = None            # JSON {"train": [...], ...} of program names (None: split by family)
    seed: int = 0
    max_tiles_per_kernel: int = 64              # tile task: at most this many tiles per kernel
    programs: Optional[Sequence[str]] = None    # only these program names (None: every .hlo file)
    store: Any = None                           # measurement store (None: the evaluator's own)
    searched: int = 0                           # fusion: each program's N best predictions of a search, measured too
    search_model: Any = None                    # the cost model of those searches, or a sequence of them
    search_evaluations: int = 2000              # configurations each search prices
    search_model_name: "Optional[str | Sequence[str]]" = None  # the models' names in the manifest


def build_dataset(programs_dir: "str | os.PathLike", task: str, evaluator: Any, target: str = "tpu",
                  configs_per_program: int = 8, out_dir: "str | os.PathLike" = "dataset",
                  options: Optional[DatasetOptions] = None, *, progress: bool = False,
                  log: Optional[Callable[[str, dict], None]] = None,
                  warn: Optional[Callable[[str], None]] = None) -> "Dataset":
    """Generate (or resume) a dataset; returns it opened. `options.programs` restricts to these names.
    Fusion task: `options.searched` > 0 adds to each program's sampled configurations the `searched` best
    distinct predictions of an annealing search priced by `search_model` (a cost model, or a sequence of
    them: `searched` picks of each; `search_evaluations` configurations each search), so that models learn
    the configurations searches pick, not only random ones. `log(program, record)` after each program,
    `warn(line)` for what was skipped."""
    o = options if options is not None else DatasetOptions()
    split_file, seed, programs, searched, search_model = o.split_file, o.seed, o.programs, o.searched, o.search_model
    if task not in ("fusion", "tile", "layout"):
        raise ValueError(f"task must be fusion, tile or layout, not {task!r}")
    if searched and (task != "fusion" or search_model is None):
        raise ValueError("searched configurations are for the fusion task and need a search cost model")
    if task == "tile" and isinstance(evaluator, str) and evaluator.strip().lower() in ("xla", "xla-inprogram"):
        raise ValueError("tile datasets need a tile-aware evaluator (sim); XLA:CPU does not take tile sizes")
    pdir = Path(programs_dir)
    if pdir.is_file():
        files = [pdir]
        pdir = pdir.parent
    elif pdir.is_dir():
        files = sorted(pdir.glob("*.hlo"))
    else:
        raise ValueError(f"programs directory {programs_dir} does not exist")
    if programs:
        want = {Path(p).stem for p in programs}
        files = [f for f in files if f.stem in want]
    if not files:
        raise ValueError(f"no .hlo programs in {programs_dir}")
    fam_known = _manifest_families(pdir)
    families = {f.stem: program_family(f.stem, fam_known) for f in files}
    if split_file:
        split = read_split_file(split_file)
        missing = sorted(set(families) - set(split))
        if missing:
            raise ValueError(f"split file {split_file} does not place {len(missing)} program(s): {', '.join(missing[:5])}")
        split = {p: split[p] for p in families}
    else:
        split = make_split(families, seed)
    out = Path(out_dir)
    (out / "shards").mkdir(parents=True, exist_ok=True)
    lock = _BuildLock(out)
    try:
        search = _make_search(searched, search_model, o.search_evaluations, o.search_model_name) if searched else None
        return _build_locked(files, task, evaluator, target, configs_per_program, out, split, families, seed,
                             o.max_tiles_per_kernel, o.store, progress, log, warn, search)
    finally:
        lock.release()


class _Search(NamedTuple):
    """How a build adds searched configurations: the cost models (one search each), picks per program and model,
    configurations each search prices, and the models' names for the manifest ("a+b" for several)."""
    models: tuple
    n: int
    evaluations: int
    label: str


def _make_search(searched: int, search_model: Any, evaluations: int, names: Any) -> _Search:
    """The _Search of build_dataset's arguments: one model or a sequence, named by `names` or by the models."""
    models = tuple(search_model) if isinstance(search_model, (list, tuple)) else (search_model,)
    if names is None:
        names = [m.name if isinstance(m, CostModel) else type(m).__name__ for m in models]
    names = [names] if isinstance(names, str) else list(names)
    if len(names) != len(models):
        raise ValueError(f"{len(models)} search models but {len(names)} names")
    return _Search(models, int(searched), int(evaluations), "+".join(map(str, names)))


def _search_record(search: Optional[_Search]) -> Optional[dict]:
    """How a dataset's searched configurations were found (its manifest's "searched" entry)."""
    return None if search is None else {"n": search.n, "evaluations": search.evaluations, "model": search.label}


def _build_locked(files, task, evaluator, target, configs_per_program, out, split, families, seed,
                  max_tiles_per_kernel, store, progress, log, warn, search=None) -> "Dataset":
    """build_dataset's work once it holds the directory's lock: read or start the manifest, build."""
    mpath = out / "manifest.json"
    if mpath.exists():
        try:
            manifest = json.loads(mpath.read_text())
        except ValueError:
            raise ValueError(f"{mpath} is corrupt; remove it (or the directory) to rebuild") from None
        for k, v in (("task", task), ("target", target), ("feature_version", feature_version(target)),
                     ("searched", _search_record(search))):
            if manifest.get(k) != v:
                raise ValueError(f"{out} holds a dataset with {k}={manifest.get(k)!r}, not {v!r}; use another --out")
    else:
        manifest = {"format": "autotune-dataset", "version": DATASET_VERSION, "task": task, "target": target,
                    "feature_version": feature_version(target), "node_dim": NODE_DIM, "tile_dim": TILE_DIM,
                    "evaluator": evaluator if isinstance(evaluator, str) else evaluator.name,
                    "seed": seed, "configs_per_program": configs_per_program, "searched": _search_record(search),
                    "programs": {}}
    ev = resolve_evaluator(evaluator, target, store)
    try:
        return _build_all(files, task, ev, target, configs_per_program, out, mpath, manifest, split, families,
                          seed, max_tiles_per_kernel, progress, log, warn, search)
    finally:
        if isinstance(evaluator, str):
            try:
                ev.close()
            except Exception:  # noqa: BLE001
                pass


class _BuildLock:
    """An exclusive advisory lock on a dataset directory, held while a build writes to it.

    Two builds into one directory would each rewrite manifest.json from their own view and lose the
    other's programs; the second one is refused instead, naming the holder's pid.
    """

    def __init__(self, out: Path):
        self._fh = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock
            return
        path = out / ".build.lock"
        fh = open(path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise ValueError(f"{out} is being written by another dataset build (pid {holder}); "
                             "wait for it to finish or use another --out") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            self._fh.close()  # closing the file drops the flock
            self._fh = None


def _build_all(files, task, ev, target, configs_per_program, out, mpath, manifest, split, families, seed,
               max_tiles_per_kernel, progress, log, warn=None, search=None) -> "Dataset":
    namespace = ev.store_namespace if isinstance(ev, Evaluator) else None
    if namespace and "evaluator_namespace" not in manifest:
        manifest["evaluator_namespace"] = namespace
    it = files
    if progress:
        try:
            from tqdm import tqdm
            it = tqdm(files, desc=f"dataset {task}")
        except ImportError:  # pragma: no cover
            pass
    for f in it:
        name = f.stem
        rec = manifest["programs"].get(name)
        shard = out / "shards" / f"{name}.npz"
        if rec is not None and shard.exists():
            rec["split"] = split[name]  # a new split file may move it
            continue
        if name in manifest.setdefault("skipped", {}):
            continue
        pseed = int.from_bytes(hashlib.sha1(f"{seed}|{name}".encode()).digest()[:4], "little")
        if task == "layout":
            arrays = _build_layout_program(f, ev, target, configs_per_program, np.random.default_rng(pseed))
            if arrays is None:
                reason = f"no convolution, dot or reshape with a choice of layout on target {target}"
                manifest["skipped"][name] = reason
                _atomic_json(mpath, manifest)
                if warn is not None:
                    warn(f"warning: {name}: skipped ({reason})")
                continue
            rec = {"n_kernels": int(len(arrays["node_config_ids"])), "n_samples": int(len(arrays["config_runtime"])),
                   "n_failed": int(arrays["n_failed"]), "n_configs": int(len(arrays["config_runtime"]))}
        else:
            arrays = _build_program(f, task, ev, target, configs_per_program, np.random.default_rng(pseed),
                                    max_tiles_per_kernel, search)
            rec = {"n_kernels": int(len(arrays["hashes"])), "n_samples": int(len(arrays["s_graph"])),
                   "n_failed": int(np.sum(~np.isfinite(arrays["s_runtime"]))),
                   **({"n_end_to_end": int(np.sum(np.isfinite(arrays["cfg_end_to_end"]))),
                       "n_no_thunk": int(np.sum(arrays["s_runtime"] == NO_THUNK_SECONDS))}
                      if "cfg_end_to_end" in arrays else {}),
                   "n_configs": int(arrays["n_configs"])}
        tmp = shard.with_name(shard.stem + f".tmp{os.getpid()}.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, shard)
        manifest["programs"][name] = {"family": families[name], "split": split[name],
                                      "file": f"shards/{name}.npz", "source": str(f), **rec}
        _atomic_json(mpath, manifest)
        if log is not None:
            log(name, manifest["programs"][name])
    _atomic_json(mpath, manifest)
    return Dataset.open(out)


# --------------------------------------------------------------------------------------------------
class Dataset:
    """An on-disk dataset (manifest.json + npz shards), loaded lazily."""

    def __init__(self, root: Path, manifest: dict):
        self.root = Path(root)
        self.manifest = manifest
        self.task: str = manifest["task"]
        self.target: str = manifest["target"]
        self._cache: dict = {}

    @classmethod
    def open(cls, root: "str | os.PathLike") -> "Dataset":
        root = Path(root)
        m = root / "manifest.json"
        if not m.is_file():
            raise ValueError(f"{root} is not a dataset (no manifest.json)")
        try:
            manifest = json.loads(m.read_text())
        except ValueError:
            raise ValueError(f"{m} is corrupt (not JSON)") from None
        if not isinstance(manifest, dict) or manifest.get("format") != "autotune-dataset":
            raise ValueError(f"{m} is not an autotune dataset manifest")
        if manifest.get("version") != DATASET_VERSION:
            raise ValueError(f"{root}: dataset version {manifest.get('version')} is not supported")
        if manifest.get("feature_version") != feature_version(manifest.get("target") or "tpu"):
            raise ValueError(f"{root} was built with another feature layout; rebuild it")
        return cls(root, manifest)

    @property
    def programs(self) -> dict:
        return self.manifest["programs"]

    def programs_in(self, split: str = "all") -> list:
        if split in ("all", None):
            return sorted(self.programs)
        s = split_name(split)
        return sorted(p for p, r in self.programs.items() if r["split"] == s)

    def __len__(self) -> int:
        return sum(int(r["n_samples"]) for r in self.programs.values())

    def load_layout(self, name: str) -> TpuGraphsRecord:
        """One program of a layout dataset: its TpuGraphs layout npz file (checked), with autotune's
        `config_analytical`, `config_analytical_terms` and `config_is_default` arrays."""
        if self.task != "layout":
            raise ValueError(f"dataset {self.root} is a {self.task} dataset, not a layout one")
        rec = self.programs.get(name)
        if rec is None:
            raise ValueError(f"no program {name!r} in dataset {self.root}")
        r = self._cache.get(name)
        if r is None:
            r, _ = read_tpugraphs_layout(self.root / rec["file"])
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[name] = r
        return r

    def iter_layouts(self, split: str = "all") -> Iterator[tuple]:
        """(name, family, layout record) of a layout dataset's programs in a split."""
        for p in self.programs_in(split):
            yield p, self.programs[p]["family"], self.load_layout(p)

    def load_program(self, name: str) -> Samples:
        if self.task == "layout":
            raise ValueError(f"dataset {self.root} is a layout dataset: its programs are layout graphs "
                             "(Dataset.load_layout), not kernel samples")
        s = self._cache.get(name)
        if s is not None:
            return s
        rec = self.programs.get(name)
        if rec is None:
            raise ValueError(f"no program {name!r} in dataset {self.root}")
        path = self.root / rec["file"]
        try:
            with np.load(path, allow_pickle=False) as z:
                a = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read shard {path}: {e}") from None
        np_, ep = a["node_ptr"], a["edge_ptr"]
        graphs = []
        tg = None
        if "tg_feat" in a:
            tp = a["tg_ptr"]
            tg = [a["tg_feat"][tp[i]:tp[i + 1]] for i in range(len(tp) - 1)]
        for i in range(len(a["hashes"])):
            r = int(a["tiled_rank"][i])
            graphs.append(KernelGraph(a["node_feat"][np_[i]:np_[i + 1]].astype(np.float32),
                                      a["opcode"][np_[i]:np_[i + 1]].astype(np.int64),
                                      a["edge_index"][:, ep[i]:ep[i + 1]].astype(np.int64),
                                      tuple(int(d) for d in a["tiled_dims"][i, :r]),
                                      a["kernel_feat"][i].astype(np.float32), str(a["hashes"][i]),
                                      geom_feat=a["geom_feat"][i].astype(np.float32)))
        n = len(a["s_graph"])
        s = Samples(graphs, a["s_graph"].astype(np.int64), [str(t) for t in a["s_tile"]],
                    a["s_runtime"].astype(np.float64), np.zeros(n, np.int64), [name], [rec["family"]],
                    a["s_analytical"].astype(np.float64), a["multiplicity"].astype(np.float64),
                    {"cfg": a.get("cfg_id"), "graph": a.get("cfg_graph"), "end_to_end": a.get("cfg_end_to_end"),
                     "end_to_end_min": a.get("cfg_end_to_end_min"),
                     "runtime": a.get("cfg_runtime"), "thunk_runtime": a.get("cfg_thunk_runtime"),
                     "unattributed": a.get("cfg_unattributed"), "searched": a.get("cfg_searched")}
                    if "cfg_id" in a else {}, tg, None,
                    a["s_default"].astype(bool) if "s_default" in a else None)
        if len(self._cache) > 64:
            self._cache.clear()
        self._cache[name] = s
        return s

    def iter_programs(self, split: str = "all") -> Iterator[tuple]:
        for p in self.programs_in(split):
            yield p, self.load_program(p)

    def load(self, split: str = "train") -> Samples:
        names = self.programs_in(split)
        if not names:
            raise ValueError(f"dataset {self.root} has no programs in the {split} split")
        return Samples.concat([self.load_program(p) for p in names])
