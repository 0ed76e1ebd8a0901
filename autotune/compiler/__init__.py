"""Compiler model: HLO, programs, analysis, targets, the fusion space, kernels and tiles.

The bottom layer: it imports nothing else of the project (docs/architecture.md).
"""
from typing import Any

from autotune.compiler import hlo as _hlo


def _verify_module(module: "_hlo.HloModule", parser: Any) -> None:
    """`verifier.verify_module`, imported on the first verified parse (the verifier sits above the parser)."""
    from autotune.compiler.verifier import verify_module
    verify_module(module, parser)


_hlo.install_module_verifier(_verify_module)
