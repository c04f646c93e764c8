"""Build, verify, cache and open engines, with fallback to the next backend/precision.

:class:`EngineManager` is the one entry point the app uses:

- ``open_engine(model, backend=None, precision=None)`` walks the candidate
  plan (the user's choice, then the fastest available, then ONNX Runtime CPU
  FP32), and returns the first engine that loads and passed verification,
  with every rejected attempt and its reason.
- ``build(model, backend, precision)`` converts the ONNX to the precision,
  builds the backend's artifact, loads it the first time and verifies it
  against the FP32 ONNX Runtime reference - all in a spawned child process -
  and records the result in the engine cache.
- A build that fails (a parser or builder error, a crash in the child) is
  remembered per cache key (:class:`~avatar_app.inference.cache.BuildFailure`):
  later starts skip it at once instead of rebuilding it in a child every time.
  ``retry(...)`` (``avatar-app engines build``, the Engines panel's Retry) tries again.
"""
from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from avatar_app.core.errors import (
    AvatarError,
    BackendUnavailableError,
    EngineBuildError,
    ModelLoadError,
    VerificationUnavailableError,
)
from avatar_app.inference import backends as _backends
from avatar_app.inference.base import BaseRunner, Precision
from avatar_app.inference.cache import BuildFailure, CacheEntry, CacheKey, EngineCache
from avatar_app.inference.calibration import CalibrationStore, calibration_sets, real_data_missing, validation_set
from avatar_app.inference.isolation import DEFAULT_TIMEOUT_S, run_isolated
from avatar_app.inference.modelinfo import ModelInfo, sha256_file

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str, float], None]


@dataclass
class Attempt:
    """One (backend, precision) tried by :meth:`EngineManager.open_engine`.

    Attributes:
        backend / precision: what was tried.
        ok: the engine was handed out.
        reason: why it was skipped or rejected ("" when ok).
        cached: the engine (or its rejection, or its remembered build failure) came
            from the cache.
        verification: the verification result as JSON, when one ran.
        failed_before: skipped because its build failed before (a UI offers Retry:
            :meth:`EngineManager.retry`).
    """

    backend: str
    precision: str
    ok: bool
    reason: str = ""
    cached: bool = False
    verification: dict | None = None
    failed_before: bool = False

    def line(self) -> str:
        """``tensorrt_rtx/fp16: rejected - max abs error ...``."""
        state = "ok" if self.ok else "skipped"
        src = " (cache)" if self.cached else ""
        return f"{self.backend}/{self.precision}: {state}{src}" + (f" - {self.reason}" if self.reason else "")


@dataclass
class OpenResult:
    """What :meth:`EngineManager.open_engine` returns.

    Attributes:
        runner: the open engine.
        attempts: every candidate tried, in order, the last one being the runner's.
    """

    runner: BaseRunner
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def fell_back(self) -> bool:
        """True when the first candidate was not the one used."""
        return len(self.attempts) > 1

    def explain(self) -> str:
        """Multi-line account of the choice, for logs and the UI."""
        return "\n".join(a.line() for a in self.attempts)


class RememberedBuildFailure(EngineBuildError):
    """The build of this engine failed before (remembered in the cache); it was not tried again.

    Attributes:
        failure: the remembered :class:`~avatar_app.inference.cache.BuildFailure`.
    """

    def __init__(self, message: str, failure: BuildFailure):
        super().__init__(message)
        self.failure = failure


def _name_the_model(exc: AvatarError, artifact: Path, what: str) -> AvatarError:
    """``exc`` with the temporary artifact's path and name replaced by ``what`` (in place; returned)."""
    if exc.args and isinstance(exc.args[0], str):
        text = exc.args[0].replace(str(artifact), what).replace(artifact.name, what)
        exc.args = (text, *exc.args[1:])
    return exc


@dataclass(frozen=True)
class BuildJob:
    """Everything a child process needs to build one engine (picklable)."""

    model_path: str
    card: dict | None
    backend: str
    precision: str
    key: dict
    cache_root: str
    calibration_files: tuple[str, ...]
    calibration_method: str
    verify: bool
    cannot_run_reason: str = ""
    int8_reduce_range: bool = False  # 7-bit INT8 weights (ORT CPU on x86 without VNNI)
    backend_obj: object = None  # the registry's Backend, pickled: the child's registry may lack it


