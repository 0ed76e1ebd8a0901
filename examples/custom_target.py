"""A custom compilation target: copy this file to add one (a target is this one file and its tests).

TPU_SMALL is a TPU v3-like core with a quarter of the scratchpad, so that fewer tiles fit and larger
reductions stream: it reuses the TPU fusion rules and the simulator. Importing the module registers
the target and its spec; use it with `autotune fusion PROG.hlo --target examples/custom_target.py:TPU_SMALL`
(the module is loaded and the target known by its name from then on), or publish it:
`[options.entry_points] autotune.targets = tpu-small = pkg.mod:TPU_SMALL`.
A target owns its hardware spec, its fusion rules (autotune/compiler/targets/fusion_rules.py: a
FusionRules subclass decides fusion legality and the compiler's default configuration), the
evaluators that can measure it (the first is the default) and its emission policy.
"""
import dataclasses

from autotune.compiler.targets import TPU_V3, Target, get_target, register_spec, register_target

TPU_SMALL_SPEC = dataclasses.replace(TPU_V3, name="tpu-small", scratchpad_bytes=TPU_V3.scratchpad_bytes // 4)
register_spec("tpu-small", lambda: TPU_SMALL_SPEC)

TPU_SMALL = register_target(Target(
    name="tpu-small", description="TPU v3-like core with a quarter of the scratchpad (an example target)",
    spec_factory=lambda: TPU_SMALL_SPEC, fusion_rules=get_target("tpu").fusion_rules, evaluators=("sim",)),
    replace=True)
