"""Featurization of a large batch of kernels on two processes (issue 21).

Python featurization (tiling descriptions, default tiles, geometry rows, graph gathering) holds the
GIL, so a second thread does not make it faster (measured: a two-thread pipeline ran no faster than
one thread on a quiet two-core machine). `graphs_in_chunks` forks a worker process that inherits
the program, the fusion space, the kernels and every featurization cache as they are at the call
(copy-on-write: nothing is loaded or sent to it), and splits the batch's chunks between the two
processes: the caller takes chunks from the front, the worker from the back, until they meet. The
worker sends each chunk's graphs back as a few concatenated arrays through a pipe (a reader thread
drains it, so the worker never waits on the caller); the caller caches them like graphs it built.
The caller consumes every chunk's graphs as they come (the GNN prices them: `GnnCostModel.predict`),
preferring the worker's finished chunks, so the network's work and the front chunks' featurization
share the caller's core while the worker featurizes on the other. The graphs are those of
`features.kernel_graphs`, array for array (same code on the same state, one chunk at a time as the
pipelined predict already did).

A worker that fails (an exception, killed, silent for `STALL_SECONDS`) is ended and its chunks are
featurized by the caller: the result never depends on the worker. Linux only (fork); elsewhere, or
with fewer than two usable cores, the chunks are featurized in order by the caller.
"""
from __future__ import annotations

import os
import pickle
import queue
import signal
import struct
import sys
import threading
import time
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from costmodels import features

STALL_SECONDS = 60.0  # a worker silent this long with chunks outstanding is ended (its chunks redone here)
_HEADER = struct.Struct("<q")


def fork_available() -> bool:
    """Whether `graphs_in_chunks` can use a worker process here (Linux, with os.fork)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


# ---- graphs <-> a few arrays (pickled per graph they cost ~28 us a graph; packed ~3 us)
def pack_graphs(graphs: Sequence[features.KernelGraph]) -> tuple:
    """The graphs as concatenated arrays and small lists (`unpack_graphs` inverts it exactly)."""
    n_nodes = np.array([g.node_feat.shape[0] for g in graphs], np.int64)
    n_edges = np.array([g.edge_index.shape[1] for g in graphs], np.int64)
    node = np.concatenate([g.node_feat for g in graphs]) if graphs else np.zeros((0, features.NODE_DIM), np.float32)
    opcode = np.concatenate([g.opcode for g in graphs]) if graphs else np.zeros(0, np.int64)
    edges = np.concatenate([g.edge_index for g in graphs], axis=1) if graphs else np.zeros((2, 0), np.int64)
    kf = np.stack([g.kernel_feat for g in graphs]) if graphs else None
    geom = np.stack([g.geom_feat for g in graphs]) if graphs else None
    metas = [g.meta for g in graphs] if any(g.meta for g in graphs) else None
    return (n_nodes, n_edges, node, opcode, edges, kf, geom, [g.hash for g in graphs],
            [g.tiled_dims for g in graphs], metas)


def unpack_graphs(packed: tuple) -> list:
    """The `KernelGraph`s of `pack_graphs`' output (node rows are views of one array)."""
    n_nodes, n_edges, node, opcode, edges, kf, geom, hashes, tiled, metas = packed
    out = []
    ns, es = np.concatenate([[0], np.cumsum(n_nodes)]), np.concatenate([[0], np.cumsum(n_edges)])
    for i, h in enumerate(hashes):
        a, b, c, d = int(ns[i]), int(ns[i + 1]), int(es[i]), int(es[i + 1])
        out.append(features.KernelGraph(node[a:b], opcode[a:b], np.ascontiguousarray(edges[:, c:d]), tiled[i],
                                        kf[i], h, meta=dict(metas[i]) if metas else {}, geom_feat=geom[i]))
    return out


# ---- the worker process
def _read_exact(fd: int, n: int) -> Optional[bytearray]:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = os.readv(fd, [view[got:]])
        if r == 0:
            return None
        got += r
    return buf


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view):]


def _worker(kernels: list, target: Any, bounds: list, cmd_fd: int, res_fd: int) -> None:
    """The forked worker: featurizes the chunks it is sent (their index, -1 ends it), sends their graphs."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller ends it
        while True:
            head = _read_exact(cmd_fd, _HEADER.size)
            if head is None:
                break
            j = _HEADER.unpack(head)[0]
            if j < 0:
                break
            a, b = bounds[j]
            blob = pickle.dumps((j, pack_graphs(features.kernel_graphs(kernels[a:b], target))), protocol=5)
            _write_all(res_fd, _HEADER.pack(len(blob)) + blob)
    except BaseException as e:  # noqa: BLE001 - reported to the caller, which redoes the chunks
        code = 1
        try:
            blob = pickle.dumps((-1, f"{type(e).__name__}: {e}"), protocol=5)
            _write_all(res_fd, _HEADER.pack(len(blob)) + blob)
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


def _reader(fd: int, out: "queue.Queue") -> None:
    """Caller side: moves the worker's messages from the pipe to a queue (None: the pipe closed)."""
    try:
        while True:
            head = _read_exact(fd, _HEADER.size)
            if head is None:
                break
            blob = _read_exact(fd, _HEADER.unpack(head)[0])
            if blob is None:
                break
            out.put(blob)
    except OSError:
        pass
    finally:
        out.put(None)


