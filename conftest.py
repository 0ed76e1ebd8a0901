"""Make the repository importable for tests run from a plain checkout (CI installs it anyway)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("AUTOTUNE_NO_MICROBENCH", "1")
# Tests never read or write the user's measurement store (~/.cache/autotune): a store of another
# autotune version there could be migrated, or answer from rows of another run.
if "AUTOTUNE_STORE" not in os.environ:
    import tempfile
    os.environ["AUTOTUNE_STORE"] = os.path.join(tempfile.mkdtemp(prefix="autotune-tests-"), "measurements.sqlite")
# Under pytest-xdist (`-n 2`, the README's test command) each worker keeps its own store, so that no test
# reads rows another worker's test wrote.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _base, _ext = os.path.splitext(os.environ["AUTOTUNE_STORE"])
    os.environ["AUTOTUNE_STORE"] = f"{_base}.{os.environ['PYTEST_XDIST_WORKER']}{_ext or '.sqlite'}"
