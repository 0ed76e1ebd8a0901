"""Measurement store: every hardware measurement, keyed by (target, machine, evaluator/version, kernel hash, tile).

Measurements are expensive (a compile plus repeated runs), so each one is committed to an SQLite
file the moment it exists, and repeated requests are answered from it. The file is in WAL mode so
several processes (parallel tuners, dataset generators) may read and write it at once.

Default location: ``$AUTOTUNE_STORE`` if set, else ``$XDG_CACHE_HOME/autotune/measurements.sqlite``
(``~/.cache/autotune/measurements.sqlite`` when XDG_CACHE_HOME is unset). The command line's
``--store PATH`` overrides both; ``--store none`` keeps measurements in memory only (MemoryStore).

Schema (version 2, in ``PRAGMA user_version``)::

    measurements(target, machine, namespace, kernel_hash, tile, seconds, status, created, extra)
    PRIMARY KEY (target, machine, namespace, kernel_hash, tile)
    kernels(target, feature_version, kernel_hash, tiled_dims, features)      -- history for transfer
    PRIMARY KEY (target, feature_version, kernel_hash)
    kernel_programs(target, kernel_hash, program, program_name)
    PRIMARY KEY (target, kernel_hash, program)

``namespace`` is ``"<evaluator name>/<evaluator version>[/<flags>]"``, so a new evaluator version
never answers from an older one's rows. ``machine`` is the evaluator's `machine` (CPU model and core
count, an accelerator's name, or a machine-independent marker for the simulator), so a store shared
between machines never mixes their timings. ``extra`` is a JSON object. A failure never replaces a
success. ``kernels`` holds each measured kernel's program-independent feature vector (written by
autotune/tuning/history.py) and ``kernel_programs`` the programs it was measured for, so that a
global cost model can be trained on the history of other programs (AutoTVM's transfer learning).

Migration: a version-1 file is upgraded in place on first open for writing; its rows keep their key
with machine ``""`` (UNKNOWN_MACHINE: not recorded), so no evaluator answers from them (they were
measured on a machine nobody can name) and transfer learning uses them only when asked to use every
machine's history.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

from hardware.base import Measurement

__all__ = [
    "SCHEMA_VERSION", "APPLICATION_ID", "StoreError", "StoreRow", "KernelRecord", "MeasurementStore", "MemoryStore",
    "default_store_path", "open_store", "UNKNOWN_MACHINE",
]

SCHEMA_VERSION = 2
UNKNOWN_MACHINE = ""  # the machine of rows from schema version 1, or of a caller that names none
# Marks the file as an autotune store (PRAGMA application_id); "ATUN" in ASCII.
APPLICATION_ID = 0x4154554E
BUSY_TIMEOUT_S = 60.0

_SCHEMA = ["""
CREATE TABLE IF NOT EXISTS measurements (
    target      TEXT NOT NULL,
    machine     TEXT NOT NULL DEFAULT '',
    namespace   TEXT NOT NULL,
    kernel_hash TEXT NOT NULL,
    tile        TEXT NOT NULL,
    seconds     REAL,
    status      TEXT NOT NULL,
    created     REAL NOT NULL,
    extra       TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (target, machine, namespace, kernel_hash, tile)
) WITHOUT ROWID""", """
CREATE TABLE IF NOT EXISTS kernels (
    target          TEXT NOT NULL,
    feature_version TEXT NOT NULL,
    kernel_hash     TEXT NOT NULL,
    tiled_dims      TEXT NOT NULL,
    features        BLOB NOT NULL,
    PRIMARY KEY (target, feature_version, kernel_hash)
) WITHOUT ROWID""", """
CREATE TABLE IF NOT EXISTS kernel_programs (
    target       TEXT NOT NULL,
    kernel_hash  TEXT NOT NULL,
    program      TEXT NOT NULL,
    program_name TEXT NOT NULL,
    PRIMARY KEY (target, kernel_hash, program)
) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS measurements_by_target ON measurements (target, machine, namespace)"]

