"""Layout space (autotune/compiler/layouts.py): configurable nodes, legal layouts, default, moves,
the rewritten program, and its pricing on the simulator; checked against TpuGraphs' real sample."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from autotune.compiler.hlo import parse_hlo
from autotune.compiler.layouts import LayoutConfig, LayoutSpace, complete_layout, physical_order
from autotune.compiler.program import Program, load_program

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "tpugraphs"
EXAMPLES = ["autoencoder_small_infer", "vae_small_infer", "lstm_small_infer"]

RESHAPE_TANH = """HloModule reshape_tanh, entry_computation_layout={(f32[64,512]{1,0})->f32[64,512]{1,0}}

ENTRY main {
  p = f32[64,512]{1,0} parameter(0)
  r = f32[64,8,64]{2,1,0} reshape(p)
  t = f32[64,8,64]{2,1,0} tanh(r)
  ROOT o = f32[64,512]{1,0} reshape(t)
}
"""

UNIT_DIMS = """HloModule unit_dims

ENTRY main {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[4,1,1,16]{3,2,1,0} reshape(p)
}
"""

CONV = """HloModule conv, entry_computation_layout={(f32[2,16,16,8]{3,2,1,0}, f32[3,3,8,16]{3,2,1,0})->f32[2,16,16,16]{3,2,1,0}}

