"""Per-program instruction feature tables (`costmodels.features`): each instruction's node row
computed once per fusion space (and once per signature), and the node, edge and opcode arrays of
kernels gathered from them with index arrays, a computation's kernels together."""
from __future__ import annotations

import weakref
from typing import Any, Optional, Sequence

import numpy as np

from costmodels.features.nodes import node_features
from costmodels.features.schema import _COL, NODE_DIM, OPCODE_INDEX, opcode_id


class _ComputationTable:
    """Per-computation feature rows shared by every kernel of a program: each instruction's
    `node_features` row as a member and as a kernel input, computed once on first use, its opcode
    id, and the operand lists as index arrays (CSR). Instructions with the same signature (opcode,
    shape, attributes: `autotune.compiler.signature`) and static cost have the same member row, and
    the same shape the same input row: `shared` (one dict per fusion space) holds those rows, so
    the repeated layers of a deep model are featurized once."""

    __slots__ = ("insts", "costs", "member_rows", "param_rows", "member_done", "param_done", "opcode",
                 "op_ptr", "op_idx", "n_ops", "sigs", "shape_sigs", "shared")

    def __init__(self, comp: Any, costs: Optional[Sequence[Any]], sigs: Optional[Sequence[int]] = None,
                 shape_sigs: Optional[Sequence[int]] = None, shared: Optional[dict] = None):
        self.insts = comp.instructions
        self.costs = costs
        self.sigs, self.shape_sigs = sigs, shape_sigs
        self.shared = shared if shared is not None and sigs is not None and shape_sigs is not None else None
        n = len(self.insts)
        self.member_rows = np.zeros((n, NODE_DIM), np.float32)
        self.param_rows = np.zeros((n, NODE_DIM), np.float32)
        self.member_done = np.zeros(n, bool)
        self.param_done = np.zeros(n, bool)
        self.opcode = np.array([opcode_id(i.opcode) for i in self.insts], np.int64)
        ops = comp.operands
        self.n_ops = np.array([len(o) for o in ops], np.int64)
        self.op_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(self.n_ops, out=self.op_ptr[1:])
        self.op_idx = np.fromiter((o for olist in ops for o in olist), np.int64, int(self.op_ptr[-1]))

    def _key(self, i: int, as_parameter: bool) -> tuple:
        """What the row of instruction `i` depends on: its shape as an input; its signature, operand
        count and static cost as a member."""
        if as_parameter:
            return (True, self.shape_sigs[i])
        c = self.costs[i] if self.costs is not None else None
        cost = None if c is None else (c.flops, c.transcendentals, c.bytes_read, c.bytes_written)
        return (False, self.sigs[i], int(self.n_ops[i]), cost)

    def rows(self, idx: np.ndarray, as_parameter: bool) -> np.ndarray:
        """Feature rows of instructions `idx` as members (`as_parameter` False) or as inputs."""
        table, done = (self.param_rows, self.param_done) if as_parameter else (self.member_rows, self.member_done)
        missing = idx[~done[idx]]
        shared = self.shared
        for i in missing.tolist():
            if not done[i]:
                key = self._key(i, as_parameter) if shared is not None else None
                row = shared.get(key) if shared is not None else None
                if row is None:
                    c = self.costs[i] if self.costs is not None else None
                    row = node_features(self.insts[i], is_parameter=as_parameter, cost=c)
                    if shared is not None:
                        shared[key] = row
                table[i] = row
                done[i] = True
        return table[idx]


_PROGRAM_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SHARED_ROWS = "__shared_rows"  # the per-space dict of rows shared by instructions of the same signature


def _computation_table(kernel: Any) -> _ComputationTable:
    """The `_ComputationTable` of the kernel's computation, shared by all kernels of its fusion space."""
    space = getattr(kernel, "space", None)
    try:
        per_space = _PROGRAM_TABLES.get(space) if space is not None else None
    except TypeError:  # a space that cannot be weakly referenced: no sharing
        space = None
        per_space = None
    if per_space is None:
        per_space = {_SHARED_ROWS: {}}
        if space is not None:
            _PROGRAM_TABLES[space] = per_space
    comp = kernel.computation
    key = getattr(kernel, "comp", id(comp))
    t = per_space.get(key)
    if t is None:
        try:
            costs = space.node_costs[key]
        except Exception:  # noqa: BLE001 - a space without static costs: those columns stay zero
            costs = None
        try:
            sigs, shape_sigs = space.signatures[key], space._shape_sigs[key]
        except Exception:  # noqa: BLE001 - a space without instruction signatures: nothing shared
            sigs = shape_sigs = None
        t = per_space[key] = _ComputationTable(comp, costs, sigs, shape_sigs, per_space[_SHARED_ROWS])
    return t


