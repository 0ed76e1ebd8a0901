"""Compilation targets: a `Target` owns its hardware spec, fusion legality, tile legality, default
evaluator and emission policy; `TargetSpec` holds the hardware constants.

Targets and specs are registered by name (each target module registers its own: tpu.py, cpu.py;
h100.py registers a spec only, as no fusion rules exist for a GPU yet). `get_target(name)` gives the
Target the fusion space, the emitter and the CLI work with; `get_spec(name)` the constants the cost
models, the simulator and tile legality read. An unknown name raises `UnknownTargetError` naming the
known ones; a name that has a spec but no Target (e.g. `gpu`) says so rather than borrowing another
target's rules. Adding a target is one new module that builds a `Target` and calls
`register_target` (see tests/autotune/compiler/test_target_registry.py for a toy one).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from autotune.plugins import Registry, UnknownPluginError

if TYPE_CHECKING:  # pragma: no cover
    from autotune.compiler.targets.fusion_rules import FusionRules

__all__ = ["TargetSpec", "Target", "CompilerOption", "UnknownTargetError", "register_target", "unregister_target", "get_target", "target_names",
           "register_spec", "get_spec", "list_specs", "KiB", "MiB", "GiB"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


class UnknownTargetError(UnknownPluginError):
    """A target (or spec) name that is not registered."""


@dataclass(frozen=True)
class TargetSpec:
    """Constants of one hardware target (per unit that a single kernel runs on; see module doc).

    Rates are per second; sizes in bytes. `peak_flops` is a float32 matrix multiply at XLA's
    DEFAULT precision (one bf16 MXU pass on TPU, TF32 tensor cores on H100); `peak_flops_bf16` is
    the bf16 matrix rate; `vector_flops` is elementwise float32 work outside the matrix units.
    """

    name: str
    kind: str  # "tpu" | "cpu" | "gpu"
    clock_hz: float
    num_cores: int  # TensorCores per chip (TPU), SMs (GPU), logical CPUs (host)
    mxu_count: int  # matrix units available to one kernel (0: none)
    mxu_width: int  # systolic array side (128 on TPU); operands are padded to it
    peak_flops: float
    peak_flops_bf16: float
    vector_flops: float
    transcendental_per_s: float
    hbm_bytes_per_s: float  # off-chip memory bandwidth (HBM on TPU/GPU, DRAM on CPU)
    hbm_bytes: int  # off-chip memory capacity available to the kernel's unit
    scratchpad_bytes: int  # fast memory a tile must fit in (TPU VMEM, GPU shared memory/SM, CPU L2)
    vector_shape: tuple[int, int]  # (sublanes, lanes): minor-two-dims tile granularity
    kernel_launch_s: float  # fixed cost per kernel execution
    dma_setup_s: float  # fixed cost per DMA (tile transfer)
    description: str = ""
    measured: bool = False  # True when the numbers come from micro-benchmarks on this machine
    sources: tuple[str, ...] = field(default=(), compare=False)
    # Off-chip links, bytes per second one unit sends (0: not given, a copy through memory at
    # hbm_bytes_per_s): collectives cross the inter-chip interconnect, infeed/outfeed the host link.
    interconnect_bytes_per_s: float = 0.0
    host_link_bytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("tpu", "cpu", "gpu"):
            raise ValueError(f"TargetSpec.kind must be tpu, cpu or gpu, not {self.kind!r}")
        for f in ("interconnect_bytes_per_s", "host_link_bytes_per_s"):
            if not getattr(self, f) > 0:
                object.__setattr__(self, f, self.hbm_bytes_per_s)
        for f in ("clock_hz", "peak_flops", "peak_flops_bf16", "vector_flops", "transcendental_per_s",
                  "hbm_bytes_per_s"):
            if not getattr(self, f) > 0:
                raise ValueError(f"TargetSpec.{f} must be > 0")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a matmul kernel is compute bound (roofline ridge)."""
        return self.peak_flops / self.hbm_bytes_per_s

    def replace(self, **changes: Any) -> "TargetSpec":
        """A copy with some fields changed (e.g. for calibration or what-if studies)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-friendly dict of all fields."""
        d = dataclasses.asdict(self)
        d["vector_shape"] = list(self.vector_shape)
        d["sources"] = list(self.sources)
        return d


