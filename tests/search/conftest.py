"""Shared fixtures for strategy tests: a small real program's fusion space and a cheap synthetic cost
(`autotune.testing.contracts.SyntheticFusionCost`: structured like a real one, so that the default, XLA-like
maximal fusion, is not optimal and local moves have a gradient to follow)."""
from __future__ import annotations

import os

import pytest

from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from autotune.testing.contracts import SyntheticFusionCost as SyntheticCost

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(REPO, "examples", "hlo", "gnn_small_infer.hlo")
TINY = os.path.join(REPO, "tests", "fixtures", "hlo", "analysis_nested_while_opt.hlo")


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
