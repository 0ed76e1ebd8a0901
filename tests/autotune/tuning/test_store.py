"""Tests for autotune/tuning/store.py: round trips, persistence, concurrency, bad files, and a kill -9 mid-run."""
from __future__ import annotations

import os
import pickle
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.tuning.store import (APPLICATION_ID, SCHEMA_VERSION, MeasurementStore, MemoryStore, StoreError,
                            default_store_path, open_store)
from hardware.base import Measurement

ROOT = str(Path(__file__).resolve().parents[3])
NS = "sim/1"


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    s = MeasurementStore(tmp_path / "m.sqlite") if request.param == "sqlite" else MemoryStore()
    yield s
    s.close()


def test_roundtrip(store):
    assert store.get("tpu", NS, "abc", "8x128") is None
    m = Measurement(1.25e-4, extra={"runs": [1e-4, 2e-4], "note": "min of 15", "nested": {"a": 1}})
    store.put("tpu", NS, "abc", "8x128", m)
    got = store.get("tpu", NS, "abc", "8x128")
    assert got.cached and got.ok and got.seconds == 1.25e-4 and got.status == "ok"
    assert got.extra == {"runs": [1e-4, 2e-4], "note": "min of 15", "nested": {"a": 1}}
    # Every key component matters.
    assert store.get("cpu", NS, "abc", "8x128") is None
    assert store.get("tpu", "sim/2", "abc", "8x128") is None
    assert store.get("tpu", NS, "abd", "8x128") is None
    assert store.get("tpu", NS, "abc", "") is None
    assert store.count() == 1 and len(store) == 1


def test_failures_and_overwrite_rules(store):
    store.put("tpu", NS, "k", "", Measurement.failure("compile_error: bad op"))
    got = store.get("tpu", NS, "k", "")
    assert got.status == "compile_error: bad op" and got.seconds is None and not got.ok
    store.put("tpu", NS, "k", "", Measurement(2.0))  # a success replaces a failure
    assert store.get("tpu", NS, "k", "").seconds == 2.0
    store.put("tpu", NS, "k", "", Measurement.failure("timeout"))  # ... but not the reverse
    assert store.get("tpu", NS, "k", "").ok
    store.put("tpu", NS, "k", "", Measurement(3.0))  # a newer success wins
    assert store.get("tpu", NS, "k", "").seconds == 3.0
    store.put("tpu", NS, "nan", "", Measurement(float("nan"), "crash: x"))
    assert store.get("tpu", NS, "nan", "").seconds is None


def test_put_many_count_iter_rows(store):
    items = [("tpu" if i % 2 else "cpu", NS, f"h{i}", f"{i}x128", Measurement(i * 1e-3, extra={"i": i}))
             for i in range(10)]
    items.append(("tpu", NS, "f", "", Measurement.failure("timeout")))
    assert store.put_many(items) == 11
    assert store.put_many([]) == 0
    assert store.count() == 11 and store.count("tpu") == 6 and store.count("cpu") == 5
    assert store.count("tpu", "other/1") == 0
    rows = list(store.iter_rows(target="tpu"))
    assert len(rows) == 6 and all(r.target == "tpu" for r in rows)
    assert [r.kernel_hash for r in rows] == sorted(r.kernel_hash for r in rows)
    ok_rows = list(store.iter_rows(target="tpu", ok_only=True))
    assert len(ok_rows) == 5 and all(r.ok for r in ok_rows)
    r = next(r for r in rows if r.kernel_hash == "h3")
    assert (r.namespace, r.tile, r.seconds, r.status, r.extra) == (NS, "3x128", 3e-3, "ok", {"i": 3})
    assert r.created == pytest.approx(time.time(), abs=60)
    assert r.measurement() == Measurement(3e-3, cached=True)


def test_bad_key_types(store):
    with pytest.raises(TypeError):
        store.put("tpu", NS, "h", (8, 128), Measurement(1.0))


