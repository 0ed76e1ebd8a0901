"""Group moves over classes of structurally equivalent edges (issue 21): `FusionSpace.edge_groups`,
`FusionSpace.group_neighbor`, and annealing's use of them."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.compiler.fusion import FusionConfig, FusionSpace, FusionState
from autotune.compiler.program import Program
from autotune.tuning.pricing import ProgramCost

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HLO = os.path.join(ROOT, "examples", "hlo")


def _layers(n: int) -> str:
    """n identical layers h = tanh(exp(h W) + h): a deep stack of repeated layers in miniature."""
    lines = ["HloModule stack", "ENTRY main {", "  h0 = f32[8,128] parameter(0)", "  w = f32[128,128] parameter(1)"]
    for i in range(1, n + 1):
        lines += [f"  d{i} = f32[8,128] dot(h{i - 1}, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
                  f"  e{i} = f32[8,128] exponential(d{i})",
                  f"  a{i} = f32[8,128] add(e{i}, h{i - 1})",
                  f"  h{i} = f32[8,128] tanh(a{i})"]
    lines += [f"  ROOT r = f32[8,128] negate(h{n})", "}"]
    return "\n".join(lines)


def _kernel_cost(kernels):
    return np.array([2e-6 + (k.bytes_read + k.bytes_written) / 1e11 for k in kernels])


def _exp_add_cost(kernels):
    """_kernel_cost, plus 20 us for a kernel that holds an exponential and an add."""
    base = _kernel_cost(kernels)
    return base + np.array([20e-6 if {"exponential", "add"} <= set(k.opcodes) else 0.0 for k in kernels])


@pytest.fixture(scope="module")
def stack():
    return FusionSpace(Program.from_text(_layers(12)), "tpu")


@pytest.fixture(scope="module")
def bert():
    return FusionSpace(Program.from_file(os.path.join(HLO, "bert_small_train.hlo")), "tpu")


def _edge_names(sp: FusionSpace, e: int) -> tuple:
    comp = sp.program.computations[sp.edge_comp[e]]
    return comp.instructions[sp.edge_prod[e]].name, comp.instructions[sp.edge_cons[e]].name


def test_edge_groups_are_the_same_edge_of_each_repeated_layer(stack):
    sp = stack
    groups = sp.edge_groups()
    names = [[_edge_names(sp, int(e)) for e in g] for g in groups]
    # the middle layers' d->e edges are one class, apart from the first layers' (parameter input)
    de = next(g for g in names if all(p.startswith("d") and c.startswith("e") for p, c in g))
    assert {p for p, _ in de} >= {f"d{i}" for i in range(3, 11)}
    for g in names:  # a class never mixes edges of different opcode pairs
        assert len({(p.rstrip("0123456789"), c.rstrip("0123456789")) for p, c in g}) == 1
    assert all(len(g) >= 2 for g in groups)
    assert sp.grouped_edges() == sum(len(g) for g in groups) <= sp.n_edges
    # the same program again gives the same classes (hash-seed independent signatures)
    again = FusionSpace(Program.from_text(_layers(12)), "tpu").edge_groups()
    assert [g.tolist() for g in again] == [g.tolist() for g in groups]


def test_a_program_without_repeats_has_no_groups():
    sp = FusionSpace(Program.from_text("""
