"""Layout search space of a program (the TpuGraphs *layout* task): configurable nodes, their legal
physical layouts per target, the default, search moves, and the program rewritten with a configuration.

A *configurable node* is a `convolution`, `dot` or `reshape` (TpuGraphs' layout collection: the nodes
whose input and output layouts the compiler's layout assignment decides). Its *tensors* are its output
followed by its array operands (convolution/dot: output, lhs, rhs; reshape: output, input), the order
of TpuGraphs' `node_config_feat` (3 tensors x 6 dims). A layout is a minor-to-major dim order, as in
HLO's `{...}` layout and TpuGraphs' `LayoutConfig.tensors[j].dims`.

Legal layouts (`tensor_choices`), after XLA's backend layout constraints:

* tpu: a convolution tensor puts its two non-spatial dims (lhs: batch, feature; rhs: input, output
  feature; output: batch, feature) minor, in either order; a dot tensor a non-batch dim minor and any
  other dim second-minor; a reshape tensor any permutation (rank <= 4) or any ordered pair of minor
  dims (rank > 4). The dims above the two minor ones stay in descending order (only the two minor dims
  decide the TPU's (8, 128) tiling), which is also how a partial TpuGraphs layout such as `[4, 0]` is
  completed (`complete_layout`). Every layout TpuGraphs' sample recorded for its 62 nodes is legal here.
* cpu (and gpu): XLA:CPU's layout assignment pins dot and convolution operands and results to the
  row-major layout (it calls Eigen/oneDNN on row-major buffers), so only reshapes are free.
Rank 0 and rank 1 tensors have one layout. The layout written in the program is always legal. Layouts
that differ only in where size-1 dims go are one choice (`physical_order`: the same bytes in the
same order); a layout given for such a tensor (`from_layouts`) is matched by its physical order.

Default (`default()`), XLA's LayoutAssignment in short: entry parameters and results keep the layout
of `entry_computation_layout` (the written one), every other array the descending (row-major) layout,
except on tpu where a convolution's tensors get *feature minor, batch second-minor* (lhs and output;
rhs: output feature minor, input feature second-minor), the TPU layout for the MXU. Where this differs
from XLA: XLA:TPU's heuristics also pick batch-minor layouts for some weight-gradient convolutions (on
TpuGraphs' sample our rule matches the recorded default of 41 of the 53 convolutions' output layouts;
tests/autotune/compiler/test_layouts.py pins the count), and XLA propagates layouts through every
layout-agnostic op, where `rewrite` propagates through elementwise ops only (below).

`rewrite(cfg)` is the program with a configuration applied, as layout assignment leaves it: the
configured tensors get their layouts; an elementwise op (not `copy`) takes the layout of its first
operand of the same dims (XLA propagates operand layouts to elementwise users); every other instruction
keeps its written layout. Where a consumer needs another layout than its producer has, a `copy` with
the needed layout is inserted (a physical transpose, what XLA inserts), except that a `broadcast` or
`iota` is re-emitted in the needed layout (it costs the same in any layout). Computation roots keep
their written layout (entry result, loop-carried state). Layouts change no values: the rewritten
program computes what the original does. The cost of a configuration is the cost of the rewritten
program's kernels (`kernels`), whose shapes carry the layouts: the simulator and the analytical model
price the (8, 128) tile padding of the two minor dims and the inserted copies
(autotune.compiler.tiles.io_geometry).
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from autotune.compiler.hlo import HloComputation, HloInstruction, HloModule, Shape
from autotune.compiler.opcodes import ELEMENTWISE, is_elementwise
from autotune.compiler.program import Computation, Program
from autotune.compiler.space import Space
from autotune.compiler.targets import Target, get_target

__all__ = ["CONFIGURABLE_OPCODES", "KERNEL_CLASSES", "kernel_class", "LayoutConfig", "LayoutNode", "LayoutSpace", "complete_layout", "physical_order",
           "tensor_choices", "MAX_PERMUTATION_RANK", "XLA_CPU_DROPS_LAYOUTS"]

CONFIGURABLE_OPCODES = ("convolution", "dot", "reshape")
MAX_PERMUTATION_RANK = 4      # reshape tensors up to this rank may take any permutation
REMATERIALIZED_OPCODES = frozenset({"broadcast", "iota"})  # re-emitted in a needed layout, never copied
# What XLA:CPU does with layouts written in HLO text (docs/layouts.md; a test pins it).
XLA_CPU_DROPS_LAYOUTS = ("XLA:CPU through jaxlib compiles StableHLO, which has no layouts: converting the HLO drops every "
                         "instruction layout and the entry_computation_layout, and XLA's own layout assignment chooses "
                         "them again; a rewritten program's values can be checked there, its timing would not reflect "
                         "the layouts")


def descending(rank: int) -> tuple:
    """The row-major (default) minor-to-major order of a rank."""
    return tuple(range(rank - 1, -1, -1))


def complete_layout(dims: Sequence[int], rank: int) -> tuple:
    """A full minor-to-major order from its minor-most dims (TpuGraphs' partial layouts such as
    [4, 0]): the remaining dims follow in descending order. Raises ValueError on a bad partial."""
    given = tuple(int(d) for d in dims)
    if len(set(given)) != len(given) or any(d < 0 or d >= rank for d in given) or len(given) > rank:
        raise ValueError(f"layout {list(given)} is not a minor-to-major order of rank {rank}")
    return given + tuple(d for d in range(rank - 1, -1, -1) if d not in given)


def _minor_pairs(rank: int, minors: Sequence[int], seconds: Optional[Sequence[int]] = None) -> list:
    """Layouts with minor dim in `minors` and second-minor in `seconds` (default: any other dim)."""
    out = []
    for a in minors:
        for b in (seconds if seconds is not None else range(rank)):
            if b != a:
                out.append(complete_layout((a, b), rank))
    return out


def _dot_dims(ins: HloInstruction, tensor: int, rank: int) -> list:
    """Non-batch dims of a dot tensor (0: output, 1: lhs, 2: rhs)."""
    if tensor == 0:
        nb = len(ins.attr("lhs_batch_dims", ()) or ())
        return list(range(nb, rank))
    key = "lhs_batch_dims" if tensor == 1 else "rhs_batch_dims"
    batch = set(ins.attr(key, ()) or ())
    return [d for d in range(rank) if d not in batch]


def _conv_pair(ins: HloInstruction, tensor: int) -> tuple:
    """The two non-spatial dims of a convolution tensor, in TPU default order (minor first)."""
    lab = ins.attr("dim_labels")
    if tensor == 0:
        return lab.out_feature, lab.out_batch
    if tensor == 1:
        return lab.lhs_feature, lab.lhs_batch
    return lab.kernel_output_feature, lab.kernel_input_feature


def tensor_choices(ins: HloInstruction, tensor: int, shape: Shape, target_kind: str) -> tuple:
    """(legal layouts, index of the default) of one tensor of a configurable node (module docstring)."""
    rank = shape.rank
    written = tuple(shape.minor_to_major())
    if rank <= 1:
        return (written,), 0
    op = ins.opcode
    default = descending(rank)
    if op == "reshape":
        if rank <= MAX_PERMUTATION_RANK:
            cands = [tuple(reversed(p)) for p in itertools.permutations(range(rank))]
        else:
            cands = _minor_pairs(rank, range(rank))
    elif target_kind != "tpu":
        cands = [written]
    elif op == "convolution":
        a, b = _conv_pair(ins, tensor)
        default = complete_layout((a, b), rank)
        cands = [default, complete_layout((b, a), rank)]
    else:  # dot on tpu
        cands = _minor_pairs(rank, _dot_dims(ins, tensor, rank))
    # layouts that differ only in where size-1 dims go are the same bytes in the same order: keep one
    seen: dict = {}
    for c in [written] + cands:
        seen.setdefault(physical_order(c, shape.dims), c)
    choices = list(seen.values())
    default = seen.get(physical_order(default, shape.dims), written)
    return tuple(choices), choices.index(default)


def physical_order(mtm: Sequence[int], dims: Sequence[int]) -> tuple:
    """A layout without its size-1 dims: two layouts with the same physical order store the same bytes
    in the same order."""
    return tuple(d for d in mtm if dims[d] != 1)


@dataclass(frozen=True)
class LayoutNode:
    """A configurable node: its place in the program and the legal layouts of each of its tensors."""

    comp: int                 # index into Program.computations
    node: int                 # instruction index in that computation
    computation: str
    instruction: str
    opcode: str
    choices: tuple            # per tensor (output, operands...): tuple of minor-to-major tuples
    defaults: tuple           # per tensor: index of the default layout in its choices
    offset: int               # index of its first tensor in a configuration's choice vector


class LayoutConfig:
    """One layout choice (an index into the tensor's legal layouts) per tensor of every configurable node."""

    __slots__ = ("choices", "parent", "flips")

    def __init__(self, choices: "bytes | bytearray | Sequence[int]", parent: Optional["LayoutConfig"] = None,
                 flips: tuple = ()):
        self.choices = bytes(choices)
        self.parent = parent
        self.flips = flips

    def key(self) -> bytes:
        return self.choices

    def __len__(self) -> int:
        return len(self.choices)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LayoutConfig) and self.choices == other.choices

    def __hash__(self) -> int:
        return hash(self.choices)

    def __repr__(self) -> str:
        return f"LayoutConfig({list(self.choices)})"

    def detach(self) -> "LayoutConfig":
        self.parent, self.flips = None, ()
        return self


