""":class:`XlaEvaluator`: an :class:`~hardware.base.Evaluator` that measures on the real backend through
jaxlib, and the worker-side functions its requests run.

Each kernel's standalone HLO module is measured in worker processes of a
:class:`~hardware.pool.MeasurementPool` (spawn context, started on first use). A compile error, a crash
of the worker (segfault in XLA, abort) or a hang past ``timeout_s`` becomes a failed
:class:`~hardware.base.Measurement` and the worker is replaced; the run goes on. Whole programs are
timed (:meth:`XlaEvaluator.measure_program`), paired with a reference
(:meth:`XlaEvaluator.measure_paired`) or profiled in place (:meth:`XlaEvaluator.measure_in_program`)
on the same path. The pool's tasks (``_measure_request``, ``_paired_request``, ``_backend_probe``,
``_start_jax``) are module-level functions: the workers unpickle them by module path.

Test hook
---------
The environment variable ``AUTOTUNE_XLA_TEST_FAULT`` (:data:`FAULT_ENV`) simulates faults
deterministically. It is a comma-separated list of ``crash:<hash>`` / ``segv:<hash>`` /
``hang:<hash>`` entries (``<hash>`` a kernel hash, or ``*`` for every kernel). It is read by the
*parent* at each request, so it can be changed while an evaluator is alive; the worker then exits
with code 86 (``crash``), dies of a segmentation fault (``segv``: a null read, as a crash inside XLA
would) or sleeps forever (``hang``) instead of measuring that kernel.

Tiles: XLA chooses its own tiling, so :class:`XlaEvaluator` ignores the tile of a request (the
measurement's ``extra["tile_ignored"]`` is then True).
"""
from __future__ import annotations

import hashlib
import os
import re
import statistics
import time
from dataclasses import asdict
from typing import Any, Optional, Sequence

import numpy as np

from hardware.base import Budget, KernelLike, Measurement, ProgramEvaluator
from hardware.pool import MeasurementPool
from hardware.xla._jaxlib import XlaStartError, _api, _first_line, _require_jaxlib, _target_for_platform
from hardware.xla.accuracy import accuracy_fallback, option_output_check
from hardware.xla.attribution import InProgramTiming, attribute_thunks
from hardware.xla.compile import CompiledHlo, compile_hlo
from hardware.xla.fusion_report import strip_metadata
from hardware.xla.outputs import computes_in_16bit, output_error, output_tolerance, random_inputs, verification_inputs
from hardware.xla.profile import profile_answer
from hardware.xla.timing import TimingOptions, time_compiled, time_paired_for


FAULT_ENV = "AUTOTUNE_XLA_TEST_FAULT"  # the test hook (module docstring)
_HAND_FUSION = re.compile(r"\bfusion\([^\n]*\bkind=k[A-Za-z]+")
_CRASH_EXIT_CODE = 86
_IMPL_VERSION = "1"


# Whole programs timed repeatedly (a verification race) are compiled once per worker: the last few
# compiled programs, and the last reference program's outputs, are kept here (worker side).
_PROGRAM_CACHE: dict = {}
_PROGRAM_CACHE_SIZE = 4
_REFERENCE_OUTPUTS: dict = {}


def _compile_cached(text: str, disable_fusion: bool, xla_flags: Optional[dict], cache: bool) -> CompiledHlo:
    key = (hashlib.sha1(text.encode()).hexdigest(), disable_fusion, repr(sorted((xla_flags or {}).items())))
    if cache and key in _PROGRAM_CACHE:
        return _PROGRAM_CACHE[key]
    compiled = compile_hlo(text, disable_fusion=disable_fusion, xla_flags=xla_flags)
    if cache:
        while len(_PROGRAM_CACHE) >= _PROGRAM_CACHE_SIZE:
            del _PROGRAM_CACHE[next(iter(_PROGRAM_CACHE))]
        _PROGRAM_CACHE[key] = compiled
    return compiled


def _reference_outputs(text: str, seed: int) -> list[np.ndarray]:
    """Outputs of a reference program (XLA's default compilation) on its verification inputs."""
    key = (hashlib.sha1(text.encode()).hexdigest(), seed)
    if key not in _REFERENCE_OUTPUTS:
        _REFERENCE_OUTPUTS.clear()
        _REFERENCE_OUTPUTS[key] = compile_hlo(text)(*verification_inputs(text, seed))
    return _REFERENCE_OUTPUTS[key]