HloModule one
ENTRY main {
  x = f32[8,128] parameter(0)
  e = f32[8,128] exponential(x)
  ROOT t = f32[8,128] tanh(e)
}"""), "tpu")
    assert sp.edge_groups() == [] and sp.grouped_edges() == 0
    cfg = sp.default()
    sp.state(cfg)
    nb = sp.group_neighbor(cfg, np.random.default_rng(0))  # falls back to a one-edge move
    assert len(nb.flips) <= 1


def test_a_whole_group_move_sets_every_legal_member(stack):
    sp = stack
    cfg = sp.default()
    sp.state(cfg)
    g = 0
    edges = sp.edge_groups()[g]
    nb = sp.group_neighbor(cfg, np.random.default_rng(3), group=g, fraction=1.0)
    assert nb.flips and set(nb.flips) <= set(edges.tolist())
    target = nb.bits[nb.flips[0]]
    moved = [e for e in edges.tolist() if cfg.bits[e] != target]
    skipped = set(moved) - set(nb.flips)
    assert sp.is_valid(nb)
    for e in skipped:  # a skipped member could not flip legally on top of the others
        bits = bytearray(nb.bits)
        bits[e] ^= 1
        assert sp.flip_delta(bits, e) is None
    diff = np.flatnonzero(nb.to_array() != cfg.to_array())
    assert sorted(diff.tolist()) == sorted(nb.flips)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 12), which=st.sampled_from(["stack", "bert"]))
def test_group_moves_keep_kernel_sets_digests_and_prices_exact(stack, bert, seed, steps, which):
    """A walk mixing group and one-edge moves: every configuration valid, its kernel set (derived from
    the parent by the move's delta) equal to one built from scratch, its Zobrist digest equal to the
    digest of its bits, and its price through the tuner's incremental path equal to a full pricing."""
    sp = stack if which == "stack" else bert
    rng = np.random.default_rng(seed)
    cfg = sp.default() if seed % 2 else sp.random(rng)
    inc = ProgramCost(sp, _kernel_cost)
    full = ProgramCost(sp, _kernel_cost)
    inc([cfg])
    for _ in range(steps):
        cfg = sp.group_neighbor(cfg, rng) if rng.random() < 0.7 else sp.neighbor(cfg, rng)
        assert sp.is_valid(cfg)
        assert cfg.digest is None or cfg.digest == sp.config_digest(FusionConfig(bytearray(cfg.bits)))
        got = inc([cfg])[0]
        assert got == pytest.approx(full([FusionConfig(bytearray(cfg.bits))])[0], rel=1e-9)
    st_ = sp.state(cfg)
    ref = FusionState.build(sp, cfg.bits)
    assert {k: v.members for k, v in st_.kernels.items()} == {k: v.members for k, v in ref.kernels.items()}


def test_annealing_makes_group_moves_only_when_asked(stack):
    from search.annealing import SimulatedAnnealing
    for gm, expect in ((0.0, False), (0.94, True)):
        strat = SimulatedAnnealing(stack, seed=0, n_chains=4, group_moves=gm, group_min_edges=0)
        pc = ProgramCost(stack, _kernel_cost)
        for _ in range(40):
            cfgs = strat.ask(4)
            strat.tell(cfgs, pc(cfgs))
        assert (strat.n_group_moves > 0) == expect
        assert strat.state_dict()["n_group_moves"] == strat.n_group_moves
    p = SimulatedAnnealing(stack, seed=0, group_min_edges=0)._group_probability()
    assert 0.0 < p < 1.0
    # a space of fewer than group_min_edges edges (the default 12,000) gets none: the search is the one
    # without group moves, proposal for proposal
    assert SimulatedAnnealing(stack, seed=0)._group_probability() == 0.0
    runs = []
    for gm in (0.94, 0.0):
        strat = SimulatedAnnealing(stack, seed=3, n_chains=4, group_moves=gm)
        pc = ProgramCost(stack, _kernel_cost)
        keys = []
        for _ in range(20):
            cfgs = strat.ask(4)
            strat.tell(cfgs, pc(cfgs))
            keys += [c.key() for c in cfgs]
        runs.append(keys)
    assert runs[0] == runs[1]
    with pytest.raises(ValueError, match="group_moves"):
        SimulatedAnnealing(stack, seed=0, group_moves=1.5)


def test_group_moves_find_what_one_edge_moves_miss_on_a_deep_stack():
    """On 24 repeated layers with a cost that penalizes every layer's exp fused with its add alike,
    annealing with group moves reaches a lower cost in the same number of proposals (one decision,
    24 layers)."""
    from search.annealing import SimulatedAnnealing
    sp = FusionSpace(Program.from_text(_layers(24)), "tpu")
    res = {}
    for gm in (0.0, 0.94):
        best = []
        for seed in range(3):
            strat = SimulatedAnnealing(sp, seed=seed, n_chains=8, group_moves=gm, group_min_edges=0)
            pc = ProgramCost(sp, _exp_add_cost)
            for _ in range(12):
                cfgs = strat.ask(8)
                strat.tell(cfgs, pc(cfgs))
            best.append(strat.best.cost)
        res[gm] = np.mean(best)
    assert res[0.94] < res[0.0]