class LayoutSpace(Space):
    """The layout search space of a program on a target (the `Space` interface, autotune/compiler/space.py,
    with `mutate` and `walks`)."""

    def __init__(self, program: Program, target: "str | Target" = "tpu"):
        self.program = program
        self.compilation_target = get_target(target)
        self.target = target if isinstance(target, str) else self.compilation_target.name
        kind = self.compilation_target.spec.kind
        order = {c.name: k for k, c in enumerate(program.module.computations)}
        located = sorted(((order.get(c.name, len(order)), ci, n) for ci, c in enumerate(program.computations)
                          for n, ins in enumerate(c.instructions) if ins.opcode in CONFIGURABLE_OPCODES))
        nodes: list[LayoutNode] = []
        offset = 0
        for _, ci, n in located:
            comp = program.computations[ci]
            ins = comp.instructions[n]
            shapes = [ins.shape] + [comp.instructions[o].shape for o in comp.operands[n]]
            if any(s.is_tuple for s in shapes):
                continue
            if ins.opcode in ("convolution", "dot"):
                shapes = shapes[:3]
            picked = [tensor_choices(ins, t, s, kind) for t, s in enumerate(shapes)]
            nodes.append(LayoutNode(ci, n, comp.name, ins.name, ins.opcode, tuple(p[0] for p in picked),
                                    tuple(p[1] for p in picked), offset))
            offset += len(picked)
        self.nodes = nodes
        self.slot_choices = [len(ch) for nd in nodes for ch in nd.choices]
        if any(k > 255 for k in self.slot_choices):
            raise ValueError("a tensor has more than 255 legal layouts")  # cannot happen: rank<=4 perms, pairs
        self.free_slots = [i for i, k in enumerate(self.slot_choices) if k > 1]
        self.slot_node = [j for j, nd in enumerate(nodes) for _ in nd.choices]
        self._default = LayoutConfig(bytes(d for nd in nodes for d in nd.defaults))

    # ---- size
    @property
    def n_slots(self) -> int:
        return len(self.slot_choices)

    def size(self) -> float:
        """Number of configurations (a float: it overflows int64 on real programs)."""
        return float(np.prod([float(k) for k in self.slot_choices])) if self.slot_choices else 1.0

    # ---- configurations
    def default(self) -> LayoutConfig:
        return self._default

    def encode(self, cfg: LayoutConfig) -> bytes:
        return cfg.key()

    def decode(self, data: bytes) -> LayoutConfig:
        data = bytes(data)
        if len(data) != self.n_slots:
            raise ValueError(f"layout configuration has {len(data)} choices, the space has {self.n_slots} tensors")
        bad = [i for i, (c, k) in enumerate(zip(data, self.slot_choices)) if c >= k]
        if bad:
            raise ValueError(f"layout configuration chooses layout {data[bad[0]]} of tensor {bad[0]}, "
                             f"which has {self.slot_choices[bad[0]]}")
        return LayoutConfig(data)

    def config_hash(self, cfg: LayoutConfig) -> str:
        """A stable 16-hex-digit hash of a configuration (the same across processes and runs)."""
        return hashlib.blake2b(cfg.key(), digest_size=8).hexdigest()

    def layouts(self, cfg: LayoutConfig) -> dict:
        """{(comp, node): (minor-to-major per tensor)} of every configurable node."""
        c = cfg.key()
        return {(nd.comp, nd.node): tuple(ch[c[nd.offset + t]] for t, ch in enumerate(nd.choices))
                for nd in self.nodes}

    def from_layouts(self, per_node: Sequence[Sequence[Optional[Sequence[int]]]]) -> LayoutConfig:
        """A configuration from a layout per tensor of every node (in `nodes` order); None, [] or a
        missing tensor means the default; partial layouts are completed (`complete_layout`).
        Raises ValueError for a layout the target does not allow."""
        if len(per_node) != len(self.nodes):
            raise ValueError(f"{len(per_node)} nodes given, the space has {len(self.nodes)} configurable nodes")
        out = bytearray(self._default.key())
        for nd, tensors in zip(self.nodes, per_node):
            for t, dims in enumerate(tensors):
                if t >= len(nd.choices):
                    if dims:
                        raise ValueError(f"{nd.instruction}: layout given for tensor {t}, it has {len(nd.choices)}")
                    continue
                if not dims:
                    continue
                shape_dims = self._tensor_dims(nd, t)
                full = physical_order(complete_layout(dims, len(shape_dims)), shape_dims)
                same = [k for k, c in enumerate(nd.choices[t]) if physical_order(c, shape_dims) == full]
                if not same:
                    raise ValueError(f"{nd.instruction}: layout {list(dims)} of tensor {t} is not legal on "
                                     f"{self.target} (legal: {[list(c) for c in nd.choices[t]]})")
                out[nd.offset + t] = same[0]
        return LayoutConfig(out)

    def _tensor_dims(self, nd: LayoutNode, t: int) -> tuple:
        """Dims of tensor t (0: output, then operands) of a configurable node."""
        comp = self.program.computations[nd.comp]
        n = nd.node if t == 0 else comp.operands[nd.node][t - 1]
        return tuple(comp.instructions[n].shape.dims)

    # ---- search moves
    def random(self, rng: np.random.Generator, p: Optional[float] = None) -> LayoutConfig:
        """Each free tensor's layout uniform among its legal ones (kept at the default with
        probability 1 - p when p is given)."""
        c = bytearray(self._default.key())
        for i in self.free_slots:
            if p is None or rng.random() < p:
                c[i] = int(rng.integers(self.slot_choices[i]))
        return LayoutConfig(c)

    def _redraw(self, c: bytearray, i: int, rng: np.random.Generator) -> None:
        k = self.slot_choices[i]
        c[i] = (c[i] + 1 + int(rng.integers(k - 1))) % k  # any other legal layout

    def neighbor(self, cfg: LayoutConfig, rng: np.random.Generator) -> LayoutConfig:
        """Another layout for one free tensor (the configuration itself when nothing is free)."""
        if not self.free_slots:
            return cfg
        c = bytearray(cfg.key())
        i = self.free_slots[int(rng.integers(len(self.free_slots)))]
        self._redraw(c, i, rng)
        return LayoutConfig(c, parent=cfg, flips=(i,))

    def mutate(self, cfg: LayoutConfig, rng: np.random.Generator, rate: float) -> LayoutConfig:
        """Each free tensor re-drawn with probability `rate`."""
        c = bytearray(cfg.key())
        for i in self.free_slots:
            if rng.random() < rate:
                self._redraw(c, i, rng)
        return LayoutConfig(c)

    def crossover(self, a: LayoutConfig, b: LayoutConfig, rng: np.random.Generator) -> LayoutConfig:
        """Uniform crossover by node (a node's tensors come from one parent)."""
        ka, kb = a.key(), b.key()
        take_b = rng.random(len(self.nodes)) < 0.5
        return LayoutConfig(bytes(kb[i] if take_b[self.slot_node[i]] else ka[i] for i in range(self.n_slots)))

    # ---- the program under a configuration
    def rewrite(self, cfg: LayoutConfig) -> HloModule:
        """The program's module with the configuration applied (module docstring); the original
        module is not modified."""
        chosen = self.layouts(cfg)
        mod = self.program.module
        used = {i.name for c in mod.computations for i in c.instructions}  # names are unique module-wide
        new_comps = {c.name: self._rewrite_computation(ci, c, chosen, used)
                     for ci, c in enumerate(self.program.computations)}
        comps = [new_comps.get(c.name, c) for c in mod.computations]
        return HloModule(mod.name, comps, dict(mod.attrs), mod.tables, mod.percent, mod.filename)

    def emit_text(self, cfg: LayoutConfig, metadata: bool = True) -> str:
        """HLO text of the rewritten program (parses and verifies; computes the original's outputs)."""
        return self.rewrite(cfg).to_text(metadata=metadata)

    def copies(self, cfg: LayoutConfig) -> int:
        """Number of layout copies the configuration inserts."""
        return sum(1 for c in self.rewrite(cfg).computations for i in c.instructions
                   if i.opcode == "copy" and _is_relayout(i.name))

    def _rewrite_computation(self, ci: int, comp: Computation, chosen: dict, used: set) -> HloComputation:
        insts = comp.instructions
        names = [i.name for i in insts]           # current name of each instruction's value
        lay: list = [None] * len(insts)           # assigned minor-to-major (None: tuple/token)
        out: list = []
        converted: dict = {}                      # (producer, layout) -> name of the converted value

        def fresh(base: str) -> str:
            name, k = f"{base}.relayout", 1
            while name in used:
                k += 1
                name = f"{base}.relayout.{k}"
            used.add(name)
            return name

        def convert(o: int, want: tuple) -> str:
            key = (o, want)
            if key not in converted:
                src = out_by_index[o]
                shape = _with_layout(src.shape, want)
                if src.opcode in REMATERIALIZED_OPCODES:
                    new = src.copy(name=fresh(src.name), shape=shape, is_root=False)
                else:
                    new = HloInstruction(fresh(src.name), "copy", shape, [names[o]])
                out.append(new)
                converted[key] = new.name
            return converted[key]

        out_by_index: dict = {}
        for n, ins in enumerate(insts):
            arr = not ins.shape.is_tuple and ins.shape.dtype != "token"
            conf = chosen.get((ci, n))
            written = tuple(ins.shape.minor_to_major()) if arr else None
            if not arr:
                mine = None
            elif conf is not None:
                mine = conf[0]
            elif ins.opcode != "copy" and is_elementwise(comp, n):
                mine = next((lay[o] for o in comp.operands[n] if lay[o] is not None
                             and insts[o].shape.dims == ins.shape.dims), written)
            else:
                mine = written
            lay[n] = mine
            ops = []
            for j, o in enumerate(comp.operands[n]):
                if lay[o] is None:
                    ops.append(names[o])
                    continue
                if conf is not None and j + 1 < len(conf):
                    want = conf[j + 1]
                elif (mine is not None and ins.opcode != "copy" and is_elementwise(comp, n)
                      and insts[o].shape.dims == ins.shape.dims):
                    want = mine
                else:
                    want = tuple(insts[o].shape.minor_to_major())
                ops.append(names[o] if want == lay[o] else convert(o, want))
            new = ins.copy(operands=ops, is_root=False)
            if mine is not None and mine != written:
                new.shape = _with_layout(ins.shape, mine)
            out.append(new)
            out_by_index[n] = new
        root = comp.root
        if lay[root] is not None and lay[root] != tuple(insts[root].shape.minor_to_major()):
            out.append(HloInstruction(fresh(insts[root].name), "copy", insts[root].shape, [names[root]]))
            out[-1].is_root = True
        else:
            out_by_index[root].is_root = True
        return HloComputation(comp.hlo.name, out, comp.hlo.is_entry, dict(comp.hlo.trailer))

    def kernels(self, cfg: LayoutConfig) -> list:
        """Kernels of the rewritten program under the target's default fusion, where every inserted
        layout copy stays a kernel of its own (a transpose through memory, as XLA:TPU leaves the
        copies of layout assignment; its producers may fuse into it). Their shapes carry the layouts
        and each has its `multiplicity`: what a cost model or the simulator prices."""
        return _default_kernels(Program.from_module(self.rewrite(cfg)), self.compilation_target)[1]

    # ---- incremental pricing of a move (autotune.tuning.pricing.LayoutCost)
    # A move changes one tensor's layout; the kernels it changes lie around that node. `move_delta`
    # rebuilds a window of the computation (every instruction within `k` hops of the node) under the
    # parent's and the move's configuration, runs the same rewrite and default fusion on both, and
    # returns the kernels that differ. The window is exact where the two disagree only on *inner*
    # instructions (module docstring of the section below); otherwise it grows, up to the whole program.
    WINDOW_MIN_COMPUTATION = 1500  # smaller computations: moves are priced from scratch
    WINDOW_HOPS = 0          # the first window: the moved node, its operand, and their default-fusion kernels
    WINDOW_ROUNDS = 8        # growths (around what a window could not decide) before pricing from scratch
    WINDOW_GROW_HOPS = 1     # hops added around each undecided instruction per growth (then their kernels)
    WINDOW_MAX_SHARE = 0.15  # a window over this share of its computation: price from scratch instead
    WINDOW_KERNEL_MAX = 200  # original kernels up to this many instructions join a window whole
    WINDOW_FAN_OUT = 16      # the window does not grow through an instruction with more users

    @property
    def walks(self) -> bool:
        """Whether a search should start its chains with walks of moves from the default (and the best)
        rather than random configurations: where a move is priced incrementally (`move_delta`: tpu rules,
        a computation of at least WINDOW_MIN_COMPUTATION instructions) and a random configuration is a
        rewrite of the whole program (search/annealing.py reads it)."""
        return self.supports_move_delta() and any(len(self.program.computations[nd.comp]) >= self.WINDOW_MIN_COMPUTATION
                                                  for nd in self.nodes)

    def supports_move_delta(self) -> bool:
        """Whether `move_delta` may price moves: the tpu fusion rules, whose default-fusion facts are
        local to an instruction's neighbourhood except the two chain facts the window handles."""
        from autotune.compiler.targets.tpu import TpuRules
        return isinstance(self.compilation_target.fusion_rules, TpuRules)

    def _graph_facts(self, ci: int) -> dict:
        """Per computation: hero_upstream by instruction name (of the original program: a layout copy is
        elementwise, so it carries its operand's value; a re-emitted broadcast its original's)."""
        cache = self.__dict__.setdefault("_facts", {})
        f = cache.get(ci)
        if f is None:
            from autotune.compiler.fusion import FusionSpace
            if "_orig_fs" not in self.__dict__:
                self._orig_fs = FusionSpace(self.program, self.compilation_target)
            comp = self.program.computations[ci]
            from autotune.compiler.targets.fusion_rules import default_facts
            of = default_facts(self._orig_fs, ci).output_fused
            f = cache[ci] = {"hero_up": {ins.name: self._orig_fs.hero_upstream(ci, n)
                                         for n, ins in enumerate(comp.instructions)},
                             "output_fused": {ins.name: of[n] for n, ins in enumerate(comp.instructions)},

                             "config_nodes": {nd.node: nd for nd in self.nodes if nd.comp == ci}}
        return f

    def _layout_memo(self, cfg: LayoutConfig, ci: int) -> dict:
        """The `config_layout` memo of a configuration (kept for the last few: a batch of moves shares
        its parent's)."""
        from collections import OrderedDict
        cache = self.__dict__.setdefault("_layout_memos", OrderedDict())
        key = (cfg.key(), ci)
        memo = cache.get(key)
        if memo is None:
            memo = cache[key] = {}
            if len(cache) > 64:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        return memo

    def _seed_layout_memo(self, parent: LayoutConfig, cfg: LayoutConfig, ci: int, moved: list) -> None:
        """Start cfg's `config_layout` memo from its parent's: all of it when only operand layouts moved
        (no instruction's own layout changes), else all but what takes its layout from a moved output
        (through elementwise users of the same dims)."""
        pm = self._layout_memo(parent, ci)
        key = (cfg.key(), ci)
        if key in self._layout_memos:
            return
        if not moved:
            memo = pm
        else:
            down = frozenset().union(*(self._layout_downstream(ci, n) for n in moved))
            memo = {k: v for k, v in pm.items() if k not in down}
        self._layout_memos[key] = memo
        if len(self._layout_memos) > 64:
            self._layout_memos.popitem(last=False)

    def _layout_downstream(self, ci: int, n: int) -> frozenset:
        """n and the instructions that may take their layout from n's (elementwise, not copy, same dims)."""
        f = self._graph_facts(ci).setdefault("downstream", {})
        out = f.get(n)
        if out is None:
            comp = self.program.computations[ci]
            insts = comp.instructions
            seen = {n}
            stack = [n]
            while stack:
                m = stack.pop()
                for u in comp.users[m]:
                    if u not in seen and insts[u].opcode != "copy" and is_elementwise(comp, u) \
                            and insts[u].shape.dims == insts[m].shape.dims:
                        seen.add(u)
                        stack.append(u)
            out = f[n] = frozenset(seen)
        return out

    def config_layout(self, cfg: LayoutConfig, ci: int, n: int, memo: dict) -> Optional[tuple]:
        """The layout `rewrite(cfg)` gives instruction n of computation ci (None: tuple or token), by an
        upward walk through the elementwise chain it takes its layout from (memoized in `memo`)."""
        comp = self.program.computations[ci]
        insts = comp.instructions
        conf_nodes = self._graph_facts(ci)["config_nodes"]
        key = cfg.key()
        stack = [n]
        while stack:
            m = stack[-1]
            if m in memo:
                stack.pop()
                continue
            ins = insts[m]
            if ins.shape.is_tuple or ins.shape.dtype == "token":
                memo[m] = None
            elif m in conf_nodes:
                nd = conf_nodes[m]
                memo[m] = nd.choices[0][key[nd.offset]]
            elif ins.opcode != "copy" and is_elementwise(comp, m):
                todo = [o for o in comp.operands[m] if o not in memo]
                if todo:
                    stack.extend(todo)
                    continue
                memo[m] = next((memo[o] for o in comp.operands[m] if memo[o] is not None
                                and insts[o].shape.dims == ins.shape.dims), tuple(ins.shape.minor_to_major()))
            else:
                memo[m] = tuple(ins.shape.minor_to_major())
            stack.pop()
        return memo[n]

    def _ball(self, ci: int, win: set, hops: int, start: Optional[list] = None) -> set:
        """`win` grown by `hops` undirected hops from `start` (default: all of it); the users of an
        instruction with more than WINDOW_FAN_OUT users are not followed."""
        comp = self.program.computations[ci]
        ops, users = comp.operands, comp.users
        win = set(win)
        ring = list(win if start is None else start)
        for _ in range(hops):
            nxt = []
            for m in ring:
                for o in ops[m]:
                    if o not in win:
                        win.add(o)
                        nxt.append(o)
                if len(users[m]) > self.WINDOW_FAN_OUT:
                    continue  # a value read everywhere (a broadcast constant): its users stay outside
                for u in users[m]:
                    if u not in win:
                        win.add(u)
                        nxt.append(u)
            ring = nxt
            if not ring:
                break
        return win

    def _with_kernels(self, ci: int, win: set, around: Optional[list] = None) -> set:
        """`win` with the whole default-fusion kernels of the original program that hold an instruction
        of `around` (default: of win): a layout's kernels are mostly those, cut at the copies."""
        f = self._graph_facts(ci)
        if "kernel_of" not in f:
            kernel_of: dict = {}
            ofs = self._orig_fs  # (built by _graph_facts) the original program has no layout copies
            for k in ofs.kernels(ofs.default()):
                if k.comp != ci or len(k.members) > self.WINDOW_KERNEL_MAX:
                    continue
                mem = frozenset(k.members)
                for m in k.members:
                    kernel_of[m] = kernel_of[m] | mem if m in kernel_of else mem
            f["kernel_of"] = kernel_of
        kernel_of = f["kernel_of"]
        out = set(win)
        for m in (win if around is None else around):
            out |= kernel_of.get(m, frozenset())
        return out

    def _close(self, ci: int, win: set) -> tuple:
        """(window, frontier, stubs): the window with the broadcasts and iotas it reads (they are
        re-emitted, not copied, in another layout: kept whole), its members with an operand or user
        outside it (and the computation's root), and the operands outside it."""
        comp = self.program.computations[ci]
        ops, users = comp.operands, comp.users
        win = set(win)
        win.update([o for m in win for o in ops[m] if o not in win
                    and comp.instructions[o].opcode in REMATERIALIZED_OPCODES])
        stubs = {o for m in win for o in ops[m] if o not in win}
        frontier = {m for m in win if any(o not in win for o in ops[m]) or any(u not in win for u in users[m])
                    or m == comp.root}
        return win, frontier, stubs

    def _window_kernels(self, cfg: LayoutConfig, ci: int, win: set, frontier: set, stubs: set) -> tuple:
        """(kernels, users, first) of the window rewritten under cfg and fused by default: the final
        kernels, the users of each frontier broadcast of constants and of its re-emitted copies (by name
        and layout), and the kernels of the default fusion before the copies are cut out. Stubs are
        parameters in their rewritten layout (scalar constants stay constants); window members with a
        user outside (and the computation's root) feed a tuple root."""
        from autotune.compiler.hlo import HloComputation as _HC
        comp = self.program.computations[ci]
        insts = comp.instructions
        memo = self._layout_memo(cfg, ci)
        out = []
        order = sorted(win | stubs)
        for k, m in enumerate(order):
            ins = insts[m]
            if m in win:
                out.append(ins)
            elif ins.opcode == "constant" and not ins.operands:
                out.append(ins.copy(is_root=False))
            else:
                lay = self.config_layout(cfg, ci, m, memo)
                shape = ins.shape if lay is None or lay == tuple(ins.shape.minor_to_major()) else _with_layout(ins.shape, lay)
                out.append(HloInstruction(ins.name, "parameter", shape, [], parameter_number=k))
        sinks = [m for m in sorted(frontier) if m == comp.root or any(u not in win for u in comp.users[m])]
        root = HloInstruction("layout.window.root", "tuple", Shape("tuple", tuple_shapes=tuple(insts[m].shape for m in sinks)),
                              [insts[m].name for m in sinks], is_root=True)
        out.append(root)
        # the window as `_rewrite_computation` reads a computation (instructions, operand indices, root)
        pos = {m: k for k, m in enumerate(order)}
        operands = [[pos[o] for o in comp.operands[m]] if m in win else [] for m in order] + [[pos[m] for m in sinks]]
        sub = _WindowComputation(out, operands, len(out) - 1, _HC(comp.hlo.name, out, True, {}))
        gf = self._graph_facts(ci)
        if "others" not in gf:
            module = self.program.module
            gf["others"] = [c for c in module.computations if c.name != comp.hlo.name]
            gf["other_names"] = frozenset(i.name for c in gf["others"] for i in c.instructions)
        others = gf["others"]
        module = self.program.module
        conf_nodes = gf["config_nodes"]
        key = cfg.key()
        chosen = {}
        for k, m in enumerate(order):
            nd = conf_nodes.get(m) if m in win else None
            if nd is not None:
                chosen[(0, k)] = tuple(ch[key[nd.offset + t]] for t, ch in enumerate(nd.choices))
        new_hlo = self._rewrite_computation(0, sub, chosen, _Names({i.name for i in out}, gf["other_names"]))
        new_comp = Computation(new_hlo, comp.multiplicity, comp.kind, in_loop=comp.in_loop)
        prog = Program(module=HloModule(module.name, others + [new_hlo], dict(module.attrs), module.tables,
                                        module.percent, module.filename), computations=[new_comp])
        hero, of = gf["hero_up"], gf["output_fused"]
        ninst = new_comp.instructions
        base = [_base_name(i.name) for i in ninst]
        # output_fused is the whole program's for an original instruction (a layout copy passes its
        # value's on where the value has one user, and a value with several users passes it on to
        # none); a layout copy's is its value's where the copy is the value's only user (exact where
        # the value's users all lie in the window; the others are the frontier's)
        index = new_comp.index
        fused = [(of.get(b, False) and len(new_comp.users[index[b]]) == 1) if i.opcode == "copy" and _is_relayout(i.name)
                 else of.get(b, False) if not _is_relayout(i.name) and i.opcode != "tuple" else False
                 for i, b in zip(ninst, base)]
        fs, kernels, first = _default_kernels(prog, self.compilation_target, hero_up=[[hero.get(b, False) for b in base]],
                                              output_fused=[fused], with_first=True)
        remat = self._remat_safe(ci)
        users = {(b, ninst[n2].shape.layout): frozenset(ninst[u].name for u in new_comp.users[n2])
                 for n2, b in enumerate(base) if b in remat}
        return kernels, users, first

    def move_delta(self, parent: LayoutConfig, cfg: LayoutConfig, slots: Optional[Sequence[int]] = None) -> Optional[tuple]:
        """(kernels removed, kernels added) from the parent's kernel set to cfg's, for cfg a few moves
        from `parent` that changed the tensors `slots` (default: cfg.flips, one `neighbor` move), all in
        one computation; None where no window decides it (then price cfg from scratch).

        The window: the moved nodes (and the operand whose layout a move changed) with their kernels
        under the original program's default fusion, grown around what it cannot decide. Exactness:
        every default-fusion fact of the tpu rules at an instruction whose operands and users all lie
        in the window (an *inner* one) is computed from the window, except two chain facts, which are
        taken from the whole program: hero_upstream (layouts change no opcode, and a layout copy is
        elementwise, so it passes its value's on) and output_fused (a layout copy passes it on exactly
        where its value has a single user, so an original instruction's is the original program's).
        The kernels that differ between the two windows, after the default fusion's repair and after
        the copies are cut out, are the moves' changed kernels when none of them holds a stub or a
        frontier member (what lies outside may fuse into it) or reads a frontier value with users
        outside (whether it fuses into its users depends on all of them); broadcasts of constants at
        the frontier are exempt where their users in the window are the same under both. A change
        reaching past the window crosses the frontier and shows there; then the window grows."""
        slots = tuple(cfg.flips) if slots is None else tuple(slots)
        if not slots or not self.supports_move_delta():
            return None
        nds = [self.nodes[self.slot_node[sl]] for sl in slots]
        ci = nds[0].comp
        comp = self.program.computations[ci]
        if any(nd.comp != ci for nd in nds) or len(comp) < self.WINDOW_MIN_COMPUTATION:
            return None  # (a small computation is repriced whole faster than two windows of it)
        centers = set()
        outputs = []
        for sl, nd in zip(slots, nds):
            t = sl - nd.offset
            centers.add(nd.node)
            if t >= 1:
                centers.add(comp.operands[nd.node][t - 1])
            else:
                outputs.append(nd.node)
        self._seed_layout_memo(parent, cfg, ci, outputs)
        win = self._with_kernels(ci, self._ball(ci, centers, self.WINDOW_HOPS))
        for _ in range(self.WINDOW_ROUNDS):
            win, frontier, stubs = self._close(ci, win)
            if len(win) > self.WINDOW_MAX_SHARE * len(comp):
                return None
            bad_members, bad_inputs = self._untrusted(ci, win, frontier, stubs)
            ka, ua, fa = self._window_kernels(parent, ci, win, frontier, stubs)
            kb, ub, fb = self._window_kernels(cfg, ci, win, frontier, stubs)
            sig_a = {_kernel_sig(k): k for k in ka}
            sig_b = {_kernel_sig(k): k for k in kb}
            removed = [k for s, k in sig_a.items() if s not in sig_b]
            added = [k for s, k in sig_b.items() if s not in sig_a]
            # a broadcast of constants at the frontier is trusted where its users (and its re-emitted
            # copies' users) in the window are the same under both configurations: then its users in
            # the whole program are too, and its kernels' facts with them
            remat = self._remat_safe(ci)
            moved = {key[0] for key, _ in set(ua.items()) ^ set(ub.items())}
            bad_members = (bad_members - remat) | (bad_members & moved)
            bad_inputs = (bad_inputs - remat) | (bad_inputs & moved)
            # the default fusion before the copies are cut out shapes the final kernels (its repair's
            # cuts stay): its kernels that differ must be decided by the window too
            first_a = {_kernel_sig(k): k for k in fa}
            first_b = {_kernel_sig(k): k for k in fb}
            changed_first = [k for s, k in first_a.items() if s not in first_b] + \
                [k for s, k in first_b.items() if s not in first_a]
            bad = set()
            for k in removed + added + changed_first:
                members, inputs = _kernel_names(k)
                bad |= (members & bad_members) | (inputs & bad_inputs)
                if _hero_reads(k, remat):
                    bad |= members
            if not bad:
                return removed, added
            # grow the window around what it could not decide
            index = comp.index
            grow = [index[b] for b in bad if b in index]
            before = len(win)
            win = self._with_kernels(ci, self._ball(ci, set(grow) | win, self.WINDOW_GROW_HOPS, start=grow), grow)
            if len(win) == before:
                return None
        return None

    def _remat_safe(self, ci: int) -> frozenset:
        """Names of the broadcasts and iotas of constants and parameters: their layout never changes (a
        user that needs another gets its own re-emitted copy), nothing fuses into them, and they are
        never a chain's link; at a window's frontier their kernels are decided by their users alone."""
        f = self._graph_facts(ci)
        if "remat_safe" not in f:
            comp = self.program.computations[ci]
            insts = comp.instructions
            f["remat_safe"] = frozenset(
                ins.name for n, ins in enumerate(insts) if ins.opcode in REMATERIALIZED_OPCODES
                and all(insts[o].opcode in ("constant", "parameter") for o in comp.operands[n]))
        return f["remat_safe"]

    def _untrusted(self, ci: int, win: set, frontier: set, stubs: set) -> tuple:
        """(members, inputs): names of the window's instructions a kernel the window builds may not hold
        as a member (the stubs and the frontier: what lies outside may fuse into them or them into
        it), and may not read as an input (the stubs and the frontier members with a user outside:
        whether they fuse into their users depends on all of them)."""
        comp = self.program.computations[ci]
        insts, users = comp.instructions, comp.users
        members = {insts[m].name for m in stubs | frontier}
        inputs = {insts[m].name for m in stubs} | {insts[m].name for m in frontier if m == comp.root
                                                   or any(u not in win for u in users[m])}
        return members, inputs