ENTRY main {
  x = f32[2,16,16,8]{3,2,1,0} parameter(0)
  w = f32[3,3,8,16]{3,2,1,0} parameter(1)
  c = f32[2,16,16,16]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  ROOT r = f32[2,16,16,16]{3,2,1,0} maximum(c, c)
}
"""


@pytest.fixture(scope="module")
def sample():
    summary = json.loads((SAMPLE / "tile_layout_summary.json").read_text())
    return summary, LayoutSpace(load_program(SAMPLE / "layout_module.hlo"), "tpu")


def test_sample_configurable_nodes_are_tpugraphs_nodes(sample):
    summary, space = sample
    assert len(space.nodes) == summary["num_configurable_nodes"] == 62
    assert Counter(n.opcode for n in space.nodes) == Counter(summary["configurable_nodes_opcodes"])
    assert [(n.computation, n.instruction) for n in space.nodes] == \
        [(m["computation"], m["instruction"]) for m in summary["configurable_nodes_mapped"]]


def test_every_recorded_tpu_layout_is_legal_and_decodes(sample):
    summary, space = sample
    keys = set()
    for run in summary["runs"]:
        cfg = space.from_layouts(run["layout_nodes"])  # raises on a layout the space does not allow
        assert space.decode(space.encode(cfg)) == cfg
        keys.add(cfg.key())
    assert len(keys) > 50  # the runs explore the space, they are not one configuration


def test_tpu_default_rule_against_the_recorded_default(sample):
    """Feature minor, batch second-minor: matches XLA:TPU's recorded default on 51 of the 53
    convolution outputs (the docstring of layouts.py states where the rule differs)."""
    summary, space = sample
    recorded = next(r for r in summary["runs"] if r["is_default"])["layout_nodes"]
    ours = space.layouts(space.default())
    outputs = [(complete_layout(rec[0], len(nd.choices[0][0])) == ours[(nd.comp, nd.node)][0])
               for nd, rec in zip(space.nodes, recorded) if nd.opcode == "convolution"]
    assert (sum(outputs), len(outputs)) == (51, 53)


def test_complete_layout():
    assert complete_layout([4, 0], 5) == (4, 0, 3, 2, 1)
    assert complete_layout([], 3) == (2, 1, 0)
    with pytest.raises(ValueError):
        complete_layout([4, 4], 5)
    with pytest.raises(ValueError):
        complete_layout([5], 5)


def test_legal_layouts_per_target():
    prog = Program.from_text(CONV)
    tpu, cpu = LayoutSpace(prog, "tpu"), LayoutSpace(prog, "cpu")
    (node,) = tpu.nodes
    assert node.choices[0][node.defaults[0]] == (3, 0, 2, 1)   # output: feature minor, batch second
    assert node.choices[2][node.defaults[2]] == (3, 2, 1, 0)   # rhs: output feature minor, input second
    assert set(node.choices[0]) == {(3, 2, 1, 0), (3, 0, 2, 1), (0, 3, 2, 1)}  # written + the two pairs
    (cnode,) = cpu.nodes  # XLA:CPU pins convolution layouts to row-major
    assert all(len(c) == 1 for c in cnode.choices) and cpu.free_slots == []
    rs = LayoutSpace(Program.from_text(RESHAPE_TANH), "cpu")
    assert [len(c) for n in rs.nodes for c in n.choices] == [6, 2, 2, 6]  # reshapes: every permutation
    # layouts differing only in where size-1 dims go are one choice
    ones = LayoutSpace(Program.from_text(UNIT_DIMS), "tpu")
    assert [len(c) for c in ones.nodes[0].choices] == [2, 1]
    assert physical_order((3, 0, 2, 1), (4, 1, 1, 16)) == (3, 0)
    cfg = ones.from_layouts([[[0, 1, 2, 3], [0]]])  # matched by its physical order, dim 0 minor
    assert physical_order(ones.layouts(cfg)[(0, 1)][0], (4, 1, 1, 16)) == (0, 3)
    assert ones.layouts(ones.default())[(0, 1)][0] == (3, 2, 1, 0)


def test_moves_encode_decode_hash():
    space = LayoutSpace(load_program(ROOT / "examples" / "hlo" / "vae_small_infer.hlo"), "tpu")
    rng = np.random.default_rng(0)
    d = space.default()
    assert space.decode(space.encode(d)) == d
    for _ in range(20):
        r = space.random(rng)
        n = space.neighbor(r, rng)
        assert sum(a != b for a, b in zip(r.key(), n.key())) == 1
        m = space.mutate(r, rng, 0.3)
        c = space.crossover(r, m, rng)
        for cfg in (r, n, m, c):
            assert space.decode(space.encode(cfg)) == cfg
    assert space.config_hash(d) == LayoutSpace(space.program, "tpu").config_hash(d)
    assert space.config_hash(d) != space.config_hash(space.neighbor(d, rng))
    with pytest.raises(ValueError, match="choices"):
        space.decode(b"\x00")
    with pytest.raises(ValueError, match="chooses layout"):
        space.decode(bytes([255] * space.n_slots))


def test_rewrite_propagates_and_copies():
    space = LayoutSpace(Program.from_text(RESHAPE_TANH), "tpu")
    d = space.default()
    assert space.copies(d) == 0
    assert space.emit_text(d, metadata=False).count("relayout") == 0
    r = space.nodes[0]
    bad = bytearray(d.key())
    bad[r.offset] = r.choices[0].index((1, 0, 2))  # the size-8 dim minor: padded to 128 lanes
    cfg = LayoutConfig(bad)
    text = space.emit_text(cfg)
    mod = parse_hlo(text)  # parses and verifies
    t = next(i for i in mod.entry.instructions if i.name == "t")
    assert t.shape.minor_to_major() == (1, 0, 2)  # the elementwise user follows its operand
    assert space.copies(cfg) == 1  # back to row-major for the final reshape
    from hardware.simulator import simulate

    def cost(c):
        ks = space.kernels(c)
        return float(np.sum(simulate(ks) * [k.multiplicity for k in ks]))
    assert cost(cfg) > cost(d)


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("target", ["tpu", "cpu"])
def test_random_configurations_emit_valid_programs(name, target):
    space = LayoutSpace(load_program(ROOT / "examples" / "hlo" / f"{name}.hlo"), target)
    rng = np.random.default_rng(1)
    for cfg in [space.default()] + [space.random(rng) for _ in range(3)]:
        mod = parse_hlo(space.emit_text(cfg))
        assert mod.entry.root.shape == space.program.module.entry.root.shape
        assert space.kernels(cfg)


_SPACES: dict = {}


def _space(name: str) -> LayoutSpace:
    if name not in _SPACES:
        _SPACES[name] = LayoutSpace(load_program(ROOT / "examples" / "hlo" / f"{name}.hlo"), "tpu")
    return _SPACES[name]


@pytest.mark.xla
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(EXAMPLES), seed=st.integers(0, 2 ** 16))
def test_property_layouts_change_no_values(name, seed):
    """Random layout configurations emit programs that parse, verify and compute the same outputs."""
    xla = pytest.importorskip("hardware.xla")
    pytest.importorskip("jax")
    space = _space(name)
    cfg = space.random(np.random.default_rng(seed))
    text = space.emit_text(cfg)
    parse_hlo(text)
    original = space.program.module.to_text()
    inputs = xla.verification_inputs(original, seed=0)
    want = xla.run_hlo(original, inputs)
    got = xla.run_hlo(text, inputs)
    err, ok = xla.output_error(got, want)
    assert ok, err


@pytest.mark.xla
def test_xla_cpu_drops_layouts_written_in_hlo_text():
    """jaxlib compiles StableHLO: the HLO's entry and instruction layouts (column-major here) are
    dropped and XLA:CPU compiles the row-major program (docs/layouts.md)."""
    xla = pytest.importorskip("hardware.xla")
    pytest.importorskip("jax")
    text = """HloModule column_major, entry_computation_layout={(f32[64,256]{0,1})->f32[64,256]{0,1}}

ENTRY main {
  a = f32[64,256]{0,1} parameter(0)
  ROOT t = f32[64,256]{0,1} tanh(a)
}
"""
    opt = xla.compile_hlo(text).optimized_text()
    header = next(line for line in opt.splitlines() if line.startswith("HloModule"))
    assert "f32[64,256]{1,0}" in header and "{0,1}" not in header
