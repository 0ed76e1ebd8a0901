"""Featurization of a large batch of kernels on two processes (issue 21).

Python featurization (tiling descriptions, default tiles, geometry rows, graph gathering) holds the
GIL, so a second thread does not make it faster (measured: a two-thread pipeline ran no faster than
one thread on a quiet two-core machine). `graphs_in_chunks` forks a worker process the first time a
fusion space's kernels come in a large batch: it inherits the program and the fusion space
(copy-on-write: nothing is loaded or sent to it) and stays for the next batches of that space
(forking per batch made the caller pay a copy-on-write page fault for most pages of its heap on
every batch: 160k faults for 12.9k kernels, a third more CPU). The batch's chunks are split between
the two processes: the caller takes chunks from the front, the worker from the back (the kernels
are sent as computation, root, members and hash; the worker rebuilds them), until they meet. The
worker writes each chunk's graphs as a few concatenated arrays to a file (/dev/shm where there is
one) and sends its name through a pipe, so it never waits on the caller (a 4 MB chunk through a
pipe needed the caller's GIL for every pipe-full); the caller caches them like graphs it built.
The worker empties its caches whenever this process's are emptied (`features.clear_cache`; a
generation number comes with each chunk), so a cold batch is cold on both sides.
The caller consumes every chunk's graphs as they come (the GNN prices them: `GnnCostModel.predict`),
preferring the worker's finished chunks, so the network's work and the front chunks' featurization
share the caller's core while the worker featurizes on the other. The graphs are those of
`features.kernel_graphs`, array for array (same code on the same state, one chunk at a time as the
pipelined predict already did).

A worker that fails (an exception, killed, silent for `STALL_SECONDS`) is ended and its chunks are
featurized by the caller (and that space gets no other worker): the result never depends on the
worker. `close_worker` ends the worker (also at exit; a worker whose caller dies reads EOF and ends).
Linux only (fork), and not in a process that loaded JAX; elsewhere, or with fewer than two usable cores,
the chunks are featurized in order by the caller.
"""
from __future__ import annotations

import atexit
import os
import pickle
import select
import shutil
import signal
import struct
import sys
import tempfile
import time
import warnings
import weakref
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from costmodels import features

STALL_SECONDS = 60.0  # a worker silent this long with chunks outstanding is ended (its chunks redone here)
_HEADER = struct.Struct("<q")


