"""Shared fixtures for strategy tests: a small real program's fusion space and a cheap synthetic cost.

The synthetic cost is structured like a real one (per-kernel launch overhead, a cost growing with
kernel size, and a superlinear penalty for oversized kernels, plus a little hash-derived noise), so
that the default (XLA-like maximal fusion) is not optimal and local moves have a gradient to follow.
"""
from __future__ import annotations

import os

import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(REPO, "examples", "hlo", "gnn_small_infer.hlo")
TINY = os.path.join(REPO, "tests", "fixtures", "hlo", "analysis_nested_while_opt.hlo")


def kernel_cost(h: str, n: int) -> float:
    u = int(h[:8], 16) / 16 ** 8
    return 1.0 + 0.02 * n + 0.5 * (n / 32.0) ** 2 + 0.2 * u


class SyntheticCost:
    """cost(cfg) in seconds from the configuration's kernel set; memoized by kernel hash."""

    def __init__(self, space: FusionSpace):
        self.space = space
        self.cache: dict[str, float] = {}
        self.calls = 0

    def __call__(self, cfg) -> float:
        self.calls += 1
        total = 0.0
        for ref in self.space.state(cfg).refs():
            c = self.cache.get(ref.hash)
            if c is None:
                c = self.cache[ref.hash] = kernel_cost(ref.hash, len(ref.members))
            total += c * self.space.multiplicity[ref.comp]
        return total * 1e-6

    def many(self, configs) -> list[float]:
        return [self(c) for c in configs]


@pytest.fixture(scope="session")
def program() -> Program:
    return Program.from_file(PROGRAM)


@pytest.fixture()
def space(program) -> FusionSpace:
    return FusionSpace(program, "tpu")


@pytest.fixture()
def cost(space) -> SyntheticCost:
    return SyntheticCost(space)


@pytest.fixture()
def cost_of():
    """The SyntheticCost class, for tests that build extra spaces."""
    return SyntheticCost


@pytest.fixture()
def tiny_space() -> FusionSpace:
    return FusionSpace(Program.from_file(TINY), "tpu")
