"""Genetic search over edge bits, after AutoTVM's GATuner.

A generational GA with elitism: the first generation is the default configuration plus random ones;
each next generation keeps the `elite` best individuals and breeds the rest by tournament selection,
uniform crossover of edge bits (`space.crossover`, which repairs the child) and mutation
(`space.mutate` flipping each edge with probability `mutation_k / n_edges`, i.e. about
`mutation_k` flips per child). Children already proposed before are redrawn, so a generation never
spends cost-model calls on old points.

ask/tell need not follow generation boundaries: `ask(n)` hands out the current generation in slices
of n and breeds the next one when it runs out, from whatever has been told by then.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.space import EdgeSpace, MutableSpace, Space
from search.base import Strategy, config_hash, register_strategy


class GeneticSearch(Strategy):
    """Generational genetic algorithm with tournament selection and elitism (see module docstring)."""

    name = "genetic"

    def __init__(self, space: Space, seed: Optional[int] = None, population: int = 32, elite: int = 4,
                 tournament: int = 3, mutation_k: float = 2.0, crossover_prob: float = 0.9,
                 retries: int = 8, **params: Any):
        super().__init__(space, seed, **params)
        if population < 2 or not 0 <= elite < population or tournament < 1:
            raise ValueError("need population >= 2, 0 <= elite < population, tournament >= 1")
        self.pop_size = int(population)
        self.elite = int(elite)
        self.tournament = int(tournament)
        self.mutation_k = float(mutation_k)
        self.crossover_prob = float(crossover_prob)
        self.retries = max(1, int(retries))
        n_edges = (space.n_edges if isinstance(space, EdgeSpace) else 0) or 0
        self._mutable = isinstance(space, MutableSpace)  # else: one neighbor move per mutation (e.g. tiles)
        self.mutation_rate = min(1.0, self.mutation_k / n_edges) if n_edges else 0.0
        self.population: list[tuple[Any, float]] = []  # parents, best first
        self._offspring: list[tuple[Any, float]] = []  # told since the last breeding
        self._queue: list = []                         # this generation, not yet asked
        self.visited: set[int] = set()
        self.generation = 0
        self._exhausted = False

    @property
    def finished(self) -> bool:
        return self._exhausted

    # ---- operators
    def _select(self) -> Any:
        """Tournament selection: the best of `tournament` individuals drawn with replacement."""
        idx = self.rng.integers(len(self.population), size=self.tournament)
        return self.population[int(min(idx, key=lambda j: (self.population[j][1], j)))][0]

    def _mutate(self, cfg: Any) -> Any:
        if self._mutable:
            return self.space.mutate(cfg, self.rng, self.mutation_rate)
        return self.space.neighbor(cfg, self.rng)  # spaces without mutate (e.g. tiles): one step

    def _child(self) -> Any:
        a = self._select()
        if self.rng.random() < self.crossover_prob:
            a = self.space.crossover(a, self._select(), self.rng)
        return self._mutate(a)

    def _fresh(self, make) -> Any:
        """First of `retries` configurations from make() whose key is new (marked visited), or None."""
        for _ in range(self.retries):
            cfg = make()
            h = config_hash(self.space, cfg)
            if h not in self.visited:
                self.visited.add(h)
                return cfg
        return None

    def _breed(self) -> None:
        """Form the next parents from what was told, then fill the queue with their children."""
        if self._offspring:
            pool: dict[Any, tuple[Any, float]] = {}
            for cfg, c in self.population + self._offspring:
                k = self.space.encode(cfg)
                if k not in pool or c < pool[k][1]:
                    pool[k] = (cfg, c)
            everyone = sorted(pool.values(), key=lambda t: t[1])
            elites = everyone[:self.elite]
            ek = {self.space.encode(c) for c, _ in elites}
            young = sorted(((c, v) for c, v in self._offspring if self.space.encode(c) not in ek),
                           key=lambda t: t[1])
            self.population = elites + young[:self.pop_size - len(elites)]
            self._offspring = []
        self.generation += 1
        if self.population:
            n_new, make = self.pop_size - self.elite, self._child
        else:  # nothing told yet: the default and random configurations
            n_new, make = self.pop_size, (lambda: self.space.random(self.rng))
            first = self._fresh(self.space.default)
            self._queue = [first] if first is not None else []
        for _ in range(2 * n_new):  # bounded: a nearly exhausted space yields a short generation
            if len(self._queue) >= n_new:
                break
            cfg = self._fresh(make)
            if cfg is None:  # the neighbourhood of the parents is used up: explore
                cfg = self._fresh(lambda: self.space.random(self.rng))
            if cfg is not None:
                self._queue.append(cfg)

    # ---- protocol
    def ask(self, n: int) -> list:
        if not self._queue:
            self._breed()
        n = max(1, int(n))
        out, self._queue = self._queue[:n], self._queue[n:]
        if not out:
            self._exhausted = True
        self.n_asked += len(out)
        return out

    def tell(self, configs: list, costs: Sequence[float]) -> None:
        arr = self.observe(configs, costs)
        for cfg, c in zip(configs, arr):
            self.visited.add(config_hash(self.space, cfg))
            self._offspring.append((cfg, float(c)))

    # ---- checkpoints
    def state_dict(self) -> dict:
        d = super().state_dict()
        enc = self.space.encode
        d.update(population=[(enc(c), v) for c, v in self.population],
                 offspring=[(enc(c), v) for c, v in self._offspring], queue=[enc(c) for c in self._queue],
                 visited=np.fromiter(self.visited, np.int64, len(self.visited)), generation=self.generation,
                 exhausted=self._exhausted)
        return d

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict(d)
        dec = self.space.decode
        self.population = [(dec(k), float(v)) for k, v in d["population"]]
        self._offspring = [(dec(k), float(v)) for k, v in d["offspring"]]
        self._queue = [dec(k) for k in d["queue"]]
        self.visited = {int(h) for h in d["visited"]}
        self.generation = int(d["generation"])
        self._exhausted = bool(d["exhausted"])


register_strategy(GeneticSearch.name, GeneticSearch)
