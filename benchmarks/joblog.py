"""Finished jobs of a long benchmark section, one JSON line each, so that an interrupted section resumes
at its first unfinished job instead of from scratch (a full paper run's sections take up to hours).

A job is a JSON-able dict of every parameter that determines its result; its canonical JSON is the key,
so a job whose settings changed is run afresh. Lines are appended and flushed as jobs finish; a line
cut short by a kill is ignored on the next read.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

__all__ = ["JobLog", "read_records", "append_record"]


def _plain(o: Any) -> Any:
    """numpy scalars/arrays (both have tolist) as plain values; anything else json cannot write as text."""
    return o.tolist() if hasattr(o, "tolist") else str(o)


def read_records(path: Path) -> list:
    """The JSON values of a JSON-lines file, one per whole line; a line cut short by a kill is skipped,
    and ended so that the next append starts on its own line."""
    path = Path(path)
    if not path.exists():
        return []
    text = path.read_text()
    if text and not text.endswith("\n"):
        with open(path, "a") as f:
            f.write("\n")
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def append_record(path: Path, record: Any) -> str:
    """Append one JSON line and fsync it (it survives a kill right after); returns the line written."""
    path = Path(path)
    line = json.dumps(record, default=_plain)  # inf/nan as Infinity/NaN: read back as floats
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    return line


class JobLog:
    """Append-only record of finished jobs: `get(job)` is the saved row or None, `put(job, row)` saves one."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._rows: dict = {}
        for rec in read_records(self.path):
            if isinstance(rec, dict) and "key" in rec and "row" in rec:
                self._rows[rec["key"]] = rec["row"]

    @staticmethod
    def key(job: dict) -> str:
        return json.dumps(job, sort_keys=True, default=_plain)

    def get(self, job: dict) -> Optional[dict]:
        return self._rows.get(self.key(job))

    def put(self, job: dict, row: dict) -> None:
        k = self.key(job)
        line = append_record(self.path, {"key": k, "row": row})
        self._rows[k] = json.loads(line)["row"]  # as a later read will see it

    def clear(self) -> None:
        self._rows.clear()
        if self.path.exists():
            self.path.unlink()

    def __len__(self) -> int:
        return len(self._rows)
