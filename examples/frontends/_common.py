"""What every frontend generator module shares (runs in that frontend's own interpreter/venv).

A generator module registers builders with :func:`program` and ends with ``sys.exit(main(...))``.
Each builder returns ``(hlo_text, notes)``: the HLO text of one compiled function and a dict of
facts for the manifest (may be empty). :func:`main` understands

    python examples/frontends/<module>.py --out DIR [--only NAME ...] [--list]

writes DIR/<name>.hlo for each program and prints one ``@@ENTRY {json}`` line per program
(name, frontend, library, kind, versions, notes) or ``@@ERROR {json}`` when a builder failed.
examples/generate_frontends_corpus.py reads those lines; this file imports nothing but the
standard library so that any interpreter can run it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time
import traceback
from typing import Callable

# name -> (library, kind, builder)
Registry = dict[str, tuple[str, str, Callable[[], tuple[str, dict]]]]


def make_program_decorator(registry: Registry):
    def program(name: str, library: str, kind: str):
        assert kind in ("infer", "train"), kind

        def register(builder):
            registry[name] = (library, kind, builder)
            return builder
        return register
    return program


# an instruction's ", metadata={op_type=... op_name=... source_file=...}"; its quoted strings may hold braces
_METADATA = re.compile(r', metadata=\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\}')


def strip_metadata(text: str) -> str:
    """Drop the per-instruction ``metadata={...}`` (op names, source lines) from HLO text; it is
    most of the size of TF's and torch_xla's HLO text and means nothing to XLA."""
    return _METADATA.sub("", text)


def versions(packages) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def main(registry: Registry, frontend: str, packages, argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=False)
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    names = [n for n in registry if not a.only or n in a.only]
    if a.list:
        for n in names:
            library, kind, _ = registry[n]
            print("@@LIST " + json.dumps({"name": n, "frontend": frontend, "library": library, "kind": kind}))
        return 0
    if not a.out:
        ap.error("--out is required")
    os.makedirs(a.out, exist_ok=True)
    vers = versions(packages)
    failures = 0
    for name in names:
        library, kind, builder = registry[name]
        t0 = time.perf_counter()
        try:
            text, notes = builder()
        except Exception as e:  # keep going: one broken program must not stop the frontend
            failures += 1
            traceback.print_exc()
            print("@@ERROR " + json.dumps({"name": name, "frontend": frontend,
                                           "error": f"{type(e).__name__}: {e}"[:2000]}), flush=True)
            continue
        with open(os.path.join(a.out, name + ".hlo"), "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        entry = {"name": name, "frontend": frontend, "library": library, "kind": kind,
                 "versions": vers, "notes": notes or {},
                 "generate_seconds": round(time.perf_counter() - t0, 2)}
        print("@@ENTRY " + json.dumps(entry), flush=True)
    return 1 if failures else 0
