"""Parallel measurement: map `fn(payload) -> Measurement` over payloads in isolated workers.

The one place that supervises measuring processes (XlaEvaluator and any other parallel evaluation
go through it). Measuring a kernel compiles and runs foreign code that may crash the process
(segfault, abort, ``os._exit``) or hang, so every per-item problem becomes a failure value: a
worker that dies becomes ``Measurement.failure("crash: ...")``, an item past its timeout is killed
with its worker and becomes ``Measurement.failure("timeout")``, and an exception raised by ``fn``
becomes ``Measurement.failure("error: ...")``. `map` never raises for an item.

Local workers are a `pebble.ProcessPool` (per-task timeouts, a dead worker reported on its own
task and replaced) in the ``spawn`` start method (jax/XLA are not fork-safe). Nothing starts
before the first `map`; the workers then persist across calls (expensive imports and an optional
``initializer`` are paid once per worker, outside item timeouts) until `close()`, the end of a
``with`` block, garbage collection or interpreter exit. Items are handed out one per free worker,
so ``skip`` (a budget check) is consulted right before each item starts, and ``on_result`` sees
each result the moment it exists. ``n_workers=0`` runs in-process (no isolation and no timeout:
for debugging). ``scheduler="tcp://HOST:PORT"`` submits the items to a dask.distributed cluster
instead; each item then runs in a fresh Python subprocess on a dask worker (:func:`run_isolated`),
giving the same crash and timeout semantics.
"""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from concurrent.futures import TimeoutError as TaskTimeout  # builtin TimeoutError from 3.11 on
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Optional, Sequence

from hardware.base import Measurement

__all__ = ["MeasurementPool", "run_isolated"]

PayloadFn = Callable[[Any], Measurement]
SkipFn = Callable[[], Optional[Measurement]]
ResultFn = Callable[[int, Measurement], None]
_MAX_FNS = 8  # functions cached per worker
_POLL_S = 1.0  # how often a waiting `map` checks for a stalled pool


def _dumps(obj: Any) -> bytes:
    """Pickle with cloudpickle when available (lambdas, closures), else the standard pickle."""
    try:
        import cloudpickle  # shipped with dask
    except ImportError:  # pragma: no cover
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "worker died"
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with code {code}"


def _as_measurement(value: Any) -> Measurement:
    """Accept a Measurement, or a plain number of seconds."""
    if isinstance(value, Measurement):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Measurement(float(value))
    if value is None:
        return Measurement.failure("error: function returned None")
    return Measurement.failure(f"error: function returned {type(value).__name__}, not a Measurement")


def _error_reason(exc: BaseException) -> str:
    msg = str(exc).splitlines()[0] if str(exc) else ""
    return f"error: {type(exc).__name__}: {msg}" if msg else f"error: {type(exc).__name__}"


def _call(fn: PayloadFn, payload: Any) -> Measurement:
    try:
        return _as_measurement(fn(payload))
    except Exception as exc:
        return Measurement.failure(_error_reason(exc))


# --------------------------------------------------------------------------------------------
# Worker side (module level: pebble's spawn workers import this module to run them)
# --------------------------------------------------------------------------------------------
_FNS: dict[str, PayloadFn] = {}  # function digest -> function, in each worker
_INIT_ERROR: Optional[str] = None


def _digest(blob: bytes) -> str:
    return hashlib.sha1(blob).hexdigest()