def _first_occurrences(a: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct value of `a`, in the order of `a`."""
    if len(a) < 2:
        return np.arange(len(a))
    _, first = np.unique(a, return_index=True)
    first.sort()
    return first


def _graph_arrays(kernel: Any) -> tuple:
    """(node rows, opcodes, edge_index, n_inputs) of a kernel, gathered from its computation's table:
    nodes are the inputs, then the scalar constants members read (first-use order), then the members;
    edges producer -> consumer in member and operand order, duplicates removed."""
    t = _computation_table(kernel)
    members = np.asarray(kernel.members, np.int64)
    inputs = np.asarray(kernel.inputs, np.int64)
    n_in, n_m = len(inputs), len(members)
    cnt = t.n_ops[members]
    total = int(cnt.sum())
    ends = np.cumsum(cnt)
    consumer = np.repeat(np.arange(n_m), cnt)
    opnd = t.op_idx[np.arange(total) - np.repeat(ends - cnt - t.op_ptr[members], cnt)]
    local = np.full(len(t.n_ops), -1, np.int64)  # instruction -> node of this kernel
    local[inputs] = np.arange(n_in)
    local[members] = -2
    cand = opnd[local[opnd] == -1]
    consts = cand[_first_occurrences(cand)]
    n_c = len(consts)
    local[consts] = n_in + np.arange(n_c)
    local[members] = n_in + n_c + np.arange(n_m)
    src = local[opnd]
    dst = consumer + (n_in + n_c)
    n = n_in + n_c + n_m
    keep = _first_occurrences(src * n + dst)
    src, dst = src[keep], dst[keep]
    rows = np.empty((n, NODE_DIM), np.float32)
    rows[:n_in] = t.rows(inputs, True)
    body = np.concatenate([consts, members])
    rows[n_in:] = t.rows(body, False)
    rows[:, _COL["n_users"]] = np.bincount(src, minlength=n)
    root = np.flatnonzero(members == kernel.root)
    rows[n_in + n_c + root, _COL["is_root"]] = 1.0
    ops = np.empty(n, np.int64)
    ops[:n_in] = OPCODE_INDEX["parameter"]
    ops[n_in:] = t.opcode[body]
    return rows, ops, np.stack([src, dst]), n_in


def graph_arrays_many(kernels: Sequence[Any]) -> list:
    """The graph arrays (node rows, opcodes, edge index, number of inputs) of many kernels, as `kernel_graph`
    builds them one by one: the kernels of one computation gathered together with index arrays (the same
    arrays, in one pass of numpy per computation instead of one per kernel). Public for the benchmarks that
    time this phase of featurization (benchmarks/pricing_speed.py)."""
    out: list = [None] * len(kernels)
    groups: dict = {}
    for i, k in enumerate(kernels):
        t = _computation_table(k)
        groups.setdefault(id(t), (t, []))[1].append(i)
    for t, idx_all in groups.values():
        for s0 in range(0, len(idx_all), _GATHER_CHUNK):  # chunks: the index arrays stay in cache
            idx = idx_all[s0:s0 + _GATHER_CHUNK]
            ks = [kernels[i] for i in idx]
            res = _gather_graphs(t, ks) if len(ks) > 1 else None
            if res is None:  # one kernel, or inputs that are not distinct: kernel by kernel
                res = [_graph_arrays(k) for k in ks]
            for i, r in zip(idx, res):
                out[i] = r
    return out


_GATHER_CHUNK = 512  # kernels gathered together by graph_arrays_many


def _segments(counts: np.ndarray) -> tuple:
    """(owner of each item, position of each item inside its segment) for segments of `counts` items."""
    owner = np.repeat(np.arange(len(counts)), counts)
    return owner, np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple:
    """(found, index into sorted_keys) of each key."""
    j = np.minimum(np.searchsorted(sorted_keys, keys), max(len(sorted_keys) - 1, 0))
    found = sorted_keys[j] == keys if len(sorted_keys) else np.zeros(len(keys), bool)
    return found, j


def _gather_graphs(t: _ComputationTable, kernels: Sequence[Any]) -> Optional[list]:
    """`_graph_arrays` of kernels of one computation table at once; None when some kernel's inputs
    repeat an instruction or include a member (the kernel-by-kernel path decides those)."""
    K, N = len(kernels), len(t.n_ops)
    mem_l = [np.asarray(k.members, np.int64) for k in kernels]
    inp_l = [np.asarray(k.inputs, np.int64) for k in kernels]
    n_m = np.array([len(m) for m in mem_l], np.int64)
    n_in = np.array([len(x) for x in inp_l], np.int64)
    mem = np.concatenate(mem_l)
    inp = np.concatenate(inp_l) if n_in.sum() else np.zeros(0, np.int64)
    mk, mpos = _segments(n_m)
    ik, ipos = _segments(n_in)
    mkey = mk * N + mem
    ikey = ik * N + inp
    m_order = np.argsort(mkey, kind="stable")
    i_order = np.argsort(ikey, kind="stable")
    smkey, sikey = mkey[m_order], ikey[i_order]
    if (len(sikey) > 1 and (sikey[1:] == sikey[:-1]).any()) or _lookup(smkey, ikey)[0].any():
        return None
    # operand slots of all members: (kernel, consumer member, producer instruction), member and operand order
    cnt = t.n_ops[mem]
    total = int(cnt.sum())
    ends = np.cumsum(cnt)
    opnd = t.op_idx[np.arange(total) - np.repeat(ends - cnt - t.op_ptr[mem], cnt)]
    ok = np.repeat(mk, cnt)
    consumer = np.repeat(mpos, cnt)
    okey = ok * N + opnd
    is_mem, jm = _lookup(smkey, okey)
    is_inp, ji = _lookup(sikey, okey)
    is_inp &= ~is_mem
    # scalar constants (neither member nor input): numbered per kernel in order of first use
    cslot = np.flatnonzero(~is_mem & ~is_inp)
    ckey = okey[cslot]
    uniq, first, inv = np.unique(ckey, return_index=True, return_inverse=True)
    by_use = np.argsort(first, kind="stable")
    cfirst = cslot[first[by_use]]              # the first slot of each constant, in slot order
    ck = ok[cfirst]
    n_c = np.bincount(ck, minlength=K).astype(np.int64)
    crank_sorted = np.empty(len(uniq), np.int64)
    crank_sorted[by_use] = np.arange(len(uniq)) - np.repeat(np.cumsum(n_c) - n_c, n_c)
    src = np.empty(total, np.int64)
    src[is_mem] = n_in[ok[is_mem]] + n_c[ok[is_mem]] + mpos[m_order[jm[is_mem]]]
    src[is_inp] = ipos[i_order[ji[is_inp]]]
    src[cslot] = n_in[ok[cslot]] + crank_sorted[inv.reshape(-1)]
    dst = n_in[ok] + n_c[ok] + consumer
    n_nodes = n_in + n_c + n_m
    nmax = int(n_nodes.max()) if K else 1
    ekey = (ok * nmax + src) * nmax + dst
    keep = np.sort(np.unique(ekey, return_index=True)[1])
    src, dst, ek = src[keep], dst[keep], ok[keep]
    n_e = np.bincount(ek, minlength=K)
    # node rows: per kernel its inputs (as parameters), constants, members
    start = np.cumsum(n_nodes) - n_nodes
    n_all = int(n_nodes.sum())
    rows = np.empty((n_all, NODE_DIM), np.float32)
    ops = np.empty(n_all, np.int64)
    in_at = start[ik] + ipos
    rows[in_at] = t.rows(inp, True)
    ops[in_at] = OPCODE_INDEX["parameter"]
    consts = opnd[cfirst]
    c_at = start[ck] + n_in[ck] + (np.arange(len(cfirst)) - np.repeat(np.cumsum(n_c) - n_c, n_c))
    m_at = start[mk] + n_in[mk] + n_c[mk] + mpos
    body_at = np.concatenate([c_at, m_at])
    body = np.concatenate([consts, mem])
    rows[body_at] = t.rows(body, False)
    ops[body_at] = t.opcode[body]
    rows[:, _COL["n_users"]] = np.bincount(start[ek] + src, minlength=n_all)
    roots = np.array([k.root for k in kernels], np.int64)
    rows[m_at[mem == roots[mk]], _COL["is_root"]] = 1.0
    out = []
    e0 = 0
    for i in range(K):
        s0, e = int(start[i]), int(n_e[i])
        n = int(n_nodes[i])
        out.append((rows[s0:s0 + n], ops[s0:s0 + n], np.stack([src[e0:e0 + e], dst[e0:e0 + e]]), int(n_in[i])))
        e0 += e
    return out
