"""Instruction and computation counts of HLO text, as the corpus manifests record them (no jax).

Used by examples/generate_corpus.py, examples/generate_idioms.py and the manifest tests.
"""
from __future__ import annotations

import re

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
