"""Run the idiom corpus through the tool as a user would, and check that emitted programs compute
what the originals compute.

For every program of examples/idioms/ (or --programs) this runs, each as its own process from the
repository root (``python -m autotune.cli``, so the checkout's code is what runs):

    show P                       show P --target cpu
    emit P --target cpu -o X     measure P --evaluator sim
    fusion P --budget 10s --hw-budget 0 --no-progress --out DIR
    fusion P --target cpu --budget 10s --hw-budget 0 --no-progress --out CPU_DIR

and then compiles and runs, with ``hardware.xla.compile_hlo`` (default options) in a subprocess
(XLA aborts the process on some bad modules), the original, the emitted X and the tuned
``CPU_DIR/fused.hlo`` on the same ``hardware.xla.random_inputs(original, seed=0)``, comparing
outputs with ``hardware.xla.output_error`` (for a program computing in 16-bit floats, a mismatch
passes when the two agree compiled without excess precision: ``hardware.xla.strict_precision_error``).
(The TPU run's fused.hlo is not run:
XLA:CPU rejects TPU fusion kinds such as kInput.)

Outcomes: ``ok``, ``ok (...)`` when the command succeeded but printed warnings or reported failed
kernels, ``refused: <line>`` (exit 2 with a one-line error, no traceback), ``error (exit N): <its
last line>``, ``traceback: <exception line>``, ``crash: <signal or Check failed line>``,
``timeout``, ``mismatch: max err E`` (parity), or ``skipped: ...`` when the command that should
have written the file failed.

Usage: python -m benchmarks.idiom_sweep [--programs a,b] [--budget 10s] [--out findings.md]
       [--json rows.json] [--jobs 1] [--dir FOLDER  (every *.hlo there instead of examples/idioms)]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IDIOMS = ROOT / "examples" / "idioms"

CLI_TIMEOUT_S = 300


def failure_line(stdout: str, stderr: str, returncode: int) -> str:
    """One line saying how a finished process failed (returncode != 0)."""
    lines = [l.strip() for l in (stderr + "\n" + stdout).splitlines() if l.strip()]
    check = next((l for l in lines if "Check failed" in l), None)
    last = check or (lines[-1] if lines else "")
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else -returncode
        return f"crash: {name}" + (f": {last[:200]}" if last else "")
    if check:
        return f"crash: {check[:250]}"
    if "Traceback (most recent call last)" in stderr:
        return f"traceback: {last[:250]}"
    if returncode == 2 and len(stderr.strip().splitlines()) == 1:
        return f"refused: {last[:250]}"
    return f"error (exit {returncode}): {last[:250]}"


def outcome(stdout: str, stderr: str, returncode: int) -> str:
    """``ok``, ``ok (notes)`` or the failure line of a finished command."""
    if returncode != 0:
        return failure_line(stdout, stderr, returncode)
    notes = [l.strip() for l in stderr.splitlines() if l.lower().startswith("warning")]
    notes += [l.strip() for l in stdout.splitlines()
              if re.search(r"\bfailed\b|\bincomplete\b", l)]
    return "ok" + (f" ({'; '.join(dict.fromkeys(notes))[:400]})" if notes else "")


def run_cli(args: list[str], env: dict, timeout: float = CLI_TIMEOUT_S) -> tuple[str, float]:
    """(outcome, seconds) of ``python -m autotune.cli ARGS`` run from the repository root."""
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True,
                           text=True, timeout=timeout, cwd=str(ROOT), env=env)
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout:.0f}s", time.perf_counter() - t0
    return outcome(r.stdout, r.stderr, r.returncode), time.perf_counter() - t0


def parity(original: str, others: list[str]) -> None:
    """In-process (run it in a subprocess): compile and run the original and each other program on
    the original's random inputs. Prints ``STAGE path`` before each compile (so that a crash names
    the program) and ``RESULT path outcome`` after each comparison."""
    from hardware.xla import accuracy_fallback, compile_hlo, computes_in_16bit, output_error, random_inputs
    text = Path(original).read_text()
    print("STAGE", original, flush=True)
    inputs = random_inputs(text, seed=0)
    ref = compile_hlo(text)(*inputs)
    for path in others:
        print("STAGE", path, flush=True)
        try:
            got = compile_hlo(Path(path).read_text())(*inputs)
        except Exception as e:  # noqa: BLE001  (a compile/run error is the finding)
            first = (str(e).strip().splitlines() or [""])[0][:250]
            print("RESULT", path, f"error: {type(e).__name__}: {first}", flush=True)
            continue
        low = computes_in_16bit(text)
        err, ok = output_error(got, ref, low_precision=low)
        ok, notes = accuracy_fallback(ok, low, Path(path).read_text(), text, inputs, got, ref)
        if "without_excess_precision" in notes:
            err = min(err, notes["without_excess_precision"])
        result = (f"ok (max err {err:.1e})" if ok else f"mismatch: max err {err:.3g}"
                  + (f" ({len(got)} outputs, original has {len(ref)})" if len(got) != len(ref) else ""))
        print("RESULT", path, result, flush=True)


def run_parity(original: str, others: list[str], timeout: float = CLI_TIMEOUT_S) -> dict:
    """:func:`parity` in a subprocess: {path: outcome}; a crash is charged to the program being
    compiled (the original's crash to every file)."""
    if not others:
        return {}
    code = f"import benchmarks.idiom_sweep as m; m.parity({original!r}, {others!r})"  # cwd: the repository root
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=timeout, cwd=str(ROOT))
        stdout, stderr, rc, why = r.stdout, r.stderr, r.returncode, None
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, rc, why = "", None, f"timeout after {timeout:.0f}s"
    results, stage = {}, None
    for line in stdout.splitlines():
        if line.startswith("STAGE "):
            stage = line[6:]
        elif line.startswith("RESULT "):
            path, result = line[7:].split(" ", 1)
            results[path] = result
    if len(results) < len(others):
        why = why or failure_line(stdout, stderr, rc)
        for p in others:
            if p not in results:
                results[p] = (f"original program: {why}" if stage == original else
                              why if p == stage else "not run: an earlier compile crashed")
    return results