def test_persistence_across_reopen(tmp_path):
    path = tmp_path / "sub" / "dir" / "m.sqlite"  # parent directories are created
    with MeasurementStore(path) as s:
        s.put("tpu", NS, "a", "1x1", Measurement(1.0, extra={"x": 1}))
        assert s.path == path
    with MeasurementStore(path) as s:
        got = s.get("tpu", NS, "a", "1x1")
        assert got.seconds == 1.0 and got.extra == {"x": 1}
        assert s.integrity_check() == "ok"
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_closed_store_raises(tmp_path):
    s = MeasurementStore(tmp_path / "m.sqlite")
    s.close()
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.get("tpu", NS, "a", "")


def test_pickled_store_reopens_file(tmp_path):
    with MeasurementStore(tmp_path / "m.sqlite") as s:
        s.put("tpu", NS, "a", "", Measurement(1.0))
        clone = pickle.loads(pickle.dumps(s))
        assert clone.get("tpu", NS, "a", "").seconds == 1.0
        clone.close()


def test_readonly(tmp_path):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as s:
        s.put("tpu", NS, "a", "", Measurement(1.0))
    with MeasurementStore(path, readonly=True) as r:
        assert r.get("tpu", NS, "a", "").seconds == 1.0
        with pytest.raises(StoreError):
            r.put("tpu", NS, "b", "", Measurement(1.0))
    with pytest.raises(StoreError, match="does not exist"):
        MeasurementStore(tmp_path / "missing.sqlite", readonly=True)


_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from autotune.tuning.store import MeasurementStore
    from hardware.base import Measurement
    tag, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    s = MeasurementStore(path)
    for i in range(n):
        s.put("tpu", "sim/1", f"{{tag}}-{{i}}", "8x128", Measurement(i * 1e-6, extra={{"w": tag}}))
        s.put("tpu", "sim/1", f"shared-{{i % 20}}", "", Measurement(1.0, extra={{"w": tag}}))
    s.close()
    print("done", flush=True)
""")


def test_concurrent_writers_from_two_processes(tmp_path):
    path = tmp_path / "m.sqlite"
    MeasurementStore(path).close()
    code = _WRITER.format(root=ROOT)
    n = 150
    procs = [subprocess.Popen([sys.executable, "-c", code, tag, str(n), str(path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in "AB"]
    with MeasurementStore(path) as reader:  # a reader alongside the writers
        for _ in range(20):
            reader.count()
            time.sleep(0.01)
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.strip() == "done"
    with MeasurementStore(path) as s:
        assert s.count() == 2 * n + 20
        for tag in "AB":
            for i in (0, n // 2, n - 1):
                m = s.get("tpu", NS, f"{tag}-{i}", "8x128")
                assert m.seconds == i * 1e-6 and m.extra == {"w": tag}
        assert s.integrity_check() == "ok"


def test_two_stores_in_one_process_share_a_file(tmp_path):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as a, MeasurementStore(path) as b:
        a.put("tpu", NS, "x", "", Measurement(1.0))
        assert b.get("tpu", NS, "x", "").seconds == 1.0


def test_corrupt_file_is_a_store_error(tmp_path):
    path = tmp_path / "m.sqlite"
    path.write_bytes(b"this is not a database\n" * 400)
    with pytest.raises(StoreError) as info:
        MeasurementStore(path)
    msg = str(info.value)
    assert str(path) in msg and "corrupt" in msg and "\n" not in msg


def test_truncated_store_file_is_a_store_error(tmp_path):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as s:
        s.put_many([("tpu", NS, f"h{i}", "", Measurement(1.0)) for i in range(500)])
    with sqlite3.connect(path) as raw:  # fold the WAL into the main file
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\xff" * 300 + data[400:])  # clobber the header's tail and page 1
    with pytest.raises(StoreError, match=str(path).replace("\\", "\\\\")):
        s = MeasurementStore(path)
        s.count()


def test_newer_schema_is_a_store_error(tmp_path):
    path = tmp_path / "m.sqlite"
    MeasurementStore(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError) as info:
        MeasurementStore(path)
    msg = str(info.value)
    assert str(path) in msg and "newer" in msg and "\n" not in msg


def test_foreign_sqlite_file_is_a_store_error(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="without an autotune schema"):
        MeasurementStore(path)
    path2 = tmp_path / "other2.sqlite"
    with sqlite3.connect(path2) as raw:
        raw.execute("PRAGMA application_id = 1234")
    with pytest.raises(StoreError, match="another application"):
        MeasurementStore(path2)


def test_unwritable_location_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError) as info:
        MeasurementStore(blocker / "m.sqlite")  # parent is a regular file
    assert str(blocker / "m.sqlite") in str(info.value)
    with pytest.raises(StoreError, match="directory"):
        MeasurementStore(tmp_path)


def test_default_path_env_vars(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTOTUNE_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "autotune" / "measurements.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".cache" / "autotune" / "measurements.sqlite"

    target = tmp_path / "env" / "store.sqlite"
    monkeypatch.setenv("AUTOTUNE_STORE", str(target))
    assert default_store_path() == target
    with MeasurementStore() as s:  # no path: the environment variable is honoured
        assert s.path == target
        s.put("tpu", NS, "a", "", Measurement(1.0))
    assert target.exists()
    with open_store(None) as s:
        assert s.path == target and s.count() == 1
    with open_store(tmp_path / "explicit.sqlite") as s:  # --store PATH wins over the variable
        assert s.path == tmp_path / "explicit.sqlite" and s.count() == 0
    for spec in ("none", "NONE", "memory"):
        assert isinstance(open_store(spec), MemoryStore)


_KILLED_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from autotune.tuning.store import MeasurementStore
    from hardware.base import Measurement
    s = MeasurementStore(sys.argv[1])
    i = 0
    while True:
        m = Measurement(1e-3 + i * 1e-7, extra={{"i": i, "pad": "x" * (i % 97)}})
        s.put("tpu", "sim/1", "kernel-%06d" % i, "%dx128" % (8 * (1 + i % 4)), m)
        i += 1
        print(i, flush=True)  # reported only after the commit returned
""")


