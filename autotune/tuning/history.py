"""Measurement history and transfer learning (AutoTVM, Chen et al. 2018, section 4).

Every kernel measured during a search is recorded in the measurement store with its
program-independent feature vector (`costmodels.xgb.kernel_static_vector`: opcode histogram,
kernel-level metrics, tile geometry, node statistics - nothing of a program's own knob encoding such
as its edge numbering) and the program it was measured for (`HistoryRecorder`, used through
`RecordingCostModel` around the evaluator). `load_history` joins the store's successful measurements
of one target, evaluator namespace (evaluator, version, flags) and machine with those vectors,
leaving out the programs asked for (the program being tuned; in the benchmark, whole families);
`fit_global_model` trains the XGBoost cost model on them (regression on log seconds for fusion,
pairwise rank per kernel for tiles, AutoTVM's rank loss). `transfer_prior` turns any cost model
(that one, or a model file) into the prior of the model-based strategy: a fusion configuration's
log predicted program time (the sum of its kernels', `ProgramCost`), a tile's predicted log time or
rank score (`prior.log_seconds` says which: a log time enters the local model as it is).

History from other machines is used only when asked for (`any_machine=True`, the CLI's
`--history-any-machine`); `History.describe()` is what the report shows: rows, kernels, programs and
machines used, what was left out and why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from autotune.tuning.store import KernelRecord
from costmodels.base import CostModel

__all__ = ["History", "HistoryRecorder", "RecordingCostModel", "load_history", "fit_global_model",
           "transfer_prior", "GLOBAL_MODEL_PARAMS", "MIN_HISTORY_ROWS"]

# The global model: fewer, shallower trees than a shipped model (history has 10^2..10^5 rows and is
# trained at the start of every run), one thread (the machine is shared with the measurements).
GLOBAL_MODEL_PARAMS = {"n_estimators": 200, "max_depth": 6, "learning_rate": 0.1, "subsample": 0.9,
                       "early_stopping_rounds": 0, "nthread": 1}
MIN_HISTORY_ROWS = 20  # fewer successful rows than this: no global model (one warning)


class HistoryRecorder:
    """Writes the feature vectors of kernels measured for one program into the store (once each)."""

    def __init__(self, store: Any, target: str, program: str, program_name: str):
        self.store, self.target = store, str(target)
        self.program, self.program_name = program, program_name
        self.recorded: set[str] = set()

    def record(self, kernels: Iterable[Any]) -> int:
        """Record the kernels not recorded yet; returns how many were written."""
        from costmodels.features import feature_version, kernel_graphs
        from costmodels.xgb import kernel_static_vector
        todo = {k.hash: k for k in kernels if k.hash not in self.recorded}
        if not todo or self.store is None:
            return 0
        graphs = kernel_graphs(list(todo.values()), self.target)
        records = [KernelRecord(h, tuple(int(d) for d in g.tiled_dims),
                                np.asarray(kernel_static_vector(g), np.float32).tobytes(),
                                ((self.program, self.program_name),))
                   for h, g in zip(todo, graphs)]
        n = self.store.put_kernels(self.target, feature_version(self.target), records)
        self.recorded.update(todo)
        return n


class RecordingCostModel(CostModel):
    """A cost model (an evaluator's, in practice) whose priced kernels are recorded as history."""

    def __init__(self, model: CostModel, recorder: HistoryRecorder):
        self.model, self.recorder = model, recorder
        self.name = model.name
        self.dedup_by_hash = model.dedup_by_hash

    def predict(self, kernels: Sequence[Any], tiles: Optional[Sequence[Any]] = None) -> np.ndarray:
        kernels = list(kernels)
        out = self.model.predict(kernels, tiles)
        self.recorder.record(k for k, v in zip(kernels, np.asarray(out, float)) if math.isfinite(v))
        return out

    __call__ = predict


@dataclass
class History:
    """Measurements of other programs joined with their kernels' features (`load_history`)."""

    task: str
    target: str
    namespace: str
    machine: Optional[str]                    # None: every machine (asked for)
    X: np.ndarray                              # [rows, KERNEL_VECTOR_DIM]
    log_runtime: np.ndarray
    groups: np.ndarray                         # one query group per kernel
    programs: dict = field(default_factory=dict)   # program sha256 -> name
    machines: dict = field(default_factory=dict)   # machine -> rows used
    excluded_rows: int = 0                     # rows of the programs left out
    unfeatured_rows: int = 0                   # rows whose kernel has no stored features

    @property
    def rows(self) -> int:
        return int(len(self.log_runtime))

    @property
    def kernels(self) -> int:
        return int(len(np.unique(self.groups)))

    @property
    def programs_digest(self) -> str:
        """sha256 of the sorted program sha256s the history comes from (its identity in a checkpoint's
        fingerprint: the rows of those programs can shrink while a run records kernels they share)."""
        import hashlib
        return hashlib.sha256("\n".join(sorted(self.programs)).encode()).hexdigest()

    def describe(self) -> dict:
        """What the report says about the history used."""
        return {"rows": self.rows, "kernels": self.kernels, "programs": len(self.programs),
                "program_names": sorted(set(self.programs.values())), "programs_sha256": self.programs_digest,
                "namespace": self.namespace,
                "machines": dict(self.machines),
                "machine_filter": self.machine if self.machine is not None else "any machine (asked for)",
                "excluded_rows": self.excluded_rows, "rows_without_features": self.unfeatured_rows}


def load_history(store: Any, task: str, target: str, namespace: str, machine: Optional[str],
                 exclude_programs: Iterable[str] = ()) -> History:
    """The store's successful measurements of `target`/`namespace` on `machine` (None: any machine)
    whose kernels have stored features and were measured for some program not in `exclude_programs`
    (program sha256s); a kernel also measured for an excluded program is left out entirely."""
    from autotune.compiler.tiles import TileConfig
    from costmodels.features import TILE_DIM, feature_version, tile_features
    from costmodels.xgb import KERNEL_STATIC_DIM, KERNEL_VECTOR_DIM
    if task not in ("fusion", "tile"):
        raise ValueError(f"task must be fusion or tile, not {task!r}")
    excluded = set(exclude_programs)
    records = store.kernel_records(target, feature_version(target))
    rows, ly, groups, group_of = [], [], [], {}
    programs: dict = {}
    machines: dict = {}
    n_excluded = n_unfeatured = 0
    for r in store.iter_rows(target=target, namespace=namespace, ok_only=True, machine=machine):
        tile = r.tile
        if (task == "tile") != bool(tile) or not r.seconds or r.seconds <= 0:
            continue  # fusion history: kernels at their default tile; tile history: explicit tiles
        rec = records.get(r.kernel_hash)
        if rec is None:
            n_unfeatured += 1
            continue
        if not rec.programs or any(p in excluded for p, _ in rec.programs):
            n_excluded += 1
            continue
        x = np.zeros(KERNEL_VECTOR_DIM, np.float32)
        x[:KERNEL_STATIC_DIM] = np.frombuffer(rec.features, np.float32)
        if tile:
            x[KERNEL_STATIC_DIM:KERNEL_STATIC_DIM + TILE_DIM] = tile_features(rec.tiled_dims, TileConfig.from_key(tile))
        rows.append(x)
        ly.append(math.log(r.seconds))
        groups.append(group_of.setdefault(r.kernel_hash, len(group_of)))
        programs.update(rec.programs)
        machines[r.machine] = machines.get(r.machine, 0) + 1
    X = np.stack(rows) if rows else np.zeros((0, KERNEL_VECTOR_DIM), np.float32)
    return History(task, target, namespace, machine, X, np.asarray(ly, float), np.asarray(groups, np.int64),
                   programs, machines, n_excluded, n_unfeatured)


def fit_global_model(history: History, seed: int = 0) -> Any:
    """The XGBoost cost model (`costmodels.xgb.XgbCostModel`) trained on a history."""
    from costmodels.xgb import XgbCostModel
    if history.rows < MIN_HISTORY_ROWS:
        raise ValueError(f"{history.rows} history rows, fewer than {MIN_HISTORY_ROWS}")
    model = XgbCostModel(history.task, history.target, seed=seed, **GLOBAL_MODEL_PARAMS)
    return model.fit_matrix(history.X, history.log_runtime, history.groups)


def transfer_prior(space: Any, model: Any, same_units: bool = True) -> Callable[[Sequence[Any]], np.ndarray]:
    """A cost model as the model-based strategy's prior over a space (lower = predicted faster):
    fusion, the log of the predicted program time (`ProgramCost`, memoized per kernel); tiles, the
    model's value of each tile of the space's kernel (log seconds, or a rank score).

    `same_units=False`: the trials measure something else than the model predicts (paired end-to-end
    trials against a kernel-sum model, autotune/tuning/paired_cost.py): the prior is then not added to
    the local model as it is but standardized and weighted by its correlation with the measurements."""
    from autotune.tuning.pricing import is_fusion_space, space_cost
    cost = space_cost(space, model)
    log_seconds = is_fusion_space(space) or not isinstance(model, CostModel) or bool(model.predicts_absolute)

    def prior(configs: Sequence[Any]) -> np.ndarray:
        values = cost(configs)
        return np.log(np.maximum(values, 1e-30)) if log_seconds else values

    prior.log_seconds = log_seconds and same_units  # type: ignore[attr-defined]  # the strategy adds it as is
    return prior
