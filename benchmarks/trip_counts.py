"""Trip counts against XLA's own: every while loop whose trip count XLA's analysis knows (the
`known_trip_count` XLA writes into the loop's backend_config in the optimized module) must be known to the
project too, with the same count (autotune/compiler/program.py: backend_config, induction variable, or the
loop evaluated on its constants).

Loops are matched by name where XLA kept it; the rest by count (each XLA-known count must be among the
project's counts of loops XLA renamed). Loops XLA does not know are listed with the project's count and
source (the project may know more: a TensorFlow loop whose condition goes through a call).

    python -m benchmarks.trip_counts [--corpus examples/hlo ...] [--json OUT.json]
Exit status 0 when no XLA-known count is missing or different.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ["examples/hlo", "examples/hlo_library", "examples/hlo_heldout", "examples/hlo_heldout2",
           "examples/hlo_frontends", "examples/idioms", "tests/fixtures/hlo/frontend_idioms"]
_WHILE = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*? while\(")
_KNOWN = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def xla_trip_counts(text: str) -> dict:
    """{while name: XLA's known trip count or None} of XLA's optimized module of `text`."""
    from hardware.xla import optimized_hlo_text
    out = {}
    for line in optimized_hlo_text(text).splitlines():
        m = _WHILE.match(line)
        if m:
            k = _KNOWN.search(line)
            out[m.group(1)] = int(k.group(1)) if k else None
    return out


def compare(text: str, filename: str = "<string>") -> dict:
    """The project's trip counts beside XLA's for one program: matched, missing (XLA knows, we do not or
    differ), and what only the project knows."""
    from autotune.compiler.program import Program
    ours = {w.instruction: (w.trip_count, w.source) for w in Program.from_text(text, filename).whiles}
    xla = xla_trip_counts(text)
    missing, matched = [], 0
    unnamed = Counter(c for n, (c, s) in ours.items() if n not in xla and s != "default")
    for name, n in xla.items():
        if n is None:
            continue
        if name in ours:
            if ours[name][0] == n and ours[name][1] != "default":
                matched += 1
            else:
                missing.append({"while": name, "xla": n, "ours": ours[name][0], "source": ours[name][1]})
        elif unnamed[n] > 0:
            unnamed[n] -= 1
            matched += 1
        else:
            missing.append({"while": name, "xla": n, "ours": None, "source": "no loop of ours with that count"})
    only_ours = [{"while": k, "ours": c, "source": s} for k, (c, s) in ours.items()
                 if s != "default" and (k not in xla or xla[k] is None)]
    return {"loops": len(ours), "xla_known": sum(v is not None for v in xla.values()), "matched": matched,
            "missing": missing, "only_ours": only_ours,
            "unknown_to_both": sum(1 for k, (c, s) in ours.items() if s == "default")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", nargs="*", default=CORPORA)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    from benchmarks.tables import git_commit
    rows = []
    for c in args.corpus:
        for path in sorted((ROOT / c).glob("*.hlo")):
            text = path.read_text()
            if " while(" not in text:
                continue
            try:
                r = compare(text, str(path))
            except Exception as e:  # noqa: BLE001 - reported per program
                r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            rows.append({"program": path.stem, "corpus": c, **r})
            print(f"{c}/{path.stem}: {r}", file=sys.stderr, flush=True)
    known = sum(r.get("xla_known", 0) for r in rows)
    matched = sum(r.get("matched", 0) for r in rows)
    missing = [dict(m, program=r["program"]) for r in rows for m in r.get("missing", [])]
    summary = {"programs": len(rows), "xla_known": known, "matched": matched, "missing": len(missing),
               "errors": sum(1 for r in rows if "error" in r),
               "only_ours": sum(len(r.get("only_ours", [])) for r in rows)}
    print(json.dumps(summary))
    for m in missing:
        print(f"MISSING {m}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": "python -m benchmarks.trip_counts " + " ".join(
            argv if argv is not None else sys.argv[1:]), "date": time.strftime("%Y-%m-%d"), "commit": git_commit(),
            "summary": summary, "rows": rows}, indent=1))
    return 1 if missing or summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
