"""Backend registry: names to backend objects, chosen by an ordered preference list.

A :class:`Backend` says whether it is installed, can build, can run here and
which precisions it supports (with the reason for each one it does not);
it builds an engine artifact from a precision's ONNX file and makes a runner
for it. Nothing here imports an optional backend at module import time.
"""
from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from avatar_app.core.errors import BackendUnavailableError
from avatar_app.inference.base import BaseRunner, Precision
from avatar_app.inference.modelinfo import ModelInfo

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str, float], None]

#: Fastest first; ONNX Runtime on the CPU is the last resort and the reference.
DEFAULT_PREFERENCE: tuple[str, ...] = ("tensorrt", "tensorrt_rtx", "ort_tensorrt", "ort_cuda", "ort_cpu")

#: The backend and precision every fallback ends on (and the verification reference).
REFERENCE = ("ort_cpu", Precision.FP32)


@dataclass
class BackendStatus:
    """What a backend can do on this machine.

    Attributes:
        name: registry name.
        installed: its Python package imports.
        version: library version (None when not installed).
        can_build: engines can be built here.
        can_run: engines can run here.
        reason: why it cannot build or run ("" when it can both).
        devices: human-readable devices it would use.
        precisions: precision value to None (supported) or the reason it is not.
    """

    name: str
    installed: bool
    version: str | None
    can_build: bool
    can_run: bool
    reason: str = ""
    devices: list[str] = field(default_factory=list)
    precisions: dict[str, str | None] = field(default_factory=dict)


class Backend:
    """Base class of registry entries.

    Attributes:
        name: registry name.
        artifact_name: file name of a built engine in its cache entry.
        default_precisions: precisions tried, in order, when the user chose none.
    """

    name = "base"
    artifact_name = "engine.bin"
    default_precisions: tuple[Precision, ...] = (Precision.FP32,)
    #: Whether plans without an explicit backend choice include it (False: only when chosen).
    automatic = True

    def status(self) -> BackendStatus:  # pragma: no cover - abstract
        """Probe the machine (cheap; may import the backend's package)."""
        raise NotImplementedError

    def device_key(self) -> str:
        """Device part of cache keys: ``"cpu"`` or ``"<GPU name> sm<major><minor>"``."""
        return "cpu"

    def needs_profile(self) -> bool:
        """Whether engines bake in an optimisation profile (TensorRT)."""
        return False

    def build(self, info: ModelInfo, precision_onnx: Path, out_path: Path,
              progress: ProgressFn | None = None) -> dict:  # pragma: no cover - abstract
        """Write the engine artifact for ``precision_onnx`` to ``out_path``; return build details."""
        raise NotImplementedError

    def check_artifact(self, path: Path) -> tuple[bool, str]:
        """The runtime's own validity check of a built artifact (default: none)."""
        return True, ""

    def make_runner(self, artifact: Path, precision: Precision, name: str) -> BaseRunner:  # pragma: no cover
        """An unopened runner for a built artifact."""
        raise NotImplementedError

    def open_direct(self, manager, info: ModelInfo, precision: Precision) -> BaseRunner | None:
        """An open runner without a cached artifact (a server's engine), or None: build and cache one.

        Raises:
            AvatarError: the engine cannot be opened (the manager tries the next candidate).
        """
        return None


