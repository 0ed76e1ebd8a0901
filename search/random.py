"""Random search: uniformly random valid configurations, never the same one twice.

The baseline every other strategy must beat, and the way the training corpus is sampled (paper,
section 4). `space.random(rng)` defines "uniform" (for fusion: each edge fused with a probability
itself drawn uniformly, then repaired), so the sample covers sparse and dense fusion alike.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from autotune.compiler.space import Space
from search.base import Strategy, config_hash, register_strategy


class RandomSearch(Strategy):
    """Uniformly random valid configurations, skipping keys already asked.

    Parameters: `max_tries` - draws per requested configuration before concluding that the space
    is exhausted (small spaces); then `finished` becomes True.
    """

    name = "random"

    def __init__(self, space: Space, seed: Optional[int] = None, max_tries: int = 20, **params: Any):
        super().__init__(space, seed, **params)
        self.max_tries = int(max_tries)
        self._seen: set[int] = set()
        self._exhausted = False

    @property
    def finished(self) -> bool:
        return self._exhausted

    def ask(self, n: int) -> list:
        out: list = []
        tries = 0
        budget = self.max_tries * max(1, n)
        while len(out) < n and tries < budget:
            tries += 1
            cfg = self.space.random(self.rng)
            h = config_hash(self.space, cfg)
            if h in self._seen:
                continue
            self._seen.add(h)
            out.append(cfg)
        if not out:
            self._exhausted = True
        self.n_asked += len(out)
        return out

    def tell(self, configs: list, costs: Sequence[float]) -> None:
        self.observe(configs, costs)
        for cfg in configs:  # told but never asked (warm start): do not propose it again
            self._seen.add(config_hash(self.space, cfg))

    def state_dict(self) -> dict:
        d = super().state_dict()
        d["seen"] = np.fromiter(self._seen, dtype=np.int64, count=len(self._seen))
        d["exhausted"] = self._exhausted
        return d

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict(d)
        self._seen = {int(h) for h in d["seen"]}
        self._exhausted = bool(d.get("exhausted", False))


register_strategy(RandomSearch.name, RandomSearch)
