"""HLO text parser and printer.

Reads HLO as JAX prints it (`lower(...).as_text(dialect="hlo")`, names without %), as XLA dumps and
`compile().as_text()` print it (names with %, scheduling, stack-frame tables, metadata, backend
configs, `/*index=N*/` comments, elided constants) and headerless modules. Attribute values are kept
verbatim for printing; the ones the analyses need are also parsed (and validated) into Python values.
Errors raise `HloParseError` carrying file:line:col, the offending line and a caret.

`parse_hlo` also runs the verifier (autotune/compiler/verifier.py: shape inference per opcode, names, call
graph) unless `verify=False`, and bounds what any input can cost later: at most `MAX_ELEMENTS`
elements per array, `MAX_TUPLE_DEPTH` nested tuples.

Modules: `types` (element types, shapes, limits, `HloParseError`), `attributes` (structured attribute
values and their parsers), `ir` (the syntax tree, printed back as text), `parser` (`parse_hlo`).
"""
from autotune.compiler.hlo.types import (DTYPE_BYTES, dtype_bytes, OPCODES, async_sugar, MAX_ELEMENTS, MAX_TUPLE_DEPTH, HloParseError, Shape, array_shape, default_layout)  # noqa: F401
from autotune.compiler.hlo.attributes import (WindowDim, ConvDimLabels, SliceDim, PadDim, AttributeError_, parse_int_list, parse_window, parse_dim_labels, parse_slice, parse_padding, parse_name_list, parse_name, parse_bool, parse_backend_config, CALLED_COMPUTATION_ATTRS, CALLED_BY_OPCODE)  # noqa: F401
from autotune.compiler.hlo.ir import (HloInstruction, HloComputation, HloModule, reachable_computations, live_instructions)  # noqa: F401
from autotune.compiler.hlo.parser import (parse_hlo, install_module_verifier, parse_hlo_file)  # noqa: F401

__all__ = ['DTYPE_BYTES', 'dtype_bytes', 'OPCODES', 'async_sugar', 'MAX_ELEMENTS', 'MAX_TUPLE_DEPTH', 'HloParseError', 'Shape', 'array_shape', 'default_layout', 'WindowDim', 'ConvDimLabels', 'SliceDim', 'PadDim', 'AttributeError_', 'parse_int_list', 'parse_window', 'parse_dim_labels', 'parse_slice', 'parse_padding', 'parse_name_list', 'parse_name', 'parse_bool', 'parse_backend_config', 'CALLED_COMPUTATION_ATTRS', 'CALLED_BY_OPCODE', 'HloInstruction', 'HloComputation', 'HloModule', 'reachable_computations', 'live_instructions', 'parse_hlo', 'install_module_verifier', 'parse_hlo_file']
