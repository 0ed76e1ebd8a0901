"""autotune.testing.contracts: every registered and shipped cost model and the plug-in example keep the
cost-model contracts, learned models fitted from scratch keep them too, and deliberately broken cost models and
strategies fail them with a one-line message naming the contract (the strategies' own runs are in
tests/search/test_strategies.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune import api
from autotune.testing.contracts import UNKNOWN_PARAMETER, check_cost_model, check_strategy, contract_dataset
from costmodels.base import CostModel, NotFittedError
from search.base import Strategy

ROOT = Path(__file__).resolve().parents[2]
PREDICTIONS = ["one finite value per kernel", "empty input", "order equivariance", "batch independence",
               "deterministic predictions"]


@pytest.mark.parametrize("name", api.list_cost_models())
def test_registered_cost_models_keep_the_contracts(name):
    done = check_cost_model(name, task="fusion", target="tpu")  # a learned name is its shipped model
    assert set(PREDICTIONS) <= set(done) and "global random state untouched" in done
    if name in ("gnn", "xgboost", "xgb", "analytical"):
        assert "save and load round trip" in done and "unknown constructor parameter is refused" in done


@pytest.mark.parametrize("path", sorted(p.name for p in (ROOT / "costmodels" / "shipped").iterdir()
                                        if "layout" not in p.name and "fusion_tpu" not in p.name
                                        and not p.name.startswith("program_")))
def test_the_other_shipped_models_keep_the_contracts(path):
    """The shipped fusion models of other targets and the tile models (fusion on tpu: the test above)."""
    _, task, target = Path(path).stem.split("_")
    done = check_cost_model(str(ROOT / "costmodels" / "shipped" / path), task=task, target=target)
    assert "save and load round trip" in done and ("tiles are priced" in done) == (task == "tile")


@pytest.mark.parametrize("path", ["gnn_layout_tpu.pt", "xgb_layout_tpu.json"])
def test_the_shipped_layout_models_keep_the_estimator_conventions(path, tmp_path):
    """Layout models score a program's layout configurations (no kernels to predict): their constructor,
    fitted state and files keep the conventions all the same."""
    model = api.load_model_file(ROOT / "costmodels" / "shipped" / path, task="layout")
    twin = type(model)(**model.get_params())
    assert twin.get_params() == model.get_params() and not twin.is_fitted() and not twin.fitted_attributes()
    with pytest.raises(TypeError, match=f"unknown parameter\\(s\\): {UNKNOWN_PARAMETER} \\(accepted: "):
        type(model)(**model.get_params(), **{UNKNOWN_PARAMETER: 1})
    name, family, record = next(contract_dataset("layout").iter_layouts("all"))
    scores = model.predict_layouts(name, family, record.arrays)
    assert scores.shape == (len(record.arrays["config_runtime"]),) and np.isfinite(scores).all()
    with pytest.raises(NotFittedError, match="not trained"):
        twin.predict_layouts(name, family, record.arrays)
    model.save(str(tmp_path / path))
    back = type(model).load(str(tmp_path / path))
    assert np.array_equal(back.predict_layouts(name, family, record.arrays), scores)


def test_the_analytical_model_prices_tiles():
    assert "tiles are priced" in check_cost_model("analytical", task="tile")


def test_the_plugin_example_keeps_the_contracts():
    done = check_cost_model(str(ROOT / "examples" / "custom_cost_model.py") + ":BandwidthModel")
    assert {"unknown constructor parameter is refused", "get_params round trip"} <= set(done)


@pytest.mark.parametrize("task", ["fusion", "tile"])
def test_learned_models_fitted_from_scratch_keep_the_contracts(task):
    from costmodels.gnn import GnnCostModel
    from costmodels.xgb import XgbCostModel
    gnn = check_cost_model(lambda: GnnCostModel(task, hidden=8, embedding=8, layers=1, seed=1),
                           fit_params={"epochs": 2, "batch_size": 32})
    xgb = check_cost_model(lambda: XgbCostModel(task, n_estimators=10, max_depth=3, nthread=1))
    for done in (gnn, xgb):
        assert {"fit marks fitted state", "fitting is reproducible", "save and load round trip"} <= set(done)


def test_an_unfitted_model_refuses_to_predict_in_one_line():
    from costmodels.gnn import GnnCostModel
    from costmodels.xgb import XgbCostModel
    for model in (GnnCostModel(), XgbCostModel()):
        assert not model.is_fitted() and not model.fitted_attributes()
        with pytest.raises(NotFittedError, match=r"^the \w+ cost model is not trained \(fit or load it first\)$"):
            model.predict(["a kernel"])


# --------------------------------------------------------------------------------------------------
# Broken plug-ins fail, with the contract named


class Roofline(CostModel):
    """A correct model to break one contract at a time: bytes over a bandwidth."""

    def __init__(self, bytes_per_second: float = 1e12):
        self.bytes_per_second = bytes_per_second

    def predict(self, kernels, tiles=None):
        return np.array([k.bytes_read + k.bytes_written for k in kernels], dtype=float) / self.bytes_per_second


class WrongLength(Roofline):
    def predict(self, kernels, tiles=None):
        return super().predict(kernels)[:-1]


class Negative(Roofline):
    def predict(self, kernels, tiles=None):
        return -super().predict(kernels)


class ByPosition(Roofline):
    def predict(self, kernels, tiles=None):
        return super().predict(kernels) + 1e-6 * np.arange(len(kernels))


class Noisy(Roofline):
    def predict(self, kernels, tiles=None):
        out = super().predict(kernels)
        return out * (1 + 0.01 * np.random.default_rng().random(len(out)))


class SwallowsParameters(Roofline):
    def __init__(self, bytes_per_second: float = 1e12, **_ignored):
        self.bytes_per_second = bytes_per_second


class RenamesItsParameter(Roofline):
    def __init__(self, bytes_per_second: float = 1e12):
        self.bandwidth = bytes_per_second


class DrawsFromTheGlobalGenerator(Roofline):
    def __init__(self, bytes_per_second: float = 1e12):
        np.random.random()  # e.g. a network initialised from the global generator
        self.bytes_per_second = bytes_per_second


@pytest.mark.parametrize("broken, contract", [
    (WrongLength, "one finite value per kernel"),
    (Negative, "one finite value per kernel"),
    (ByPosition, "order equivariance"),
    (Noisy, "deterministic predictions"),
    (SwallowsParameters, "unknown constructor parameter is refused"),
    (RenamesItsParameter, "get_params round trip"),
    (DrawsFromTheGlobalGenerator, "global random state untouched"),
])
def test_a_broken_cost_model_fails_its_contract(broken, contract):
    assert check_cost_model(Roofline)  # the model they break passes
    with pytest.raises(AssertionError) as e:
        check_cost_model(broken)
    msg = str(e.value)
    assert msg.startswith(f"{broken.__name__} breaks the contract '{contract}': ") and "\n" not in msg


def test_a_learned_model_that_predicts_unfitted_fails():
    class Memorizer(Roofline):
        requires_fit = True

        def fit(self, dataset):
            self.scale_ = 1.0
            return self

    with pytest.raises(AssertionError, match=r"^Memorizer breaks the contract 'predict before fit is one clear "
                                             r"error': an unfitted learned model predicted$"):
        check_cost_model(Memorizer)


class Base(Strategy):
    """A correct strategy to break one contract at a time: random configurations never asked before."""

    name = "contract-base"

    def __init__(self, space, seed=None, **params):
        super().__init__(space, seed, **params)
        self.asked = set()

    def ask(self, n):
        out = []
        for _ in range(20 * n):
            cfg = self.draw()
            key = self.space.encode(cfg)
            if key not in self.asked and len(out) < n:
                self.asked.add(key)
                out.append(cfg)
        return out

    def draw(self):
        return self.space.random(self.rng)

    def tell(self, configs, costs):
        self.observe(configs, costs)
        self.asked |= {self.space.encode(c) for c in configs}

    def state_dict(self):
        return {**super().state_dict(), "asked": sorted(self.asked)}

    def load_state_dict(self, d):
        super().load_state_dict(d)
        self.asked = set(d["asked"])


class Repeats(Base):
    name = "contract-repeats"

    def tell(self, configs, costs):
        self.observe(configs, costs)
        self.asked.clear()


class GlobalRandom(Base):
    name = "contract-global-random"

    def draw(self):
        return self.space.random(np.random.default_rng(np.random.randint(2 ** 31)))


class ForgetsItsRng(Base):
    name = "contract-forgets"

    def state_dict(self):
        return {k: v for k, v in super().state_dict().items() if k != "rng"}

    def load_state_dict(self, d):
        self.best.load_state_dict(d["best"], self.space)
        self.asked = set(d["asked"])


class NoBest(Base):
    name = "contract-no-best"

    def tell(self, configs, costs):
        if len(costs) != len(configs):
            raise ValueError("lengths differ")
        self.asked |= {self.space.encode(c) for c in configs}


class Swallows(Base):
    name = "contract-swallows"

    def __init__(self, space, seed=None, **params):
        super().__init__(space, seed)


@pytest.mark.parametrize("broken, contract", [
    (Repeats, "no configuration proposed twice"),
    (GlobalRandom, "same seed same asks"),
    (ForgetsItsRng, "state_dict round trip resumes identically"),
    (NoBest, "tell tolerates order, subsets, failures and strangers"),
    (Swallows, "unknown parameter is an error"),
])
def test_a_broken_strategy_fails_its_contract(broken, contract):
    assert check_strategy(Base)  # the strategy they break passes
    with pytest.raises(AssertionError) as e:
        check_strategy(broken)
    msg = str(e.value)
    assert msg.startswith(f"{broken.__name__} breaks the contract '{contract}': ") and "\n" not in msg


def test_the_shipped_whole_program_model_keeps_the_estimator_conventions():
    """The whole-program cpu model (costmodels/program_cpu.py) prices configurations, not kernels: it keeps
    the estimator conventions and refuses to predict unfitted."""
    from costmodels.program_cpu import ProgramModel
    model = ProgramModel.load(str(ROOT / "costmodels" / "shipped" / "program_fusion_cpu.json"))
    twin = type(model)(**model.get_params())
    assert twin.get_params() == model.get_params() and not twin.is_fitted() and model.is_fitted()
    assert set(model.fitted_attributes()) >= {"boosters_", "n_features_"}
    with pytest.raises(NotFittedError):
        twin.predict(np.zeros((1, model.n_features_)))
    with pytest.raises(TypeError, match="unknown parameter"):
        type(model)(**model.get_params(), **{UNKNOWN_PARAMETER: 1})