def _exit_with_parent(parent: int) -> None:
    """Worker thread: end the worker when its parent is gone (killed, say), even mid-item."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _start_worker(initializer_blob: Optional[bytes]) -> None:
    """pebble initializer: watch the parent, then run the user's initializer; its exception is
    kept, not fatal (a worker dying here would be restarted in a loop), and fails the items."""
    global _INIT_ERROR
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True,
                     name="autotune-parent-watch").start()
    if initializer_blob is None:
        return
    try:
        pickle.loads(initializer_blob)()
    except BaseException as exc:  # noqa: BLE001 - reported on each item
        _INIT_ERROR = f"worker initializer failed: {_error_reason(exc)[len('error: '):]}"


def _load_function(fn_blob: bytes) -> PayloadFn:
    key = _digest(fn_blob)
    fn = _FNS.get(key)
    if fn is None:
        fn = pickle.loads(fn_blob)
        if len(_FNS) >= _MAX_FNS:  # keep a few recent functions, not every lambda ever sent
            _FNS.pop(next(iter(_FNS)))
        _FNS[key] = fn
    return fn


def _check_function(fn_blob: bytes) -> None:
    """Task: load (and cache) a function, so that one that cannot load fails once, not per item."""
    _load_function(fn_blob)


def _run_item(fn_blob: bytes, payload_blob: bytes) -> bytes:
    """Task: fn(payload) as a pickled Measurement (pickled here: nothing the parent cannot read)."""
    if _INIT_ERROR is not None:
        m = Measurement.failure(f"error: {_INIT_ERROR}")
    else:
        try:
            m = _call(_load_function(fn_blob), pickle.loads(payload_blob))
        except BaseException as exc:  # noqa: BLE001 - SystemExit from fn, a payload that cannot load
            m = Measurement.failure(_error_reason(exc))
    try:
        return pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an unpicklable extra, say
        kept = Measurement(m.seconds, m.status) if m.ok else Measurement.failure(_error_reason(exc))
        return pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL)


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------
def _stop_pebble(pool: Any) -> None:
    """Stop a pebble pool and its workers now (running tasks are killed)."""
    try:
        pool.stop()
        pool.join(timeout=10)
    except Exception:  # pragma: no cover - best effort
        pass


class _Broken(Exception):
    """The pebble pool broke (a worker died outside any task): restart it and resubmit."""


class MeasurementPool:
    """Map a picklable `fn(payload) -> Measurement` over payloads, in parallel, never raising per item.

    n_workers: local worker processes (default os.cpu_count(); 0 = in-process, no isolation).
    timeout: default per-item limit in seconds (None = no limit), counted from when a worker takes
    the item. scheduler: "tcp://HOST:PORT" of a dask.distributed scheduler. initializer: a
    picklable callable run once in each local worker as it starts (an exception there fails that
    worker's items). setup_timeout bounds how long items may wait without any worker taking one
    (start-up, initializer, loading `fn`); a pool that broke max_start_failures times in a row,
    or a function that killed that many workers while loading, fails the remaining items.
    Not thread-safe.
    """

    def __init__(self, n_workers: Optional[int] = None, timeout: Optional[float] = None,
                 scheduler: Optional[str] = None, mp_context: str = "spawn",
                 max_start_failures: int = 3, setup_timeout: float = 300.0,
                 initializer: Optional[Callable[[], Any]] = None):
        if n_workers is not None and n_workers < 0:
            raise ValueError("n_workers must be >= 0")
        self.n_workers = (os.cpu_count() or 1) if n_workers is None else int(n_workers)
        self.timeout = timeout
        self.scheduler = scheduler
        self.max_start_failures = max(1, int(max_start_failures))
        self.setup_timeout = float(setup_timeout)
        self.mp_context = mp_context
        self.initializer = initializer
        self._pebble: Any = None
        self._finalizer: Optional[weakref.finalize] = None
        self._loaded: dict[str, None] = {}  # digests of functions known to load in a worker
        self._client = None
        self.crashes = 0  # items whose worker died under them
        self.timeouts = 0  # items killed (with their worker) at their timeout
        self.pool_restarts = 0  # pebble pools replaced after breaking

    # -- public ----------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """Whether local worker processes are (being) started; False until the first `map`."""
        return self._pebble is not None

    def map(self, fn: PayloadFn, payloads: Sequence[Any], timeout: Optional[float] = None, *,
            skip: Optional[SkipFn] = None, on_result: Optional[ResultFn] = None) -> list[Measurement]:
        """One Measurement per payload, in order. Crashes, timeouts and exceptions become failures.

        skip: called right before an item is handed to a worker; a Measurement it returns is that
        item's result and the item is not run (e.g. a spent budget). on_result(index, m): called in
        this thread as soon as each item's result exists, before `map` returns.
        """
        payloads = list(payloads)
        if not payloads:
            return []
        timeout = self.timeout if timeout is None else timeout
        out: list[Optional[Measurement]] = [None] * len(payloads)

        def finish(i: int, m: Measurement) -> None:
            out[i] = m
            if on_result is not None:
                on_result(i, m)

        if self.scheduler:
            self._map_dask(fn, payloads, timeout, skip, finish)
        elif self.n_workers == 0:
            for i, p in enumerate(payloads):
                gate = skip() if skip is not None else None
                finish(i, gate if gate is not None else _call(fn, p))
        else:
            self._map_local(fn, payloads, timeout, skip, finish)
        return [m if m is not None else Measurement.failure("crash: lost result") for m in out]

    def close(self) -> None:
        """Stop the worker processes / disconnect from the cluster."""
        self._discard_pebble()
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None

    def __enter__(self) -> "MeasurementPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.scheduler or ("in-process" if self.n_workers == 0 else f"{self.n_workers} local workers")
        return f"MeasurementPool({where}, timeout={self.timeout})"

    # -- local processes -------------------------------------------------------------------------
    def _pool(self) -> Any:
        """The pebble pool, created on first use; stopped by close(), GC or interpreter exit."""
        if self._pebble is None:
            from pebble import ProcessPool

            init_blob = _dumps(self.initializer) if self.initializer is not None else None
            self._pebble = ProcessPool(max_workers=self.n_workers, initializer=_start_worker,
                                       initargs=(init_blob,), context=mp.get_context(self.mp_context))
            self._finalizer = weakref.finalize(self, _stop_pebble, self._pebble)
        return self._pebble

    def _discard_pebble(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # stops the pool once, and unregisters the exit hook
        self._pebble = self._finalizer = None

    def _schedule(self, task: Callable, args: tuple, timeout: Optional[float]) -> Future:
        try:
            return self._pool().schedule(task, args=args, timeout=timeout)
        except RuntimeError as exc:  # "Unexpected error within the Pool": it broke meanwhile
            raise _Broken(str(exc)) from None

    def _ensure_loaded(self, fn_blob: bytes) -> Optional[str]:
        """Load `fn` in a worker once per pool; the failure reason of every item if it cannot."""
        key = _digest(fn_blob)
        if key in self._loaded:
            return None
        reason = ""
        for _ in range(self.max_start_failures):
            try:
                fut = self._schedule(_check_function, (fn_blob,), None)
                done, _ = wait([fut], timeout=self.setup_timeout)
                if not done:
                    fut.cancel()
                    self._discard_pebble()
                    reason = f"no response within {self.setup_timeout:g} s"
                    continue
                exc = fut.exception()
            except _Broken as b:
                exc = BrokenProcessPool(str(b))
            if exc is None:
                if len(self._loaded) >= 64:
                    self._loaded.clear()
                self._loaded[key] = None
                return None
            if isinstance(exc, BrokenProcessPool):
                self._discard_pebble()
                self.pool_restarts += 1
                reason = "worker pool broke"
                continue
            from pebble import ProcessExpired

            if isinstance(exc, ProcessExpired):
                reason = _describe_exit(exc.exitcode)
                continue
            return f"error: cannot load function: {type(exc).__name__}: {exc}"
        return f"crash: worker failed to start or load the function ({reason})"

    def _map_local(self, fn: PayloadFn, payloads: list[Any], timeout: Optional[float],
                   skip: Optional[SkipFn], finish: Callable[[int, Measurement], None]) -> None:
        from pebble import ProcessExpired

        try:
            fn_blob = _dumps(fn)
        except Exception as exc:
            for i in range(len(payloads)):
                finish(i, Measurement.failure(f"error: cannot pickle function: {exc}"))
            return
        queue: deque[tuple[int, bytes]] = deque()
        for i, p in enumerate(payloads):
            try:
                queue.append((i, _dumps(p)))
            except Exception as exc:
                finish(i, Measurement.failure(f"error: cannot pickle payload: {exc}"))
        if not queue:
            return
        load_error = self._ensure_loaded(fn_blob)
        if load_error is not None:
            for i, _ in queue:
                finish(i, Measurement.failure(load_error))
            return
        in_flight: dict[Future, tuple[int, bytes]] = {}
        breaks = 0
        last_progress = time.monotonic()

        def fail_all(reason: str) -> None:
            for fut, (i, _) in list(in_flight.items()):
                fut.cancel()
                finish(i, Measurement.failure(reason))
            in_flight.clear()
            while queue:
                finish(queue.popleft()[0], Measurement.failure(reason))

        try:
            while queue or in_flight:
                broken = False
                while queue and len(in_flight) < self.n_workers:  # one item per worker
                    i, blob = queue[0]
                    gate = skip() if skip is not None else None
                    if gate is not None:
                        queue.popleft()
                        finish(i, gate)
                        continue
                    try:
                        fut = self._schedule(_run_item, (fn_blob, blob), timeout)
                    except _Broken:
                        broken = True
                        break
                    queue.popleft()
                    in_flight[fut] = (i, blob)
                if not broken:
                    done, _ = wait(list(in_flight), timeout=_POLL_S, return_when=FIRST_COMPLETED)
                    now = time.monotonic()
                    for fut in done:
                        i, blob = in_flight.pop(fut)
                        try:
                            exc = fut.exception()
                        except CancelledError as c:
                            exc = c
                        if isinstance(exc, BrokenProcessPool):
                            broken = True
                            queue.appendleft((i, blob))  # it never ran: pebble knew of no running task
                            continue
                        last_progress = now
                        breaks = 0
                        if exc is None:
                            try:
                                m = _as_measurement(pickle.loads(fut.result()))
                            except Exception as err:
                                m = Measurement.failure(f"error: cannot read result: {err}")
                        elif isinstance(exc, TaskTimeout):
                            self.timeouts += 1
                            m = Measurement.failure("timeout")
                        elif isinstance(exc, ProcessExpired):
                            self.crashes += 1
                            m = Measurement.failure(f"crash: {_describe_exit(exc.exitcode)}")
                        else:
                            m = Measurement.failure(_error_reason(exc))
                        finish(i, m)
                    if any(f.running() for f in in_flight):
                        last_progress = now
                    elif in_flight and now - last_progress > self.setup_timeout:
                        self._discard_pebble()
                        fail_all(f"crash: worker failed to start or load the function "
                                 f"(no worker ready within {self.setup_timeout:g} s)")
                if broken:
                    # A worker died while pebble knew of no running task (start-up, an idle
                    # worker killed): every unfinished task was aborted. Restart and resubmit.
                    for fut, item in list(in_flight.items()):
                        queue.appendleft(item)
                    in_flight.clear()
                    queue = deque(sorted(queue, key=lambda item: item[0]))
                    self._discard_pebble()
                    self.pool_restarts += 1
                    breaks += 1
                    if breaks >= self.max_start_failures:
                        fail_all(f"crash: worker failed to start or load the function "
                                 f"(worker pool broke {breaks} times in a row)")
        except BaseException:
            for fut in in_flight:  # interrupted: running items are killed with their workers
                fut.cancel()
            raise

    # -- dask.distributed ------------------------------------------------------------------------
    def _map_dask(self, fn: PayloadFn, payloads: list[Any], timeout: Optional[float],
                  skip: Optional[SkipFn], finish: Callable[[int, Measurement], None]) -> None:
        try:
            client = self._get_client()
        except Exception as exc:
            reason = f"crash: cannot reach scheduler {self.scheduler}: {type(exc).__name__}: {exc}"
            for i in range(len(payloads)):
                finish(i, Measurement.failure(reason))
            return
        from distributed import as_completed

        futures = {}
        for i, p in enumerate(payloads):
            gate = skip() if skip is not None else None
            if gate is not None:
                finish(i, gate)
                continue
            try:
                futures[client.submit(run_isolated, fn, p, timeout, pure=False)] = i
            except Exception as exc:
                finish(i, Measurement.failure(f"error: cannot submit: {type(exc).__name__}: {exc}"))
        for f in as_completed(list(futures), loop=client.loop):
            try:
                m = _as_measurement(f.result())
            except Exception as exc:  # KilledWorker, CancelledError, communication errors
                m = Measurement.failure(f"crash: {type(exc).__name__}: {exc}")
            finish(futures[f], m)

    def _get_client(self):
        if self._client is None:
            from distributed import Client  # deferred: dask is only needed for clusters

            self._client = Client(self.scheduler, timeout=30, set_as_default=False)
        return self._client


# --------------------------------------------------------------------------------------------
# One item in a fresh subprocess (used on dask workers, which are daemonic and cannot fork pools)
# --------------------------------------------------------------------------------------------
_RUNNER = r"""
import pickle, sys
fn, payload = pickle.loads(sys.stdin.buffer.read())
from hardware.pool import _call
m = _call(fn, payload)
try:
    blob = pickle.dumps(m)
except Exception as exc:
    blob = pickle.dumps(type(m)(None, "error: unpicklable result: %s" % exc))
out = sys.stdout.buffer
out.write(b"\n@@AUTOTUNE-RESULT@@" + blob)
out.flush()
"""
_MARK = b"\n@@AUTOTUNE-RESULT@@"


def _crash_line(stderr: str) -> str:
    """The line of a dead process's stderr that says why: XLA's ``Check failed`` when there is one
    (an abort prints it before a long stack trace), else the last non-empty line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    why = next((ln for ln in lines if "Check failed" in ln), lines[-1] if lines else "")
    return why[:300]


def run_isolated(fn: PayloadFn, payload: Any, timeout: Optional[float] = None) -> Measurement:
    """Run fn(payload) in a fresh Python subprocess; crash/timeout/exception become failures."""
    try:
        blob = _dumps((fn, payload))
    except Exception as exc:
        return Measurement.failure(f"error: cannot pickle item: {exc}")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        proc = subprocess.Popen([sys.executable, "-c", _RUNNER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        return Measurement.failure(f"crash: cannot start subprocess: {exc}")
    try:
        stdout, stderr = proc.communicate(blob, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Measurement.failure("timeout")
    pos = stdout.rfind(_MARK)
    if proc.returncode != 0 or pos < 0:
        why = _crash_line(stderr.decode(errors="replace") if stderr else "")
        detail = f" ({why})" if why else ""
        return Measurement.failure(f"crash: {_describe_exit(proc.returncode)}{detail}")
    try:
        return _as_measurement(pickle.loads(stdout[pos + len(_MARK):]))
    except Exception as exc:
        return Measurement.failure(f"error: cannot read result: {exc}")