def fork_available() -> bool:
    """Whether `graphs_in_chunks` can use a worker process here (Linux, with os.fork, and no JAX loaded)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and not _threaded_runtime_loaded()


def _threaded_runtime_loaded() -> bool:
    """JAX loaded in this process (an in-process XLA evaluator): its thread pools may hold locks that a
    forked child would wait on forever (JAX warns on every fork), so no worker is forked."""
    return "jax" in sys.modules


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


def _send(fd: int, obj: Any) -> None:
    blob = pickle.dumps(obj, protocol=5)
    _write_all(fd, _HEADER.pack(len(blob)) + blob)


def _recv(fd: int) -> Any:
    head = _read_exact(fd, _HEADER.size)
    if head is None:
        return None
    blob = _read_exact(fd, _HEADER.unpack(head)[0])
    return None if blob is None else pickle.loads(blob)


def _worker_main(space: Any, cmd_fd: int, res_fd: int, spool: str) -> None:
    """The forked worker: featurizes the chunks it is sent ((index, cache generation, target, kernels as
    (comp, root, members, hash, valid))), writes each chunk's packed graphs to a file in `spool` and
    sends back (index, file, CPU seconds); EOF ends it."""
    from autotune.compiler import tiles
    from autotune.compiler.fusion.kernels import Kernel
    code = 0
    generation = features.cache_generation()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller ends it
        while True:
            msg = _recv(cmd_fd)
            if msg is None:
                break
            j, gen, target, refs = msg
            c = time.process_time()
            if gen != generation:  # the caller emptied its caches: a cold start here too
                features.clear_cache()
                tiles.clear_caches()
                generation = gen
            kernels = [Kernel(space, *r) for r in refs]
            path = os.path.join(spool, f"chunk{j}.pkl")
            with open(path, "wb") as f:
                pickle.dump(pack_graphs(features.kernel_graphs(kernels, target)), f, protocol=5)
            features.drop_graphs(kernels, target)  # the caller keeps them; the tiling caches stay here
            _send(res_fd, (j, path, time.process_time() - c))
    except BaseException as e:  # noqa: BLE001 - reported to the caller, which redoes the chunks
        code = 1
        try:
            _send(res_fd, (-1, f"{type(e).__name__}: {e}", 0.0))
        except BaseException:  # noqa: BLE001
            pass
    finally:
        shutil.rmtree(spool, ignore_errors=True)  # (the caller may have ended without removing it)
        os._exit(code)


def _big_pipe() -> tuple:
    r, w = os.pipe()
    try:  # room for a few requests and results without blocking the writer (Linux; 64 kB by default)
        import fcntl
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass
    return r, w


PIPE_BYTES = 1 << 20


class _Worker:
    """A forked featurization worker for the kernels of one fusion space (see the module docstring)."""

    def __init__(self, space: Any):
        self.space_ref = weakref.ref(space)
        shm = "/dev/shm"
        self.spool = tempfile.mkdtemp(prefix="autotune-features-",
                                      dir=shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None)
        cmd_r, cmd_w = _big_pipe()
        res_r, res_w = os.pipe()
        with warnings.catch_warnings():  # (3.12+ warns about forking a process with threads: the worker
            warnings.simplefilter("ignore", DeprecationWarning)  # runs featurization only, which takes no locks)
            pid = os.fork()
        if pid == 0:  # the worker
            os.close(cmd_w)
            os.close(res_r)
            _worker_main(space, cmd_r, res_w, self.spool)
        os.close(cmd_r)
        os.close(res_w)
        self.pid, self.cmd_w, self.res_r = pid, cmd_w, res_r
        self._poller: Any = None

    def poll(self, timeout: Optional[float]) -> Any:
        """The worker's next notice, waiting up to `timeout` seconds (0: not at all): its message,
        False when none came in time, None when the worker is gone."""
        if self._poller is None:  # (poll, not select: no limit on the descriptor's number)
            self._poller = select.poll()
            self._poller.register(self.res_r, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not self._poller.poll(None if timeout is None else int(timeout * 1000)):
            return False
        try:
            return _recv(self.res_r)
        except (OSError, pickle.UnpicklingError, EOFError):
            return None

    def result(self, path: str) -> tuple:
        """The packed graphs of a chunk's file (removed)."""
        with open(path, "rb") as f:
            data = f.read()
        os.unlink(path)
        return pickle.loads(data)

    def request(self, j: int, target: Any, kernels: Sequence[Any]) -> bool:
        try:
            _send(self.cmd_w, (j, features.cache_generation(), target,
                               [(k.comp, k.root, k.members, k.hash, k.valid) for k in kernels]))
            return True
        except OSError:
            return False  # the worker is gone: poll sees its EOF

    def close(self, kill: bool = False) -> None:
        if self.pid is None:
            return
        if kill:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.close(self.cmd_w)  # EOF: the worker ends
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        try:
            os.close(self.res_r)
        except OSError:
            pass
        shutil.rmtree(self.spool, ignore_errors=True)
        self.pid = None


_WORKER: Optional[_Worker] = None
_FAILED: "weakref.WeakSet" = weakref.WeakSet()  # fusion spaces whose worker failed: no other worker for them


def close_worker() -> None:
    """End the featurization worker process, if any (the next large batch forks a new one)."""
    global _WORKER
    if _WORKER is not None:
        _WORKER.close()
        _WORKER = None


atexit.register(close_worker)