class OrtBackend(Backend):
    """ONNX Runtime with one execution provider; the artifact is the precision's ONNX file."""

    artifact_name = "model.onnx"

    def __init__(self, name: str, provider: str, default_precisions: tuple[Precision, ...]):
        self.name = name
        self.provider = provider
        self.default_precisions = default_precisions

    def status(self) -> BackendStatus:
        from avatar_app.inference import ort

        version = ort.ort_version()
        if version is None:
            return BackendStatus(self.name, False, None, False, False, "onnxruntime is not installed",
                                 precisions={p.value: "onnxruntime is not installed" for p in Precision})
        offered = ort.ort_available_providers()
        if self.provider not in offered:
            why = (f"{self.provider} is not in this onnxruntime build (offered: {', '.join(offered)}); "
                   "it needs onnxruntime-gpu and an NVIDIA GPU")
            return BackendStatus(self.name, True, version, False, False, why,
                                 precisions={p.value: why for p in Precision})
        problem = ort.provider_load_problem(self.provider)
        if problem:
            why = f"{self.provider} is in this onnxruntime build but cannot load here: {problem}"
            return BackendStatus(self.name, True, version, False, False, why,
                                 precisions={p.value: why for p in Precision})
        if self.provider == ort.CPU_EP:
            devices = [f"CPU ({os.cpu_count()} logical cores)"]
        else:
            from avatar_app.inference.trt import cuda_devices

            devs, _ = cuda_devices()
            devices = [f"GPU {d['index']}: {d['name']} (sm{d['cc'][0]}{d['cc'][1]})" for d in devs] or ["CUDA device 0"]
        precisions = {p.value: None for p in Precision}
        return BackendStatus(self.name, True, version, True, True, "", devices, precisions)

    def device_key(self) -> str:
        from avatar_app.inference import ort

        if self.provider == ort.CPU_EP:
            return "cpu"
        return _gpu_key()

    def build(self, info, precision_onnx, out_path, progress=None) -> dict:
        from avatar_app.inference import ort

        shutil.copyfile(precision_onnx, out_path)
        return {"onnxruntime_version": ort.ort_version(), "provider": self.provider}

    def make_runner(self, artifact, precision, name) -> BaseRunner:
        from avatar_app.inference.dirs import user_cache_dir
        from avatar_app.inference.ort import TRT_EP, OrtRunner, SessionFromOnnx

        trt_cache = user_cache_dir() / "ort_tensorrt" if self.provider == TRT_EP else None
        return OrtRunner(SessionFromOnnx(artifact, self.name, trt_cache_dir=trt_cache), precision, name)


class TrtBackend(Backend):
    """Native TensorRT (``tensorrt``) or TensorRT for RTX (``tensorrt_rtx``); artifact is a plan."""

    artifact_name = "engine.plan"
    default_precisions = (Precision.FP16, Precision.FP32)

    def __init__(self, name: str):
        self.name = name

    def status(self) -> BackendStatus:
        from avatar_app.inference import trt

        try:
            mod = trt.import_trt(self.name)
        except BackendUnavailableError as exc:
            why = str(exc)
            return BackendStatus(self.name, False, None, False, False, why,
                                 precisions={p.value: why for p in Precision})
        devs, dev_reason = trt.cuda_devices()
        devices = [f"GPU {d['index']}: {d['name']} (sm{d['cc'][0]}{d['cc'][1]})" for d in devs]
        can_run, reason = bool(devs), dev_reason
        if devs and self.name == "tensorrt_rtx":
            cc = devs[0]["cc"]
            if cc not in trt.RTX_RUNNABLE_CC:
                can_run = False
                reason = (f"TensorRT for RTX does not run engines on compute capability "
                          f"{cc[0]}.{cc[1]} ({devs[0]['name']}); engines can still be built")
        if not can_run and not devs:
            reason = f"engines can be built but not run here: {dev_reason}"
        # Strongly typed networks: every precision comes from the ONNX file.
        precisions = {p.value: None for p in Precision}
        return BackendStatus(self.name, True, mod.__version__, True, can_run, reason, devices, precisions)

    def device_key(self) -> str:
        return _gpu_key()

    def needs_profile(self) -> bool:
        return True

    def build(self, info, precision_onnx, out_path, progress=None) -> dict:
        from avatar_app.inference.trt import build_plan

        return build_plan(self.name, info, precision_onnx, out_path, progress)

    def check_artifact(self, path: Path) -> tuple[bool, str]:
        from avatar_app.inference.trt import plan_validity

        return plan_validity(self.name, path.read_bytes())

    def make_runner(self, artifact, precision, name) -> BaseRunner:
        from avatar_app.inference.trt import TrtRunner

        return TrtRunner(artifact, self.name, precision, name)


