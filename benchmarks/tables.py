"""Markdown tables of the benchmark reports (one helper for every benchmark)."""
from __future__ import annotations

from typing import Optional, Sequence

__all__ = ["md_table"]


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]], align: Optional[Sequence[str]] = None) -> str:
    """A markdown table; align: ---, ---: or :-: per column (default: the first left, the rest right)."""
    align = list(align or ["---"] + ["---:"] * (len(header) - 1))
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
