"""What every contract suite shares: the one-line failure, the small real program and its kernels, a
tiny dataset, and the global random state a plug-in must leave alone."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "dot_product_attention_bf16.hlo"
UNKNOWN_PARAMETER = "no_such_parameter_xyz"  # what the "unknown parameter" contracts pass


def _fail(subject: str, contract: str, detail: str) -> None:
    detail = " ".join(str(detail).split())
    raise AssertionError(f"{subject} breaks the contract '{contract}': {detail}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


# ------------------------------------------------------------------------------------------ inputs
def contract_program() -> Any:
    """The small real program the contracts run on (an attention block, shipped with autotune)."""
    from autotune.compiler.program import Program
    return Program.from_file(str(PROGRAM))


def contract_kernels(target: str = "tpu", program: Any = None, configs: int = 4, seed: int = 0) -> list:
    """Distinct fusion kernels of a program (default: `contract_program`): those of its default configuration
    and of `configs` random ones."""
    from autotune.compiler.fusion import FusionSpace
    space = FusionSpace(program if program is not None else contract_program(), target)
    rng = np.random.default_rng(seed)
    out: dict = {}
    for cfg in [space.default()] + [space.random(rng) for _ in range(configs)]:
        for k in space.kernels(cfg):
            out.setdefault(k.hash, k)
    return list(out.values())


_DATASETS: dict = {}


def contract_dataset(task: str, target: str = "tpu") -> Any:
    """A tiny dataset of `contract_program` measured on the simulator (every program in the train split),
    built once per process in a temporary directory: enough to check that a learned model fits."""
    key = (task, target)
    if key not in _DATASETS:
        import json
        from autotune.tuning.dataset import DatasetOptions, build_dataset
        root = Path(tempfile.mkdtemp(prefix=f"autotune-contract-{task}-"))
        (root / "programs").mkdir()
        (root / "programs" / PROGRAM.name).write_text(PROGRAM.read_text())
        (root / "split.json").write_text(json.dumps({"train": [PROGRAM.stem], "validation": [], "test": []}))
        _DATASETS[key] = build_dataset(root / "programs", task, "sim", target=target, configs_per_program=6,
                                       out_dir=root / "dataset",
                                       options=DatasetOptions(split_file=str(root / "split.json"), seed=0,
                                                              max_tiles_per_kernel=8))
    return _DATASETS[key]


def _global_random_state() -> tuple:
    """numpy's and (once imported) torch's global random states. (Not Python's `random`: importing some
    libraries draws from it, xgboost among them.)"""
    torch = sys.modules.get("torch")
    return np.random.get_state(), (torch.random.get_rng_state() if torch is not None else None)


def _same_random_state(a: tuple, b: tuple) -> bool:
    (np_a, torch_a), (np_b, torch_b) = a, b
    if np_a[0] != np_b[0] or not np.array_equal(np_a[1], np_b[1]) or np_a[2:] != np_b[2:]:
        return False
    return torch_a is None or torch_b is None or bool((torch_a == torch_b).all())


def _same_params(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        try:
            if not bool(np.all(a[k] == b[k])):
                return False
        except Exception:  # noqa: BLE001 - values that do not compare: the same object or not
            if a[k] is not b[k]:
                return False
    return True


# -------------------------------------------------------------------------------------- cost models