@dataclass(frozen=True)
class CompilerOption:
    """One option of a target's own compiler that a search may set, as data: for XLA a DebugOptions field
    (``name``, passed as ``compile_hlo(..., xla_flags={name: value})``), the ``values`` worth trying (the
    compiler's default first), whether a non-default value may change the program's outputs
    (``changes_numerics``: a search must then check them against the default compile's), what it does
    (``doc``, with the measurement that put it here), and ``requires``: options that must hold given values
    for this one to act (the ``honor_*`` parts of fast-math act only with fast-math on)."""

    name: str
    values: tuple[Any, ...]
    changes_numerics: bool = False
    doc: str = ""
    requires: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("CompilerOption.name is empty")
        if len(self.values) < 2:
            raise ValueError(f"CompilerOption {self.name}: values lists the default and at least one other value")
        if len(set(map(repr, self.values))) != len(self.values):
            raise ValueError(f"CompilerOption {self.name}: a value is listed twice")

    @property
    def default(self) -> Any:
        """The compiler's own value (the first of ``values``)."""
        return self.values[0]

    def flags(self, value: Any) -> dict[str, Any]:
        """The compile options that set this option to ``value``: none for the default (the compiler's own
        compile), else the option and what it ``requires``."""
        if not any(value == v and type(value) is type(v) for v in self.values):
            raise ValueError(f"{value!r} is not a declared value of {self.name}: {self.values}")
        if value == self.default and type(value) is type(self.default):
            return {}
        return {**dict(self.requires), self.name: value}


