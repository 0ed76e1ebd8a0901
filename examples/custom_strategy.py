"""A custom search strategy: copy this file to write your own.

HillClimb is a greedy edge-flipping hill climber: each ask() proposes n unseen neighbors of the
current configuration (one edge flipped, via space.neighbor, so the tuner derives their kernels
incrementally); tell() moves to the best of them if it is faster, and restarts from a random
configuration after `patience` proposals without improvement. Use it with
`--strategy examples/custom_strategy.py:HillClimb` (or `custom_strategy:HillClimb`), or publish it
in your package's setup.cfg: `[options.entry_points] autotune.strategies = hillclimb = pkg.mod:HillClimb`.
Contracts (search/base.py, checked by `autotune.testing.contracts.check_strategy`, docs/plugins.md): ask(n)
returns 1..n valid configurations never proposed before; tell() takes costs in seconds (inf = failure);
state_dict() is picklable and holds configurations as space.encode(...).
"""
import numpy as np

from search.base import Strategy, key_hash


class HillClimb(Strategy):
    name = "hillclimb"

    def __init__(self, space, seed=None, patience: int = 256, **params):
        super().__init__(space, seed, **params)  # sets self.space, self.rng, self.best
        self.patience, self.seen = patience, set()
        self.current, self.cost, self.fails = space.default(), float("inf"), 0
        self.exhausted = False

    def ask(self, n: int) -> list:
        if not self.seen:  # first call: the starting point itself
            self.seen.add(key_hash(self.space.encode(self.current)))
            return [self.current]
        out = self._unseen(lambda: self.space.neighbor(self.current, self.rng), n, tries=4 * n)
        if not out:  # boxed in: jump anywhere not proposed before
            out = self._unseen(lambda: self.space.random(self.rng), 1, tries=4 * n)
        self.exhausted = not out  # nothing new in 8n draws: the space looks used up
        return out

    def _unseen(self, draw, n: int, tries: int) -> list:
        """Up to n configurations from `draw()` never proposed before, in at most `tries` draws."""
        out = []
        for _ in range(tries):
            cfg = draw()
            h = key_hash(self.space.encode(cfg))
            if h not in self.seen:
                self.seen.add(h)
                out.append(cfg)
                if len(out) == n:
                    break
        return out

    @property
    def finished(self) -> bool:
        return self.exhausted

    def tell(self, configs: list, costs) -> None:
        costs = self.observe(configs, costs)  # checks lengths, NaN -> inf, updates self.best
        i = int(np.argmin(costs)) if len(costs) else 0
        if len(costs) and costs[i] < self.cost:
            self.current.detach()  # no longer the chain head: drop its parent link (bounded memory)
            self.current, self.cost, self.fails = configs[i], float(costs[i]), 0
        else:
            self.fails += len(configs)
            if self.fails >= self.patience:  # stuck in a local minimum: restart elsewhere
                self.current, self.cost, self.fails = self.space.random(self.rng), float("inf"), 0

    def state_dict(self) -> dict:
        return {**super().state_dict(), "current": self.space.encode(self.current), "cost": self.cost,
                "fails": self.fails, "seen": list(self.seen)}

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict(d)
        self.current, self.cost, self.fails = self.space.decode(d["current"]), d["cost"], d["fails"]
        self.seen = set(d["seen"])
