"""Model families for the real HLO corpus (plain JAX).

``FAMILIES`` maps a family name to a :class:`~examples.corpus.registry.Family`;
``examples/generate_corpus.py`` lowers every (family, size, mode) to HLO text.
"""
from .registry import FAMILIES, MODES, Family, register  # noqa: F401
from . import vision, sequence, other, attention  # noqa: F401,E402  (registers the families)

__all__ = ["FAMILIES", "MODES", "Family", "register"]
