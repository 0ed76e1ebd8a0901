"""`check_stage`: the contracts of autotune/run/stages.py a stage keeps (docs/plugins.md): a Stage class
with a name, found by its spec, constructed without arguments, a finite non-negative budget reserve, and a
run (in a real library run on the contract program, beside the fusion stage) that returns a StageResult
whose program parses, whose report fields are JSON and leave the other stages' fields alone."""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from autotune.testing.contracts.common import PROGRAM, _fail, _first_line

STAGE_CONTRACTS = (
    "a Stage class with a name",
    "found by its spec",
    "constructed without arguments",
    "a finite non-negative reserve",
    "runs in a library run and returns a StageResult",
    "its program parses",
    "its report fields are JSON and its own",
)


def check_stage(stage: Any) -> list:
    """Check a stage (a Stage class, a registered name, `module:Class` or `path.py:Class`) against the
    contracts a run relies on; returns the names checked. The run is a short one on the simulator:
    the stage runs first and fusion searches what it hands on, or after what it `requires`."""
    from autotune.run import RunOptions, Stage, StageResult, get_stage, tune
    from autotune.run.settings import RunSettings
    done: list = []
    name = f"stage {stage!r}"

    def fail(contract: str, detail: str) -> NoReturn:
        _fail(name, contract, detail)
        raise AssertionError(detail)  # (_fail raises)

    try:
        cls = get_stage(stage)
    except Exception as e:  # noqa: BLE001 - the contract's failure names it
        fail("a Stage class with a name", f"get_stage raised {_first_line(e)}")
    if not (isinstance(cls, type) and issubclass(cls, Stage)) or not isinstance(cls.name, str) or not cls.name \
            or cls.name == Stage.name:
        fail("a Stage class with a name", "subclass autotune.run.Stage and give it its own `name`")
    name = f"stage {cls.name!r}"
    done.append("a Stage class with a name")
    if get_stage(cls) is not cls:
        fail("found by its spec", "get_stage(the class) returned another object")
    done.append("found by its spec")
    try:
        obj = cls()
    except Exception as e:  # noqa: BLE001
        fail("constructed without arguments", f"raised {_first_line(e)}")
    done.append("constructed without arguments")
    options = RunOptions(hw_budget=0, max_evals=20, store="none", progress=False)
    settings = RunSettings(target="tpu", cost_model="analytical", strategy="random", evaluator_name="sim",
                           budget_text="inf", total_s=None, hw_s=0.0, hw_text="0", options=options)
    try:
        reserve = obj.reserve_s(settings)
    except Exception as e:  # noqa: BLE001
        fail("a finite non-negative reserve", f"reserve_s raised {_first_line(e)}")
    if not isinstance(reserve, (int, float)) or not math.isfinite(reserve) or reserve < 0:
        fail("a finite non-negative reserve", f"reserve_s returned {reserve!r}")
    done.append("a finite non-negative reserve")
    stages = [*cls.requires, cls] if cls.requires else [cls] if cls.name == "fusion" else [cls, "fusion"]
    with tempfile.TemporaryDirectory(prefix="autotune-stage-contract-") as tmp:
        out = Path(tmp) / "run"
        try:
            result = tune(str(PROGRAM), "tpu", cost_model="analytical", strategy="random", budget=None, stages=stages,
                          options=RunOptions(hw_budget=0, max_evals=20, store="none", progress=False, out_dir=out))
        except Exception as e:  # noqa: BLE001
            fail("runs in a library run and returns a StageResult", f"the run raised {_first_line(e)}")
        mine = result.state.results.get(cls.name)
        if not isinstance(mine, StageResult):
            fail("runs in a library run and returns a StageResult", f"run returned {type(mine).__name__}")
        done.append("runs in a library run and returns a StageResult")
        if mine.program_text is not None:
            from autotune.compiler.program import Program
            try:
                Program.from_text(mine.program_text)
            except Exception as e:  # noqa: BLE001
                fail("its program parses", _first_line(e))
            done.append("its program parses")
        try:
            json.dumps(mine.report)
            json.dumps(mine.verification)
        except (TypeError, ValueError) as e:
            fail("its report fields are JSON and its own", _first_line(e))
        others = set()
        for other, r in result.state.results.items():
            if other != cls.name:
                others |= set(r.report)
        clash = sorted(set(mine.report) & others)
        if clash:
            fail("its report fields are JSON and its own", f"it overwrites {clash[0]!r} of another stage")
        done.append("its report fields are JSON and its own")
    return done