# Version 1 -> 2: the machine column joins the key (rows of version 1: UNKNOWN_MACHINE).
_MIGRATE_1_TO_2 = [
    "ALTER TABLE measurements RENAME TO measurements_v1",
    "DROP INDEX IF EXISTS measurements_by_target",
    *_SCHEMA,
    "INSERT INTO measurements (target, machine, namespace, kernel_hash, tile, seconds, status, created, extra) "
    "SELECT target, '', namespace, kernel_hash, tile, seconds, status, created, extra FROM measurements_v1",
    "DROP TABLE measurements_v1",
]

# Insert, or replace an existing row unless that would replace a success by a failure.
_UPSERT = """
INSERT INTO measurements (target, machine, namespace, kernel_hash, tile, seconds, status, created, extra)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (target, machine, namespace, kernel_hash, tile) DO UPDATE SET
    seconds = excluded.seconds, status = excluded.status,
    created = excluded.created, extra = excluded.extra
WHERE excluded.status = 'ok' OR measurements.status != 'ok'
"""


class StoreError(RuntimeError):
    """The store file cannot be used (corrupt, newer schema, not an autotune store, unwritable)."""


@dataclass(frozen=True)
class StoreRow:
    """One stored measurement, as yielded by `iter_rows` (for building datasets)."""

    target: str
    namespace: str
    kernel_hash: str
    tile: str
    seconds: Optional[float]
    status: str
    created: float
    extra: dict = field(default_factory=dict, compare=False)
    machine: str = UNKNOWN_MACHINE

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.seconds is not None

    def measurement(self) -> Measurement:
        """This row as a Measurement (marked cached)."""
        return Measurement(self.seconds, self.status, cached=True, extra=dict(self.extra))


@dataclass(frozen=True)
class KernelRecord:
    """A measured kernel's program-independent features (autotune/tuning/history.py writes them)."""

    kernel_hash: str
    tiled_dims: tuple
    features: bytes                          # float32 vector, layout of `feature_version`
    programs: tuple = ()                     # (program sha256, program name) it was measured for


def default_store_path() -> Path:
    """$AUTOTUNE_STORE, else $XDG_CACHE_HOME/autotune/measurements.sqlite (~/.cache when unset)."""
    env = os.environ.get("AUTOTUNE_STORE")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "autotune" / "measurements.sqlite"


def _dump_extra(extra: Optional[dict]) -> str:
    if not extra:
        return "{}"
    return json.dumps(extra, sort_keys=True, default=str, allow_nan=True)


def _load_extra(text: Optional[str]) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_value": value}


def _seconds(m: Measurement) -> Optional[float]:
    if m.seconds is None:
        return None
    s = float(m.seconds)
    return s if math.isfinite(s) else None


def _check_key(target: str, namespace: str, kernel_hash: str, tile: str, machine: str = UNKNOWN_MACHINE) -> None:
    for name, v in (("target", target), ("namespace", namespace), ("kernel_hash", kernel_hash), ("tile", tile),
                    ("machine", machine)):
        if not isinstance(v, str):
            raise TypeError(f"store key {name} must be a str, got {type(v).__name__}")