def _worker_for(kernels: Sequence[Any]) -> Optional[_Worker]:
    """The worker of the kernels' fusion space (forked now if needed), or None where none can serve them."""
    global _WORKER
    from autotune.compiler.fusion.kernels import Kernel
    space = getattr(kernels[0], "space", None)
    if space is None or space in _FAILED or any(type(k) is not Kernel or k.space is not space for k in kernels):
        return None
    if _WORKER is not None and _WORKER.space_ref() is space:
        return _WORKER
    close_worker()
    try:
        _WORKER = _Worker(space)
    except OSError as e:  # no process to spare
        WorkerStats.failure = f"fork: {e}"
        _FAILED.add(space)
        return None
    return _WORKER


class WorkerStats:
    """What the last `graphs_in_chunks` did (tests, benchmarks): chunks per process, a worker failure,
    and the worker's CPU seconds for its chunks."""
    chunks_here = 0
    chunks_worker = 0
    failure: Optional[str] = None
    worker_cpu_s = 0.0


def graphs_in_chunks(kernels: Sequence[Any], target: Any, chunk: int, workers: bool = True) -> Iterator[tuple]:
    """(start, end, graphs) of consecutive chunks of `chunk` kernels, each chunk once, in the order
    they are ready: the caller's own chunks from the front, the worker's from the back (see the
    module docstring); workers False, one chunk, no fork, or kernels that are not one fusion space's
    `Kernel`s: all here, in order."""
    global _WORKER
    kernels = list(kernels)
    n = len(kernels)
    bounds = [(s, min(s + chunk, n)) for s in range(0, n, max(int(chunk), 1))]
    WorkerStats.chunks_here = WorkerStats.chunks_worker = 0
    WorkerStats.failure, WorkerStats.worker_cpu_s = None, 0.0
    worker = _worker_for(kernels) if workers and len(bounds) >= 2 and fork_available() else None
    if worker is None:
        for a, b in bounds:
            WorkerStats.chunks_here += 1
            yield a, b, features.kernel_graphs(kernels[a:b], target)
        return
    front, back = 0, len(bounds)  # chunks [front, back) not started; the worker's are taken from the back
    outstanding: set = set()

    def assign() -> None:
        nonlocal back
        if worker is not None and back > front:
            back -= 1
            outstanding.add(back)
            a, b = bounds[back]
            worker.request(back, target, kernels[a:b])

    def fail(why: str) -> list:
        global _WORKER
        nonlocal worker
        WorkerStats.failure = why
        if worker.space_ref() is not None:
            _FAILED.add(worker.space_ref())
        worker.close(kill=True)
        if _WORKER is worker:
            _WORKER = None
        worker = None
        redo = sorted(outstanding)
        outstanding.clear()
        return redo

    name = features.canonical_target_name(target)
    try:
        assign()
        assign()  # two in flight: the worker never waits for its next chunk
        while front < back or outstanding:
            msg = False  # nothing from the worker (yet)
            if outstanding:
                msg = worker.poll(0.0 if front < back else STALL_SECONDS)
                why = "the worker process ended early"
                if msg is False and front >= back:  # nothing else to do and nothing came: a stalled worker
                    msg, why = None, f"no result in {STALL_SECONDS:.0f} s"
            if msg is None or (msg and msg[0] < 0):
                redo = fail(why if msg is None else f"the worker failed: {msg[1]}")
                for j in redo:
                    a, b = bounds[j]
                    WorkerStats.chunks_here += 1
                    yield a, b, features.kernel_graphs(kernels[a:b], target)
                continue
            if msg:
                j, path, cpu = msg
                try:
                    graphs = unpack_graphs(worker.result(path))
                except Exception as e:  # noqa: BLE001 - a chunk file gone or torn: the worker's chunks are redone here
                    for jj in fail(f"the worker's chunk {j} could not be read ({type(e).__name__}: {e})"):
                        a, b = bounds[jj]
                        WorkerStats.chunks_here += 1
                        yield a, b, features.kernel_graphs(kernels[a:b], target)
                    continue
                features.cache_graphs(graphs, name)
                outstanding.discard(j)
                WorkerStats.chunks_worker += 1
                WorkerStats.worker_cpu_s += cpu
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
        if outstanding and worker is not None:  # abandoned (the consumer stopped early): a fresh worker next time
            worker.close(kill=True)
            if _WORKER is worker:
                _WORKER = None