def _measure_in_process(req: dict) -> dict:
    """Compile, make inputs, (compare outputs,) time: the work one request does (in the worker).

    Request keys besides the text: ``inputs`` ("random": :func:`random_inputs`, or "verification":
    :func:`verification_inputs`), ``cache`` (keep the compiled program for the next request), and
    ``reference`` (a program text: before timing, run once and compare the outputs with the
    reference's on the same inputs; the answer then carries ``output_error``/``outputs_match``).
    """
    fault = req.get("fault")
    if fault == "crash":
        os._exit(_CRASH_EXIT_CODE)
    if fault == "segv":
        import ctypes
        ctypes.string_at(0)
    if fault == "hang":
        while True:
            time.sleep(3600)
    text = req["text"]
    seed = req.get("seed", 0)
    try:
        compiled = _compile_cached(text, req.get("disable_fusion", False), req.get("xla_flags"),
                                   bool(req.get("cache")))
    except Exception as exc:
        return {"status": f"compile_error: {_first_line(exc)}"}
    try:
        make_inputs = verification_inputs if req.get("inputs") == "verification" else random_inputs
        # checked against a reference: the reference's inputs (verification_inputs reads the text)
        inputs = make_inputs(req.get("reference") or text, seed)
    except Exception as exc:
        return {"status": f"unsupported: {_first_line(exc)}"}
    extra: dict = {}
    if req.get("reference") is not None:
        try:
            ref = _reference_outputs(req["reference"], seed)
        except Exception as exc:
            return {"status": f"reference_error: the original program does not run: {_first_line(exc)}"}
        try:
            low = computes_in_16bit(req["reference"])
            got = compiled(*inputs)
            err, ok = output_error(got, ref, low_precision=low)
        except Exception as exc:
            return {"status": f"runtime_error: {_first_line(exc)}"}
        ok, notes = accuracy_fallback(ok, low, text, req["reference"], inputs, got, ref,
                                      {"disable_fusion": req.get("disable_fusion", False),
                                       "xla_flags": req.get("xla_flags")})
        extra = {"output_error": err, "outputs_match": ok}
        if "without_excess_precision" in notes:  # judged without excess precision: recorded beside it
            extra["output_error_without_excess_precision"] = notes["without_excess_precision"]
        if "vs_f64" in notes:  # judged against the program in f64: both errors recorded
            extra["output_error_vs_f64"] = notes["vs_f64"]
        if not ok:  # a program computing something else is no candidate, whatever its speed
            return {"status": f"output_mismatch: outputs differ from the original program's (max error "
                              f"{err:.3g}, tolerance {output_tolerance(low):g})", **extra}
    timing = TimingOptions(**req.get("timing", {}))
    if req.get("profile_runs"):
        try:
            return {"status": "ok", "compile_s": compiled.compile_seconds, **extra,
                    **profile_answer(compiled, inputs, int(req["profile_runs"]), timing)}
        except Exception as exc:
            return {"status": f"runtime_error: {_first_line(exc)}", **extra}
    try:
        res = time_compiled(compiled, inputs, timing)
    except Exception as exc:
        return {"status": f"runtime_error: {_first_line(exc)}", **extra}
    return {"status": "ok", "seconds": res.seconds, "repeats": res.repeats, "number": res.number,
            "compile_s": compiled.compile_seconds, **extra}