def _expected(i: int) -> tuple[str, str, Measurement]:
    return ("kernel-%06d" % i, "%dx128" % (8 * (1 + i % 4)),
            Measurement(1e-3 + i * 1e-7, extra={"i": i, "pad": "x" * (i % 97)}))


def test_kill_minus_9_mid_run_keeps_every_committed_row(tmp_path):
    path = tmp_path / "m.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER.format(root=ROOT), str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reported = 0
    deadline = time.monotonic() + 30
    try:
        while reported < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            reported = int(line)
    finally:
        proc.kill()  # SIGKILL, mid-run
        proc.wait(10)
    assert proc.returncode == -9 if os.name == "posix" else proc.returncode != 0
    assert reported >= 300, proc.stderr.read()
    with MeasurementStore(path) as s:
        assert s.integrity_check() == "ok"
        assert s.count() >= reported  # the row being written at the kill may or may not be there
        for i in range(reported):
            h, tile, want = _expected(i)
            got = s.get("tpu", NS, h, tile)
            assert got is not None, f"committed row {i} lost"
            assert got.seconds == want.seconds and got.status == "ok" and got.extra == want.extra
        # The store is fully usable after the crash.
        s.put("tpu", NS, "after", "", Measurement(1.0))
        assert s.get("tpu", NS, "after", "").ok


def test_corrupt_page_found_later_is_a_store_error(tmp_path):
    path = tmp_path / "m.sqlite"
    with MeasurementStore(path) as s:
        s.put_many([("tpu", NS, f"h{i}", "", Measurement(1.0, extra={"p": "x" * 200})) for i in range(2000)])
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = b"\x13" * 4096
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as info:
        with MeasurementStore(path) as s:
            list(s.iter_rows())
    assert "corrupt" in str(info.value) and str(path) in str(info.value)


# -- machine keys and schema migration (issue 19) ---------------------------------------------------

