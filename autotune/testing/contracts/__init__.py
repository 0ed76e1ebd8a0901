"""Contract suites for plug-in authors, after scikit-learn's `check_estimator`: `check_cost_model`,
`check_strategy`, `check_evaluator`, `check_target` and `check_stage` run the small checks that autotune relies on, on a
real program, and raise AssertionError with a one-line message naming the contract a plug-in breaks.

    from autotune.testing.contracts import check_cost_model, check_strategy
    def test_my_model():
        check_cost_model(MyModel)                         # a class, a factory, an instance or a name
    def test_my_strategy():
        check_strategy(MyStrategy, params={"width": 4})   # a class or a name

Each returns the names of the contracts it checked (a contract that does not apply is left out: save and
load for a model that cannot be saved, tiles for a fusion-only model). docs/plugins.md describes each.
"""
from autotune.testing.contracts.common import (PROGRAM, UNKNOWN_PARAMETER, contract_dataset, contract_kernels,
                                               contract_program)
from autotune.testing.contracts.cost_model import COST_MODEL_CONTRACTS, check_cost_model
from autotune.testing.contracts.evaluator import EVALUATOR_CONTRACTS, check_evaluator
from autotune.testing.contracts.stage import STAGE_CONTRACTS, check_stage
from autotune.testing.contracts.strategy import STRATEGY_CONTRACTS, SyntheticFusionCost, check_strategy
from autotune.testing.contracts.target import TARGET_CONTRACTS, check_target

__all__ = ["check_cost_model", "check_strategy", "check_evaluator", "check_target", "check_stage", "STAGE_CONTRACTS", "contract_program",
           "contract_kernels", "contract_dataset", "SyntheticFusionCost", "COST_MODEL_CONTRACTS",
           "STRATEGY_CONTRACTS", "EVALUATOR_CONTRACTS", "TARGET_CONTRACTS", "UNKNOWN_PARAMETER", "PROGRAM"]