def _paired_in_process(req: dict) -> dict:
    """A paired timing request (worker side): ``text`` (the candidate) against ``paired_with`` (the
    reference), both compiled with the request's options (the reference with ``reference_options``
    where given; cached), on the candidate's
    :func:`verification_inputs`, for ``seconds`` (:func:`time_paired_for`)."""
    fault = req.get("fault")
    if fault == "crash":
        os._exit(_CRASH_EXIT_CODE)
    if fault == "hang":
        while True:
            time.sleep(3600)
    opts = (req.get("disable_fusion", False), req.get("xla_flags"), True)
    ref_opts = req.get("reference_options")
    ref_opts = opts if ref_opts is None else (ref_opts.get("disable_fusion", False), ref_opts.get("xla_flags"), True)
    try:
        reference = _compile_cached(req["paired_with"], *ref_opts)
        candidate = _compile_cached(req["text"], *opts)
    except Exception as exc:
        return {"status": f"compile_error: {_first_line(exc)}"}
    try:
        inputs = verification_inputs(req["text"], req.get("seed", 0))
    except Exception as exc:
        return {"status": f"unsupported: {_first_line(exc)}"}
    try:
        p = time_paired_for(reference, candidate, inputs, float(req["seconds"]), pairs=int(req.get("pairs", 4)),
                            min_block_ms=float(req.get("min_block_ms", 1.0)))
    except Exception as exc:
        return {"status": f"runtime_error: {_first_line(exc)}"}
    return {"status": "ok", "ratio": p.ratio, "ratios": p.ratios,
            "candidate_s": float(statistics.median(p.seconds)),
            "reference_s": float(statistics.median(p.reference_seconds)),
            "candidate_blocks": p.seconds, "reference_blocks": p.reference_seconds, "pairs": int(req.get("pairs", 4))}


def _paired_request(req: dict) -> Measurement:
    """One paired timing as a MeasurementPool task: ``seconds`` is the median ratio candidate /
    reference, ``extra`` the per-pair ``ratios`` and both programs' median block times."""
    try:
        resp = _paired_in_process(req)
    except Exception as exc:
        resp = {"status": f"worker_error: {type(exc).__name__}: {_first_line(exc)}"}
    if resp.get("status") != "ok":
        return Measurement.failure(resp.get("status", "worker_error: no status"))
    return Measurement(float(resp["ratio"]), extra={k: resp[k] for k in ("ratios", "candidate_s", "reference_s",
                                                                         "candidate_blocks", "reference_blocks", "pairs")})


def _options_check_request(req: dict) -> Measurement:
    """Pool task of :meth:`XlaEvaluator.check_compile_options`: compile the reference program with XLA's
    defaults (cached) and the program with its base options plus ``xla_flags``, run both on the same
    inputs, compare the outputs."""
    fault = req.get("fault")
    if fault == "crash":
        os._exit(_CRASH_EXIT_CODE)
    text, flags = req["text"], dict(req["xla_flags"])
    reference = req.get("reference_text") or text
    base = dict(req.get("base_options") or {})
    disable_fusion = bool(base.get("disable_fusion", False))
    compile_flags = {**dict(base.get("xla_flags") or {}), **flags}
    try:
        inputs = verification_inputs(reference, req.get("seed", 0))
        ref = _reference_outputs(reference, req.get("seed", 0))
    except Exception as exc:  # noqa: BLE001
        return Measurement.failure(f"reference_error: the program does not run with XLA's defaults: {_first_line(exc)}")
    try:
        candidate = _compile_cached(text, disable_fusion, compile_flags, True)
    except Exception as exc:  # noqa: BLE001
        return Measurement.failure(f"compile_error: {_first_line(exc)}")
    try:
        got = candidate(*inputs)
    except Exception as exc:  # noqa: BLE001
        return Measurement.failure(f"runtime_error: {_first_line(exc)}")
    try:
        check = option_output_check(reference, compile_flags, got, ref, inputs, candidate_text=text,
                                    disable_fusion=disable_fusion)
    except Exception as exc:  # noqa: BLE001
        return Measurement.failure(f"worker_error: {type(exc).__name__}: {_first_line(exc)}")
    if not check["accurate"]:
        m = Measurement.failure(f"output_mismatch: outputs less accurate than XLA's default compile's (max error "
                                f"{check['error']:.3g}, tolerance {output_tolerance(computes_in_16bit(reference)):g})")
        m.extra.update(check)
        return m
    return Measurement(float(candidate.compile_seconds), extra=check)


# What a measurement with a `reference` says about its outputs (kept in its extra, failed or not).
OUTPUT_CHECK_KEYS = ("output_error", "outputs_match", "output_error_without_excess_precision", "output_error_vs_f64")