def test_rows_are_keyed_by_machine(store):
    """Two machines sharing a store never answer from each other's rows; iter_rows filters by machine."""
    store.put("cpu", NS, "k", "", Measurement(1.0), machine="Xeon A (2 cores)")
    store.put("cpu", NS, "k", "", Measurement(5.0), machine="EPYC B (64 cores)")
    assert store.get("cpu", NS, "k", "", machine="Xeon A (2 cores)").seconds == 1.0
    assert store.get("cpu", NS, "k", "", machine="EPYC B (64 cores)").seconds == 5.0
    assert store.get("cpu", NS, "k", "", machine="Other (2 cores)") is None
    assert store.get("cpu", NS, "k", "") is None  # no machine named: only rows without one
    assert store.count() == 2 and store.count(machine="Xeon A (2 cores)") == 1
    assert [r.machine for r in store.iter_rows(machine="EPYC B (64 cores)")] == ["EPYC B (64 cores)"]
    assert sorted(r.seconds for r in store.iter_rows("cpu")) == [1.0, 5.0]


def test_evaluators_key_their_rows_by_their_machine():
    """The simulator is machine-independent; a host evaluator names the CPU model and core count."""
    from hardware.base import Evaluator
    from hardware.simulator import SIMULATED_MACHINE, TpuSimulator
    assert TpuSimulator().machine == SIMULATED_MACHINE
    host = Evaluator.machine.fget(None)
    assert f"({os.cpu_count()} cores)" in host and host != SIMULATED_MACHINE


def test_kernel_records_round_trip(store):
    from autotune.tuning.store import KernelRecord
    rec = KernelRecord("h1", (8, 128), b"\x00\x00\x80?", (("sha-a", "a.hlo"),))
    assert store.put_kernels("tpu", "fv1", [rec]) == 1
    store.put_kernels("tpu", "fv1", [KernelRecord("h1", (8, 128), b"\x00\x00\x80?", (("sha-b", "b.hlo"),))])
    got = store.kernel_records("tpu", "fv1")
    assert list(got) == ["h1"] and got["h1"].tiled_dims == (8, 128) and got["h1"].features == b"\x00\x00\x80?"
    assert got["h1"].programs == (("sha-a", "a.hlo"), ("sha-b", "b.hlo"))  # programs accumulate
    assert store.kernel_records("tpu", "fv2") == {} and store.kernel_records("cpu", "fv1") == {}


V1_SCHEMA = """
CREATE TABLE measurements (
    target TEXT NOT NULL, namespace TEXT NOT NULL, kernel_hash TEXT NOT NULL, tile TEXT NOT NULL,
    seconds REAL, status TEXT NOT NULL, created REAL NOT NULL, extra TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (target, namespace, kernel_hash, tile)) WITHOUT ROWID;
CREATE INDEX measurements_by_target ON measurements (target, namespace);
"""


def test_schema_1_file_is_migrated_in_place(tmp_path):
    """A version-1 store keeps every row, now with the unknown machine: no evaluator answers from it,
    history over every machine still sees it; the file is version 2 afterwards, readable read-only."""
    from autotune.tuning.store import UNKNOWN_MACHINE
    path = tmp_path / "v1.sqlite"
    raw = sqlite3.connect(path)
    raw.executescript(V1_SCHEMA)
    raw.executemany("INSERT INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [("tpu", NS, "k1", "8x128", 1.5, "ok", 1.0, '{"n": 3}'),
                     ("cpu", "xla/2", "k2", "", None, "compile_error: x", 2.0, "{}")])
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="open it once for writing"):
        MeasurementStore(path, readonly=True)
    with MeasurementStore(path) as s:
        rows = list(s.iter_rows())
        assert [(r.target, r.kernel_hash, r.seconds, r.status, r.machine) for r in rows] == [
            ("cpu", "k2", None, "compile_error: x", UNKNOWN_MACHINE), ("tpu", "k1", 1.5, "ok", UNKNOWN_MACHINE)]
        assert rows[1].extra == {"n": 3}
        assert s.get("tpu", NS, "k1", "8x128", machine="Xeon (2 cores)") is None
        s.put("tpu", NS, "k1", "8x128", Measurement(2.0), machine="Xeon (2 cores)")  # beside, not over, the old row
        assert s.count() == 3 and s.kernel_records("tpu", "fv") == {}
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.close()
    with MeasurementStore(path, readonly=True) as s:  # a second open: nothing left to migrate
        assert s.count(machine=UNKNOWN_MACHINE) == 2
