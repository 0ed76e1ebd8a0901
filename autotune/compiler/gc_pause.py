"""Pause Python's cyclic garbage collector during passes that build large acyclic structures.

Parsing, normalizing and indexing a 50k-instruction program allocate millions of long-lived
objects; every collection the allocations trigger walks the growing heap, which made these passes
superlinear in program size (measured: a 2x slowdown at 51k instructions, benchmarks/scale.py).
Reference counting still frees everything acyclic; cycles left by a paused pass are collected
when the collector resumes.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector is off inside (usable as a decorator, `@gc_paused()`; re-entrant:
    restores the state it found)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
