"""Equivalent formulations of operations: the choice, per instruction, of how it is written (a depthwise
convolution as shifted multiply-adds, a convolution as an im2col dot, ...), the original being the
default. `FormulationSpace` holds a program's choices; autotune/run/formulations.py searches them."""
from autotune.compiler.formulations.convolution import (CONV_FORMULATIONS, ConvGeometry, MAX_PATCH_BYTES,
                                                        MAX_WINDOW_POSITIONS, write_convolution)
from autotune.compiler.formulations.reduce_window import (REDUCE_WINDOW_FORMULATIONS, ReduceWindowGeometry,
                                                          write_reduce_window)
from autotune.compiler.formulations.space import ORIGINAL, FormulationError, FormulationSite, FormulationSpace

__all__ = ["CONV_FORMULATIONS", "ConvGeometry", "MAX_PATCH_BYTES", "MAX_WINDOW_POSITIONS", "write_convolution",
           "REDUCE_WINDOW_FORMULATIONS", "ReduceWindowGeometry", "write_reduce_window", "ORIGINAL", "FormulationError", "FormulationSite", "FormulationSpace"]