def sweep_program(name: str, work: str, budget: str, env: dict, folder: Path = IDIOMS) -> list[dict]:
    """Every command on one program (`folder`/`name`.hlo); rows of {program, command, outcome, seconds}."""
    path = str(folder / f"{name}.hlo")
    rel = os.path.relpath(path, ROOT)
    emitted = os.path.join(work, f"{name}.emit.hlo")
    run_dir = os.path.join(work, f"{name}.fusion")
    cpu_dir = os.path.join(work, f"{name}.fusion_cpu")
    commands = [
        ["show", rel], ["show", rel, "--target", "cpu"],
        ["emit", rel, "--target", "cpu", "-o", emitted],
        ["measure", rel, "--evaluator", "sim"],
        ["fusion", rel, "--budget", budget, "--hw-budget", "0", "--no-progress", "--out", run_dir],
        ["fusion", rel, "--target", "cpu", "--budget", budget, "--hw-budget", "0",
         "--no-progress", "--out", cpu_dir],
    ]
    rows = []
    for args in commands:
        result, seconds = run_cli(args, env)
        shown = " ".join(a if a not in (emitted, run_dir, cpu_dir) else os.path.basename(a)
                         for a in args)
        rows.append({"program": name, "command": shown, "outcome": result, "seconds": seconds})
    targets = {"compile+run emitted (emit --target cpu) vs original": emitted,
               "compile+run tuned (fusion --target cpu) fused.hlo vs original":
                   os.path.join(cpu_dir, "fused.hlo")}
    for label, p in targets.items():  # one subprocess each: a crash on one hides nothing
        t0 = time.perf_counter()
        result = (run_parity(path, [p])[p] if os.path.exists(p)
                  else "skipped: the command did not write it")
        rows.append({"program": name, "command": label, "seconds": time.perf_counter() - t0,
                     "outcome": result})
    return rows


def markdown(rows: list[dict], header: str) -> str:
    """The report: a count line, then failures, refusals, runs with notes, and every run."""
    def kind(r):
        o = r["outcome"]
        return "ok" if o.startswith("ok") else o.split(":")[0].split(" ")[0]
    failing = [r for r in rows if kind(r) not in ("ok", "refused", "skipped")]
    refused = [r for r in rows if kind(r) in ("refused", "skipped")]
    noted = [r for r in rows if r["outcome"].startswith("ok (") and "max err" not in r["outcome"]]
    programs = sorted({r["program"] for r in rows})
    broken = sorted({r["program"] for r in failing})
    ok = sum(kind(r) == "ok" for r in rows)
    out = [header, "",
           f"{len(programs)} programs, {len(rows)} runs: {ok} ok, {len(refused)} refused or "
           f"skipped, {len(failing)} failed, on {len(broken)} programs"
           + (f" ({', '.join(broken)})" if broken else "") + ".", ""]
    for title, subset in (("Failures", failing), ("Refusals (and the runs they skip)", refused),
                          ("Succeeded with warnings or failed kernels", noted), ("All runs", rows)):
        out += [f"## {title}", "", "| program | command | outcome |", "|---|---|---|"]
        out += [f"| {r['program']} | `{r['command']}` | {r['outcome'].replace('|', '/')} |"
                for r in subset]
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="", help="comma-separated names (default: all)")
    ap.add_argument("--budget", default="10s", help="fusion --budget")
    ap.add_argument("--out", default="", help="write the markdown table here (default: stdout)")
    ap.add_argument("--json", default="", help="also write the rows as JSON")
    ap.add_argument("--jobs", type=int, default=1, help="programs swept in parallel")
    ap.add_argument("--dir", default="", help="sweep every *.hlo of this folder instead (your own programs)")
    a = ap.parse_args(argv)
    folder = Path(a.dir).resolve() if a.dir else IDIOMS
    if a.dir:
        names = sorted(p.stem for p in folder.glob("*.hlo"))
        if not names:
            ap.error(f"no .hlo files in {a.dir}")
    else:
        names = [e["name"] for e in json.loads((IDIOMS / "manifest.json").read_text())]
    if a.programs:
        want = a.programs.split(",")
        unknown = sorted(set(want) - set(names))
        if unknown:
            ap.error(f"not in {'the folder' if a.dir else 'examples/idioms/manifest.json'}: {', '.join(unknown)}")
        names = [n for n in names if n in want]
    work = tempfile.mkdtemp(prefix="idiom_sweep_")
    env = dict(os.environ, AUTOTUNE_STORE=os.path.join(work, "measurements.sqlite"))
    t0 = time.perf_counter()
    rows: list[dict] = []
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for program_rows in pool.map(lambda n: sweep_program(n, work, a.budget, env, folder), names):
            rows += program_rows
            worst = next((r for r in program_rows if not r["outcome"].startswith("ok")), None)
            print(f"{program_rows[0]['program']:32s} "
                  + ("ok" if worst is None else f"{worst['command'].split()[0]}: {worst['outcome'][:120]}"),
                  file=sys.stderr, flush=True)
    header = (f"# Idiom corpus sweep\n\n`python -m benchmarks.idiom_sweep --budget {a.budget}` over "
              f"{len(names)} programs of {a.dir or 'examples/idioms/'} in {time.perf_counter() - t0:.0f}s.")
    text = markdown(rows, header)
    if a.out:
        Path(a.out).write_text(text + "\n")
    else:
        print(text)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