# Kernel classes of a rewritten program, the analytical model's cost terms per configuration
# (`kernel_class`; autotune.tuning.pricing.LayoutCost.terms): the learned layout models reweight them.
KERNEL_CLASSES = ("relayout", "convolution", "dot", "reduce", "elementwise", "other")


def kernel_class(kernel) -> int:
    """Index in `KERNEL_CLASSES` of a kernel by its root: a layout copy `rewrite` inserted, a
    convolution, a dot, a reduce, an elementwise op, anything else."""
    root = kernel.root_instruction
    if root.opcode == "copy" and _is_relayout(root.name):
        return 0
    if root.opcode in ("convolution", "dot", "reduce"):
        return KERNEL_CLASSES.index(root.opcode)
    return 4 if root.opcode in ELEMENTWISE else 5


class _WindowComputation:
    """A window of a computation as `LayoutSpace._rewrite_computation` reads it."""

    __slots__ = ("instructions", "operands", "root", "hlo")

    def __init__(self, instructions: list, operands: list, root: int, hlo: HloComputation):
        self.instructions, self.operands, self.root, self.hlo = instructions, operands, root, hlo


class _Names:
    """Names in use: a window's own (growing) and the rest of the module's (fixed)."""

    __slots__ = ("own", "rest")

    def __init__(self, own: set, rest: frozenset):
        self.own, self.rest = own, rest

    def __contains__(self, name: str) -> bool:
        return name in self.own or name in self.rest

    def add(self, name: str) -> None:
        self.own.add(name)


