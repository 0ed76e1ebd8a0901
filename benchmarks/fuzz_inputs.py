"""Bad input at scale: >= 10,000 mutated HLO files through the real CLI, with hang detection.

Each mutant (autotune/testing/fuzz.py: 1-3 syntactic or semantic mutations of a corpus program) is
written to a file and run through `autotune show`, `autotune emit --target cpu`, `autotune emit
--target tpu` and `autotune measure --evaluator sim` - the click entry point `autotune.cli.app.main`,
invoked in-process by click's CliRunner inside worker subprocesses that each take many files (the
commands stop at the first one that fails). A file that takes more than --timeout seconds is a hang:
its worker is killed and replaced; a worker that dies (signal, memory limit) is a crash. Outcomes
per file: ok, one-line error with file:line:col, error without a position, traceback, hang, crash.

    python -m benchmarks.fuzz_inputs --files 10000 [--workers 1] [--timeout 20] [--seed 0]

Writes benchmarks/results/fuzz_inputs.md (and fuzz_inputs_failures.jsonl with every non-clean case
and how to rebuild it: source file and seed).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import select
import subprocess
import sys
import tempfile
import time

from autotune.cli.app import MEASUREMENT_FAILED_EXIT
from autotune.testing.fuzz import (CRASH, HANG, MEASUREMENT_FAILED, OK, OUTCOMES, POSITIONED,
                                   TRACEBACK, UNPOSITIONED, corpus_files, mutants)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMANDS = (["show"], ["emit", "--target", "cpu", "-o", "{out}"], ["emit", "--target", "tpu", "-o", "{out}"],
            ["measure", "--evaluator", "sim", "--target", "tpu", "--store", "none"])
ERROR_LINE = re.compile(r"^autotune: error: (.*)$")
POSITIONED_ERROR = re.compile(r"^autotune: error: .+?:\d+:\d+: ")
WORKER_MEMORY_BYTES = 4 << 30  # a worker past this is a crash (unbounded memory growth)


# --------------------------------------------------------------------------------------------------
# Worker: reads file paths on stdin, answers one JSON line per file on stdout.


def _run_commands(path: str, out: str) -> dict:
    from click.testing import CliRunner

    from autotune.cli.app import main
    runner = CliRunner()
    for cmd in COMMANDS:
        args = [a.replace("{out}", out) for a in cmd]
        args.insert(1, path)
        res = runner.invoke(main, args, catch_exceptions=True)
        stderr = res.stderr
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            import traceback
            tb = "".join(traceback.format_exception(type(res.exception), res.exception,
                                                    res.exception.__traceback__))
            kind = CRASH if isinstance(res.exception, MemoryError) else TRACEBACK
            return {"outcome": kind, "command": cmd[0], "detail": tb.strip().splitlines()[-1][:300],
                    "traceback": tb[-3000:]}
        if res.exit_code == 0:
            continue
        if res.exit_code == MEASUREMENT_FAILED_EXIT and cmd[0] == "measure":
            return {"outcome": MEASUREMENT_FAILED, "command": cmd[0], "exit": res.exit_code,
                    "detail": stderr.strip().splitlines()[-1][:300]}
        errors = [line for line in stderr.splitlines() if ERROR_LINE.match(line)]
        others = [line for line in stderr.splitlines() if line.strip() and not ERROR_LINE.match(line)
                  and "warning" not in line]
        one_line = len(errors) == 1 and not others
        detail = errors[0] if errors else (stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1]
        outcome = POSITIONED if one_line and POSITIONED_ERROR.match(errors[0]) else UNPOSITIONED
        return {"outcome": outcome, "command": cmd[0], "exit": res.exit_code, "detail": detail[:300]}
    return {"outcome": OK}


def worker() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    out = os.path.join(tempfile.mkdtemp(prefix="fuzz_emit_"), "out.hlo")
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        t0 = time.perf_counter()
        result = _run_commands(path, out)
        result["seconds"] = round(time.perf_counter() - t0, 3)
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


# --------------------------------------------------------------------------------------------------
# Parent: a pool of workers, one file at a time each, a deadline per file.


class _Worker:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": ROOT, "AUTOTUNE_NO_MICROBENCH": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.fuzz_inputs", "--worker"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        self.job = None
        self.deadline = 0.0

    def submit(self, job: dict, timeout: float) -> None:
        self.job = job
        self.deadline = time.monotonic() + timeout
        self.proc.stdin.write(job["path"] + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run(args: argparse.Namespace) -> dict:
    files = corpus_files(max_bytes=args.max_bytes)
    tmp = tempfile.mkdtemp(prefix="fuzz_inputs_")
    counts = collections.Counter()
    by_command = collections.Counter()
    failures: list = []
    messages = collections.Counter()
    seconds: list = []
    slowest: list = []
    gen = mutants(files, args.files, args.seed)
    workers = [_Worker() for _ in range(args.workers)]
    pending = 0
    done = 0
    t_start = time.time()

    def next_job(k: int) -> "dict | None":
        m = next(gen, None)
        if m is None:
            return None
        path = os.path.join(tmp, f"mutant_{k:05d}_{os.path.basename(m.source)}")
        with open(path, "w", encoding="utf-8") as f:
            f.write(m.text)
        return {"k": k, "path": path, "source": os.path.relpath(m.source, ROOT), "seed": m.seed,
                "mutations": m.mutations}

    def record(job: dict, result: dict) -> None:
        nonlocal done
        done += 1
        outcome = result["outcome"]
        counts[outcome] += 1
        if outcome == POSITIONED:
            # the message after file:line:col, with numbers and names folded: what kinds of errors occur
            msg = POSITIONED_ERROR.sub("", result["detail"])
            messages[re.sub(r"\b\d+\b", "N", re.sub(r"'[^']*'", "'_'", msg))[:90]] += 1
            by_command[result.get("command", "?")] += 1
        if "seconds" in result:
            seconds.append(result["seconds"])
            slowest.append((result["seconds"], job["source"], job["seed"], job["mutations"], outcome))
            slowest.sort(key=lambda x: -x[0])
            del slowest[5:]
        if outcome not in (OK, POSITIONED, MEASUREMENT_FAILED):
            failures.append({**{k: job[k] for k in ("source", "seed", "mutations")}, **result})
        os.unlink(job["path"])
        if args.progress and done % 500 == 0:
            print(f"{done}/{args.files} {dict(counts)} {time.time() - t_start:.0f}s", file=sys.stderr, flush=True)

    k = 0
    for w in workers:
        job = next_job(k)
        if job is None:
            break
        k += 1
        w.submit(job, args.timeout)
        pending += 1
    while pending:
        live = [w for w in workers if w.job is not None]
        timeout = max(0.0, min(w.deadline for w in live) - time.monotonic())
        ready, _, _ = select.select([w.proc.stdout for w in live], [], [], timeout)
        now = time.monotonic()
        for i, w in enumerate(workers):
            if w.job is None:
                continue
            result = None
            if w.proc.stdout in ready:
                line = w.proc.stdout.readline()
                if line:
                    result = json.loads(line)
                else:  # the worker died (segfault, memory limit)
                    result = {"outcome": CRASH, "detail": f"worker exited with {w.proc.wait()}"}
                    workers[i] = _Worker()
            elif now >= w.deadline:
                result = {"outcome": HANG, "detail": f"more than {args.timeout:g} s"}
                w.kill()
                workers[i] = _Worker()
            if result is None:
                continue
            record(w.job, result)
            pending -= 1
            w.job = None
            job = next_job(k)
            if job is not None:
                k += 1
                workers[i].submit(job, args.timeout)
                pending += 1
    for w in workers:
        w.kill()
    os.rmdir(tmp)
    seconds.sort()
    return {"files": done, "seed_files": len(files), "counts": dict(counts), "failures": failures,
            "errors_by_command": dict(by_command), "top_messages": messages.most_common(25),
            "wall_s": time.time() - t_start, "slowest": slowest,
            "median_s": seconds[len(seconds) // 2] if seconds else None, "max_s": seconds[-1] if seconds else None}


def write_report(res: dict, args: argparse.Namespace, path: str) -> None:
    c = res["counts"]
    n = res["files"]
    lines = [
        "# Fuzzing bad input through the CLI (issue 16)",
        "",
        f"Command: `python -m benchmarks.fuzz_inputs --files {args.files} --workers {args.workers} "
        f"--timeout {args.timeout:g} --seed {args.seed}`",
        f"Machine: 2-core shared CI-class VM ({platform.machine()}, Python {platform.python_version()}); "
        f"date: {time.strftime('%Y-%m-%d')}; wall time {res['wall_s'] / 60:.1f} min "
        f"(median {res['median_s']:.2f} s, max {res['max_s']:.2f} s per file).",
        "",
        f"{n:,} mutated files from {res['seed_files']} corpus programs (examples/hlo, examples/idioms, "
        "tests/fixtures/hlo, data/tpugraphs/layout_module.hlo), 1-3 mutations each (40% syntactic, 60% semantic), each run "
        "through `show`, `emit --target cpu`, `emit --target tpu`, `measure --evaluator sim` "
        f"(click's CliRunner in worker processes; {args.timeout:g} s per file; {WORKER_MEMORY_BYTES >> 30} GiB "
        "address-space limit per worker).",
        "",
        "| outcome | files | share |",
        "|---|---:|---:|",
    ]
    for o in OUTCOMES:
        lines.append(f"| {o.replace('_', ' ')} | {c.get(o, 0):,} | {100 * c.get(o, 0) / max(n, 1):.2f}% |")
    lines += ["", "Measurement failed = `measure` exit status 3 after reading the program fine (a kernel the "
              "simulator could not run); not an input error."]
    lines += ["", "Errors with a position, by the command that reported them: "
              + ", ".join(f"{k} {v:,}" for k, v in sorted(res["errors_by_command"].items())) + ".", "",
              "Most frequent error messages (names folded to `'_'`, numbers to `N`):", "",
              "| count | message |", "|---:|---|"]
    for msg, cnt in res["top_messages"]:
        lines.append(f"| {cnt:,} | `{msg}` |")
    lines += ["", "Slowest files (seconds for all four commands):", ""]
    for sec, src, seed, what, outcome in res["slowest"]:
        lines.append(f"- {sec:.2f} s: {src} seed {seed} ({'; '.join(what)}): {outcome.replace('_', ' ')}")
    if res["failures"]:
        lines += ["", "Not clean (rebuild with `Mutator(seed).mutate(open(source).read())`):", ""]
        for f in res["failures"][:50]:
            lines.append(f"- {f['outcome']} in `{f.get('command', '?')}`: {f['source']} seed {f['seed']} "
                         f"({'; '.join(f['mutations'])}): {f['detail']}")
    else:
        lines += ["", "Every file either went through all four commands or stopped with one line naming "
                  "file:line:column."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per file before it counts as a hang")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-bytes", type=int, default=None, help="only corpus files up to this size")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "fuzz_inputs.md"))
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker()
        return {}
    res = run(args)
    write_report(res, args, args.out)
    with open(os.path.splitext(args.out)[0] + "_failures.jsonl", "w") as f:
        for rec in res["failures"]:
            f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k not in ("failures", "top_messages", "slowest")}, indent=1))
    return res


if __name__ == "__main__":
    main()
