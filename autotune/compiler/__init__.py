"""Compiler model: HLO, programs, analysis, targets, the fusion space, kernels and tiles.

The bottom layer: it imports nothing else of the project.
"""
