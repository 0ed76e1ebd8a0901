"""Online model-based search, after AutoTVM (Chen et al., NeurIPS 2018, section 3).

Every round, a statistical cost model (XGBoost, AutoTVM's parameters) is refitted on all the
(configuration features -> log measured cost) pairs told so far; the model scores candidate
configurations, and the batch asked for is the best-scored unmeasured candidates, an epsilon share
of it drawn at random instead (exploration). The first batch is the space's default (the
compiler's choice, a strong baseline here) and random configurations: nothing to fit yet. In a space
too large to enumerate (fusion), "random" means a walk of 1..`explore_moves` neighbor moves from the
best measured configurations (the default first): a uniformly random fusion configuration is far
slower than the compiler's and teaches the model nothing about the ones worth measuring.

Candidates: a space small enough to enumerate (a kernel's tile space, `space.tiles()` of at most
`max_enumerate` configurations) is scored whole; any other space (fusion) is searched on the model
by simulated annealing: `sa_chains` chains start at the best measured configurations and where the
last round's chains ended (AutoTVM keeps its annealing points across rounds), at first at random
configurations (`explore_moves`: near the default), walk `sa_steps` steps of `space.neighbor` moves
with Metropolis acceptance on the model's score, and every unmeasured configuration they visit is a
candidate.

The model is fitted with a rank objective by default (`objective="rank"`, XGBoost's pairwise rank
loss: AutoTVM found it better than regression because only the order matters); `"reg"` fits
standardized log costs. The model is pluggable (`model=`): a name of `LOCAL_MODELS` ("xgboost", the
default; "gnn": the shipped GNN fine-tuned on the measurements, costmodels/gnn/finetune.py - a
kernel-level model whose configuration cost is its kernels' predicted times summed) or any callable
`fit(objective, X, y_log, seed, base_margin) -> score(X, base_margin) -> array` (a factory
`(space) -> fit` marked `on_configurations` gets configurations instead of features X).
Features: `features(space, configs)` when given, else `config_features` (fusion: one 0/1 column per
edge; tiles: log2 of the tile's extents). A failed measurement (inf) ranks below every success.
Measurement is the tuner's job: this strategy only asks and learns.

Options of AutoTVM's sections 3.3 and 4:
* `diversity` (AutoTVM's diversity-aware exploration; 0 = off): the batch is chosen greedily from the
  `diversity_pool` x batch best-scored candidates to maximize a submodular objective, predicted
  quality (the candidate's score rescaled to [0, 1] among the candidates) plus `diversity` times its
  coverage gain, the (knob, value) pairs (feature column, value) it adds to those the batch already
  covers, over the largest such gain left (so 1.0 weighs the most novel candidate like the best
  predicted one, in every space). Near-duplicates of one good configuration no longer fill a batch.
* `epsilon`: each batch has a binomial(batch, epsilon) share of random unmeasured configurations.
* `prior` (transfer learning): a callable `prior(configs) -> array`, lower = predicted faster, e.g.
  a global cost model trained on other programs' measurements (autotune/tuning/history.py). The
  first batch is the prior's best (with the default and the epsilon share) instead of random
  configurations, and every fit uses it as the local model's base margin (`prior_margin`: a prior
  in log seconds as it is, another one scaled by its correlation with the measurements; ignored
  while it does not correlate with them): score = margin(prior) + local trees, AutoTVM's
  f_global + f_local.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from autotune.compiler.space import ArraySpace, EnumerableSpace, FeatureSpace, Space
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


ScoreFn = Callable[..., np.ndarray]  # score(X, base_margin=None) -> array, lower = predicted faster


def fit_xgboost(objective: str, X: np.ndarray, y_log: np.ndarray, seed: int,
                base_margin: Optional[np.ndarray] = None) -> ScoreFn:
    """Fit XGBoost on (features, log cost), on top of `base_margin` (in the score's units, lower =
    faster) when given; returns `score(X, base_margin=None) -> array`, lower = predicted faster."""
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
        params.update(objective="reg:squarederror", base_score=0.0)
        d = xgb.DMatrix(X, label=(y_log - mu) / sd, nthread=1)
        sign = 1.0
    if base_margin is not None:  # XGBoost's margin is in its own units: higher = faster for rank
        d.set_base_margin(sign * np.asarray(base_margin, dtype=float))
    booster = xgb.train(params, d, num_boost_round=XGB_ROUNDS)

    def score(X_new: np.ndarray, base_margin: Optional[np.ndarray] = None) -> np.ndarray:
        dn = xgb.DMatrix(X_new, nthread=1)
        if base_margin is not None:
            dn.set_base_margin(sign * np.asarray(base_margin, dtype=float))
        return sign * booster.predict(dn, output_margin=True).astype(np.float64)

    return score


# The local models `model=` names (a "module:attr" is loaded when asked for: search uses costmodels only
# through its base interface); any callable with fit_xgboost's signature is accepted too, or a factory
# `(space) -> fit` marked `on_configurations` whose fit takes configurations instead of features.
LOCAL_MODELS: dict[str, Any] = {"xgboost": fit_xgboost,
                                "gnn": "costmodels.gnn.finetune:GnnFineTune"}  # the shipped GNN, fine-tuned


def fit_model(objective: str, X: np.ndarray, y_log: np.ndarray, seed: int) -> ScoreFn:
    """The default local model (XGBoost) fitted on (features, log cost); lower score = faster."""
    return fit_xgboost(objective, X, y_log, seed)


def fit_predict(objective: str, X: np.ndarray, y_log: np.ndarray, X_all: np.ndarray, seed: int) -> np.ndarray:
    """Fit on measured (features, log cost) and score `X_all` in one call (lower = faster)."""
    return fit_model(objective, X, y_log, seed)(X_all)


def prior_margin(prior_measured: np.ndarray, y_log: np.ndarray,
                 log_seconds: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """The base margin a prior gives the local model, in the local model's units (log costs
    standardized by their spread over the measured configurations), lower = faster.

    A prior in log seconds (`log_seconds`, e.g. a global model's predicted program time) is taken
    as it is, AutoTVM's f_global + f_local: margin = (prior - its mean) / spread of y. A prior on
    another scale (a rank score) is standardized and weighted by its correlation with y. Either way
    a prior that does not correlate positively with the measurements so far is ignored (weight 0).
    Returns `margin(prior_values)`; `margin.weight` is the weight used."""
    p = np.asarray(prior_measured, dtype=float)
    y = np.asarray(y_log, dtype=float)
    ok = np.isfinite(p) & np.isfinite(y)
    mu = float(p[ok].mean()) if ok.any() else 0.0
    sd_p = float(p[ok].std()) if ok.sum() > 1 else 0.0
    sd_y = float(y[ok].std()) if ok.sum() > 1 else 0.0
    weight, scale = 0.0, 1.0
    if ok.sum() >= 3 and sd_p > 1e-12 and sd_y > 1e-12:
        corr = float(np.corrcoef(p[ok], y[ok])[0, 1])
        if math.isfinite(corr) and corr > 0:
            weight, scale = (1.0, sd_y) if log_seconds else (corr, sd_p)

    def margin(values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=float)
        z = np.where(np.isfinite(v), (v - mu) / scale, 3.0)  # unknown: predicted slow
        return weight * z

    margin.weight = weight  # type: ignore[attr-defined]
    return margin


def diverse_batch(score: np.ndarray, knobs: np.ndarray, free: np.ndarray, k: int, weight: float,
                  pool: int = 3) -> list:
    """Greedy maximization of predicted quality + `weight` x knob coverage (AutoTVM section 3.3):
    indices into `score` of a batch of k from the `pool` * k best-scored `free` candidates. Quality
    is the score rescaled to [0, 1] over those candidates (1 = best); coverage gain is the number of
    (knob, value) pairs of `knobs` (one row per candidate, one column per knob) the batch does not
    cover yet, over the largest such gain left."""
    free = np.asarray(free)
    if k <= 0 or not len(free):
        return []
    cand = free[np.argsort(score[free], kind="stable")[:max(k, int(pool) * k)]]
    s = score[cand]
    span = float(s.max() - s.min())
    quality = (s.max() - s) / span if span > 0 else np.ones(len(cand))
    rows = np.asarray(knobs)[cand]
    pairs = [set(enumerate(np.round(r, 6).tolist())) for r in rows]
    covered: set = set()
    left = list(range(len(cand)))
    out: list = []
    while left and len(out) < k:
        gains = np.array([len(pairs[i] - covered) for i in left], dtype=float)
        top = float(gains.max())
        value = quality[left] + (weight * gains / top if top > 0 else 0.0)
        j = left[int(np.argmax(value))]
        out.append(int(cand[j]))
        covered |= pairs[j]
        left.remove(j)
    return out


def select_batch(score: np.ndarray, free: np.ndarray, k: int, epsilon: float,
                 rng: np.random.Generator, knobs: Optional[np.ndarray] = None, diversity: float = 0.0,
                 diversity_pool: int = 3) -> tuple[list, list]:
    """(greedy, random) indices into `score` for a batch of k from the `free` ones: the best scored
    first (ties, frequent with trees, broken at random), or with `diversity` > 0 and `knobs` the
    diversity-aware choice (`diverse_batch`); a binomial(k, epsilon) share drawn at random from the
    rest instead."""
    free = np.asarray(free)
    n_eps = int(rng.binomial(k, epsilon)) if epsilon > 0 else 0
    if diversity > 0 and knobs is not None:
        jitter = score + 1e-9 * (float(np.ptp(score)) if len(score) else 0.0) * rng.random(len(score))
        greedy = diverse_batch(jitter, knobs, free, k - n_eps, diversity, diversity_pool)
    else:
        ranked = free[np.lexsort((rng.random(len(free)), score[free]))]
        greedy = list(ranked[:k - n_eps])
    rest = np.setdiff1d(free, greedy)
    eps = list(rng.choice(rest, size=min(n_eps, len(rest)), replace=False)) if n_eps else []
    return greedy, eps


def config_features(space: Space, configs: Sequence[Any]) -> np.ndarray:
    """Knob features of configurations: `space.features` when the space has it (`FeatureSpace`); tiles:
    log2(1 + extent) per dimension (`space.to_array`, `ArraySpace`); fusion and any bytes-encoded space:
    one 0/1 column per byte of the encoding (per edge)."""
    if not configs:
        return np.zeros((0, 0))
    if isinstance(space, FeatureSpace):
        return np.asarray(space.features(configs), dtype=float)
    if isinstance(space, ArraySpace):
        return np.log2(1.0 + np.maximum(np.asarray(space.to_array(configs), dtype=float), 0.0))
    keys = [space.encode(c) for c in configs]
    if all(isinstance(k, (bytes, bytearray)) for k in keys):
        return np.frombuffer(b"".join(bytes(k) for k in keys), dtype=np.uint8).reshape(len(keys), -1).astype(float)
    raise TypeError(f"{type(space).__name__}: no features for model-based search (give features=)")


class ModelBasedSearch(Strategy):
    """AutoTVM-style online model-based search (module docstring).

    Parameters: `objective` ("rank" or "reg"), `model` (a `LOCAL_MODELS` name or a fit callable),
    `epsilon` (random share of each batch), `diversity` (weight of knob coverage in the batch
    choice, 0 = off) and `diversity_pool` (candidates considered, times the batch), `prior` (callable
    `configs -> array`, lower = faster: a global model for transfer learning), `n_initial` (random
    configurations measured before the first fit; default: the first batch), `explore_moves` (random
    configurations of a space too large to enumerate are walks of up to this many neighbor moves from
    the best measured ones - a uniformly random fusion configuration is far slower than the
    compiler's and teaches the model nothing about the ones worth measuring; 0 = uniform), `sa_chains` and
    `sa_steps` (annealing on the model, for spaces too large to enumerate), `sa_temperature`
    (relative to the spread of the chains' scores), `max_enumerate`, `features` (callable
    `(space, configs) -> matrix`).
    """

    name = "model-based"

    def __init__(self, space: Space, seed: Optional[int] = None, objective: str = "rank", epsilon: float = 0.1,
                 n_initial: Optional[int] = None, sa_chains: int = 32, sa_steps: int = 40,
                 sa_temperature: float = 1.0, max_enumerate: int = 4096,
                 features: Optional[Callable[[Any, Sequence[Any]], np.ndarray]] = None,
                 model: "str | Callable[..., ScoreFn]" = "xgboost", diversity: float = 0.0, diversity_pool: int = 3,
                 prior: Optional[Callable[[Sequence[Any]], np.ndarray]] = None, explore_moves: int = 4,
                 **params: Any):
        super().__init__(space, seed, **params)
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
        if not 0.0 <= float(epsilon) <= 1.0:
            raise ValueError("epsilon must be in [0, 1]")
        if float(diversity) < 0 or int(diversity_pool) < 1:
            raise ValueError("diversity must be >= 0 and diversity_pool >= 1")
        if isinstance(model, str):
            if model.lower() not in LOCAL_MODELS:
                raise ValueError(f"model must be one of {', '.join(LOCAL_MODELS)} or a callable, not {model!r}")
            model = LOCAL_MODELS[model.lower()]
            if isinstance(model, str):
                from autotune.plugins import load_object
                model = load_object(model)
        # a factory marked `on_configurations` builds a model that learns from configurations themselves
        self.local_on_configurations = bool(getattr(model, "on_configurations", False))
        self.fit_local = model(space) if self.local_on_configurations else model
        self.diversity = float(diversity)
        self.diversity_pool = int(diversity_pool)
        self.prior = prior
        self.explore_moves = max(0, int(explore_moves))
        self.prior_weight: Optional[float] = None  # the last fit's weight of the prior (0: ignored)
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
        self._prior_memo: dict = {}            # key hash -> prior value
        self._sa_heads: list = []              # where the last round's annealing chains ended
        self.fits = 0

    @property
    def finished(self) -> bool:
        return self._exhausted

    # ---- helpers
    def _hash(self, cfg: Any) -> int:
        return config_hash(self.space, cfg)

    def _enumerable(self) -> bool:
        if self._all is None and isinstance(self.space, EnumerableSpace):
            tiles = list(self.space.tiles())
            if len(tiles) <= self.max_enumerate:
                self._all = tiles
        return self._all is not None

    def _random(self, n: int, taken: set) -> list:
        """n new configurations to explore: uniform (`space.random`) in an enumerable space or with
        `explore_moves=0`; otherwise walks of 1..explore_moves neighbor moves from one of the best
        measured configurations (the default first)."""
        out: list = []
        local = self.explore_moves > 0 and not self._enumerable()
        if local:
            ranked = sorted(((v, c) for c, v in self._told.values() if math.isfinite(v)), key=lambda t: t[0])
            starts = [c for _, c in ranked[:4]] or [self.space.default()]
        for _ in range(20 * max(1, n)):
            if len(out) >= n:
                break
            if local:
                cfg = starts[int(self.rng.integers(len(starts)))]
                for _ in range(int(self.rng.integers(1, self.explore_moves + 1))):
                    cfg = self.space.neighbor(cfg, self.rng)
            else:
                cfg = self.space.random(self.rng)
            h = self._hash(cfg)
            if h not in self._asked and h not in self._told and h not in taken:
                taken.add(h)
                out.append(cfg)
        return out

    def _prior(self, configs: Sequence[Any]) -> np.ndarray:
        """The prior's values of configurations (memoized: the prior is fixed for a run)."""
        keys = [self._hash(c) for c in configs]
        todo = {h: c for h, c in zip(keys, configs) if h not in self._prior_memo}
        if todo:
            values = np.asarray(self.prior(list(todo.values())), dtype=float).reshape(-1)
            if values.shape != (len(todo),):
                raise ValueError(f"prior returned {values.shape} values for {len(todo)} configurations")
            self._prior_memo.update(zip(todo, values.tolist()))
        return np.array([self._prior_memo[h] for h in keys], dtype=float)

    def _fit(self) -> Callable[[Sequence[Any]], np.ndarray]:
        """The model of this round as `score(configs) -> array` (lower = predicted faster)."""
        configs = [c for c, _ in self._told.values()]
        y = failures_last(np.log(np.maximum([v for _, v in self._told.values()], 1e-300)))
        self.fits += 1
        margin = None
        if self.prior is not None:
            margin = prior_margin(self._prior(configs), y, bool(getattr(self.prior, "log_seconds", False)))
            self.prior_weight = float(margin.weight)  # type: ignore[attr-defined]
        inputs = (lambda cfgs: cfgs) if self.local_on_configurations else (lambda cfgs: self.features(self.space, cfgs))
        model = self.fit_local(self.objective, inputs(configs), y, int(self.rng.integers(2 ** 31)),
                               None if margin is None else margin(self._prior(configs)))
        if margin is None:
            return lambda cfgs: model(inputs(cfgs))
        return lambda cfgs: model(inputs(cfgs), margin(self._prior(cfgs)))

    def _anneal(self, score: Callable[[Sequence[Any]], np.ndarray]) -> tuple[list, np.ndarray]:
        """Simulated annealing on the model: (unmeasured configurations visited, their scores)."""
        space, rng = self.space, self.rng
        measured = sorted(self._told.values(), key=lambda t: t[1])
        heads = [c for c, v in measured[:self.sa_chains // 2] if math.isfinite(v)]
        if not heads:
            heads = [space.default()]
        heads += self._sa_heads[:self.sa_chains - len(heads)]  # chains go on where the last round's ended
        heads += self._random(self.sa_chains - len(heads), set())  # local walks from the best (or the default)
        heads += [space.random(rng) for _ in range(self.sa_chains - len(heads))]
        cur = score(heads)
        t0 = self.sa_temperature * max(float(np.std(cur)), 1e-9)
        pool: dict = {}
        for step in range(self.sa_steps):
            temp = t0 * (1.0 - step / self.sa_steps) + 1e-12
            props = [space.neighbor(c, rng) for c in heads]
            s = score(props)
            for i, (p, v) in enumerate(zip(props, s)):
                h = self._hash(p)
                if h not in self._told and h not in self._asked and h not in pool:
                    pool[h] = (p, float(v))
                if v <= cur[i] or rng.random() < math.exp(-(v - cur[i]) / temp):
                    heads[i], cur[i] = p, v
        self._sa_heads = [heads[i] for i in np.argsort(cur, kind="stable")]  # best-scored first
        return [c for c, _ in pool.values()], np.array([v for _, v in pool.values()])

    # ---- the protocol
    def ask(self, n: int) -> list:
        n = max(1, int(n))
        taken: set = set()
        successes = sum(math.isfinite(v) for _, v in self._told.values())
        first = self.n_initial if self.n_initial is not None else n
        out = []
        if successes < max(2, first):
            if not self._told and not self._asked:
                out.append(self.space.default())  # the compiler's choice: a strong first measurement
                taken.add(self._hash(out[0]))
            if self.prior is None or n - len(out) <= 0:
                out += self._random(n - len(out), taken)
                score = None
            else:  # transfer: the global model's best instead of random configurations
                score = self._prior
        else:
            score = self._fit()
        if score is not None:
            n_model = n - len(out)
            if self._enumerable():
                idx = [i for i, c in enumerate(self._all) if self._hash(c) not in self._told
                       and self._hash(c) not in self._asked and self._hash(c) not in taken]
                pool = [self._all[i] for i in idx]
                scores = score(pool) if idx else np.zeros(0)
            else:
                pool, scores = self._anneal(score)
                keep = [i for i, c in enumerate(pool) if self._hash(c) not in taken]
                pool, scores = [pool[i] for i in keep], scores[keep]
            knobs = self.features(self.space, pool) if pool and self.diversity > 0 else None
            greedy, eps = select_batch(scores, np.arange(len(pool)), min(n_model, len(pool)), self.epsilon,
                                       self.rng, knobs=knobs, diversity=self.diversity,
                                       diversity_pool=self.diversity_pool) if pool else ([], [])
            out += [pool[i] for i in greedy + eps]
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
        d["sa_heads"] = [self.space.encode(c) for c in self._sa_heads]
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
        self._sa_heads = [self.space.decode(k) for k in d.get("sa_heads", [])]


register_strategy(ModelBasedSearch.name, ModelBasedSearch)

__all__ = ["ModelBasedSearch", "fit_model", "fit_xgboost", "fit_predict", "select_batch", "diverse_batch",
           "prior_margin", "failures_last", "config_features", "LOCAL_MODELS", "XGB_PARAMS", "XGB_ROUNDS"]
