"""The parsed options of the commands with many of them, one dataclass each: click passes a command's
options as keywords, the command function takes them as `**options` and builds its dataclass (a name
that is not a field fails loudly), so that no signature lists two dozen parameters. The options
themselves, and their --help, are the click decorators' in autotune/cli/app.py and learn.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["SearchArgs", "TransferArgs", "FusionArgs", "TileArgs", "DatasetBuildArgs"]


@dataclass(frozen=True)
class SearchArgs:
    """The options `fusion` and `layout` share (`_search_options`)."""

    budget: str                  # --budget: wall clock of the whole command (text, e.g. 5m)
    cost_model: Optional[str]    # --cost-model spec (None: the command's default)
    strategy: str                # --strategy spec
    evaluator: Optional[str]     # --evaluator name (None: the target's default)
    target: str                  # --target, canonical name
    hw_budget: Optional[str]     # --hw-budget text (None: a tenth of --budget)
    top_k: int                   # --top-k: configurations verified on hardware
    seed: int
    out_dir: Optional[str]       # --out (None: a new folder under ./autotune-runs/)
    resume_dir: Optional[str]    # --resume: the run folder to continue
    store: Optional[str]         # --store: measurement store
    batch_size: int
    max_evals: Optional[int]     # --max-evals: stop after this many configurations
    no_progress: bool


@dataclass(frozen=True)
class TransferArgs:
    """--strategy-param, --transfer and --history-any-machine (`fusion`, `tile`)."""

    strategy_param: tuple        # KEY=VALUE texts
    transfer: str                # auto, store, none or a model
    history_any_machine: bool


@dataclass(frozen=True)
class FusionArgs(SearchArgs, TransferArgs):
    """`autotune fusion`'s options (besides PROGRAM)."""

    scheduler: Optional[str]     # --scheduler: a dask.distributed cluster for xla
    workers: int                 # --workers: local measuring processes for xla
    trial_cost: str              # --trial-cost: kernel-sum or paired
    trial_seconds: float         # --trial-seconds: paired timing per configuration
    options_budget: Optional[str]  # --options-budget: the compiler-options stage's hardware time (text)
    formulations_budget: Optional[str]  # --formulations-budget: the formulations stage's hardware time (text)
    stages: Optional[str]        # --stages: the stages to run, comma-separated (None: the target's default stages)


@dataclass(frozen=True)
class TileArgs(TransferArgs):
    """`autotune tile`'s options (besides PROGRAM)."""

    top_k: int                   # tiles per kernel raced on the evaluator
    strategy: str                # topk or an online strategy
    trials: int                  # measurements per kernel of an online strategy
    repeats: int                 # extra timings in the race
    cost_model: Optional[str]
    evaluator: str
    target: str
    config_path: Optional[str]   # --config: the fusion configuration whose kernels are tiled
    budget: Optional[str]        # --budget: hardware measurements' wall clock (text)
    out_dir: Optional[str]
    store: Optional[str]
    seed: int


@dataclass(frozen=True)
class DatasetBuildArgs:
    """`autotune dataset build`'s options."""

    programs_dir: str            # --programs: a folder of .hlo programs (or one file)
    task: str                    # fusion, tile or layout
    evaluator: str               # sim, xla or xla-inprogram
    target: str
    configs_per_program: int
    max_tiles: int               # tile task: tiles per kernel
    split_file: Optional[str]
    only: Sequence[str]          # --program: only these programs
    store: Optional[str]
    seed: int
    searched: int                # fusion: N best predictions of a search per program
    search_model: Sequence[str]  # the cost models of those searches
    search_evals: int            # configurations each search prices
    out_dir: str
