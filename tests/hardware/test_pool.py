"""Tests for hardware/pool.py: order, crash and timeout isolation, in-process mode, dask clusters."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from hardware.base import Measurement
from hardware.pool import MeasurementPool, run_isolated

try:  # Pickle this module's helpers by value so workers need not import the test module.
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except Exception:  # pragma: no cover - plain pickle by reference then
    pass


def work(x):
    """Test payload interpreter: numbers succeed; a few magic strings misbehave."""
    if x == "exit":
        os._exit(7)
    if x == "abort":  # what an XLA CHECK does: the reason, a stack trace, then SIGABRT
        sys.stderr.write("F0000 x.cc:1] Check failed: shape ok\n*** stack trace ***\n  frame 1\n")
        sys.stderr.flush()
        os.abort()
    if x == "segv":
        import ctypes

        ctypes.string_at(0)
    if x == "sleep":
        time.sleep(60)
    if x == "raise":
        raise ValueError("bad payload")
    if x == "float":
        return 0.25
    return Measurement(float(x) * 1e-3, extra={"pid": os.getpid(), "x": x})


@pytest.fixture(scope="module")
def pool():
    p = MeasurementPool(n_workers=2, timeout=2.0)
    yield p
    p.close()


def test_results_in_order(pool):
    xs = list(range(10))
    res = pool.map(work, xs)
    assert [m.seconds for m in res] == pytest.approx([x * 1e-3 for x in xs])
    assert all(m.ok for m in res)
    assert all(m.extra["pid"] != os.getpid() for m in res)  # ran in workers
    assert len({m.extra["pid"] for m in res}) <= 2
    assert pool.map(work, []) == []


def test_worker_exit_is_a_crash_failure(pool):
    res = pool.map(work, [1, 2, "exit", 3, 4])
    assert res[2].status.startswith("crash:") and "7" in res[2].status and res[2].seconds is None
    assert [m.seconds for i, m in enumerate(res) if i != 2] == pytest.approx([1e-3, 2e-3, 3e-3, 4e-3])
    # The dead worker was replaced: the pool still works with its full width.
    assert all(m.ok for m in pool.map(work, [5, 6, 7]))


def test_segfault_is_a_crash_failure(pool):
    res = pool.map(work, ["segv", 1])
    assert res[0].status.startswith("crash:") and "SIGSEGV" in res[0].status
    assert res[1].ok


def test_timeout_kills_the_item(pool):
    t0 = time.monotonic()
    res = pool.map(work, ["sleep", 1, 2, 3], timeout=1.0)
    assert time.monotonic() - t0 < 10
    assert res[0].status == "timeout" and res[0].seconds is None
    assert all(m.ok for m in res[1:])
    assert pool.timeouts >= 1
    assert pool.map(work, [8])[0].ok


def test_exceptions_and_odd_results_are_failures(pool):
    res = pool.map(work, ["raise", "float", 2])
    assert res[0].status == "error: ValueError: bad payload"
    assert res[1].ok and res[1].seconds == 0.25  # plain seconds are accepted
    assert res[2].ok


def test_unpicklable_payload_is_a_failure(pool):
    res = pool.map(work, [threading.Lock(), 1])
    assert res[0].status.startswith("error: cannot pickle payload")
    assert res[1].ok


def test_lambda_functions_work(pool):
    res = pool.map(lambda x: Measurement(x * 2.0), [1, 2])
    assert [m.seconds for m in res] == [2.0, 4.0]


def test_in_process_mode():
    p = MeasurementPool(n_workers=0)
    res = p.map(work, [1, "raise", 3])
    assert res[0].extra["pid"] == os.getpid()
    assert res[1].status.startswith("error: ValueError")
    assert res[2].ok
    p.close()


def test_default_width_is_cpu_count():
    assert MeasurementPool().n_workers == (os.cpu_count() or 1)
    with pytest.raises(ValueError):
        MeasurementPool(n_workers=-1)


def test_run_isolated():
    assert run_isolated(work, 3, timeout=30).seconds == pytest.approx(3e-3)
    assert run_isolated(work, "exit", timeout=30).status.startswith("crash: worker exited with code 7")
    assert run_isolated(work, "sleep", timeout=1.0).status == "timeout"
    aborted = run_isolated(work, "abort", timeout=30).status
    assert aborted.startswith("crash: worker killed by signal SIGABRT") and "Check failed: shape ok" in aborted


def test_dask_local_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        with MeasurementPool(scheduler=cluster.scheduler_address, timeout=8.0) as p:  # ends the 60 s sleep; 2 s timed out the raising task too on a loaded machine
            res = p.map(work, [1, 2, "exit", 3, "sleep", "raise"])
            assert [m.seconds for m in res[:2]] == pytest.approx([1e-3, 2e-3])
            assert res[2].status.startswith("crash:")
            assert res[3].ok and res[3].seconds == pytest.approx(3e-3)
            assert res[4].status == "timeout"
            assert res[5].status.startswith("error: ValueError")
            assert all(m.extra["pid"] != os.getpid() for m in (res[0], res[1], res[3]))


def test_unreachable_scheduler_is_a_failure_not_an_exception():
    p = MeasurementPool(scheduler="tcp://127.0.0.1:1")
    p._get_client = lambda: (_ for _ in ()).throw(OSError("connection refused"))  # avoid the 30 s connect
    res = p.map(work, [1, 2])
    assert all(m.status.startswith("crash: cannot reach scheduler") for m in res)


def test_many_distinct_functions(pool):
    # More functions than a worker caches: older ones are evicted and re-sent when needed.
    fns = [(lambda k: (lambda x: Measurement(float(x + k))))(k) for k in range(12)]
    for _ in range(2):
        for k, f in enumerate(fns):
            assert pool.map(f, [1])[0].seconds == 1.0 + k


class CrashOnLoad:
    """A callable whose unpickling kills the worker: loading the function must not loop forever."""

    def __call__(self, x):
        return Measurement(1.0)

    def __reduce__(self):
        return (os._exit, (5,))


def test_function_that_kills_worker_on_load_fails_items():
    with MeasurementPool(n_workers=2, timeout=5.0, max_start_failures=2) as p:
        t0 = time.monotonic()
        res = p.map(CrashOnLoad(), [1, 2, 3])
        assert time.monotonic() - t0 < 15
        assert all(m.status.startswith("crash: worker failed to start or load the function") for m in res)
        assert all(m.ok for m in p.map(work, [1, 2]))  # the pool recovers for other functions


# -- lifecycle: lazily started, stopped at close / exit, recovers from dead workers ----------------
def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie awaiting its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _gone_within(pids, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def slow_pid(x):
    time.sleep(0.3)  # long enough for every worker to take an item
    return Measurement(1e-3, extra={"pid": os.getpid()})


def test_nothing_starts_before_the_first_map_and_close_stops_the_workers():
    import multiprocessing

    before = set(multiprocessing.active_children())
    p = MeasurementPool(n_workers=2, timeout=10.0)
    assert not p.started and set(multiprocessing.active_children()) == before
    pids = {m.extra["pid"] for m in p.map(slow_pid, range(4))}
    assert p.started and len(pids) == 2 and all(_alive(pid) for pid in pids)
    p.close()
    assert not p.started and _gone_within(pids, 10)
    assert p.map(work, [1])[0].ok  # a closed pool starts again when used
    p.close()


def test_a_worker_killed_between_maps_is_replaced():
    with MeasurementPool(n_workers=1, timeout=10.0) as p:
        (first,) = p.map(work, [1])
        os.kill(first.extra["pid"], 9)
        time.sleep(0.3)
        res = p.map(work, [1, 2, 3])
        assert all(m.ok for m in res) and res[0].extra["pid"] != first.extra["pid"]


def test_skip_and_on_result_hooks(pool):
    seen = []
    gate = iter([None, None, Measurement.failure("budget_exhausted"), Measurement.failure("budget_exhausted")])
    res = pool.map(work, [1, "exit", 3, 4], skip=lambda: next(gate), on_result=lambda i, m: seen.append((i, m)))
    assert res[0].ok and res[1].status.startswith("crash:")
    assert [m.status for m in res[2:]] == ["budget_exhausted"] * 2  # never started
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3] and all(res[i] is m for i, m in seen)


def slow_init():
    time.sleep(1.5)


def broken_init():
    raise RuntimeError("no device")


def test_initializer_runs_outside_item_timeouts_and_its_error_fails_items():
    with MeasurementPool(n_workers=1, timeout=1.0, initializer=slow_init) as p:
        assert all(m.ok for m in p.map(work, [1, 2]))  # the 1.5 s start-up is not an item's time
    with MeasurementPool(n_workers=1, timeout=5.0, initializer=broken_init) as p:
        res = p.map(work, [1, 2])
        assert all(m.status == "error: worker initializer failed: RuntimeError: no device" for m in res)


_ORPHAN_SCRIPT = r"""
import os, signal, sys, threading, time
sys.path.insert(0, sys.argv[1])
from hardware.base import Measurement
from hardware.pool import MeasurementPool

def job(x):
    if x == "hang":
        open(sys.argv[3], "w").write(str(os.getpid()))
        time.sleep(600)
    time.sleep(0.3)
    return Measurement(1e-3, extra={"pid": os.getpid()})

p = MeasurementPool(n_workers=2, timeout=None)
pids = {m.extra["pid"] for m in p.map(job, [1, 2, 3, 4])}
if sys.argv[2] == "kill":  # killed while one worker hangs in an item
    threading.Thread(target=p.map, args=(job, ["hang"]), daemon=True).start()
    while not os.path.exists(sys.argv[3]) or not open(sys.argv[3]).read():
        time.sleep(0.05)
    assert int(open(sys.argv[3]).read()) in pids
print(" ".join(map(str, sorted(pids))), flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""  # "exit": the interpreter ends without close()


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_no_orphan_workers_when_the_parent_ends(tmp_path, how):
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", _ORPHAN_SCRIPT, root, how, str(tmp_path / "hung.pid")],
                          capture_output=True, text=True, timeout=120)
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2, proc.stderr
    assert _gone_within(pids, 15), [p for p in pids if _alive(p)]
