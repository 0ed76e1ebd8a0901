#!/usr/bin/env python3
"""Generate the frontends corpus: XLA programs produced by frontends other than plain JAX model code.

Each frontend runs in an interpreter (a virtual environment) that has that frontend installed; this
driver runs in the project's interpreter (it needs jax/jaxlib only for the check below):

    python -m venv /tmp/venv-tf   && /tmp/venv-tf/bin/pip install -r examples/frontends/requirements-tf.txt
    python -m venv /tmp/venv-txla && /tmp/venv-txla/bin/pip install -r examples/frontends/requirements-torch-xla.txt
    python -m venv /tmp/venv-sci  && /tmp/venv-sci/bin/pip install -r examples/frontends/requirements-jax-science.txt
    python examples/generate_frontends_corpus.py [--out examples/hlo_frontends] [--only NAME ...] [--list]
        [--frontend tensorflow|torch_xla|keras_jax|jax_science ...] [--no-run]
        [--python-tf /tmp/venv-tf/bin/python] [--python-txla /tmp/venv-txla/bin/python]
        [--python-sci /tmp/venv-sci/bin/python]

Frontends (generator modules under examples/frontends/, each run as a subprocess):

* ``tensorflow`` (tf_programs.py): ``tf.function(jit_compile=True)`` and
  ``experimental_get_compiler_ir(...)(stage="hlo")`` on Keras 3 (TF backend) applications and
  layers, tf_keras models and plain TF ops (tf.signal.stft, pooling, strided-slice gradients,
  tf.while_loop), inference and GradientTape train steps with Keras optimizers. tf.Variables are
  parameters of the HLO.
* ``torch_xla`` (torch_xla_programs.py): timm and HF transformers PyTorch models with tiny
  configurations traced lazily by torch_xla on PJRT_DEVICE=CPU;
  ``torch_xla._XLAC._get_xla_tensors_hlo`` of the outputs (inference) or of the loss and updated
  parameters after ``loss.backward(); optimizer.step()`` (train).
* ``keras_jax`` (keras_hub_programs.py): keras_hub backbones with tiny constructor configurations on
  Keras 3's JAX backend, ``jax.jit(model.stateless_call)`` (and stateless train steps with a Keras
  optimizer's ``stateless_apply``), ``.lower(...).as_text(dialect="hlo")``.
* ``jax_science`` (jax_science_programs.py): diffrax, numpyro, mujoco-mjx and jax-md.

No weights or data are downloaded: every model is built from a configuration with random
initialisation. Each program is written as <out>/<name>.hlo; this driver then re-parses it with
XLA's own parser (a file that parser refuses is deleted and left out), compiles it and runs it once
on random inputs in a child process (``--no-run`` skips that) and writes <out>/manifest.json:
name, frontend, library, kind (infer/train), instruction/computation counts, the versions of the
packages that produced it, and notes (e.g. host callbacks). ``--only`` regenerates some programs
and keeps the other manifest entries.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from hlo_count import count_hlo, read_manifest, write_manifest  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "hlo_frontends")
GENERATORS = os.path.join(HERE, "frontends")

# frontend -> (generator module, the option naming its interpreter, default venv)
FRONTENDS = {
    "tensorflow": ("tf_programs.py", "python_tf", "/tmp/venv-tf"),
    "torch_xla": ("torch_xla_programs.py", "python_txla", "/tmp/venv-txla"),
    "keras_jax": ("keras_hub_programs.py", "python_sci", "/tmp/venv-sci"),
    "jax_science": ("jax_science_programs.py", "python_sci", "/tmp/venv-sci"),
}

# Run in a child process: compiling a program with a host callback (or a crash inside XLA) must not
# take the driver down. Prints one JSON line.
_CHECK = r"""
import json, os, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, sys.argv[1])
import numpy as np
path, run = sys.argv[2], sys.argv[3] == "1"
text = open(path).read()
res = {"parsed": False, "compiled": False, "ran": False}
try:
    from hardware.xla.compile import compile_hlo, parameter_shapes, parse_hlo_text
except Exception:  # the project is not importable: jax's own parser and client
    compile_hlo = parameter_shapes = None
    from jax._src.lib import xla_client
    parse_hlo_text = getattr(getattr(xla_client, "hlo", None), "hlo_module_from_text", None) \
        or xla_client._xla.hlo_module_from_text
try:
    parse_hlo_text(text); res["parsed"] = True
    if compile_hlo is not None:
        exe = compile_hlo(text); res["compiled"] = True
        res["compile_seconds"] = round(exe.compile_seconds, 2)
        if run:
            rng = np.random.default_rng(0)
            args = []
            for dt, dims in parameter_shapes(text):
                if np.issubdtype(dt, np.floating):
                    args.append((rng.standard_normal(dims) * 0.1).astype(dt))
                else:
                    args.append(np.zeros(dims, dt))
            outs = exe(*args)
            res["ran"] = True
            res["finite"] = bool(all(np.all(np.isfinite(np.asarray(o, np.float64)))
                                     for o in outs if np.issubdtype(o.dtype, np.floating)))
except Exception as e:
    res["error"] = (type(e).__name__ + ": " + str(e))[:1000]