def _default_kernels(prog: Program, target: Target, hero_up: Optional[list] = None,
                     output_fused: Optional[list] = None, with_first: bool = False) -> tuple:
    """(fusion space, kernels) of a rewritten program under the target's default fusion with every
    layout copy a kernel of its own (`LayoutSpace.kernels`); `hero_up` (per computation, per
    instruction) and `output_fused` replace the space's hero_upstream and output_fused facts (a
    window's, taken from the whole program); `with_first` also returns the kernels of the default
    fusion before the copies are cut out (the repair that shaped them decides cuts that stay)."""
    from autotune.compiler.fusion import FusionConfig, FusionSpace
    fs = FusionSpace(prog, target)
    if hero_up is not None:
        fs._hero_up = hero_up
    if output_fused is not None:
        from autotune.compiler.targets.fusion_rules import default_facts
        for ci, of in enumerate(output_fused):
            default_facts(fs, ci).output_fused = of
    first = fs.default()
    bits = bytearray(first.bits)
    for e in range(fs.n_edges):
        producer = prog.computations[fs.edge_comp[e]].instructions[fs.edge_prod[e]]
        if bits[e] and producer.opcode == "copy" and _is_relayout(producer.name):
            bits[e] = 0
    if with_first:
        return fs, fs.kernels(fs.repair(FusionConfig(bits))), fs.kernels(first)
    return fs, fs.kernels(fs.repair(FusionConfig(bits)))


