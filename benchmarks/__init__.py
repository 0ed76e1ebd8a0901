"""The maintained benchmark suite: each module measures a claim the project keeps making or a goal it tracks.

Run one from the repository root as `python -m benchmarks.NAME [--help]`; its docstring says what it measures
and its options. Every module here has a smoke test in tests/benchmarks/ (a tiny run that checks structure,
not timing), imports the project through public names only, and never edits the import path
(tests/benchmarks/test_suite_rules.py). Raw results go to benchmarks/results/ (results only, no scripts);
today's numbers are on docs/results.md (`python -m benchmarks.results_page`). A one-off investigation lives
in experiments/DATE-topic/ instead, beside the lab note that records it.
"""
