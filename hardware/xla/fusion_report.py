"""XLA's own fusion decisions: compile a module and list the fusions in the optimized module
(:func:`xla_fusion_report`), input metadata stripped first (:func:`strip_metadata`) so that each
fused instruction's ``op_name`` names the input instruction it came from."""
from __future__ import annotations

import re
from typing import Any

from hardware.xla.compile import compile_hlo


_METADATA_RE = re.compile(r",?\s*metadata=\{")
_OP_NAME_RE = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_KIND_RE = re.compile(r"\bkind=(k\w+)")
_CALLS_RE = re.compile(r"\bcalls=%?([\w.\-]+)")
_FREE_OPCODES = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                           "after-all", "partition-id", "replica-id"})
_CUSTOM_KIND_RE = re.compile(r'"fusion_config":\{[^}]*"kind":"([^"]*)"')


def strip_metadata(text: str) -> str:
    """Remove every ``metadata={...}`` attribute from HLO text (quotes and nested braces aware).

    Compiling through StableHLO turns instruction names into MLIR locations, which XLA prints back
    as ``metadata={op_name="<name>"}``; but an instruction that already carries metadata keeps its
    old ``op_name`` instead. Stripping first makes ``op_name`` always the original name.
    """
    out: list[str] = []
    pos = 0
    while True:
        m = _METADATA_RE.search(text, pos)
        if m is None:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:m.start()])
        i, depth, in_str = m.end(), 1, False
        while i < len(text) and depth:
            c = text[i]
            if in_str:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
        pos = i


def _opcode_of(line: str) -> str:
    """Opcode as XLA prints it, from an instruction's text ``%n = shape opcode(...)``."""
    rhs = line.split(" = ", 1)[1].lstrip() if " = " in line else line
    if rhs.startswith("("):  # tuple shape: skip balanced parentheses
        depth = 0
        for i, c in enumerate(rhs):
            depth += c == "("
            depth -= c == ")"
            if depth == 0:
                rhs = rhs[i + 1:].lstrip()
                break
    else:
        rhs = rhs.split(" ", 1)[1] if " " in rhs else rhs
    return rhs.split("(", 1)[0].strip()


def _instr_info(instr: Any) -> dict[str, Any]:
    line = instr.to_string()
    m = _OP_NAME_RE.search(line)
    op_name = m.group(1) if m else None
    return {"name": instr.name, "opcode": _opcode_of(line), "op_name": op_name,
            "origin": op_name.rsplit("/", 1)[-1] if op_name else None}