def _measure_request(req: dict) -> Measurement:
    """One kernel or program request as a MeasurementPool task (module level: picklable)."""
    try:
        resp = _measure_in_process(req)
    except Exception as exc:
        resp = {"status": f"worker_error: {type(exc).__name__}: {_first_line(exc)}"}
    checked = {k: resp[k] for k in OUTPUT_CHECK_KEYS if k in resp}
    if resp.get("status") != "ok":
        m = Measurement.failure(resp.get("status", "worker_error: no status"))
        m.extra.update(checked)
        return m
    repeats = list(resp["repeats"])
    cv = statistics.stdev(repeats) / statistics.fmean(repeats) if len(repeats) > 1 else 0.0
    profiled = {k: resp[k] for k in ("thunks", "profiled_runs", "run_seconds", "tail_seconds") if k in resp}
    return Measurement(float(resp["seconds"]), extra={
        "repeats": repeats, "number": resp["number"], "compile_s": resp["compile_s"], "cv": cv, **checked,
        **profiled})


def _backend_probe(_: Any = None) -> Measurement:
    """Pool task: the worker's backend, as ``extra`` {"platform", "jaxlib", "machine"} (raises if jax
    cannot start); "machine" is the worker's host CPU, or its first accelerator's name."""
    from autotune.compiler.targets.host import host_machine
    api = _api()
    machine = host_machine()
    if api.platform != "cpu":
        try:
            import jax
            machine = f"{jax.devices()[0].device_kind} ({machine})"
        except Exception:  # noqa: BLE001 - the host still names the machine
            pass
    return Measurement(0.0, extra={"platform": api.platform, "jaxlib": api.version, "machine": machine})


def _start_jax() -> None:
    """Pool initializer: import jax and resolve the shim as each worker starts, outside the item
    timeouts. An error is left for the worker's first request to report with its message."""
    try:
        _api()
    except Exception:
        pass


def _faults_from_env() -> dict[str, str]:
    spec = os.environ.get(FAULT_ENV, "")
    faults: dict[str, str] = {}
    for item in spec.split(","):
        kind, _, key = item.strip().partition(":")
        if kind in ("crash", "segv", "hang") and key:
            faults[key] = kind
    return faults


