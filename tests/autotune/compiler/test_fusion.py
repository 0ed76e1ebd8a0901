"""Fusion space: semantics (roots, cloning, heroes), legality per target, space operations."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.compiler.fusion import FusionConfig, FusionSpace, FusionState
from autotune.compiler.program import Program

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HLO = os.path.join(ROOT, "examples", "hlo")

DIAMOND = """
HloModule diamond
ENTRY main {
  x = f32[64,128] parameter(0)
  e = f32[64,128] exponential(x)
  a = f32[64,128] add(e, x)
  m = f32[64,128] multiply(e, x)
  ROOT s = f32[64,128] subtract(a, m)
}
"""


def _space(text: str, target: str = "tpu") -> FusionSpace:
    return FusionSpace(Program.from_text(text), target)


def _edge(space: FusionSpace, prod: str, cons: str) -> int:
    comp = space.program.computations[0]
    for e in range(space.n_edges):
        if (comp.instructions[space.edge_prod[e]].name, comp.instructions[space.edge_cons[e]].name) == (prod, cons):
            return e
    raise KeyError((prod, cons))


def _kernels(space: FusionSpace, cfg: FusionConfig) -> dict:
    comp = space.program.computations[0]
    return {comp.instructions[k.root].name: sorted(comp.instructions[m].name for m in k.members)
            for k in space.state(cfg).refs()}


def test_unfused_every_op_is_a_kernel():
    sp = _space(DIAMOND)
    assert sp.n_edges == 4
    assert _kernels(sp, sp.unfused()) == {"e": ["e"], "a": ["a"], "m": ["m"], "s": ["s"]}


def test_producer_fused_into_some_users_is_cloned():
    sp = _space(DIAMOND)
    bits = bytearray(sp.n_edges)
    bits[_edge(sp, "e", "a")] = 1
    ks = _kernels(sp, FusionConfig(bits))
    # e is cloned into a's kernel and stays a kernel of its own (m still reads it)
    assert ks == {"e": ["e"], "a": ["a", "e"], "m": ["m"], "s": ["s"]}
    bits[_edge(sp, "e", "m")] = 1
    ks = _kernels(sp, FusionConfig(bits))
    assert "e" not in ks and ks["a"] == ["a", "e"] and ks["m"] == ["e", "m"]


def test_everything_fused_is_one_kernel():
    sp = _space(DIAMOND)
    cfg = FusionConfig(bytearray([1] * sp.n_edges))
    assert _kernels(sp, cfg) == {"s": ["a", "e", "m", "s"]}


def test_default_does_not_duplicate_expensive_producer_partially():
    sp = _space(DIAMOND)
    ks = _kernels(sp, sp.default())
    assert list(ks) == ["s"]  # exp fusible into all users: no duplication needed


DOTS = """
HloModule dots
ENTRY main {
  x = f32[128,256] parameter(0)
  w = f32[256,128] parameter(1)
  v = f32[128,128] parameter(2)
  b = f32[128] parameter(3)
  d1 = f32[128,128] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[128,128] broadcast(b), dimensions={1}
  a = f32[128,128] add(d1, bb)
  r = f32[128,128] tanh(a)
  d2 = f32[128,128] dot(r, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = f32[128,128] negate(d2)
}
"""


def test_tpu_one_hero_per_kernel():
    sp = _space(DOTS, "tpu")
    everything = sp.repair(FusionConfig(bytearray([1] * sp.n_edges)))
    assert sp.is_valid(everything)
    for k in sp.kernels(everything):
        assert sum(op in ("dot", "convolution", "reduce") for op in k.opcodes) <= 1
    # The chain bias-add/tanh fuses into a dot as producers or consumers.
    ks = _kernels(sp, sp.default())
    assert any("d2" in v and "r" in v for v in ks.values()) or any("d1" in v and "r" in v for v in ks.values())


def test_cpu_keeps_matrix_dots_out_of_fusions():
    sp = _space(DOTS, "cpu")
    for cfg in (sp.default(), sp.random(np.random.default_rng(0))):
        for k in sp.kernels(cfg):
            if "dot" in k.opcodes:
                assert k.opcodes == ["dot"]


def test_invalid_configs_are_rejected_and_repaired():
    sp = _space(DOTS, "tpu")
    bad = FusionConfig(bytearray([1] * sp.n_edges))
    assert not sp.is_valid(bad)
    fixed = sp.repair(bad)
    assert sp.is_valid(fixed) and sp.repair(fixed) == fixed
    with pytest.raises(ValueError):
        sp.repair(FusionConfig(bytearray(sp.n_edges + 1)))


@pytest.fixture(scope="module")
def bert_space():
    return FusionSpace(Program.from_file(os.path.join(HLO, "bert_small_infer.hlo")), "tpu")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 40))
def test_config_digest_of_a_walk_equals_its_digest_from_scratch(bert_space, seed, steps):
    """A neighbor's digest is its parent's XOR one edge's value: the same as computing it from the
    bits, whatever the walk; configurations that differ have different digests."""
    sp = bert_space
    rng = np.random.default_rng(seed)
    cfg = sp.default()
    seen = {sp.config_digest(cfg): cfg.key()}
    for _ in range(steps):
        cfg = sp.neighbor(cfg, rng)
        d = cfg.digest
        assert d is not None and d == sp.config_digest(FusionConfig(bytearray(cfg.bits)))
        assert seen.setdefault(d, cfg.key()) == cfg.key()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 40), target=st.sampled_from(["tpu", "cpu"]))
def test_incremental_kernel_sets_match_rebuild(bert_space, seed, steps, target):
    sp = bert_space if target == "tpu" else FusionSpace(bert_space.program, "cpu")
    rng = np.random.default_rng(seed)
    cfg = sp.random(rng) if seed % 2 else sp.default()
    for _ in range(steps):
        cfg = sp.neighbor(cfg, rng)
        assert sp.is_valid(cfg)
    inc = sp.state(cfg)
    full = FusionState.build(sp, cfg.bits)
    assert {k: v.hash for k, v in inc.kernels.items()} == {k: v.hash for k, v in full.kernels.items()}
    assert {k: v.members for k, v in inc.kernels.items()} == {k: v.members for k, v in full.kernels.items()}


def _wide_fan_out_program(users: int) -> str:
    """One broadcast read by each of a chain of `users` adds."""
    lines = ["HloModule wide", "ENTRY main {", "  x = f32[] parameter(0)", "  y = f32[8,128] parameter(1)",
             "  b = f32[8,128] broadcast(x), dimensions={}", "  s0 = f32[8,128] add(b, y)"]
    lines += [f"  s{i} = f32[8,128] add(s{i - 1}, b)" for i in range(1, users)]
    lines += [f"  ROOT r = f32[8,128] negate(s{users - 1})", "}"]
    return "\n".join(lines)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), fused=st.floats(0.0, 1.0))
def test_is_root_of_a_wide_producer_is_the_definition(seed, fused):
    """A producer with more fusible users than `_WIDE_FAN_OUT` is checked as an array: still a root
    exactly when one of its users does not fuse it (all fused, one unfused, random)."""
    from autotune.compiler.fusion.space import _WIDE_FAN_OUT
    sp = _space(_wide_fan_out_program(_WIDE_FAN_OUT + 36))
    assert len(sp._wide_out_edges) == 1  # the broadcast
    (_, b), = sp._wide_out_edges
    assert sp.program.computations[0].instructions[b].opcode == "broadcast"
    rng = np.random.default_rng(seed)
    out = [e for e, _ in sp.out_edges[0][b]]
    every = bytearray(b"\x01" * sp.n_edges)
    one_cut = bytearray(every)
    one_cut[out[rng.integers(len(out))]] = 0
    rand = bytearray((rng.random(sp.n_edges) < fused).astype(np.uint8).tobytes())
    for bits in (every, one_cut, rand):
        assert sp.is_root(bits, 0, b) == (not all(bits[e] for e in out))
        assert sp.is_root(bytes(bits), 0, b) == sp.is_root(bits, 0, b)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1))
def test_space_operations_keep_validity(bert_space, seed):
    sp = bert_space
    rng = np.random.default_rng(seed)
    a, b = sp.random(rng), sp.random(rng)
    for cfg in (a, b, sp.crossover(a, b, rng), sp.mutate(a, rng, 0.05), sp.neighbor(a, rng)):
        assert sp.is_valid(cfg)
        assert sp.decode(sp.encode(cfg)) == cfg
    # every kernel's members are reachable from its root through fused edges, roots are kernel roots
    st_ = sp.state(a)
    for (ci, r), ref in st_.kernels.items():
        assert ref.members[-1] == r and sp.is_root(a.bits, ci, r)


def test_neighbor_flips_exactly_one_edge(bert_space):
    rng = np.random.default_rng(1)
    cfg = bert_space.default()
    nb = bert_space.neighbor(cfg, rng)
    diff = np.flatnonzero(nb.to_array() != cfg.to_array())
    assert len(diff) == 1 and nb.flips == (int(diff[0]),)


def test_state_derived_along_a_random_walk(bert_space):
    rng = np.random.default_rng(5)
    sp = bert_space
    start = sp.default()
    sp.state(start)
    cfg = start
    for _ in range(12):  # unevaluated intermediate configurations
        cfg = sp.neighbor(cfg, rng)
    inc = sp.state(cfg)
    full = FusionState.build(sp, cfg.bits)
    assert {k: v.hash for k, v in inc.kernels.items()} == {k: v.hash for k, v in full.kernels.items()}


# ---- in-place updates and output-fusion epilogues (issue 16: wrong results on real programs)

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hlo")


def _opcodes_of_kernels(space: FusionSpace, cfg: FusionConfig) -> list:
    comp = space.program.computations[0]
    return sorted(sorted(comp.instructions[m].opcode for m in k.members) for k in space.state(cfg).refs())


def _load(name: str, target: str = "tpu") -> FusionSpace:
    return FusionSpace(Program.from_file(os.path.join(FIXTURES, f"{name}.hlo")), target)


def test_tpu_in_place_update_never_reads_another_region_of_its_buffer():
    """dynamic_slice(cache, i) -> update at j != i: fused, XLA updates `cache` in place and the
    slice reads rows the update already wrote (measured on XLA:CPU: wrong results)."""
    sp = _load("dus_shifted_window")
    for cfg in [sp.default()] + [sp.random(np.random.default_rng(s), p=1.0) for s in range(5)]:
        for ops in _opcodes_of_kernels(sp, cfg):
            assert not ("dynamic-slice" in ops and "dynamic-update-slice" in ops), ops
    everything = FusionConfig(bytearray([1] * sp.n_edges))
    assert not sp.is_valid(everything)
    assert sp.is_valid(sp.repair(everything))


def test_tpu_in_place_update_may_read_the_region_it_writes():
    """A KV-cache update reads the window it then overwrites (same indices): XLA fuses it."""
    sp = _load("dus_kv_update")
    kernels = _opcodes_of_kernels(sp, sp.default())
    assert any("dynamic-slice" in ops and "dynamic-update-slice" in ops for ops in kernels), kernels


def test_tpu_dot_kernel_continues_through_elementwise_ops_only():
    """dot -> add -> slice -> dynamic-update-slice: every edge is fine alone, the kernel is not
    (an output fusion's epilogue is elementwise)."""
    sp = _load("dot_slice_dus")
    for cfg in [sp.default(), sp.repair(FusionConfig(bytearray([1] * sp.n_edges)))]:
        for ops in _opcodes_of_kernels(sp, cfg):
            if "dot" in ops:
                assert set(ops) - {"dot"} <= {"add", "broadcast", "multiply", "convert", "bitcast"}, ops


def test_in_place_rule_is_what_the_fast_path_checks():
    """Incremental search (flip_delta) and the full legality check agree on these programs."""
    for name in ("dus_shifted_window", "dus_kv_update", "dot_slice_dus"):
        sp = _load(name)
        rng = np.random.default_rng(0)
        cfg = sp.default()
        for _ in range(200):
            cfg = sp.neighbor(cfg, rng)
            assert sp.is_valid(cfg), name


def test_cpu_loop_body_fusions_never_read_fused_values_through_layouts():
    """Inside a while body XLA:CPU keeps no layout for values computed in a hand-made fusion, so a
    broadcast (slice, pad, reduce, ...) of one aborts its emitter (the threefry rotation
    `broadcast(32 - k)`); elementwise chains and broadcasts of kernel inputs still fuse there."""
    from autotune.compiler.targets import CpuRules
    sp = _load("loop_rotate_transpose", "cpu")
    body = next(c for c in sp.program.computations if c.kind == "while_body")
    assert body.in_loop and not sp.program.computations[0].in_loop
    ins, rules = body.instructions, sp.rules
    sub = next(i for i, x in enumerate(ins) if x.opcode == "subtract" and x.shape.rank == 0)
    bcast = next(u for u in body.users[sub] if ins[u].opcode == "broadcast")
    shr = next(u for u in body.users[bcast] if ins[u].opcode == "shift-right-logical")
    assert not rules.edge_ok(body, sub, bcast)
    assert rules.edge_ok(body, bcast, shr)  # elementwise consumer of a fused broadcast
    assert not CpuRules.loop_fusion_compiles(body, shr, [sub, bcast, shr])
    assert CpuRules.loop_fusion_compiles(body, shr, [bcast, shr])
    for cfg in (sp.default(), sp.random(np.random.default_rng(0))):
        for ref in sp.state(cfg).refs():
            assert not (sub in ref.members and bcast in ref.members)
