"""Target look-ups of the tiles package (`autotune.compiler.tiles`): a target's canonical spec name, the
key of every tiling cache, and its `TargetSpec`, both cached by name until a spec is registered."""
from __future__ import annotations

from typing import Any


def canonical_target_name(target: Any) -> str:
    """The canonical spec name of a target (a name, alias, TargetSpec or Target): the key of the
    tiling caches, so that "tpu", "tpu-v3" and the Target share their entries."""
    global _SPEC_GEN
    if type(target) is str:  # by name: cached until a spec is registered
        hit = _TARGET_NAMES.get(target)
        if hit is not None and hit[0] == _SPEC_GEN[0]:
            return hit[1]
    from autotune.compiler.targets import get_spec
    from autotune.compiler.targets.base import SPEC_GENERATION
    _SPEC_GEN = SPEC_GENERATION
    name = get_spec(target).name
    if type(target) is str:
        if len(_TARGET_NAMES) > 1_000:
            _TARGET_NAMES.clear()
        _TARGET_NAMES[target] = (SPEC_GENERATION[0], name)
    return name


def _spec(target: Any) -> Any:
    """`get_spec(target)`, by name cached until a spec is registered."""
    global _SPEC_GEN
    if type(target) is str:
        hit = _TARGET_SPECS.get(target)
        if hit is not None and hit[0] == _SPEC_GEN[0]:
            return hit[1]
    from autotune.compiler.targets import get_spec
    from autotune.compiler.targets.base import SPEC_GENERATION
    _SPEC_GEN = SPEC_GENERATION
    spec = get_spec(target)
    if type(target) is str:
        if len(_TARGET_SPECS) > 1_000:
            _TARGET_SPECS.clear()
        _TARGET_SPECS[target] = (_SPEC_GEN[0], spec)
    return spec


_TARGET_SPECS: dict = {}  # target name or alias -> (SPEC_GENERATION when looked up, its TargetSpec)
_TARGET_NAMES: dict = {}  # target name or alias -> (SPEC_GENERATION when looked up, its canonical spec name)
_SPEC_GEN: list = [-1]    # autotune.compiler.targets.base.SPEC_GENERATION, bound on the first look-up
