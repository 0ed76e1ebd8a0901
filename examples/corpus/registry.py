"""Family registry: family name -> :class:`Family` (model builder, loss, inputs, sizes)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

MODES = ("infer", "train")


@dataclasses.dataclass
class Family:
    name: str
    description: str
    forward: Callable   # forward(cx, inputs, cfg) -> outputs (array or dict of arrays)
    loss: Callable      # loss(outputs, targets, cfg) -> scalar
    make_batch: Callable  # make_batch(key, cfg) -> (inputs dict, targets dict)
    sizes: dict[str, dict[str, Any]]  # size name -> config; cfg["modes"] may restrict modes
    infer: Callable | None = None  # optional separate inference forward (e.g. greedy decoding)
    corpus: str = "hlo"  # which corpus folder: "hlo" (examples/hlo), else examples/hlo_<corpus>

    def modes(self, size):
        return tuple(self.sizes[size].get("modes", MODES))


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    if family.name in FAMILIES:
        raise ValueError(f"family {family.name!r} registered twice")
    FAMILIES[family.name] = family
    return family
