"""The `autotune` command line: the top layer, built on the public functions of the layers below."""
from autotune.cli.app import main

__all__ = ["main"]
