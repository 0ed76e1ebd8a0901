"""The `Space` protocol (autotune/compiler/space.py): the three spaces implement it, each member
themselves, and offer the optional capabilities the module's table lists."""
from __future__ import annotations

import os

import numpy as np
import pytest

from autotune.compiler import space as S
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.layouts import LayoutSpace
from autotune.compiler.program import Program
from autotune.compiler.tiles import TileSpace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CAPABILITIES = (S.MutableSpace, S.EdgeSpace, S.DigestSpace, S.WalkingSpace, S.KernelSpace, S.EnumerableSpace,
                S.ArraySpace, S.FeatureSpace)


@pytest.fixture(scope="module")
def spaces():
    prog = Program.from_file(os.path.join(ROOT, "examples", "hlo", "gnn_small_infer.hlo"))
    fusion = FusionSpace(prog, "tpu")
    kernel = max(fusion.kernels(fusion.default()), key=lambda k: len(TileSpace(k, "tpu")))
    return {"fusion": fusion, "tile": TileSpace(kernel, "tpu"), "layout": LayoutSpace(prog, "tpu")}


@pytest.mark.parametrize("kind, capabilities", [
    ("fusion", {"MutableSpace", "EdgeSpace", "DigestSpace"}),
    ("tile", {"KernelSpace", "EnumerableSpace", "ArraySpace"}),
    ("layout", {"MutableSpace", "WalkingSpace"}),
])
def test_spaces_implement_the_protocol_and_their_capabilities(spaces, kind, capabilities):
    space = spaces[kind]
    assert isinstance(space, S.Space)
    for name in ("default", "random", "neighbor", "crossover", "encode", "decode"):  # none is the protocol's stub
        assert getattr(type(space), name) is not getattr(S.Space, name), name
    assert {c.__name__ for c in CAPABILITIES if isinstance(space, c)} == capabilities


def test_the_protocol_round_trips_configurations(spaces):
    rng = np.random.default_rng(0)
    for space in spaces.values():
        a, b = space.random(rng), space.neighbor(space.default(), rng)
        child = space.crossover(a, b, rng)
        for cfg in (space.default(), a, b, child):
            assert space.encode(space.decode(space.encode(cfg))) == space.encode(cfg)
        assert space.target is not None


def test_a_structural_space_is_a_space_without_subclassing():
    class Line:
        target = "tpu"

        def default(self): return 0
        def random(self, rng): return int(rng.integers(10))
        def neighbor(self, cfg, rng): return max(0, min(9, cfg + int(rng.choice([-1, 1]))))
        def crossover(self, a, b, rng): return a
        def encode(self, cfg): return cfg
        def decode(self, key): return key

    assert isinstance(Line(), S.Space) and not isinstance(Line(), S.MutableSpace)
    from search.base import get_strategy
    strat = get_strategy("annealing")(Line(), seed=0, n_chains=2)
    cfgs = strat.ask(2)
    strat.tell(cfgs, [float(c) for c in cfgs])
    assert all(0 <= c <= 9 for c in cfgs)
