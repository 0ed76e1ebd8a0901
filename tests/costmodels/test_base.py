"""CostModel registry and the Evaluator adapter."""
import numpy as np
import pytest

from costmodels import base
from costmodels.base import (CostModel, EvaluatorCostModel, UnknownCostModelError, get_cost_model,
                             list_cost_models, register_cost_model)
from hardware.base import Evaluator, Measurement


class K:
    def __init__(self, h):
        self.hash = h

    def to_hlo_module(self):
        return ""


class Const(CostModel):
    name = "const"

    def __init__(self, value=1.0):
        self.value = value

    def predict(self, kernels, tiles=None):
        return np.full(len(list(kernels)), self.value)


class HalfFails(Evaluator):
    name = "halffails"

    def _measure_batch(self, kernels, tiles):
        return [Measurement(1e-3) if k.hash.startswith("ok") else Measurement.failure("crash: x")
                for k in kernels]


class Raises(Evaluator):
    name = "raises"

    def _measure_batch(self, kernels, tiles):
        raise RuntimeError("boom")


def test_register_and_get_by_name():
    register_cost_model("Const-Test", Const)
    m = get_cost_model("const-test", value=3.0)
    assert isinstance(m, Const) and m.value == 3.0
    assert "const-test" in list_cost_models()
    assert list(m.predict([K("a"), K("b")])) == [3.0, 3.0]


def test_builtins_resolve():
    from costmodels.analytical import AnalyticalCostModel
    assert isinstance(get_cost_model("analytical"), AnalyticalCostModel)
    sim = get_cost_model("sim")
    assert sim.predicts_absolute and "sim" in list_cost_models()


def test_module_class_specs():
    from costmodels.analytical import AnalyticalCostModel
    assert isinstance(get_cost_model("costmodels.analytical:AnalyticalCostModel"), AnalyticalCostModel)
    assert isinstance(get_cost_model("costmodels.analytical.AnalyticalCostModel", target="tpu-v2"),
                      AnalyticalCostModel)
    inst = Const(2.0)
    assert get_cost_model(inst) is inst
    assert isinstance(get_cost_model(Const), Const)


@pytest.mark.parametrize("spec, msg", [
    ("no-such-model", "unknown cost model"),
    ("no_such_module_xyz:Model", "cannot import"),
    ("costmodels.analytical:Nope", "has no attribute"),
    ("", "must be a name"),
])
def test_unknown_specs_raise_value_error(spec, msg):
    with pytest.raises(ValueError, match=msg):
        get_cost_model(spec)
    assert issubclass(UnknownCostModelError, ValueError)


def test_entry_points(monkeypatch):
    class EP:
        name = "plugin-model"

        def load(self):
            return Const

    monkeypatch.setattr(base.COST_MODELS, "entry_points", lambda: {"plugin-model": EP()})
    assert isinstance(get_cost_model("plugin-model", value=5.0), Const)
    assert "plugin-model" in list_cost_models()


def test_evaluator_adapter_failures_are_inf():
    ev = HalfFails()
    m = get_cost_model(ev)
    assert isinstance(m, EvaluatorCostModel)
    out = m.predict([K("ok1"), K("bad"), K("ok2")])
    assert out[0] == 1e-3 and np.isinf(out[1]) and out[2] == 1e-3
    assert np.all(np.isinf(EvaluatorCostModel(Raises()).predict([K("a"), K("b")])))
    assert np.all(np.isinf(EvaluatorCostModel(HalfFails(budget=0)).predict([K("ok")])))
    assert m.predict([]).shape == (0,)


def test_simulator_as_evaluator_cost_model():
    from autotune.compiler.fusion import FusionSpace
    from autotune.compiler.program import Program
    from hardware.simulator import TpuSimulator
    prog = Program.from_text("HloModule m\nENTRY e {\n a = f32[256,256]{1,0} parameter(0)\n"
                             " ROOT n = f32[256,256]{1,0} negate(a)\n}\n")
    fs = FusionSpace(prog, "tpu")
    ks = fs.kernels(fs.default())
    m = EvaluatorCostModel(TpuSimulator(noise=0))
    assert m.predict(ks)[0] == pytest.approx(TpuSimulator(noise=0).simulate(ks)[0])