class XlaEvaluator(ProgramEvaluator):
    """Kernel runtimes measured on the real backend through jaxlib (CPU here, GPU where present).

    Each kernel's ``to_hlo_module()`` text goes to a worker of a :class:`~hardware.pool.MeasurementPool`
    (``n_workers`` spawn-context processes, or a dask cluster with ``scheduler``) that compiles it,
    makes :func:`random_inputs`, times it with ``timing`` and answers seconds per execution. The
    constructor starts nothing: the workers start on first use (a measurement, or a question about
    the backend: ``platform``, ``version``, a ``target`` left to the backend) and stop at `close()`,
    the end of a ``with`` block or interpreter exit. A backend that cannot start at all raises
    :class:`XlaStartError` from that first use. Statuses: ``ok``; ``compile_error: <first line>``;
    ``crash: worker ...`` (the worker died: segfault in XLA, abort; it is replaced and the run goes
    on); ``timeout`` (no answer within ``timeout_s``, compile included: the worker is killed and
    replaced); ``unsupported: ...`` (e.g. tuple parameters); ``runtime_error: ...``;
    ``budget_exhausted`` (the Budget ran out during the batch: checked before each kernel starts).
    ``extra`` carries ``repeats`` (seconds per run of each repeat), ``number``, ``compile_s`` and
    ``cv``. Each result reaches the store as soon as it exists.

    ``version`` is ``"1-jaxlib<ver>-<platform>"`` (plus a flags digest when fusion is disabled or
    XLA flags are set), so stored measurements never mix jaxlib versions or backends.
    """

    name = "xla"

    def __init__(self, target: Optional[str] = None, budget: "Budget | str | float | None" = None,
                 store: Any = None, *, timing: TimingOptions = TimingOptions(),
                 timeout_s: float = 60.0, seed: int = 0, disable_fusion: bool = False,
                 xla_flags: Optional[dict[str, Any]] = None, startup_timeout_s: float = 120.0,
                 n_workers: int = 1, scheduler: Optional[str] = None):
        _require_jaxlib()
        super().__init__(target, budget, store)  # target None: the backend's, learnt on first use
        self.timing = timing
        self.timeout_s = timeout_s
        self.seed = seed
        self.disable_fusion = disable_fusion
        self.xla_flags = dict(xla_flags or {})
        self.startup_timeout_s = startup_timeout_s
        self._backend: Optional[dict] = None
        self._pool = MeasurementPool(n_workers=max(1, int(n_workers)), timeout=timeout_s,
                                     scheduler=scheduler, setup_timeout=startup_timeout_s,
                                     initializer=_start_jax)

    # -- the backend, learnt from a worker on first use --------------------------------------------
    def _backend_info(self) -> dict:
        """{"platform", "jaxlib"} of the measuring workers (starts them; raises XlaStartError)."""
        if self._backend is None:
            (m,) = self._pool.map(_backend_probe, [None], timeout=self.startup_timeout_s)
            if not m.ok:
                raise XlaStartError(f"XLA worker failed to start: {m.status}")
            self._backend = dict(m.extra)
        return self._backend

    @property
    def platform(self) -> str:
        """Platform of the workers' jax backend ("cpu", "cuda", ...)."""
        return self._backend_info()["platform"]

    @property
    def jaxlib_version(self) -> str:
        return self._backend_info()["jaxlib"]

    @property
    def machine(self) -> str:
        """The measuring workers' machine (on a dask cluster, not this host): CPU model and cores,
        or the accelerator's name."""
        return self._backend_info().get("machine") or super().machine

    @property
    def target(self) -> str:  # type: ignore[override]
        if self._target is None:
            self._target = _target_for_platform(self.platform)
        return self._target

    @target.setter
    def target(self, value: Optional[str]) -> None:
        self._target = value

    @property
    def version(self) -> str:  # type: ignore[override]
        version = f"{_IMPL_VERSION}-jaxlib{self.jaxlib_version}-{self.platform}"
        if self.disable_fusion or self.xla_flags:
            digest = hashlib.sha1(repr((self.disable_fusion, sorted(self.xla_flags.items()))).encode())
            version += f"-flags{digest.hexdigest()[:8]}"
        return version

    @property
    def worker_restarts(self) -> int:
        """How many workers were replaced after a crash or timeout of their kernel."""
        return self._pool.crashes + self._pool.timeouts

    def _request(self, text: str, key: str, faults: dict[str, str], **options: Any) -> dict:
        return {"text": text, "seed": self.seed, "timing": asdict(self.timing),
                "disable_fusion": self.disable_fusion, "xla_flags": self.xla_flags,
                "fault": faults.get(key) or faults.get("*"), **options}

    # Hand-made `fusion` instructions reach XLA through jaxlib's HLO -> MLIR conversion as
    # mhlo.fusion; the CPU client compiles that, but PJRT plugins (CUDA) take StableHLO only, where
    # mhlo.fusion is illegal (measured with jaxlib 0.11.2 on an H100). There, a kernel is emitted
    # as its plain instructions and XLA's own fusion pass fuses the standalone module (for a
    # kernel that is one fusion in practice), and end-to-end timing of a configuration is refused.
    @property
    def hand_fusions(self) -> bool:
        """Whether this backend compiles hand-made fusion instructions (CPU: yes)."""
        return self.platform == "cpu"

    def _kernel_text(self, k: KernelLike) -> str:
        if self.hand_fusions:
            return k.to_hlo_module()
        try:
            return k.to_hlo_module(fused=False)
        except TypeError:  # a duck-typed kernel without the option
            return k.to_hlo_module()

    def measure(self, kernels: Sequence[KernelLike], tiles: Optional[Sequence[Any]] = None) -> list[Measurement]:
        kernels = list(kernels)
        if kernels and not self.budget.exhausted:
            self._backend_info()  # a backend that cannot start is an error, not a failure per kernel
        return super().measure(kernels, tiles)

    def _measure_batch(self, kernels: Sequence[KernelLike], tiles: Sequence[Any]) -> list[Measurement]:
        out: list[Optional[Measurement]] = [None] * len(kernels)
        faults = _faults_from_env()
        reqs, where = [], []
        for i, k in enumerate(kernels):
            try:
                text = self._kernel_text(k)
            except Exception as exc:
                out[i] = Measurement.failure(f"emit_error: {type(exc).__name__}: {_first_line(exc)}")
                self._report(i, out[i])
                continue
            reqs.append(self._request(text, k.hash, faults))
            where.append(i)

        def budget_gate() -> Optional[Measurement]:
            if self.budget.exhausted:
                self.budget_exhausted = True
                return Measurement.failure("budget_exhausted")
            return None

        def measured(j: int, m: Measurement) -> None:
            i = where[j]
            if tiles[i] is not None and m.status != "budget_exhausted":
                m.extra["tile_ignored"] = True
            out[i] = m
            self._report(i, m)

        self._pool.map(_measure_request, reqs, skip=budget_gate, on_result=measured)
        return out  # type: ignore[return-value]

    def measure_program(self, hlo_text: str, *, reference: Optional[str] = None,
                        disable_fusion: Optional[bool] = None,
                        xla_flags: Optional[dict[str, Any]] = None) -> Measurement:
        """Time a whole (possibly fused) program end to end, on the same path as kernels.

        The program runs exactly as given (donated parameters get fresh copies per execution, see
        :func:`time_compiled`) on :func:`verification_inputs`; each worker keeps the last few
        compiled programs, so timing the same text again does not recompile it. ``reference``: a
        program text whose outputs (XLA's default compilation, same inputs) this program's must
        match: ``extra["output_error"]``/``extra["outputs_match"]`` (:func:`output_error`).
        ``disable_fusion``/``xla_flags`` override the evaluator's compile options for this program
        (e.g. ``autotune.compiler.emission.EMITTED_CPU_COMPILE_OPTIONS`` for an emitted configuration).

        Not cached in the store. Its fault-hook key is the sha1 hex digest of the text.
        """
        if self.budget.exhausted:
            self.budget_exhausted = True
            return Measurement.failure("budget_exhausted")
        if not self.hand_fusions and _HAND_FUSION.search(hlo_text):
            return Measurement.failure(
                f"unsupported: hand-made fusion instructions do not compile through jaxlib's "
                f"{self.platform} plugin (mhlo.fusion is not StableHLO); time configurations end to "
                f"end on the cpu backend")
        req = self._program_request(hlo_text, disable_fusion, xla_flags,
                                    inputs="verification", cache=True, reference=reference)
        return self._pool.map(_measure_request, [req])[0]

    def _program_request(self, hlo_text: str, disable_fusion: Optional[bool],
                         xla_flags: Optional[dict[str, Any]], **options: Any) -> dict:
        """The request of one whole-program timing (`measure_program`, `measure_paired`): the compile
        options given override the evaluator's; counted as one measurement; keyed by the text's sha1."""
        if disable_fusion is not None:
            options["disable_fusion"] = disable_fusion
        if xla_flags is not None:
            options["xla_flags"] = dict(xla_flags)
        self.measured += 1
        return self._request(hlo_text, hashlib.sha1(hlo_text.encode()).hexdigest(), _faults_from_env(), **options)

    def measure_paired(self, reference_text: str, hlo_text: str, seconds: float, *,
                       disable_fusion: Optional[bool] = None, xla_flags: Optional[dict[str, Any]] = None,
                       pairs: int = 4, min_block_ms: float = 1.0,
                       reference_options: Optional[dict[str, Any]] = None) -> Measurement:
        """``hlo_text``'s end-to-end time relative to ``reference_text``'s (taking the same inputs),
        timed beside it: :func:`time_paired_for` in one worker for about ``seconds`` (at most a third
        of ``timeout_s``, so that a request never times out for its length; call again for more).
        ``seconds`` of the answer: the median ratio candidate / reference; ``extra["ratios"]``: two
        per candidate block (over the reference block before it, and after it), in order;
        ``candidate_blocks``/``reference_blocks``: the blocks' seconds per execution (``pairs`` and
        ``pairs + 1`` per round, round after round); ``candidate_s``/``reference_s``: the median block times. Compile
        options as :meth:`measure_program`. Outputs are not compared (time programs checked by
        :meth:`measure_program` first). ``reference_options`` (``disable_fusion``, ``xla_flags``): the
        reference's own compile options where they differ from the candidate's (XLA's own compile
        of an original program against an emitted one). Fault-hook key: the sha1 hex digest of
        ``hlo_text``."""
        if self.budget.exhausted:
            self.budget_exhausted = True
            return Measurement.failure("budget_exhausted")
        if not self.hand_fusions and (_HAND_FUSION.search(hlo_text) or _HAND_FUSION.search(reference_text)):
            return Measurement.failure(f"unsupported: hand-made fusion instructions do not compile through "
                                       f"jaxlib's {self.platform} plugin")
        extra = {} if reference_options is None else {"reference_options": dict(reference_options)}
        req = self._program_request(hlo_text, disable_fusion, xla_flags, paired_with=reference_text, pairs=pairs,
                                    min_block_ms=min_block_ms, **extra,
                                    seconds=max(0.0, min(float(seconds), self.timeout_s / 3)))
        return self._pool.map(_paired_request, [req])[0]

    def check_compile_options(self, hlo_text: str, xla_flags: dict[str, Any], *,
                              base_options: Optional[dict[str, Any]] = None,
                              reference_text: Optional[str] = None) -> Measurement:
        """The program compiled with ``base_options`` (``disable_fusion``, ``xla_flags``; default: XLA's
        defaults) plus ``xla_flags`` against ``reference_text`` (default: the program itself) compiled with
        XLA's defaults alone (never the evaluator's own options), both run in a worker on the reference's
        :func:`verification_inputs` (seed: the evaluator's) and compared by
        :func:`hardware.xla.accuracy.option_output_check`. ``seconds`` of the answer: the candidate's
        compile time; status "ok" when its outputs are as accurate as the reference's, else
        "output_mismatch: ..." (or the compile/runtime failure); ``extra``: the comparison."""
        if self.budget.exhausted:
            self.budget_exhausted = True
            return Measurement.failure("budget_exhausted")
        self.measured += 1
        req = {"text": hlo_text, "xla_flags": dict(xla_flags), "seed": self.seed,
               "base_options": dict(base_options or {}), "reference_text": reference_text,
               "fault": _faults_from_env().get(hashlib.sha1(hlo_text.encode()).hexdigest())}
        return self._pool.map(_options_check_request, [req])[0]

    def measure_in_program(self, space: Any, cfg: Any, kernels: Optional[Sequence[Any]] = None, *,
                           runs: Optional[int] = None, reference: Optional[str] = None) -> InProgramTiming:
        """A fusion configuration's kernels timed inside the program: the configuration is emitted
        (``emit_fused_text``), compiled once with ``EMITTED_CPU_COMPILE_OPTIONS`` (as `measure_program`
        compiles it), timed end to end (unprofiled) and run ``runs`` times (default: the evaluator's, 20)
        under jaxlib's profiler, interleaved (:func:`profile_compiled`); each thunk is mapped back to the
        kernel it runs (:func:`attribute_thunks`).

        ``kernels``: the configuration's kernels to report (default: all, ``space.kernels(cfg)``). A
        failure (emission, compile, runtime, budget) fails the end-to-end measurement and every kernel
        with its status. Not cached in the store; CPU backend only (hand-made fusions)."""
        from autotune.compiler.emission import EMITTED_CPU_COMPILE_OPTIONS, emit_fused_text
        kernels = list(space.kernels(cfg) if kernels is None else kernels)

        def failed(status: str, extra: Optional[dict] = None) -> InProgramTiming:
            m = Measurement.failure(status)
            m.extra.update(extra or {})
            return InProgramTiming(m, [Measurement.failure(status) for _ in kernels])

        if self.budget.exhausted:
            self.budget_exhausted = True
            return failed("budget_exhausted")
        if not self.hand_fusions:
            return failed(f"unsupported: in-program kernel timing needs hand-made fusions, which jaxlib's "
                          f"{self.platform} plugin does not compile; use the cpu backend")
        try:
            text = strip_metadata(emit_fused_text(space, cfg))
        except Exception as exc:
            return failed(f"emit_error: {type(exc).__name__}: {_first_line(exc)}")
        flags = dict(EMITTED_CPU_COMPILE_OPTIONS["xla_flags"])
        flags.update(self.xla_flags)
        self.measured += 1
        req = self._request(text, hashlib.sha1(text.encode()).hexdigest(), _faults_from_env(),
                            inputs="verification", reference=reference,
                            disable_fusion=EMITTED_CPU_COMPILE_OPTIONS["disable_fusion"], xla_flags=flags,
                            profile_runs=int(runs or getattr(self, "runs", 20)))
        m = self._pool.map(_measure_request, [req])[0]
        if not m.ok:
            return failed(m.status, m.extra)
        per_kernel, unattributed = attribute_thunks(kernels, m.extra["thunks"])
        return InProgramTiming(m, per_kernel, unattributed)

    def close(self) -> None:
        """Stop the worker processes (a later measurement starts new ones)."""
        self._pool.close()

    def __enter__(self) -> "XlaEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