def _precision_onnx(info: ModelInfo, precision: Precision, job: BuildJob, cache: EngineCache,
                    progress: ProgressFn | None) -> Path:
    """The ONNX file of ``precision``, converted once and kept in the cache."""
    from avatar_app.inference.modelinfo import load_feed_set
    from avatar_app.inference.precision import FeedSetReader, convert

    if precision is Precision.FP32:
        return info.path
    onnx_dir = cache.root / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    variant = job.key.get("variant", "")[:12]
    dst = onnx_dir / f"{info.name}-{info.sha256[:16]}-{precision.value}{'-' + variant if variant else ''}.onnx"
    if dst.is_file():
        return dst
    if progress:
        progress(f"converting to {precision.value}", 0.1)
    reader = None
    if precision is Precision.INT8:
        sets = [load_feed_set(Path(p), info.inputs) for p in job.calibration_files]
        if not sets:
            sets = calibration_sets(info)
        reader = FeedSetReader(sets)
    with tempfile.NamedTemporaryFile(dir=onnx_dir, suffix=".onnx.tmp", delete=False) as tmp:
        tmp_path = Path(tmp.name)
    try:
        convert(info.path, tmp_path, precision, reader, job.calibration_method, card=info.card,
                reduce_range=job.int8_reduce_range)
        tmp_path.replace(dst)
    finally:
        tmp_path.unlink(missing_ok=True)
    return dst


def _finite_reference(info: ModelInfo, data: dict, source: str) -> list[dict[str, np.ndarray]]:
    """The FP32 reference outputs on the validation set, refusing a model whose outputs are NaN/Inf.

    Run once per build, before any conversion (otherwise the FP16 range check would
    call broken weights an overflow and the INT8 calibration would fail on a NaN
    range); verification reuses the outputs.

    Returns:
        One dict of outputs per sample (:func:`~avatar_app.inference.verify.reference_outputs`).

    Raises:
        ModelLoadError: a non-finite output (broken weights or inputs).
    """
    from avatar_app.inference.ort import OrtRunner
    from avatar_app.inference.verify import reference_outputs

    with OrtRunner.from_path(info.path, "ort_cpu") as ref:
        outs = reference_outputs(ref, data)
    bad = sorted({k for o in outs for k, v in o.items() if not np.all(np.isfinite(v))})
    if bad:
        raise ModelLoadError(
            f"{info.path.name} gives NaN/Inf in float32 on its {source} validation samples "
            f"(outputs {', '.join(bad)}): its weights or inputs are broken; re-export or reinstall "
            "the model (no engine was built)")
    return outs


def _int8_details(job: BuildJob, info: ModelInfo, src: Path) -> dict[str, str]:
    """What an INT8 engine's manifest says of its calibration and of its INT8 layers.

    Returns:
        ``{"calibration": ..., "int8_layers": ...}`` (the second only when the QDQ file can be read).
    """
    from avatar_app.inference.precision import int8_summary

    shipped = str(info.calibration_path)
    own = sum(1 for f in job.calibration_files if f != shipped)
    sets = (["the model's calibration set"] if len(job.calibration_files) > own else []) + (
        [f"{own} sample file(s) of your own"] if own else [])
    out = {"calibration": f"{job.calibration_method} method, " + " + ".join(sets or ["no samples"])}
    if job.int8_reduce_range:
        from avatar_app.inference.precision import REDUCED_RANGE_NOTE

        out["int8_weights"] = REDUCED_RANGE_NOTE
    split = int8_summary(src)
    if split is not None:
        q, floats = split["quantized_layers"], split["float_nodes"]
        out["int8_layers"] = (f"{q} of {q + len(floats)} weighted layers in INT8"
                              + (f", in float: {', '.join(floats)}" if floats else ""))
    return out


