"""Make the repository importable for tests run from a plain checkout (CI installs it anyway)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("AUTOTUNE_NO_MICROBENCH", "1")
