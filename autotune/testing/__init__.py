"""Test tooling, not imported by the autotune core: the HLO input fuzzer (fuzz.py) shared by tests/ and
benchmarks/, and the contract suites a plug-in author runs in their own tests (contracts.py, docs/plugins.md)."""