@dataclass(frozen=True)
class Target:
    """One compilation target: what the fusion space, the emitter, tile legality and the CLI ask of it.

    `spec_factory` builds the hardware spec on first use (the host CPU's is measured); `fusion_rules`
    decides fusion legality and the compiler's default configuration; `evaluators` names the
    evaluators that can measure it, the first being the default (names only: the compiler layer
    imports no evaluator); `xla_cpu_emission` is the emission policy: emitted programs and kernels
    are compiled by XLA:CPU with its fusion passes off, so hand-made fusions are kept as emitted
    (multi-instruction kernels measured as fusions, constants passed as operands where the rules
    say so, layout fix-ups of kernel.emit_fused_module applied). `compiler_options` is the target's
    declared option space: the options of its own compiler worth searching (:class:`CompilerOption`;
    empty where none was measured).
    """

    name: str
    description: str
    spec_factory: Callable[[], TargetSpec] = field(compare=False)
    fusion_rules: "FusionRules" = field(compare=False)
    evaluators: tuple[str, ...] = ("sim",)
    xla_cpu_emission: bool = False
    aliases: tuple[str, ...] = ()
    compiler_options: tuple[CompilerOption, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.evaluators:
            raise ValueError(f"target {self.name!r} names no evaluator")
        names = [o.name for o in self.compiler_options]
        if len(set(names)) != len(names):
            raise ValueError(f"target {self.name!r} declares a compiler option twice: {names}")

    @property
    def spec(self) -> TargetSpec:
        """The hardware constants (built, or measured, on first use)."""
        return self.spec_factory()

    @property
    def default_evaluator(self) -> str:
        """Name of the evaluator used when none is given ("sim", "xla", ...)."""
        return self.evaluators[0]

    def tile_fits(self, footprint_bytes: float) -> bool:
        """Tile legality: whether a tile's working set fits the unit's scratchpad (VMEM, L2, ...)."""
        return footprint_bytes <= self.spec.scratchpad_bytes

    def __str__(self) -> str:
        return self.name


# ------------------------------------------------------------------------------------------------
# Registries (plain dicts; names and aliases are case-insensitive)

_SPECS: dict[str, Callable[[], TargetSpec]] = {}
_SPEC_ALIASES: dict[str, str] = {}
SPEC_GENERATION = [0]  # bumped by every register_spec: caches of name lookups check it


def _key(name: str) -> str:
    return str(name).strip().lower()


def _as_target(obj: Any, spec: str) -> "Target":
    """What a target spec resolved to must be a Target (or a zero-argument factory of one)."""
    target = obj() if callable(obj) and not isinstance(obj, Target) else obj
    if not isinstance(target, Target):
        raise UnknownTargetError(f"{spec!r} is not a compilation target (got {type(target).__name__})")
    return target


# Compilation targets by name: the plug-in registry (autotune/plugins.py; entry-point group autotune.targets).
TARGETS = Registry("target", "autotune.targets", check=_as_target, error=UnknownTargetError)


def register_target(target: Target, replace: bool = False) -> Target:
    """Make `target` (and its aliases) known to get_target; a name taken by another target is an error."""
    names = [target.name, *target.aliases]
    for n in names:  # (entry points name the same objects, so only registered targets can clash)
        owner = TARGETS.registered(n)
        if owner is not None and owner is not target and not replace:
            raise ValueError(f"target name {n!r} is already registered (by target {owner.name!r})")
    return TARGETS.register(target.name, target, aliases=target.aliases)


def unregister_target(name: str) -> None:
    """Forget a registered target and its aliases (tests, plug-ins being reloaded)."""
    TARGETS.unregister(name)


def target_names() -> list[str]:
    """Canonical names of the known targets (registered and entry points), sorted."""
    return TARGETS.names()


def get_target(name: "str | Target") -> Target:
    """The Target for a name, alias, entry point, `module:Class` or `path.py:Class`; a Target passes through.

    Raises UnknownTargetError (one line naming the known targets) for anything else, including a
    name that only has a hardware spec (such as `gpu`: no fusion rules are defined for it)."""
    if isinstance(name, Target):
        return name
    if isinstance(name, str):
        found = TARGETS.registered(name)  # the common case, without reading entry points
        if found is not None:
            return found
        if not name.strip():
            raise UnknownTargetError(f"unknown target {name!r}; known targets: {', '.join(target_names())}")
        spec_name = _SPEC_ALIASES.get(_key(name))
        if spec_name is not None and name not in TARGETS:
            found = TARGETS.registered(spec_name)  # a spec alias of a target (v2 -> tpu-v2)
            if found is not None:
                return found
            raise UnknownTargetError(f"target {name!r} has a hardware spec but no fusion rules (no compiler "
                                     f"target is defined for it); known targets: {', '.join(target_names())}")
    try:
        return TARGETS.get(name)
    except UnknownTargetError as e:
        if str(e).startswith("unknown target"):
            raise UnknownTargetError(f"unknown target {name!r}; known targets: {', '.join(target_names())}") from None
        raise


def register_spec(name: str, factory: Callable[[], TargetSpec], aliases: tuple[str, ...] = ()) -> None:
    """Make a hardware spec known to get_spec (`factory` is called on each lookup; it may cache)."""
    _SPECS[name] = factory
    for n in (name, *aliases):
        _SPEC_ALIASES[_key(n)] = name
    SPEC_GENERATION[0] += 1


def list_specs() -> list[str]:
    """Canonical names of the registered hardware specs."""
    return list(_SPECS)


def get_spec(name: "str | TargetSpec | Target") -> TargetSpec:
    """The TargetSpec for a spec name or alias ("tpu", "tpu-v2", "tpu-v3", "cpu", "h100", "gpu"); a
    TargetSpec passes through and a Target gives its spec."""
    if isinstance(name, TargetSpec):
        return name
    if isinstance(name, Target):
        return name.spec
    canonical = _SPEC_ALIASES.get(_key(name))
    if canonical is None:
        raise UnknownTargetError(
            f"unknown target {name!r}; known: {', '.join(list_specs())} (alias: tpu = tpu-v3)")
    return _SPECS[canonical]()