def _gpu_key() -> str:
    from avatar_app.inference.trt import cuda_devices

    devs, _ = cuda_devices()
    if not devs:
        return "no-gpu"
    d = devs[0]
    return f"{d['name']} sm{d['cc'][0]}{d['cc'][1]}"


_REGISTRY: dict[str, Backend] = {}


def register_backend(backend: Backend, replace: bool = False) -> None:
    """Add a backend to the registry.

    Raises:
        ValueError: a backend of that name exists and ``replace`` is False.
    """
    if backend.name in _REGISTRY and not replace:
        raise ValueError(f"backend {backend.name!r} is already registered")
    _REGISTRY[backend.name] = backend


def unregister_backend(name: str) -> None:
    """Remove a backend (tests)."""
    _REGISTRY.pop(name, None)


def get_backend(name: str) -> Backend:
    """The registered backend called ``name``.

    Raises:
        BackendUnavailableError: no such backend.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise BackendUnavailableError(
            f"unknown backend {name!r}; known: {', '.join(backend_names())}") from None


def backend_names(preference: Iterable[str] | None = None) -> list[str]:
    """Registered names in preference order (unlisted ones after the listed, then ort_cpu last)."""
    pref = list(preference or DEFAULT_PREFERENCE)
    names = [n for n in pref if n in _REGISTRY]
    names += [n for n in _REGISTRY if n not in names]
    if REFERENCE[0] in names:  # the reference is always the last resort
        names.remove(REFERENCE[0])
        names.append(REFERENCE[0])
    return names


def backend_statuses(preference: Iterable[str] | None = None) -> list[BackendStatus]:
    """Status of every registered backend, in preference order."""
    out = []
    for name in backend_names(preference):
        try:
            out.append(_REGISTRY[name].status())
        except Exception as exc:  # noqa: BLE001 - a broken optional backend must not break listing
            logger.warning("probing backend %s failed: %s", name, exc)
            out.append(BackendStatus(name, False, None, False, False, f"probe failed: {exc}"))
    return out


def candidate_plan(backend: str | None = None, precision: Precision | str | None = None,
                   preference: Iterable[str] | None = None,
                   model_precisions: Iterable[Precision] = tuple(Precision)) -> list[tuple[str, Precision]]:
    """Ordered (backend, precision) pairs to try: the user's choice, then fallbacks.

    The user's choice first; then the same backend at the lower precisions
    (INT8 -> FP16 -> FP32); then every backend in preference order at its
    default precisions; always ending with ONNX Runtime CPU FP32.
    """
    allowed = set(model_precisions)
    order = [Precision.INT8, Precision.FP16, Precision.FP32]
    plan: list[tuple[str, Precision]] = []

    def add(b: str, p: Precision) -> None:
        if (b, p) not in plan and (p in allowed or (b, p) == REFERENCE):
            plan.append((b, p))

    names = [b for b in backend_names(preference) if get_backend(b).automatic]
    prec = Precision.parse(precision) if precision is not None else None
    if backend is not None:
        get_backend(backend)
        precs = order[order.index(prec):] if prec else list(get_backend(backend).default_precisions)
        for p in precs:
            add(backend, p)
    elif prec is not None:
        for b in names:
            add(b, prec)
    for b in names:
        for p in get_backend(b).default_precisions:
            add(b, p)
    add(*REFERENCE)
    return plan


def _register_defaults() -> None:
    register_backend(TrtBackend("tensorrt"))
    register_backend(TrtBackend("tensorrt_rtx"))
    register_backend(OrtBackend("ort_tensorrt", "TensorrtExecutionProvider", (Precision.FP16, Precision.FP32)))
    register_backend(OrtBackend("ort_cuda", "CUDAExecutionProvider", (Precision.FP16, Precision.FP32)))
    register_backend(OrtBackend("ort_cpu", "CPUExecutionProvider", (Precision.FP32,)))
    from avatar_app.inference.remote import RemoteBackend  # imports this module's Backend

    register_backend(RemoteBackend())


_register_defaults()
