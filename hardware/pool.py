"""Parallel measurement: map `fn(payload) -> Measurement` over payloads in isolated workers.

Measuring a kernel compiles and runs foreign code that may crash the process (segfault, abort,
``os._exit``) or hang. The pool therefore runs each item in a worker process and turns every
per-item problem into a failure value: a worker that dies becomes ``Measurement.failure("crash:
...")``, one that exceeds its per-item timeout is killed and becomes ``Measurement.failure("timeout")``,
and an exception raised by ``fn`` becomes ``Measurement.failure("error: ...")``. Dead workers are
replaced. `map` never raises for an item.

Local workers use the ``spawn`` start method (jax/XLA are not fork-safe) and persist across `map`
calls, so expensive imports are paid once per worker. ``n_workers=0`` runs in-process (no
isolation and no timeout: for debugging). ``scheduler="tcp://HOST:PORT"`` submits the items to a
dask.distributed cluster instead; each item then runs in a fresh Python subprocess on a dask
worker, giving the same crash and timeout semantics.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Optional, Sequence

from hardware.base import Measurement

__all__ = ["MeasurementPool", "run_isolated"]

PayloadFn = Callable[[Any], Measurement]
_MAX_FNS = 8  # functions cached per worker


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
# Local worker processes
# --------------------------------------------------------------------------------------------
def _worker_main(conn: Connection) -> None:
    """Worker loop. Messages in: ("fn", id, bytes), ("item", idx, fn_id, bytes), ("stop",)."""
    fns: dict[int, PayloadFn] = {}
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        kind = msg[0]
        if kind == "stop":
            return
        if kind == "fn":
            _, fn_id, blob = msg
            try:
                fn = pickle.loads(blob)
                if len(fns) >= _MAX_FNS:  # keep a few recent functions, not every lambda ever sent
                    fns.pop(next(iter(fns)))
                fns[fn_id] = fn
                conn.send(("fn_ok", fn_id, None))
            except BaseException as exc:  # noqa: BLE001 - report, do not die
                conn.send(("fn_err", fn_id, f"cannot load function: {type(exc).__name__}: {exc}"))
        elif kind == "item":
            _, idx, fn_id, blob = msg
            try:
                payload = pickle.loads(blob)
                m = _call(fns[fn_id], payload)
            except BaseException as exc:  # noqa: BLE001
                m = Measurement.failure(_error_reason(exc))
            try:
                conn.send(("result", idx, m))
            except Exception as exc:  # unpicklable extra, say
                conn.send(("result", idx, Measurement(m.seconds, m.status) if m.ok
                           else Measurement.failure(_error_reason(exc))))


class _Worker:
    """Parent-side handle of one worker process and its state."""

    def __init__(self, ctx, setup_timeout: float) -> None:
        self.setup_deadline = time.monotonic() + setup_timeout  # for start-up and loading the function
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True, name="autotune-measure")
        self.proc.start()
        child.close()
        self.ready = False
        self.loaded: dict[int, None] = {}  # mirrors the worker's function cache (same eviction)
        self.loading: Optional[int] = None
        self.item: Optional[int] = None
        self.deadline = float("inf")

    @property
    def idle(self) -> bool:
        return self.ready and self.loading is None and self.item is None

    def kill(self) -> None:
        try:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(5)
        except Exception:  # pragma: no cover
            pass
        try:
            self.conn.close()
        except Exception:  # pragma: no cover
            pass

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except Exception:
            pass
        self.proc.join(1)
        self.kill()


class MeasurementPool:
    """Map a picklable `fn(payload) -> Measurement` over payloads, in parallel, never raising per item.

    n_workers: local worker processes (default os.cpu_count(); 0 = in-process, no isolation).
    timeout: default per-item limit in seconds (None = no limit), counted from when the item
    reaches an idle, loaded worker. scheduler: "tcp://HOST:PORT" of a dask.distributed scheduler.
    setup_timeout bounds a worker's start-up and the loading (unpickling, imports) of `fn`; after
    max_start_failures workers fail to get ready in a row, the remaining items fail. Not thread-safe.
    """

    def __init__(self, n_workers: Optional[int] = None, timeout: Optional[float] = None,
                 scheduler: Optional[str] = None, mp_context: str = "spawn",
                 max_start_failures: int = 3, setup_timeout: float = 300.0):
        if n_workers is not None and n_workers < 0:
            raise ValueError("n_workers must be >= 0")
        self.n_workers = (os.cpu_count() or 1) if n_workers is None else int(n_workers)
        self.timeout = timeout
        self.scheduler = scheduler
        self.max_start_failures = max_start_failures
        self.setup_timeout = float(setup_timeout)
        self._ctx = mp.get_context(mp_context)
        self._workers: list[_Worker] = []
        self._fn_ids: dict[bytes, int] = {}
        self._next_fn_id = 0
        self._client = None
        self.crashes = 0
        self.timeouts = 0

    # -- public ----------------------------------------------------------------------------------
    def map(self, fn: PayloadFn, payloads: Sequence[Any], timeout: Optional[float] = None) -> list[Measurement]:
        """One Measurement per payload, in order. Crashes, timeouts and exceptions become failures."""
        payloads = list(payloads)
        if not payloads:
            return []
        timeout = self.timeout if timeout is None else timeout
        if self.scheduler:
            return self._map_dask(fn, payloads, timeout)
        if self.n_workers == 0:
            return [_call(fn, p) for p in payloads]
        return self._map_local(fn, payloads, timeout)

    def close(self) -> None:
        """Stop the worker processes / disconnect from the cluster."""
        for w in self._workers:
            w.stop()
        self._workers = []
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None

    def __enter__(self) -> "MeasurementPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        where = self.scheduler or ("in-process" if self.n_workers == 0 else f"{self.n_workers} local workers")
        return f"MeasurementPool({where}, timeout={self.timeout})"

    # -- local processes -------------------------------------------------------------------------
    def _map_local(self, fn: PayloadFn, payloads: list[Any], timeout: Optional[float]) -> list[Measurement]:
        out: list[Optional[Measurement]] = [None] * len(payloads)
        try:
            fn_blob = _dumps(fn)
        except Exception as exc:
            return [Measurement.failure(f"error: cannot pickle function: {exc}")] * len(payloads)
        fn_id = self._fn_ids.get(fn_blob)
        if fn_id is None:
            if len(self._fn_ids) >= 64:
                self._fn_ids.clear()  # ids stay unique: they come from a counter
            fn_id = self._fn_ids[fn_blob] = self._next_fn_id
            self._next_fn_id += 1
        pending: list[tuple[int, bytes]] = []
        for i, p in enumerate(payloads):
            try:
                pending.append((i, _dumps(p)))
            except Exception as exc:
                out[i] = Measurement.failure(f"error: cannot pickle payload: {exc}")
        pending.reverse()  # pop() from the end keeps submission order
        want = min(self.n_workers, len(pending))
        for w in self._workers:  # a map interrupted earlier (KeyboardInterrupt) may leave stale work
            if w.item is not None or w.loading is not None or not w.proc.is_alive():
                w.kill()
        self._workers = [w for w in self._workers if w.proc.is_alive() and w.item is None and w.loading is None]
        while len(self._workers) < want:
            self._workers.append(_Worker(self._ctx, self.setup_timeout))
        start_failures = 0
        last_start_error = ""
        fn_error: Optional[str] = None

        def finish(idx: int, m: Measurement) -> None:
            out[idx] = m

        while pending or any(w.item is not None for w in self._workers):
            if fn_error is not None:
                for idx, _ in pending:
                    finish(idx, Measurement.failure(f"error: {fn_error}"))
                pending.clear()
                if not any(w.item is not None for w in self._workers):
                    break
            # Hand out work to idle workers.
            for w in self._workers:
                if not w.ready or w.loading is not None or w.item is not None:
                    continue
                if fn_id not in w.loaded:
                    if pending:
                        w.loading = fn_id
                        w.setup_deadline = time.monotonic() + self.setup_timeout
                        self._send(w, ("fn", fn_id, fn_blob))
                    continue
                if pending:
                    idx, blob = pending.pop()
                    w.item = idx
                    w.deadline = time.monotonic() + timeout if timeout is not None else float("inf")
                    self._send(w, ("item", idx, fn_id, blob))  # a death shows on the sentinel
            # Wait for a message, a death, or the nearest deadline.
            now = time.monotonic()
            deadline = min([w.deadline for w in self._workers if w.item is not None] +
                           [w.setup_deadline for w in self._workers if not w.ready or w.loading is not None],
                           default=float("inf"))
            wait_s = None if deadline == float("inf") else max(0.0, deadline - now)
            objs: list[Any] = []
            for w in self._workers:
                objs.extend((w.conn, w.proc.sentinel))
            ready = set(wait(objs, timeout=wait_s)) if objs else set()
            now = time.monotonic()
            replace: list[_Worker] = []
            for w in self._workers:
                if w.conn in ready:
                    try:
                        while w.conn.poll():
                            msg = w.conn.recv()
                            kind = msg[0]
                            if kind == "ready":
                                w.ready = True
                                w.setup_deadline = float("inf")
                            elif kind == "fn_ok":
                                start_failures = 0
                                w.setup_deadline = float("inf")
                                if len(w.loaded) >= _MAX_FNS:
                                    w.loaded.pop(next(iter(w.loaded)))
                                w.loaded[msg[1]] = None
                                w.loading = None
                            elif kind == "fn_err":
                                w.loading = None
                                w.setup_deadline = float("inf")
                                fn_error = msg[2]
                            elif kind == "result":
                                if w.item == msg[1]:
                                    finish(msg[1], _as_measurement(msg[2]))
                                    w.item, w.deadline = None, float("inf")
                    except (EOFError, OSError):
                        pass  # died: handled through the sentinel
                if not w.proc.is_alive() and (w.proc.sentinel in ready or w.conn in ready
                                              or w.proc.exitcode is not None):
                    w.proc.join(1)
                    reason = _describe_exit(w.proc.exitcode)
                    if w.item is not None:
                        self.crashes += 1
                        finish(w.item, Measurement.failure(f"crash: {reason}"))
                        w.item = None
                    elif not w.ready or w.loading is not None:
                        start_failures += 1
                        last_start_error = reason
                    replace.append(w)
                elif (not w.ready or w.loading is not None) and now >= w.setup_deadline:
                    start_failures += 1
                    last_start_error = f"no response within {self.setup_timeout:g} s"
                    replace.append(w)
                elif w.item is not None and now >= w.deadline:
                    self.timeouts += 1
                    finish(w.item, Measurement.failure("timeout"))
                    w.item = None
                    replace.append(w)
            for w in replace:
                w.kill()
                self._workers.remove(w)
            if start_failures >= self.max_start_failures:
                for idx, _ in pending:
                    finish(idx, Measurement.failure(
                        f"crash: worker failed to start or load the function ({last_start_error})"))
                pending.clear()
            busy = sum(1 for w in self._workers if w.item is not None)
            while pending and len(self._workers) < min(self.n_workers, len(pending) + busy):
                self._workers.append(_Worker(self._ctx, self.setup_timeout))
        return [m if m is not None else Measurement.failure("crash: lost result") for m in out]

    @staticmethod
    def _send(w: _Worker, msg: tuple) -> bool:
        try:
            w.conn.send(msg)
            return True
        except (OSError, ValueError, BrokenPipeError):
            return False

    # -- dask.distributed ------------------------------------------------------------------------
    def _map_dask(self, fn: PayloadFn, payloads: list[Any], timeout: Optional[float]) -> list[Measurement]:
        try:
            client = self._get_client()
        except Exception as exc:
            reason = f"crash: cannot reach scheduler {self.scheduler}: {type(exc).__name__}: {exc}"
            return [Measurement.failure(reason)] * len(payloads)
        futures = []
        for p in payloads:
            try:
                futures.append(client.submit(run_isolated, fn, p, timeout, pure=False))
            except Exception as exc:
                futures.append(Measurement.failure(f"error: cannot submit: {type(exc).__name__}: {exc}"))
        out: list[Measurement] = []
        for f in futures:
            if isinstance(f, Measurement):
                out.append(f)
                continue
            try:
                out.append(_as_measurement(f.result()))
            except Exception as exc:  # KilledWorker, CancelledError, communication errors
                out.append(Measurement.failure(f"crash: {type(exc).__name__}: {exc}"))
        return out

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
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] if stderr else []
        detail = f" ({tail[0][:200]})" if tail else ""
        return Measurement.failure(f"crash: {_describe_exit(proc.returncode)}{detail}")
    try:
        return _as_measurement(pickle.loads(stdout[pos + len(_MARK):]))
    except Exception as exc:
        return Measurement.failure(f"error: cannot read result: {exc}")