def build_job(job: BuildJob, progress: ProgressFn | None = None) -> dict:
    """Convert, build, first-load and verify one engine; commit it to the cache.

    Runs in a child process (see :func:`~avatar_app.inference.isolation.run_isolated`).

    Returns:
        The written manifest as a dict.

    Raises:
        EngineBuildError, BackendUnavailableError, ModelLoadError: the build failed
            (nothing is cached then).
    """
    from avatar_app.inference.verify import fp16_range_violations, range_rejection, verify

    t0 = time.perf_counter()
    info = ModelInfo.from_onnx(job.model_path, job.card)
    precision = Precision.parse(job.precision)
    backend = job.backend_obj or _backends.get_backend(job.backend)
    cache = EngineCache(Path(job.cache_root))
    data, source = validation_set(info)
    expected = _finite_reference(info, data, source)
    range_result = None
    if precision is Precision.FP16:
        if progress:
            progress("checking float16 range", 0.05)
        violations = fp16_range_violations(info.path, data)
        if violations:
            range_result = range_rejection(precision.value, violations, info.tolerances[precision],
                                           next(iter(data.values())).shape[0], source)
    src = _precision_onnx(info, precision, job, cache, progress)
    if progress:
        progress(f"building {job.backend}", 0.4)
    scratch = cache.scratch_dir()
    with tempfile.NamedTemporaryFile(dir=scratch, suffix=".artifact", delete=False) as tmp:
        art_tmp = Path(tmp.name)
    try:
        details = backend.build(info, src, art_tmp, progress)
        build_time = time.perf_counter() - t0
        ok, why = backend.check_artifact(art_tmp)
        if not ok:
            raise EngineBuildError(f"the new {job.backend} engine of {info.path.name} fails the "
                                   f"runtime's validity check: {why}")
        if why:
            details["validity"] = why
        if precision is Precision.INT8:  # what the variant hash stands for, readable in `engines list`
            details.update(_int8_details(job, info, src))
        status, reason, verification, load_checked = "ok", "", None, False
        if range_result is not None:  # rejected whether or not the engine can run here
            status, reason, verification = "rejected", range_result.reason, range_result.to_json()
        elif not job.verify:
            status, reason = "unverified", job.cannot_run_reason or "verification not requested"
        else:
            if progress:
                progress("verifying against the FP32 reference", 0.7)
            runner = backend.make_runner(art_tmp, precision, info.path.name)
            with runner:  # the first load of the new engine
                load_checked = True
                result = verify(runner, data, info.tolerances[precision], expected=expected,
                                data_source=source)
            verification = result.to_json()
            if not result.passed:
                status, reason = "rejected", result.reason
        key = CacheKey(**job.key)
        entry = cache.commit(key, info.name, art_tmp, backend.artifact_name, build_time_s=build_time,
                             status=status, reason=reason, verification=verification,
                             load_checked=load_checked, details=details)
    except AvatarError as exc:  # messages name the model, never the temporary file
        _name_the_model(exc, art_tmp, f"the new {job.backend} engine of {info.path.name}")
        raise
    finally:
        art_tmp.unlink(missing_ok=True)
    if progress:
        progress("done", 1.0)
    return asdict(entry.manifest)


