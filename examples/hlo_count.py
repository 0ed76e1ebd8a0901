"""Instruction and computation counts of HLO text, as the corpus manifests record them (no jax).

Used by examples/generate_corpus.py, examples/generate_idioms.py and the manifest tests.
"""
from __future__ import annotations

import json
import os
import re
from typing import Callable

INSTRUCTION_RE = re.compile(r"^\s*(ROOT\s+)?%?[\w.\-]+\s*=")


def count_hlo(text: str) -> tuple[int, int]:
    """(instructions, computations): instruction-defining lines inside computations, and headers."""
    instructions = computations = 0
    inside = False
    for line in text.splitlines():
        if not inside:
            if line and not line[0].isspace() and line.rstrip().endswith("{") \
                    and not line.startswith("HloModule"):
                computations += 1
                inside = True
        elif line.rstrip() == "}":
            inside = False
        elif INSTRUCTION_RE.match(line):
            instructions += 1
    return instructions, computations


def read_manifest(path: str, keep: "Callable[[str], bool]" = lambda name: True) -> dict[str, dict]:
    """Entries of an existing manifest.json by name (for --only runs that regenerate a few programs)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {e["name"]: e for e in json.load(f) if keep(e["name"])}


def write_manifest(path: str, entries: dict[str, dict]) -> list[dict]:
    """Write the entries sorted by name as manifest.json; returns the list written."""
    manifest = [entries[k] for k in sorted(entries)]
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return manifest