class MeasurementStore:
    """SQLite-backed measurement store (WAL mode; safe for several processes writing at once).

    Every `put` is its own committed transaction, so a killed process loses nothing it reported.
    Use as a context manager or call `close()`. Errors about the file raise `StoreError`.
    """

    def __init__(self, path: "str | os.PathLike[str] | None" = None, *, timeout: float = BUSY_TIMEOUT_S,
                 readonly: bool = False):
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self.timeout = float(timeout)
        self.readonly = readonly
        self._lock = threading.RLock()
        self._conn: Optional[sqlite3.Connection] = None
        self._pid = os.getpid()
        self._open()

    # -- connection management -------------------------------------------------------------------
    def _error(self, what: str, exc: Optional[BaseException] = None) -> StoreError:
        detail = f": {exc}" if exc is not None else ""
        return StoreError(f"measurement store {self.path}: {what}{detail}")

    def _open(self) -> None:
        if not self.readonly:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._error("cannot create its directory", exc) from exc
        elif not self.path.exists():
            raise self._error("does not exist")
        if self.path.exists() and self.path.is_dir():
            raise self._error("is a directory, not a store file")
        try:
            if self.readonly:
                uri = self.path.resolve().as_uri() + "?mode=ro"
                conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None,
                                       check_same_thread=False)
            else:
                conn = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None,
                                       check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error("cannot open (unwritable location?)", exc) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            self._init_schema(conn)
        except StoreError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._classify(exc, "cannot be used") from exc
        self._conn = conn
        self._pid = os.getpid()

    def _classify(self, exc: sqlite3.DatabaseError, default: str) -> StoreError:
        msg = str(exc).lower()
        if "not a database" in msg or "malformed" in msg or "corrupt" in msg:
            return self._error("corrupt or not an SQLite file (move it away or pass --store PATH)", exc)
        if "readonly" in msg or "read-only" in msg or "unable to open" in msg or "permission" in msg:
            return self._error("not writable (check permissions or pass --store PATH)", exc)
        if "locked" in msg or "busy" in msg:
            return self._error(f"still locked by another process after {self.timeout:g} s", exc)
        return self._error(default, exc)

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        self._check_header(conn, app_id, version)
        if self.readonly:
            if version == 0:
                raise self._error("is not initialised (empty file)")
            if version < SCHEMA_VERSION:
                raise self._error(f"has schema version {version}; open it once for writing to upgrade it "
                                  f"to version {SCHEMA_VERSION}")
            return
        # WAL lets readers and one writer proceed concurrently; NORMAL sync is durable against
        # process crashes (kill -9), losing at most the last transactions on power loss.
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise self._error(f"cannot switch to WAL journal mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        if version == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_header(conn, app_id, version)
            if version == 0:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            elif version == 1:
                for statement in _MIGRATE_1_TO_2:
                    conn.execute(statement)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise

    def _check_header(self, conn: sqlite3.Connection, app_id: int, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise self._error(f"has schema version {version}, newer than this autotune supports "
                              f"({SCHEMA_VERSION}); upgrade autotune or pass --store PATH")
        if app_id not in (0, APPLICATION_ID):
            raise self._error(f"is an SQLite file of another application (application_id {app_id:#x})")
        if version == 0:
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise self._error("is an SQLite file without an autotune schema")

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise self._error("is closed")
        if os.getpid() != self._pid:  # forked: never share an SQLite connection across processes
            self._conn = None
            self._open()
        return self._conn  # type: ignore[return-value]

    def _run(self, fn):
        with self._lock:
            try:
                return fn(self._db())
            except StoreError:
                raise
            except sqlite3.DatabaseError as exc:
                raise self._classify(exc, "database error") from exc

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    def __enter__(self) -> "MeasurementStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self) -> dict:
        # Send the path, not the connection, to worker processes; they reopen the file.
        return {"path": str(self.path), "timeout": self.timeout, "readonly": self.readonly}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], timeout=state["timeout"], readonly=state["readonly"])

    def __repr__(self) -> str:
        return f"MeasurementStore({str(self.path)!r})"

    # -- API -------------------------------------------------------------------------------------
    def get(self, target: str, namespace: str, kernel_hash: str, tile_key: str = "",
            machine: str = UNKNOWN_MACHINE) -> Optional[Measurement]:
        """The stored Measurement (cached=True) for this key, or None."""
        _check_key(target, namespace, kernel_hash, tile_key, machine)
        row = self._run(lambda db: db.execute(
            "SELECT seconds, status, extra FROM measurements WHERE target = ? AND machine = ? "
            "AND namespace = ? AND kernel_hash = ? AND tile = ?",
            (target, machine, namespace, kernel_hash, tile_key)).fetchone())
        if row is None:
            return None
        return Measurement(row[0], row[1], cached=True, extra=_load_extra(row[2]))

    def put(self, target: str, namespace: str, kernel_hash: str, tile_key: str, measurement: Measurement,
            machine: str = UNKNOWN_MACHINE) -> None:
        """Commit one measurement now (a failure never replaces a stored success)."""
        self.put_many([(target, namespace, kernel_hash, tile_key, measurement)], machine=machine)

    def put_many(self, items: Iterable[tuple[str, str, str, str, Measurement]],
                 machine: str = UNKNOWN_MACHINE) -> int:
        """Commit many (target, namespace, kernel_hash, tile_key, measurement), all measured on
        `machine`, in one transaction."""
        if self.readonly:
            raise self._error("is opened read-only")
        now = time.time()
        rows = []
        for target, namespace, kernel_hash, tile, m in items:
            _check_key(target, namespace, kernel_hash, tile, machine)
            rows.append((target, machine, namespace, kernel_hash, tile, _seconds(m), str(m.status), now,
                         _dump_extra(m.extra)))
        if not rows:
            return 0
        self._write(lambda db: db.executemany(_UPSERT, rows))
        return len(rows)

    def _write(self, body) -> None:
        """Run `body(db)` in one IMMEDIATE transaction (rolled back on any error)."""
        def write(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            try:
                body(db)
                db.execute("COMMIT")
            except BaseException:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise

        self._run(write)

    def count(self, target: Optional[str] = None, namespace: Optional[str] = None,
              machine: Optional[str] = None) -> int:
        """Number of stored rows (optionally of one target, namespace and/or machine)."""
        where, args = _where(target, namespace, machine=machine)
        return self._run(lambda db: db.execute(f"SELECT count(*) FROM measurements{where}", args).fetchone()[0])

    def iter_rows(self, target: Optional[str] = None, namespace: Optional[str] = None,
                  ok_only: bool = False, machine: Optional[str] = None) -> Iterator[StoreRow]:
        """Yield stored rows (ordered by key), e.g. to build training datasets; `machine=None`: every machine."""
        where, args = _where(target, namespace, ok_only, machine)
        rows = self._run(lambda db: db.execute(
            "SELECT target, namespace, kernel_hash, tile, seconds, status, created, extra, machine "
            f"FROM measurements{where} ORDER BY target, machine, namespace, kernel_hash, tile", args).fetchall())
        for r in rows:
            yield StoreRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], _load_extra(r[7]), r[8])

    def put_kernels(self, target: str, feature_version: str, records: Iterable[KernelRecord]) -> int:
        """Store kernels' feature vectors and the programs they were measured for (history)."""
        if self.readonly:
            raise self._error("is opened read-only")
        kernels, links = [], []
        for r in records:
            kernels.append((target, feature_version, r.kernel_hash, json.dumps(list(r.tiled_dims)),
                            sqlite3.Binary(bytes(r.features))))
            links += [(target, r.kernel_hash, prog, name) for prog, name in r.programs]
        if not kernels:
            return 0

        def body(db: sqlite3.Connection) -> None:
            db.executemany("INSERT OR REPLACE INTO kernels VALUES (?, ?, ?, ?, ?)", kernels)
            db.executemany("INSERT OR IGNORE INTO kernel_programs VALUES (?, ?, ?, ?)", links)

        self._write(body)
        return len(kernels)

    def kernel_records(self, target: str, feature_version: str) -> dict[str, KernelRecord]:
        """Every stored kernel of a target and feature layout, by hash, with its programs."""
        progs: dict[str, list] = {}
        for h, prog, name in self._run(lambda db: db.execute(
                "SELECT kernel_hash, program, program_name FROM kernel_programs WHERE target = ?",
                (target,)).fetchall()):
            progs.setdefault(h, []).append((prog, name))
        rows = self._run(lambda db: db.execute(
            "SELECT kernel_hash, tiled_dims, features FROM kernels WHERE target = ? AND feature_version = ?",
            (target, feature_version)).fetchall())
        return {h: KernelRecord(h, tuple(json.loads(d)), bytes(f), tuple(sorted(progs.get(h, ()))))
                for h, d, f in rows}

    def __len__(self) -> int:
        return self.count()

    def integrity_check(self) -> str:
        """SQLite's integrity check: "ok" for a healthy file."""
        return self._run(lambda db: db.execute("PRAGMA integrity_check").fetchone()[0])


