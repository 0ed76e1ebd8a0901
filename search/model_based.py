"""Online model-based search, after AutoTVM (Chen et al., NeurIPS 2018, section 3).

Every round, a statistical cost model (XGBoost, AutoTVM's parameters) is refitted on all the
(configuration features -> log measured cost) pairs told so far; the model scores candidate
configurations, and the batch asked for is the best-scored unmeasured candidates, an epsilon share
of it drawn at random instead (exploration). The first batch is the space's default (the
compiler's choice, a strong baseline here) and random configurations: nothing to fit yet.

Candidates: a space small enough to enumerate (a kernel's tile space, `space.tiles()` of at most
`max_enumerate` configurations) is scored whole; any other space (fusion) is searched on the model
by simulated annealing: `sa_chains` chains start at the best measured configurations and at random
ones, walk `sa_steps` steps of `space.neighbor` moves with Metropolis acceptance on the model's
score, and every unmeasured configuration they visit is a candidate.

The model is fitted with a rank objective by default (`objective="rank"`, XGBoost's pairwise rank
loss: AutoTVM found it better than regression because only the order matters); `"reg"` fits
standardized log costs. Features: `features(space, configs)` when given, else `config_features`
(fusion: one 0/1 column per edge; tiles: log2 of the tile's extents). A failed measurement (inf)
ranks below every success. Measurement is the tuner's job: this strategy only asks and learns.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from search.base import Strategy, config_hash, register_strategy

# AutoTVM's XGBoostCostModel parameters (max_depth 3, eta 0.3, gamma 1e-4, min_child_weight 1), with a
# fixed number of rounds: online training sets have tens to hundreds of rows.
XGB_PARAMS = {"max_depth": 3, "eta": 0.3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0,
              "lambda": 1.0, "alpha": 0.0, "tree_method": "exact", "nthread": 1, "verbosity": 0}
XGB_ROUNDS = 60
OBJECTIVES = ("rank", "reg")
FAILURE_PENALTY = math.log(10.0)  # a failure counts as 10x slower than the slowest success


def failures_last(y_log: np.ndarray) -> np.ndarray:
    """Log costs with failures (non-finite) replaced by the slowest success + log(10)."""
    y = np.asarray(y_log, dtype=float)
    ok = np.isfinite(y)
    if ok.all():
        return y
    return np.where(ok, y, (y[ok].max() if ok.any() else 0.0) + FAILURE_PENALTY)


def fit_model(objective: str, X: np.ndarray, y_log: np.ndarray, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """Fit XGBoost on (features, log cost); returns `score(X) -> array`, lower = predicted faster."""
    import xgboost as xgb

    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    params = dict(XGB_PARAMS, seed=int(seed))
    if objective == "rank":
        from scipy.stats import rankdata
        rel = rankdata(-y_log, method="dense") - 1.0  # fastest = highest relevance
        params.update(objective="rank:pairwise", lambdarank_pair_method="mean",
                      lambdarank_num_pair_per_sample=8)
        d = xgb.DMatrix(X, label=rel, qid=np.zeros(len(X), np.int64), nthread=1)
        sign = -1.0
    else:
        mu, sd = float(y_log.mean()), float(max(y_log.std(), 1e-6))
        params.update(objective="reg:squarederror")
        d = xgb.DMatrix(X, label=(y_log - mu) / sd, nthread=1)
        sign = 1.0
    booster = xgb.train(params, d, num_boost_round=XGB_ROUNDS)
    return lambda X_new: sign * booster.predict(xgb.DMatrix(X_new, nthread=1)).astype(np.float64)


def fit_predict(objective: str, X: np.ndarray, y_log: np.ndarray, X_all: np.ndarray, seed: int) -> np.ndarray:
    """Fit on measured (features, log cost) and score `X_all` in one call (lower = faster)."""
    return fit_model(objective, X, y_log, seed)(X_all)


def select_batch(score: np.ndarray, free: np.ndarray, k: int, epsilon: float,
                 rng: np.random.Generator) -> tuple[list, list]:
    """(greedy, random) indices into `score` for a batch of k from the `free` ones: the best scored
    first (ties, frequent with trees, broken at random), a binomial(k, epsilon) share drawn at
    random from the rest instead."""
    free = np.asarray(free)
    n_eps = int(rng.binomial(k, epsilon)) if epsilon > 0 else 0
    ranked = free[np.lexsort((rng.random(len(free)), score[free]))]
    greedy = list(ranked[:k - n_eps])
    rest = np.setdiff1d(free, greedy)
    eps = list(rng.choice(rest, size=min(n_eps, len(rest)), replace=False)) if n_eps else []
    return greedy, eps


def config_features(space: Any, configs: Sequence[Any]) -> np.ndarray:
    """Knob features of configurations: `space.features` when the space has it; tiles: log2(1 +
    extent) per dimension (`space.to_array`); fusion and any bytes-encoded space: one 0/1 column per
    byte of the encoding (per edge)."""
    if not configs:
        return np.zeros((0, 0))
    if callable(getattr(space, "features", None)):
        return np.asarray(space.features(configs), dtype=float)
    if callable(getattr(space, "to_array", None)):
        return np.log2(1.0 + np.maximum(np.asarray(space.to_array(configs), dtype=float), 0.0))
    keys = [space.encode(c) for c in configs]
    if all(isinstance(k, (bytes, bytearray)) for k in keys):
        return np.frombuffer(b"".join(bytes(k) for k in keys), dtype=np.uint8).reshape(len(keys), -1).astype(float)
    raise TypeError(f"{type(space).__name__}: no features for model-based search (give features=)")


class ModelBasedSearch(Strategy):
    """AutoTVM-style online model-based search (module docstring).

    Parameters: `objective` ("rank" or "reg"), `epsilon` (random share of each batch), `n_initial`
    (random configurations measured before the first fit; default: the first batch), `sa_chains` and
    `sa_steps` (annealing on the model, for spaces too large to enumerate), `sa_temperature`
    (relative to the spread of the chains' scores), `max_enumerate`, `features` (callable
    `(space, configs) -> matrix`).
    """

    name = "model-based"

    def __init__(self, space: Any, seed: Optional[int] = None, objective: str = "rank", epsilon: float = 0.1,
                 n_initial: Optional[int] = None, sa_chains: int = 32, sa_steps: int = 40,
                 sa_temperature: float = 1.0, max_enumerate: int = 4096,
                 features: Optional[Callable[[Any, Sequence[Any]], np.ndarray]] = None, **params: Any):
        super().__init__(space, seed, **params)
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError("epsilon must be in [0, 1]")
        self.objective = objective
        self.epsilon = float(epsilon)
        self.n_initial = n_initial
        self.sa_chains = max(1, int(sa_chains))
        self.sa_steps = max(1, int(sa_steps))
        self.sa_temperature = float(sa_temperature)
        self.max_enumerate = int(max_enumerate)
        self.features = features or config_features
        self._told: dict = {}        # key hash -> (config, cost), first tell wins
        self._asked: set[int] = set()
        self._exhausted = False
        self._all: Optional[list] = None       # enumerable spaces: every configuration
        self._all_X: Optional[np.ndarray] = None
        self.fits = 0

    @property
    def finished(self) -> bool:
        return self._exhausted

    # ---- helpers
    def _hash(self, cfg: Any) -> int:
        return config_hash(self.space, cfg)

    def _enumerable(self) -> bool:
        if self._all is None and callable(getattr(self.space, "tiles", None)):
            tiles = list(self.space.tiles())
            if len(tiles) <= self.max_enumerate:
                self._all = tiles
                self._all_X = self.features(self.space, tiles)
        return self._all is not None

    def _random(self, n: int, taken: set) -> list:
        out: list = []
        for _ in range(20 * max(1, n)):
            if len(out) >= n:
                break
            cfg = self.space.random(self.rng)
            h = self._hash(cfg)
            if h not in self._asked and h not in self._told and h not in taken:
                taken.add(h)
                out.append(cfg)
        return out

    def _fit(self) -> Callable[[np.ndarray], np.ndarray]:
        configs = [c for c, _ in self._told.values()]
        y = failures_last(np.log(np.maximum([v for _, v in self._told.values()], 1e-300)))
        self.fits += 1
        return fit_model(self.objective, self.features(self.space, configs), y,
                         int(self.rng.integers(2 ** 31)))

    def _anneal(self, score: Callable[[np.ndarray], np.ndarray]) -> tuple[list, np.ndarray]:
        """Simulated annealing on the model: (unmeasured configurations visited, their scores)."""
        space, rng = self.space, self.rng
        measured = sorted(self._told.values(), key=lambda t: t[1])
        heads = [c for c, v in measured[:self.sa_chains // 2] if math.isfinite(v)]
        heads += [space.random(rng) for _ in range(self.sa_chains - len(heads))]
        cur = score(self.features(space, heads))
        t0 = self.sa_temperature * max(float(np.std(cur)), 1e-9)
        pool: dict = {}
        for step in range(self.sa_steps):
            temp = t0 * (1.0 - step / self.sa_steps) + 1e-12
            props = [space.neighbor(c, rng) for c in heads]
            s = score(self.features(space, props))
            for i, (p, v) in enumerate(zip(props, s)):
                h = self._hash(p)
                if h not in self._told and h not in self._asked and h not in pool:
                    pool[h] = (p, float(v))
                if v <= cur[i] or rng.random() < math.exp(-(v - cur[i]) / temp):
                    heads[i], cur[i] = p, v
        return [c for c, _ in pool.values()], np.array([v for _, v in pool.values()])

    # ---- the protocol
    def ask(self, n: int) -> list:
        n = max(1, int(n))
        taken: set = set()
        successes = sum(math.isfinite(v) for _, v in self._told.values())
        first = self.n_initial if self.n_initial is not None else n
        if successes < max(2, first):
            out = []
            if not self._told and not self._asked and callable(getattr(self.space, "default", None)):
                out.append(self.space.default())  # the compiler's choice: a strong first measurement
                taken.add(self._hash(out[0]))
            out += self._random(n - len(out), taken)
        else:
            score = self._fit()
            if self._enumerable():
                idx = [i for i, c in enumerate(self._all) if self._hash(c) not in self._told
                       and self._hash(c) not in self._asked]
                pool = [self._all[i] for i in idx]
                scores = score(self._all_X[idx]) if idx else np.zeros(0)
            else:
                pool, scores = self._anneal(score)
            greedy, eps = select_batch(scores, np.arange(len(pool)), min(n, len(pool)), self.epsilon, self.rng) \
                if pool else ([], [])
            out = [pool[i] for i in greedy + eps]
            taken = {self._hash(c) for c in out}
            if len(out) < n:  # the model found too few new candidates: fill with random ones
                out += self._random(n - len(out), taken)
        if not out:
            self._exhausted = True
        self._asked.update(self._hash(c) for c in out)
        self.n_asked += len(out)
        return out

    def tell(self, configs: list, costs: Sequence[float]) -> None:
        arr = self.observe(configs, costs)
        for cfg, c in zip(configs, arr):
            self._told.setdefault(self._hash(cfg), (cfg, float(c)))

    # ---- checkpoints
    def state_dict(self) -> dict:
        d = super().state_dict()
        d["told"] = [(self.space.encode(c), v) for c, v in self._told.values()]
        d["asked"] = np.fromiter(self._asked, dtype=np.int64, count=len(self._asked))
        d["exhausted"] = self._exhausted
        d["fits"] = self.fits
        return d

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict(d)
        self._told = {}
        for enc, v in d["told"]:
            cfg = self.space.decode(enc)
            self._told[self._hash(cfg)] = (cfg, float(v))
        self._asked = {int(h) for h in d["asked"]}
        self._exhausted = bool(d.get("exhausted", False))
        self.fits = int(d.get("fits", 0))


register_strategy(ModelBasedSearch.name, ModelBasedSearch)

__all__ = ["ModelBasedSearch", "fit_model", "fit_predict", "select_batch", "failures_last", "config_features",
           "XGB_PARAMS", "XGB_ROUNDS"]