def _base_name(name: str) -> str:
    """The original instruction an instruction of a rewritten program stands for (a layout copy or a
    re-emitted broadcast: the value it converts)."""
    k = name.find(".relayout")
    return name[:k] if k >= 0 else name


def _kernel_sig(kernel) -> tuple:
    """A kernel's identity across two rewrites of one window: its members and inputs by name and layout
    (equal ones have equal content, so equal hashes; a kernel renamed only is a change priced at zero)."""
    insts = kernel.computation.instructions
    return (tuple((insts[m].name, insts[m].shape.layout) for m in kernel.members),
            tuple((insts[o].name, insts[o].shape.layout) for o in kernel.inputs))


def _kernel_names(kernel) -> tuple:
    """(members, inputs): the original names of a kernel's members and of its inputs."""
    insts = kernel.computation.instructions
    return {_base_name(i.name) for i in kernel.instructions}, {_base_name(insts[o].name) for o in kernel.inputs}


def _hero_reads(kernel, names: frozenset) -> bool:
    """Whether a dot or convolution of the kernel reads (fused or as an input) one of `names` (by
    original name): whether the producer fuses into it depends on its user count in the whole program."""
    comp = kernel.computation
    insts = comp.instructions
    return any(insts[m].opcode in ("dot", "convolution") and any(_base_name(insts[o].name) in names
                                                               for o in comp.operands[m]) for m in kernel.members)


def _is_relayout(name: str) -> bool:
    """An instruction `rewrite` inserted (a layout copy or a re-emitted broadcast/iota)."""
    return name.endswith(".relayout") or ".relayout." in name


def _with_layout(shape: Shape, mtm: tuple) -> Shape:
    return replace(shape, layout=",".join(str(d) for d in mtm))
