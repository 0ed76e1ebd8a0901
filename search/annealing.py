"""Parallel simulated annealing, after AutoTVM's SimulatedAnnealingOptimizer.

`n_chains` Markov chains walk the space at once. Each `ask` returns one proposal per chain (a
neighbor of the chain head, made with `space.neighbor` so the tuner can derive its kernel set
incrementally from the head's), which lets the tuner score a whole step with one batched cost-model
call. `tell` applies Metropolis acceptance per chain on the *relative* cost difference, so the
temperature means the same on a 10-microsecond program and a 10-second one: at temperature T a move
that is T*100 % slower is accepted with probability 1/e. One edge flip typically changes a program
of tens to hundreds of kernels by 0.1-1 %, hence the defaults t_start=0.003 (0.3 % uphill moves
are common early on) and t_end=3e-5 (greedy at the end); on a synthetic kernel-size cost over the
corpus (tests/search) hotter schedules (0.01-0.05) wandered and found 5-20 % worse configurations.
On the TPU simulator at 3000 evaluations (bert_small_infer, gnn_small_train), starting most chains
at perturbed defaults and restarting after `patience=8` idle proposals gave 1.77x/1.66x over the
default against 1.59x/1.49x for random starts with patience 20; fewer chains (16) do better still
at such small budgets, because each chain gets more steps.

What it adds to textbook annealing, each for a reason:
- visited-set exclusion: a proposal whose key was proposed before is redrawn (up to `retries`
  times); repeated points waste a batch slot (AutoTVM does the same);
- an epsilon-greedy share `eps` of proposals are fresh random configurations (global exploration;
  accepted only when Metropolis says so);
- starting points: chain 0 at the default, a share `init_random` at random configurations, the
  rest at the default mutated with a log-uniform rate (the default is a strong baseline here, unlike
  in AutoTVM's setting, and pure random starts cost most of a small budget); on large programs
  (more than 2,000 fusible edges) random walks of 1-64 neighbor moves from the default instead, and
  the epsilon share walks from the global best: a random configuration of a 10k-edge program has
  thousands of kernels the cost model has never seen;
- group moves (`group_moves`, default 0.94): a proposal draws an edge; when the edge belongs to a
  class of structurally equivalent edges (`FusionSpace.edge_groups`: the same edge in each of a deep
  stack's repeated layers) the move may set its whole class, or a random part of it, to the opposite
  of its value at once (`FusionSpace.group_neighbor`), else the edge alone flips. A group move costs
  about as much as the one-edge moves it makes, so `group_moves` is the share of the search's edge
  flips that group moves make: a grouped edge moves its class with probability g / (g + (1 - g) F),
  F the expected flips of a group move (0.75 x the size-weighted mean class size). A minute of
  annealing on a 200-layer transformer makes fewer one-edge moves than the space has edges (62,755);
  a group move applies one decision to all 200 layers, and the kernels it makes are equal across
  layers, so a model memoized by kernel hash prices a handful of new ones. Measured with the GNN over
  20-30 s of annealing (no start-up), best configuration on the noise-free simulator: 48 layers
  x1.022 without group moves, x1.048 / x1.071 / x1.059 / x1.035 with a group move for 5% / 20% / 50% /
  100% of grouped edges' moves; 200 layers x1.004 without, x1.029 / x1.014 at 5% / 20%. Both optima
  are g = 0.94 (F = 63 and 271). 0 turns them off (the proposals are then those of the search before
  group moves, draw for draw), and so does a space of fewer than `group_min_edges` (12,000) edges: on
  the corpus' small programs (250-3,000 edges, 1,000 configurations, GNN, two seeds each;
  experiments/2026-11-27-group-moves/) group moves gave a lower simulated speedup in 8 of 12 seed-matched
  pairs (0.96-1.008 of the search without them), on its three of 5,000-10,000 edges (resnet_medium_train,
  efficientnet_medium_train, resnet_large_train; 20 s searches) in 5 of 6 (0.994-1.008): where a search
  visits every edge many times, the one-edge moves they displace are worth more. Every corpus program
  (at most 10,261 edges) is searched as before; the 48- and 200-layer transformers (15,027 and 62,755)
  get them;
- chain restarts: a chain that made no improvement in `patience` proposals, or that cannot find
  an unvisited neighbor, restarts from the global best;
- persistence: chains, visited set and the position in the temperature schedule survive across
  rounds and checkpoints. The temperature falls geometrically from `t_start` to `t_end` over
  `n_steps` steps (one step = one proposal per chain), then reheats for the next round while the
  chains keep their heads, as AutoTVM's persistent mode does between tuning rounds.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.space import EdgeSpace, MutableSpace, Space, WalkingSpace
from search.base import Strategy, config_hash, register_strategy


class SimulatedAnnealing(Strategy):
    """Parallel simulated annealing over a Space (see the module docstring).

    Parameters: `n_chains` (proposals per step), `t_start`/`t_end` (relative temperatures),
    `n_steps` (steps per annealing round), `eps` (share of fresh random proposals), `patience`
    (non-improving proposals before a chain restarts from the global best), `retries` (redraws of
    an already visited proposal), `init_random` (share of chains starting at random configurations
    rather than perturbed defaults), `start` ("random": every chain starts at a random configuration,
    as the paper's search from a random configuration), `group_moves` (the share of edge flips made by
    group moves over classes of equivalent edges; 0: none), `group_min_edges` (spaces with fewer edges
    get no group moves). The first step proposes the chains'
    starting points.
    """

    name = "annealing"

    def __init__(self, space: Space, seed: Optional[int] = None, n_chains: int = 64, t_start: float = 0.003,
                 t_end: float = 3e-5, n_steps: int = 300, eps: float = 0.05, patience: int = 8,
                 retries: int = 8, init_random: float = 0.25, start: str = "default", group_moves: float = 0.94,
                 group_min_edges: int = 12000, **params: Any):
        super().__init__(space, seed, **params)
        if start not in ("default", "random"):
            raise ValueError(f"start must be 'default' or 'random', not {start!r}")
        if n_chains < 1:
            raise ValueError("n_chains must be >= 1")
        if not (t_start >= t_end > 0):
            raise ValueError("temperatures must satisfy t_start >= t_end > 0")
        if not 0.0 <= eps <= 1.0:
            raise ValueError("eps must be in [0, 1]")
        if not 0.0 <= group_moves <= 1.0:
            raise ValueError("group_moves must be in [0, 1]")
        self.n_chains = int(n_chains)
        self.t_start, self.t_end = float(t_start), float(t_end)
        self.n_steps = max(1, int(n_steps))
        self.eps = float(eps)
        self.patience = max(1, int(patience))
        self.retries = max(1, int(retries))
        self.init_random = float(init_random)
        self.start = start
        self.group_moves = float(group_moves)
        self.group_min_edges = int(group_min_edges)
        self._group_p: Optional[float] = None  # probability of a group move (`_group_probability`)
        self.n_group_moves = 0
        self.heads: list = [None] * self.n_chains          # chain heads (None: not started yet)
        self.head_costs = np.full(self.n_chains, math.inf)
        self.stale = np.zeros(self.n_chains, dtype=np.int64)  # proposals since the last improvement
        self.visited: set[int] = set()
        self._pending: dict[Any, int] = {}                  # proposal's config_hash -> chain index
        self._cursor = 0                                    # next chain to propose for (round robin)
        self._round_evals = 0                               # told chain proposals in this round
        self.round = 0
        self.n_restarts = 0
        self._exhausted = False
        # What the space offers beyond `Space` (autotune/compiler/space.py), looked up once.
        self._edge_space = isinstance(space, EdgeSpace)  # edge bits: mutation rates, group moves
        self._n_edges = space.n_edges if self._edge_space else 0
        self._mutable = isinstance(space, MutableSpace)
        self._walking = isinstance(space, WalkingSpace)
        # The tuner derives a proposal's kernels from its head's cached state: keep heads cached.
        if self._edge_space:
            space.state_cache_size = max(space.state_cache_size, 4 * self.n_chains + 16)

    # ---- schedule
    @property
    def temperature(self) -> float:
        frac = min(1.0, self._round_evals / (self.n_chains * self.n_steps))
        return self.t_start * (self.t_end / self.t_start) ** frac

    @property
    def finished(self) -> bool:
        return self._exhausted

    # ---- ask
    # On large programs a random configuration shares almost no kernel with anything priced so far
    # (thousands of new kernels for the cost model); there, starting points and the epsilon share
    # are short random walks of neighbor moves, which the tuner prices incrementally.
    LARGE_SPACE_EDGES = 2000

    def _large(self) -> bool:
        # (a layout space says so itself: where its moves are priced incrementally, LayoutSpace.walks)
        return self._n_edges > self.LARGE_SPACE_EDGES or (self._walking and bool(self.space.walks))

    def _walk(self, start: Any, max_steps: int = 8) -> Any:
        """A random walk of 1..max_steps (log-uniform) neighbor moves from `start`."""
        steps = int(math.exp(self.rng.uniform(0.0, math.log(max_steps))))
        cfg = start
        for _ in range(max(1, steps)):
            cfg = self.space.neighbor(cfg, self.rng)
        return cfg

    def _initial(self, i: int) -> Any:
        """Chain 0 starts at the default; the others at random configurations (a share
        `init_random`) or at the default perturbed with a log-uniform mutation rate (on large
        programs: a random walk from the default)."""
        if self.start == "random":
            return self.space.random(self.rng)
        default = self.space.default()
        if i == 0 and config_hash(self.space, default) not in self.visited:
            return default
        n_edges = self._n_edges
        if self._large():
            return self._walk(default)
        if self.rng.random() < self.init_random or not n_edges or not self._mutable:
            return self.space.random(self.rng)
        # log-uniform in [1/n_edges, 0.2]; programs with fewer than 5 edges: one expected flip
        low = math.log(1.0 / n_edges)
        rate = math.exp(self.rng.uniform(low, max(low, math.log(0.2))))
        return self.space.mutate(default, self.rng, max(rate, 1.0 / n_edges))

    def _candidate(self, i: int) -> Any:
        head = self.heads[i]
        if head is None:
            return self._initial(i)
        if self.eps > 0 and self.rng.random() < self.eps:
            if self._large():
                return self._walk(self.best.config if self.best.config is not None else head)
            return self.space.random(self.rng)
        p_group = self._group_probability() if self.group_moves > 0 else 0.0
        if p_group > 0 and self.rng.random() < p_group:  # (no draw without group moves: the same stream)
            self.n_group_moves += 1
            return self.space.group_neighbor(head, self.rng)
        return self.space.neighbor(head, self.rng)

    def _group_probability(self) -> float:
        """Probability that a proposal is a group move: the share s of the space's edges that are
        grouped, times g / (g + (1 - g) F) (F: expected edges a group move flips), so that group moves
        make a share g = `group_moves` of the flips; 0 for spaces without group moves."""
        if self._group_p is None:
            n = self._n_edges
            on = self.group_moves > 0 and n >= max(1, self.group_min_edges) and self._edge_space
            sizes = np.array([len(g) for g in self.space.edge_groups()] if on else [], dtype=float)
            if not len(sizes):
                self._group_p = 0.0
            else:
                share = sizes.sum() / n
                flips = 0.75 * float((sizes ** 2).sum() / sizes.sum())
                g = min(self.group_moves, 1.0 - 1e-9)
                self._group_p = share * g / (g + (1.0 - g) * flips)
        return self._group_p

    def _propose(self, i: int) -> Any:
        """A proposal for chain i whose key is new, or None after `retries` visited draws."""
        for _ in range(self.retries):
            cfg = self._candidate(i)
            h = config_hash(self.space, cfg)
            if h not in self.visited:
                self.visited.add(h)
                return cfg
        return None

    def ask(self, n: int) -> list:
        """One proposal for each of min(n, n_chains) chains, taken round robin."""
        out: list = []
        k = min(max(1, int(n)), self.n_chains)
        for _ in range(k):
            i = self._cursor
            self._cursor = (self._cursor + 1) % self.n_chains
            cfg = self._propose(i)
            if cfg is None and self._restart(i):
                cfg = self._propose(i)
            if cfg is None:
                continue
            self._pending[config_hash(self.space, cfg)] = i
            out.append(cfg)
        if not out:  # every chain is boxed in: fall back to fresh random points
            for _ in range(self.retries * k):
                cfg = self.space.random(self.rng)
                h = config_hash(self.space, cfg)
                if h not in self.visited:
                    self.visited.add(h)
                    self._pending[config_hash(self.space, cfg)] = self._cursor
                    out.append(cfg)
                    break
            else:
                self._exhausted = True
        while len(self._pending) > 8 * self.n_chains:  # asked but never told: forget the oldest
            del self._pending[next(iter(self._pending))]
        self.n_asked += len(out)
        return out

    # ---- tell
    def _accept(self, old: float, new: float, temp: float) -> bool:
        """Metropolis on the relative difference; a failure (inf) is never accepted over a success."""
        if new <= old:
            return True
        if not math.isfinite(new):
            return False
        delta = (new - old) / max(abs(old), 1e-30)
        return bool(self.rng.random() < math.exp(-delta / temp))

    def _set_head(self, i: int, cfg: Any, cost: float) -> None:
        old = self.heads[i]
        if (old is not None and old is not cfg and hasattr(old, "detach")
                and all(h is not old for j, h in enumerate(self.heads) if j != i)):
            old.detach()  # no longer a chain head: drop its parent link (bounded memory)
        self.heads[i] = cfg
        self.head_costs[i] = cost

    def _restart(self, i: int) -> bool:
        """Move chain i to the global best; False when there is none yet."""
        if self.best.config is None:
            return False
        self._set_head(i, self.best.config, self.best.cost)
        self.stale[i] = 0
        self.n_restarts += 1
        return True

    def tell(self, configs: list, costs: Sequence[float]) -> None:
        arr = self.observe(configs, costs)
        temp = self.temperature
        for cfg, c in zip(configs, arr):
            h = config_hash(self.space, cfg)
            self.visited.add(h)
            i = self._pending.pop(h, None)
            if i is None:
                continue  # not ours (warm start): only best and visited learn from it
            old = self.head_costs[i]
            self.stale[i] = 0 if c < old else self.stale[i] + 1
            if self._accept(old, c, temp):
                self._set_head(i, cfg, c)
            self._round_evals += 1
        for i in np.flatnonzero(self.stale >= self.patience):
            self._restart(int(i))
        if self._round_evals >= self.n_chains * self.n_steps:  # end of round: reheat, keep chains
            self._round_evals = 0
            self.round += 1

    # ---- checkpoints
    def state_dict(self) -> dict:
        d = super().state_dict()
        enc = self.space.encode
        d.update(heads=[None if h is None else enc(h) for h in self.heads], head_costs=self.head_costs.tolist(),
                 stale=self.stale.tolist(), visited=np.fromiter(self.visited, np.int64, len(self.visited)),
                 n_visited=len(self.visited), pending=dict(self._pending), cursor=self._cursor,
                 round_evals=self._round_evals, round=self.round, n_restarts=self.n_restarts,
                 n_group_moves=self.n_group_moves,
                 temperature=self.temperature, exhausted=self._exhausted)
        return d

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict(d)
        if len(d["heads"]) != self.n_chains:
            raise ValueError(f"checkpoint has {len(d['heads'])} chains, this strategy {self.n_chains}")
        dec = self.space.decode
        self.heads = [None if h is None else dec(h) for h in d["heads"]]
        # A head equal to the best shares its object, as it did before the checkpoint.
        if self.best.config is not None:
            bk = self.space.encode(self.best.config)
            self.heads = [self.best.config if h is not None and self.space.encode(h) == bk else h
                          for h in self.heads]
        self.head_costs = np.asarray(d["head_costs"], dtype=float)
        self.stale = np.asarray(d["stale"], dtype=np.int64)
        self.visited = {int(h) for h in d["visited"]}
        self._pending = dict(d["pending"])
        self._cursor = int(d["cursor"])
        self._round_evals = int(d["round_evals"])
        self.round = int(d["round"])
        self.n_restarts = int(d["n_restarts"])
        self.n_group_moves = int(d.get("n_group_moves", 0))
        self._exhausted = bool(d["exhausted"])


register_strategy(SimulatedAnnealing.name, SimulatedAnnealing)