print("@@CHECK " + json.dumps(res))
"""


def check_program(path: str, run: bool, timeout: int = 600) -> dict:
    try:
        p = subprocess.run([sys.executable, "-c", _CHECK, ROOT, path, "1" if run else "0"],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"parsed": None, "error": f"check timed out after {timeout}s"}
    for line in p.stdout.splitlines():
        if line.startswith("@@CHECK "):
            return json.loads(line[8:])
    return {"parsed": None, "error": f"check exited {p.returncode}: {p.stderr.strip()[-800:]}"}


def interpreter(args, frontend: str) -> str:
    _, opt, venv = FRONTENDS[frontend]
    given = getattr(args, opt)
    if given:
        return given
    py = os.path.join(venv, "bin", "python")
    return py if os.path.exists(py) else sys.executable


def run_generator(py: str, module: str, extra: list[str]) -> tuple[list[dict], list[dict], int]:
    env = dict(os.environ, PYTHONPATH=GENERATORS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("PJRT_DEVICE", "CPU")
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("KERAS_HOME", "/tmp/keras-home")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env.setdefault("HF_HUB_OFFLINE", "1")
    cmd = [py, os.path.join(GENERATORS, module)] + extra
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    entries, errors = [], []
    for line in p.stdout:
        if line.startswith("@@ENTRY ") or line.startswith("@@LIST "):
            entries.append(json.loads(line.split(" ", 1)[1]))
        elif line.startswith("@@ERROR "):
            errors.append(json.loads(line[8:]))
            print(f"  FAILED {errors[-1]['name']}: {errors[-1]['error'][:300]}", flush=True)
        else:
            sys.stdout.write("  | " + line)
    return entries, errors, p.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="+", metavar="NAME", help="program names to (re)generate")
    ap.add_argument("--frontend", nargs="+", choices=sorted(FRONTENDS), help="only these frontends")
    ap.add_argument("--list", action="store_true", help="list the program names and exit")
    ap.add_argument("--no-run", action="store_true", help="parse and compile, but do not run, each program")
    ap.add_argument("--no-check", action="store_true", help="skip XLA's parse/compile check")
    for fe, (_, opt, venv) in FRONTENDS.items():
        if not any(a.dest == opt for a in ap._actions):
            ap.add_argument("--" + opt.replace("_", "-"), dest=opt, metavar="PYTHON",
                            help=f"interpreter with the frontend installed (default {venv}/bin/python)")
    a = ap.parse_args(argv)
    frontends = a.frontend or list(FRONTENDS)
    os.makedirs(a.out, exist_ok=True)
    manifest_path = os.path.join(a.out, "manifest.json")
    partial = bool(a.only or a.frontend)
    entries = read_manifest(manifest_path) if partial else {}
    failed: list[str] = []
    listed = 0
    for fe in frontends:
        module = FRONTENDS[fe][0]
        py = interpreter(a, fe)
        extra = ["--list"] if a.list else ["--out", a.out]
        if a.only:
            extra += ["--only"] + a.only
        print(f"== {fe}: {py} {module}", flush=True)
        t0 = time.perf_counter()
        got, errors, rc = run_generator(py, module, extra)
        failed += [e["name"] for e in errors]
        if a.list:
            for e in got:
                print(f"{e['name']:40s} {e['frontend']:12s} {e['library']:22s} {e['kind']}")
            listed += len(got)
            continue
        if rc and not got and not errors:
            print(f"  generator exited {rc} (is the frontend installed in {py}?)", flush=True)
            failed.append(fe)
        for e in got:
            path = os.path.join(a.out, e["name"] + ".hlo")
            with open(path) as f:
                text = f.read()
            e["file"] = e["name"] + ".hlo"
            e["instructions"], e["computations"] = count_hlo(text)
            e["bytes"] = len(text.encode())
            if not a.no_check:
                chk = check_program(path, run=not a.no_run and not e["notes"].get("host_callback"))
                e["xla_check"] = chk
                if chk.get("parsed") is False:
                    print(f"  DROPPED {e['name']}: XLA's parser refuses it: {chk.get('error')}", flush=True)
                    os.remove(path)
                    entries.pop(e["name"], None)
                    failed.append(e["name"])
                    continue
            status = "" if a.no_check else " ".join(k for k in ("parsed", "compiled", "ran")
                                                     if e["xla_check"].get(k))
            print(f"{e['name']:40s} {e['library']:20s} {e['kind']:5s} {e['instructions']:6d} instr "
                  f"{e['computations']:4d} comps {e['bytes'] / 1e3:8.1f} kB  {status}"
                  + (f"  [{e['xla_check']['error'][:200]}]" if e.get("xla_check", {}).get("error") else ""),
                  flush=True)
            entries[e["name"]] = {k: e[k] for k in ("name", "file", "frontend", "library", "kind",
                                                    "instructions", "computations", "bytes", "versions",
                                                    "notes") } | ({"xla_check": e["xla_check"]}
                                                                  if "xla_check" in e else {})
        print(f"== {fe}: {len(got)} programs in {time.perf_counter() - t0:.0f}s", flush=True)
    if a.list:
        return 0 if listed else 1
    write_manifest(manifest_path, entries)
    print(f"done: {len(entries)} programs in {manifest_path}" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