def _where(target: Optional[str], namespace: Optional[str], ok_only: bool = False,
           machine: Optional[str] = None) -> tuple[str, tuple]:
    clauses, args = [], []
    for column, value in (("target", target), ("machine", machine), ("namespace", namespace)):
        if value is not None:
            clauses.append(f"{column} = ?")
            args.append(value)
    if ok_only:
        clauses.append("status = 'ok' AND seconds IS NOT NULL")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", tuple(args)


class MemoryStore:
    """Dict-backed store with MeasurementStore's API: for tests and `--store none`."""

    path = None

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, str, str, str], StoreRow] = {}
        self._kernels: dict[tuple[str, str, str], KernelRecord] = {}
        self._lock = threading.Lock()

    def get(self, target: str, namespace: str, kernel_hash: str, tile_key: str = "",
            machine: str = UNKNOWN_MACHINE) -> Optional[Measurement]:
        """The stored Measurement (cached=True) for this key, or None."""
        row = self._rows.get((target, machine, namespace, kernel_hash, tile_key))
        return row.measurement() if row is not None else None

    def put(self, target: str, namespace: str, kernel_hash: str, tile_key: str, measurement: Measurement,
            machine: str = UNKNOWN_MACHINE) -> None:
        """Store one measurement (a failure never replaces a stored success)."""
        self.put_many([(target, namespace, kernel_hash, tile_key, measurement)], machine=machine)

    def put_many(self, items: Iterable[tuple[str, str, str, str, Measurement]],
                 machine: str = UNKNOWN_MACHINE) -> int:
        """Store many (target, namespace, kernel_hash, tile_key, measurement) tuples measured on `machine`."""
        now = time.time()
        n = 0
        with self._lock:
            for target, namespace, kernel_hash, tile, m in items:
                _check_key(target, namespace, kernel_hash, tile, machine)
                key = (target, machine, namespace, kernel_hash, tile)
                old = self._rows.get(key)
                if old is not None and old.status == "ok" and m.status != "ok":
                    n += 1
                    continue
                extra = _load_extra(_dump_extra(m.extra))  # same JSON round trip as the SQLite store
                self._rows[key] = StoreRow(target, namespace, kernel_hash, tile, _seconds(m), str(m.status),
                                           now, extra, machine)
                n += 1
        return n

    def count(self, target: Optional[str] = None, namespace: Optional[str] = None,
              machine: Optional[str] = None) -> int:
        """Number of stored rows (optionally of one target, namespace and/or machine)."""
        return sum(1 for _ in self.iter_rows(target, namespace, machine=machine))

    def iter_rows(self, target: Optional[str] = None, namespace: Optional[str] = None,
                  ok_only: bool = False, machine: Optional[str] = None) -> Iterator[StoreRow]:
        """Yield stored rows ordered by key."""
        with self._lock:
            rows = [self._rows[k] for k in sorted(self._rows)]
        for r in rows:
            if target is not None and r.target != target:
                continue
            if namespace is not None and r.namespace != namespace:
                continue
            if machine is not None and r.machine != machine:
                continue
            if ok_only and not r.ok:
                continue
            yield r

    def __len__(self) -> int:
        return len(self._rows)

    def put_kernels(self, target: str, feature_version: str, records: Iterable[KernelRecord]) -> int:
        """Store kernels' feature vectors and the programs they were measured for (history)."""
        n = 0
        with self._lock:
            for r in records:
                key = (target, feature_version, r.kernel_hash)
                old = self._kernels.get(key)
                programs = tuple(sorted(set(r.programs) | set(old.programs if old else ())))
                self._kernels[key] = KernelRecord(r.kernel_hash, tuple(r.tiled_dims), bytes(r.features), programs)
                n += 1
        return n

    def kernel_records(self, target: str, feature_version: str) -> dict[str, KernelRecord]:
        """Every stored kernel of a target and feature layout, by hash, with its programs."""
        with self._lock:
            return {h: r for (t, v, h), r in self._kernels.items() if t == target and v == feature_version}

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._rows)} rows)"


Store = Union[MeasurementStore, MemoryStore]


def open_store(spec: "str | os.PathLike[str] | None" = None) -> Store:
    """The store a `--store` value names: None -> default path, "none"/"memory" -> MemoryStore."""
    if spec is not None and str(spec).strip().lower() in ("none", "memory", ":memory:", "off"):
        return MemoryStore()
    return MeasurementStore(spec)
