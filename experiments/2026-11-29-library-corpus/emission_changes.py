"""Which programs of a corpus did the 2026-11-29 changes touch? (one-off; run at commit of this folder)

Emission: `cpu_checkable` of the default and random:0..2 configurations, cpu and tpu, with the two new
emission rules (one-element kernels with broadcasts/reshapes plain; upcasts of computed 16-bit values
outside fusions) against the same code with the rules switched off. Inputs: `verification_inputs`
against the rule before (rank <= 1 numpy floats non-negative). A program whose emission and inputs
are both unchanged keeps its earlier emission-parity result; the others are re-checked.

    python experiments/2026-11-29-library-corpus/emission_changes.py examples/idioms examples/hlo
"""
import hashlib
import json
import sys

import numpy as np

import autotune.compiler.emission as K
from autotune.compiler.fusion import FusionSpace
from autotune.compiler.program import Program
from hardware.parity import config_for
from hardware.xla import random_inputs, verification_inputs

SPECS = ["default", "random:0", "random:1", "random:2"]
NEW = (K._upcasts_at_inputs, K._ONE_ELEMENT_SHAPE_OPS)
OLD = ((lambda comp, ref: set()), frozenset())


def emitted(space, rules) -> list:
    K._upcasts_at_inputs, K._ONE_ELEMENT_SHAPE_OPS = rules
    try:
        return [hashlib.sha1(K.cpu_checkable(space, config_for(space, s)).text.encode()).hexdigest() for s in SPECS]
    finally:
        K._upcasts_at_inputs, K._ONE_ELEMENT_SHAPE_OPS = NEW


def inputs_changed(text: str) -> bool:
    old = [np.abs(a) if a.dtype.kind == "f" and a.ndim <= 1 else a for a in random_inputs(text, 0)]
    return any(x.dtype != y.dtype or not np.array_equal(np.asarray(x, np.float64), np.asarray(y, np.float64))
               for x, y in zip(verification_inputs(text), old))


def main(folders) -> None:
    for folder in folders:
        for m in json.load(open(f"{folder}/manifest.json")):
            text = open(f"{folder}/{m['name']}.hlo").read()
            prog = Program.from_text(text)
            targets = [t for t in ("cpu", "tpu")
                       if emitted(FusionSpace(prog, t), NEW) != emitted(FusionSpace(prog, t), OLD)]
            print(json.dumps({"program": m["name"], "emission_changed": targets,
                              "inputs_changed": inputs_changed(text)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
