"""Fixtures for the example-corpus tests: jax-free modules of examples/ loaded by path."""
import importlib.util
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="session")
def example_module():
    """load(relative_path) imports a jax-free module of examples/ (which is not a package)."""
    loaded = {}

    def load(relative_path: str):
        if relative_path not in loaded:
            path = EXAMPLES / relative_path
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[relative_path] = module
        return loaded[relative_path]
    return load
