"""The maintained benchmark suite: each module measures a claim the project keeps making or a goal it tracks.

Run one from the repository root as `python -m benchmarks.NAME [--help]`; its docstring says what it measures
and its options. Every module here has a smoke test in tests/benchmarks/ (a tiny run that checks structure,
not timing), imports the project through public names only, and never edits the import path
(tests/benchmarks/test_suite_rules.py). Raw results go to benchmarks/results/ (results only, no scripts);
today's numbers are on docs/results.md (`python -m benchmarks.results_page`). A one-off investigation lives
in experiments/DATE-topic/ instead, beside the lab note that records it.

By theme:
  today's numbers     results_page, heldout, heldout_seeds, shipped_accuracy
  start-up and speed  startup, jax_cache, foundation_speed, annealing_speed, simulator_speed, verifier_speed,
                      gnn_speed, pricing_speed, layout_pricing_speed
  scale and budgets   scale, scale_search, budget_floor
  correct on XLA:CPU  emission_parity, library_fusion, idiom_sweep, fuzz_inputs
  XLA:CPU tuning      xla_cpu_tuning, xla_cpu_options, cpu_cost_models, paired_calibration
  learned models      learned_features, layout_models, tpugraphs_tiles, calibrate_tpugraphs
  search              search_strategies, autotvm_transfer, layout_tpugraphs
  the papers          paper, paper_ablations, paper_claim, paper_tile_online
  helpers             tables, joblog, guided_search (imported by the others; no entry point of their own)
"""