def xla_fusion_report(text: str, *, strip_input_metadata: bool = True,
                      include_wrapped: bool = True, include_unfused: bool = False,
                      optimized_module: Any = None) -> list[dict[str, Any]]:
    """Which fusions XLA made: compile ``text`` and list every fusion in the optimized module.

    One dict per ``fusion`` instruction in a non-fused computation, in program order::

        {"name": "subtract_tanh_fusion",       # the fusion instruction, as XLA named it
         "computation": "main.1",              # where it sits
         "kind": "kLoop" | "kOutput" | "kCustom" | ...,
         "custom_kind": "__ynn_fusion" | None, # backend_config fusion_config.kind (kCustom)
         "calls": "fused_computation",
         "op_name": "tanh.1",                  # the fusion's metadata = its root's origin
         "wrapped": bool,                      # single-op `wrapped_*` fusion, see below
         "instructions": [{"name", "opcode", "op_name", "origin"}, ...],  # parameters excluded
         "origins": ["add.1", "exp.1", ...]}   # input instruction names, where known

    What survives in XLA:CPU's printout (jaxlib 0.10.2, measured on JAX-generated HLO for an
    elementwise chain, dot+bias+relu and exp+reduce):

    * Instruction *names* do not survive exactly: the HLO -> StableHLO -> HLO round trip renames
      every instruction, keeping the name's prefix and renumbering the suffix (``add.1`` ->
      ``add.0``, ``a`` -> ``a.0``; entry parameters ``x.1`` stay). Fusions get new names from
      their ops (``subtract_tanh_fusion``, ``add_exponential_fusion``, ``ynn_fusion``).
    * The original name survives as ``metadata={op_name="<name>"}`` on every fused instruction
      and on the fusion itself (= its root's), *provided the input had no metadata* (otherwise
      the old op_name is kept; hence ``strip_input_metadata``). ``origin`` is that name; an
      instruction inlined from a ``call`` gets ``"<call name>/<name>"`` and origin ``<name>``.
    * Constants materialised inside a fused computation carry no op_name (origin None), and
      broadcasts XLA creates itself carry the op_name of the instruction they came from.
    * Elementwise chains become one ``kLoop`` fusion (e.g. add, exp, broadcast, multiply,
      subtract, tanh -> ``subtract_tanh_fusion``).
    * A dot becomes a ``kCustom`` fusion with backend_config kind ``__ynn_fusion`` (a YNNPACK
      library call) and its bias-add + relu a separate ``kLoop`` fusion: no ``kOutput`` fusion
      for dot+bias on CPU here. ``exp`` feeding a ``reduce`` is fused with the reduce into one
      ``__ynn_fusion`` kCustom fusion.
    * Every op XLA:CPU leaves unfused (or every op, with the fusion pass disabled) is wrapped in
      a single-instruction ``kLoop`` fusion named ``wrapped_<opcode>`` calling
      ``wrapped_<opcode>_computation``: not a fusion decision. Such entries have
      ``wrapped=True`` (drop them with ``include_wrapped=False``).
    * A hand-written ``fusion`` in the input is kept as written, but its fused computation is
      renamed (``region_N.M``) and its parameters inherit the fusion's op_name.
    * More patterns (JAX-generated, 256x256 f32): ``exp(x)`` with two users is *not* duplicated
      into them (it stays ``wrapped_exponential``, each user fusing only its cheap ops); a dot
      followed by a full-matrix add or a tanh leaves the add/tanh as a separate kernel; a
      ``reduce`` is fused with its elementwise producers and, in softmax, with its
      broadcast/subtract/exp consumers into one ``__ynn_fusion``; transpose+add becomes one
      ``copy_add_fusion``; concatenate fuses its exp producer; a gather fuses with its index
      clamping and the multiply after it. A ``convolution`` stays a bare (Eigen) instruction,
      with XLA-made layout transposes around it as ``transpose_copy_fusion`` (no op_name on the
      ones for the operands; the output one fuses the relu that follows). When the convolution
      is the module's root (a standalone conv kernel), the rewritten ``convolution`` has *no*
      op_name and the output ``transpose_copy_fusion`` carries the conv's original name.
    * ``backend_config`` of a loop fusion may carry ``outer_dimension_partitions`` (the
      parallel split over the 2 cores); it does not change what was fused.

    ``include_unfused=True`` also lists every other top-level instruction that does work (not
    parameter, constant, tuple, get-tuple-element, bitcast), e.g. a bare ``convolution`` or
    ``copy``, with ``kind=None`` and itself as the single instruction: with it, the report
    covers every kernel of the optimized entry computation.
    """
    if optimized_module is None:
        src = strip_metadata(text) if strip_input_metadata else text
        optimized_module = compile_hlo(src).optimized_module()
    comps = {c.name: c for c in optimized_module.computations()}
    printed = optimized_module.to_string()
    position = {m.group(1): m.start() for m in re.finditer(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = ", printed, re.M)}
    try:
        top = list(optimized_module.make_nonfusion_computations())
    except Exception:  # pragma: no cover - older jaxlib
        top = list(comps.values())
    report: list[dict[str, Any]] = []
    for comp in top:
        for instr in comp.instructions():
            line = instr.to_string()
            opcode = _opcode_of(line)
            if opcode != "fusion":
                if include_unfused and opcode not in _FREE_OPCODES:
                    info = _instr_info(instr)
                    report.append({"name": instr.name, "computation": comp.name, "kind": None,
                                   "custom_kind": None, "calls": None, "op_name": info["op_name"],
                                   "wrapped": False, "instructions": [info],
                                   "origins": [info["origin"]] if info["origin"] else []})
                continue
            kind = _KIND_RE.search(line)
            calls = _CALLS_RE.search(line)
            ck = _CUSTOM_KIND_RE.search(line)
            op = _OP_NAME_RE.search(line)
            callee = comps.get(calls.group(1)) if calls else None
            fused = [] if callee is None else [
                _instr_info(i) for i in callee.instructions() if _opcode_of(i.to_string()) != "parameter"]
            fused.sort(key=lambda f: position.get(f["name"], 0))  # printed (topological) order
            wrapped = instr.name.startswith("wrapped_") and len(fused) == 1
            if wrapped and not include_wrapped:
                continue
            report.append({
                "name": instr.name,
                "computation": comp.name,
                "kind": kind.group(1) if kind else None,
                "custom_kind": ck.group(1) if ck else None,
                "calls": calls.group(1) if calls else None,
                "op_name": op.group(1) if op else None,
                "wrapped": wrapped,
                "instructions": fused,
                "origins": [f["origin"] for f in fused if f["origin"]],
            })
    return report