class EngineManager:
    """Builds, caches, verifies and opens engines.

    Args:
        cache: the engine cache (default: the user cache directory).
        isolate: run builds and first loads in a spawned child process (True in
            the app; tests may turn it off for speed).
        preference: backend names, fastest first (default
            :data:`~avatar_app.inference.backends.DEFAULT_PREFERENCE`).
        calibration_method: ``"percentile"`` or ``"entropy"`` for INT8.
        calibration_root: root of the user's recorded calibration samples
            (default ``user_data_dir()/calibration``).
        timeout_s: limit of one child job, seconds.
        cpu_features: injected CPU features for the INT8 ``reduce_range`` choice
            (``cpuinfo_flags``, ``numpy_features``, ``machine`` of
            :func:`~avatar_app.inference.precision.cpu_has_vnni`; default: read this machine).
        child_duty: pace build children to this share of one core (``duty`` of
            :func:`~avatar_app.inference.isolation.run_isolated`; the studio passes
            :func:`~avatar_app.inference.isolation.live_child_duty`); None: not paced (the CLI).
    """

    def __init__(self, cache: EngineCache | None = None, isolate: bool = True,
                 preference: tuple[str, ...] | None = None, calibration_method: str = "percentile",
                 calibration_root: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 cpu_features: Mapping | None = None, child_duty: float | None = None):
        self.cache = cache or EngineCache()
        self.isolate = isolate
        self.preference = preference
        self.calibration_method = calibration_method
        self.calibration_root = calibration_root
        self.timeout_s = timeout_s
        self.cpu_features = dict(cpu_features or {})
        self.child_duty = child_duty
        self._info_cache: dict[tuple[str, float], ModelInfo] = {}

    # -- keys ------------------------------------------------------------------
    def model_info(self, model_path: str | Path, card: Mapping | None = None) -> ModelInfo:
        """:class:`ModelInfo` of a model (memoised on path and modification time)."""
        path = Path(model_path)
        k = (str(path.resolve()), path.stat().st_mtime if path.exists() else 0.0)
        if card is not None or k not in self._info_cache:
            info = ModelInfo.from_onnx(path, card)
            if card is not None:
                return info
            self._info_cache[k] = info
        return self._info_cache[k]

    def calibration_files(self, info: ModelInfo) -> list[Path]:
        """Default calibration set beside the model plus the user's stored samples."""
        files = [info.calibration_path] if info.calibration_path.is_file() else []
        return files + CalibrationStore(info.name, self.calibration_root).files()

    def int8_reduce_range(self, backend: str) -> bool:
        """Whether ``backend``'s INT8 file gets 7-bit weights here.

        True for an ONNX Runtime backend on the CPU provider on an x86 CPU without VNNI
        (:func:`~avatar_app.inference.precision.int8_reduce_range`); False for TensorRT
        and GPU providers. Part of the INT8 cache key (and so of the QDQ file's name).
        """
        from avatar_app.inference.precision import int8_reduce_range

        return int8_reduce_range(getattr(_backends.get_backend(backend), "provider", None),
                                 **self.cpu_features)

    def cache_key(self, info: ModelInfo, backend: str, precision: Precision) -> CacheKey:
        """The cache key of (model, backend, precision) on this machine."""
        b = _backends.get_backend(backend)
        st = b.status()
        variant = ""
        if precision is Precision.INT8:
            from avatar_app.inference.precision import Int8Recipe

            h = hashlib.sha256(self.calibration_method.encode())
            for f in self.calibration_files(info):
                h.update(sha256_file(f).encode())
            # the INT8 recipe (card exclusions, search, recipe version) changes the file
            # and so does reduce_range (7-bit weights for ORT CPU without VNNI): a file made on
            # another kind of CPU, or for TensorRT, is not reused
            h.update(Int8Recipe.from_card(info.card, self.calibration_method,
                                          reduce_range=self.int8_reduce_range(backend)).fingerprint().encode())
            variant = h.hexdigest()[:20]
        return CacheKey(onnx_sha256=info.sha256, precision=precision.value, backend=backend,
                        backend_version=st.version or "", device=b.device_key(),
                        profile=info.profile_key() if b.needs_profile() else "", variant=variant)

    # -- building ----------------------------------------------------------------
    def build(self, model_path: str | Path, backend: str, precision: Precision | str, *,
              card: Mapping | None = None, progress: ProgressFn | None = None,
              force: bool = False, retry: bool = False) -> CacheEntry:
        """Build (or find in the cache) the engine of (model, backend, precision).

        Args:
            model_path: FP32 source ONNX.
            backend: registry name.
            precision: the engine precision.
            card: optional model-card dict (dynamic dims, tolerances, precisions).
            progress: ``progress(stage, fraction)`` callback (called in this process).
            force: rebuild even when a valid entry exists (and even when it failed before).
            retry: build even when this engine's build failed before (see :meth:`retry`).

        Returns:
            The cache entry; its manifest ``status`` is ``"ok"``, ``"rejected"`` (failed
            verification, with the reason) or ``"unverified"`` (cannot run here).

        Raises:
            BackendUnavailableError: the backend cannot build here.
            RememberedBuildFailure: the build failed before and ``retry``/``force`` is off
                (nothing is built; the message gives the earlier reason).
            EngineBuildError: conversion/parse/build failed or the child crashed (the
                failure is remembered for this cache key).
            ModelLoadError: the model cannot be read.
            VerificationUnavailableError: (an EngineBuildError) a reduced precision of a
                ``real_data_only`` model without its real validation set
                (:func:`~avatar_app.inference.calibration.real_data_missing`).
        """
        precision = Precision.parse(precision)
        info = self.model_info(model_path, card)
        if precision not in info.precisions:
            raise EngineBuildError(
                f"{info.path.name} does not support {precision.value} "
                f"(its metadata allows {', '.join(p.value for p in info.precisions)})")
        if why := real_data_missing(info, precision.value):
            raise VerificationUnavailableError(why)
        b = _backends.get_backend(backend)
        st = b.status()
        if not st.can_build:
            raise BackendUnavailableError(f"{backend} cannot build engines here: {st.reason}")
        key = self.cache_key(info, backend, precision)
        if not force:
            entry = self.cache.lookup(key, info.name)
            if entry is not None:
                ok, why = b.check_artifact(entry.artifact_path) if entry.manifest.status == "ok" else (True, "")
                if ok:
                    return entry
                logger.warning("cached %s engine of %s fails the runtime check (%s); rebuilding",
                               backend, info.name, why)
                self.cache.remove(entry.folder)
        label = f"build {precision.value} {backend} engine of {info.path.name}"
        failure = self.cache.failure(key, info.name)
        if failure is not None and not (force or retry):
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(failure.when))
            raise RememberedBuildFailure(
                f"{label} failed before ({when}), not tried again: {failure.reason} (retry with "
                f"`avatar-app engines build --model {info.path.name} --backend {backend} --precision "
                f"{precision.value}` or Retry in the Engines panel)", failure)
        job = BuildJob(model_path=str(info.path), card=dict(card) if card else None, backend=backend,
                       precision=precision.value, key=asdict(key), cache_root=str(self.cache.root),
                       calibration_files=tuple(str(p) for p in self.calibration_files(info)),
                       calibration_method=self.calibration_method, verify=st.can_run,
                       cannot_run_reason="" if st.can_run else st.reason,
                       int8_reduce_range=precision is Precision.INT8 and self.int8_reduce_range(backend),
                       backend_obj=b)
        logger.info("%s", label)
        try:
            run_isolated(build_job, job, label=label, isolate=self.isolate, timeout_s=self.timeout_s,
                         progress=progress, duty=self.child_duty)
            entry = self.cache.lookup(key, info.name)
            if entry is None:
                raise EngineBuildError(f"{label}: the child finished but left no valid cache entry")
        except AvatarError as exc:
            self.cache.record_failure(key, info.name, str(exc), type(exc).__name__)
            logger.info("%s failed; remembered, not tried again until a retry: %s", label, exc)
            raise
        self.cache.forget_failure(key, info.name)
        return entry

    def build_failure(self, model_path: str | Path, backend: str, precision: Precision | str,
                      card: Mapping | None = None) -> BuildFailure | None:
        """The remembered failed build of (model, backend, precision) on this machine, or None.

        What the Engines panel shows beside its Retry button.

        Raises:
            BackendUnavailableError: unknown backend.
            ModelLoadError: the model cannot be read.
            EngineBuildError: also a reduced precision of a ``real_data_only`` model without its
                real validation set (:func:`~avatar_app.inference.calibration.real_data_missing`).
        """
        precision = Precision.parse(precision)
        info = self.model_info(model_path, card)
        return self.cache.failure(self.cache_key(info, backend, precision), info.name)

    def retry(self, model_path: str | Path, backend: str, precision: Precision | str, **kwargs) -> CacheEntry:
        """Build an engine whose build failed before, now (the panel's Retry, ``engines build``).

        Args:
            model_path / backend / precision: as :meth:`build`.
            **kwargs: ``card``, ``progress``, ``force`` of :meth:`build`.

        Returns:
            The cache entry (see :meth:`build`); a success forgets the failure.

        Raises:
            The errors of :meth:`build` (a new failure is remembered again).
        """
        return self.build(model_path, backend, precision, retry=True, **kwargs)

    # -- opening -----------------------------------------------------------------
    def open_reference(self, model_path: str | Path) -> BaseRunner:
        """The FP32 ONNX Runtime CPU runner of the source model (open)."""
        from avatar_app.inference.ort import OrtRunner

        return OrtRunner.from_path(model_path, "ort_cpu", Precision.FP32).open()

    def open_engine(self, model_path: str | Path, backend: str | None = None,
                    precision: Precision | str | None = None, *, card: Mapping | None = None,
                    progress: ProgressFn | None = None) -> OpenResult:
        """Open the best usable engine, falling back along the candidate plan.

        Args:
            model_path: FP32 source ONNX.
            backend / precision: the user's choice (None: fastest available).
            card: optional model-card dict.
            progress: build progress callback.

        Returns:
            :class:`OpenResult` with the open runner and every attempt with its reason.

        Raises:
            ModelLoadError: not even the ONNX Runtime CPU reference can load the model.
        """
        info = self.model_info(model_path, card)
        plan = _backends.candidate_plan(backend, precision, self.preference, info.precisions)
        attempts: list[Attempt] = []
        statuses: dict[str, _backends.BackendStatus] = {}
        for bname, prec in plan:
            if (bname, prec) == _backends.REFERENCE:
                runner = self.open_reference(info.path)
                attempts.append(Attempt(bname, prec.value, True, "FP32 reference"))
                return self._done(runner, attempts)
            if bname not in statuses:
                statuses[bname] = _backends.get_backend(bname).status()
            st = statuses[bname]
            if not st.can_run:
                attempts.append(Attempt(bname, prec.value, False, st.reason or "cannot run here"))
                continue
            if st.precisions.get(prec.value):
                attempts.append(Attempt(bname, prec.value, False, st.precisions[prec.value]))
                continue
            if why := real_data_missing(info, prec.value):
                attempts.append(Attempt(bname, prec.value, False, why))
                continue
            try:
                runner, attempt = self._open_candidate(info, bname, prec, card, progress)
            except RememberedBuildFailure as exc:  # known: no child, no warning on every start
                logger.info("%s/%s for %s not used: %s", bname, prec.value, info.name, exc)
                attempts.append(Attempt(bname, prec.value, False, str(exc), cached=True, failed_before=True))
                continue
            except AvatarError as exc:
                logger.warning("%s/%s for %s not used: %s", bname, prec.value, info.name, exc)
                attempts.append(Attempt(bname, prec.value, False, str(exc)))
                continue
            attempts.append(attempt)
            if runner is not None:
                return self._done(runner, attempts)
        raise AssertionError("candidate plan did not end with the reference")  # pragma: no cover

    def _open_candidate(self, info: ModelInfo, bname: str, prec: Precision, card, progress):
        direct = _backends.get_backend(bname).open_direct(self, info, prec)
        if direct is not None:  # a server's engine: nothing to build or cache here
            v = direct.verification
            return direct, Attempt(bname, prec.value, True, "", False, v.to_json() if v is not None else None)
        key = self.cache_key(info, bname, prec)
        cached = self.cache.lookup(key, info.name) is not None
        entry = self.build(info.path, bname, prec, card=card, progress=progress)
        m = entry.manifest
        if m.status != "ok":
            return None, Attempt(bname, prec.value, False, f"{m.status}: {m.reason}", cached, m.verification)
        backend = _backends.get_backend(bname)
        runner = backend.make_runner(entry.artifact_path, prec, info.path.name)
        try:
            runner.open()
        except AvatarError:
            # A cached entry that loaded once but fails now: drop it so the next start rebuilds.
            self.cache.remove(entry.folder)
            raise
        runner.verification = m.verification_result
        return runner, Attempt(bname, prec.value, True, "", cached, m.verification)

    @staticmethod
    def _done(runner: BaseRunner, attempts: list[Attempt]) -> OpenResult:
        result = OpenResult(runner, attempts)
        if result.fell_back:
            # expected on machines without a GPU: the reasons are in `engines list` and the Engines panel
            logger.info("engine choice for %s:\n%s", runner.name, result.explain())
        logger.info("using %s", runner.describe())
        return result