class WorkerStats:
    """What the last `graphs_in_chunks` did (tests, benchmarks): chunks per process, worker failures,
    and the worker's CPU seconds (from its exit status)."""
    chunks_here = 0
    chunks_worker = 0
    failure: Optional[str] = None
    worker_cpu_s = 0.0


def graphs_in_chunks(kernels: Sequence[Any], target: Any, chunk: int, workers: bool = True) -> Iterator[tuple]:
    """(start, end, graphs) of consecutive chunks of `chunk` kernels, each chunk once, in the order
    they are ready: the caller's own chunks from the front, a forked worker's from the back (see the
    module docstring); workers False, one chunk, or no fork: all here, in order."""
    kernels = list(kernels)
    n = len(kernels)
    bounds = [(s, min(s + chunk, n)) for s in range(0, n, max(int(chunk), 1))]
    WorkerStats.chunks_here = WorkerStats.chunks_worker = 0
    WorkerStats.failure, WorkerStats.worker_cpu_s = None, 0.0
    if not workers or len(bounds) < 2 or not fork_available():
        for a, b in bounds:
            WorkerStats.chunks_here += 1
            yield a, b, features.kernel_graphs(kernels[a:b], target)
        return
    cmd_r, cmd_w = os.pipe()
    res_r, res_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:  # no process to spare: all here
        for fd in (cmd_r, cmd_w, res_r, res_w):
            os.close(fd)
        WorkerStats.failure = f"fork: {e}"
        for a, b in bounds:
            WorkerStats.chunks_here += 1
            yield a, b, features.kernel_graphs(kernels[a:b], target)
        return
    if pid == 0:  # the worker
        os.close(cmd_w)
        os.close(res_r)
        _worker(kernels, target, bounds, cmd_r, res_w)
    os.close(cmd_r)
    os.close(res_w)
    inbox: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_reader, args=(res_r, inbox), name="feature-worker-reader", daemon=True)
    reader.start()
    front, back = 0, len(bounds)  # chunks [front, back) not started; the worker's are taken from the back
    outstanding: set = set()
    worker_ok = True

    def assign() -> None:
        nonlocal back
        if worker_ok and back > front:
            back -= 1
            outstanding.add(back)
            try:
                os.write(cmd_w, _HEADER.pack(back))
            except OSError:
                pass  # the worker is gone: its EOF reaches the reader

    def fail(why: str) -> list:
        nonlocal worker_ok
        worker_ok = False
        WorkerStats.failure = why
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        redo = sorted(outstanding)
        outstanding.clear()
        return redo

    name = features.canonical_target_name(target)
    try:
        assign()
        assign()  # two in flight: the worker never waits for its next chunk
        while front < back or outstanding:
            blob = None
            if outstanding:
                try:
                    blob = inbox.get_nowait() if front < back else inbox.get(timeout=STALL_SECONDS)
                except queue.Empty:
                    if front >= back:  # nothing else to do and nothing came: a stalled worker
                        blob = None
                        redo = fail(f"no result in {STALL_SECONDS:.0f} s")
                        for j in redo:
                            a, b = bounds[j]
                            WorkerStats.chunks_here += 1
                            yield a, b, features.kernel_graphs(kernels[a:b], target)
                        continue
                    blob = False  # nothing ready: work on a front chunk
            if blob is None and outstanding:  # the pipe closed before the worker's chunks came
                redo = fail("the worker process ended early")
                for j in redo:
                    a, b = bounds[j]
                    WorkerStats.chunks_here += 1
                    yield a, b, features.kernel_graphs(kernels[a:b], target)
                continue
            if blob:
                j, payload = pickle.loads(blob)
                if j < 0:
                    redo = fail(f"the worker failed: {payload}")
                    for jj in redo:
                        a, b = bounds[jj]
                        WorkerStats.chunks_here += 1
                        yield a, b, features.kernel_graphs(kernels[a:b], target)
                    continue
                graphs = unpack_graphs(payload)
                features.cache_graphs(graphs, name)
                outstanding.discard(j)
                WorkerStats.chunks_worker += 1
                assign()
                a, b = bounds[j]
                yield a, b, graphs
                continue
            if front < back:
                j = front
                front += 1
                a, b = bounds[j]
                WorkerStats.chunks_here += 1
                yield a, b, features.kernel_graphs(kernels[a:b], target)
    finally:
        try:
            os.write(cmd_w, _HEADER.pack(-1))
        except OSError:
            pass
        os.close(cmd_w)
        if outstanding:  # abandoned (the consumer stopped early): do not wait for its chunks
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        t0 = os.times()
        _, status = os.waitpid(pid, 0)
        t1 = os.times()
        WorkerStats.worker_cpu_s = (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)
        reader.join(timeout=5.0)
        os.close(res_r)
