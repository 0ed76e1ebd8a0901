"""Test tooling shared by tests/ and benchmarks/ (not imported by the autotune core)."""
