"""Detect, at start, GPU inference runtimes the user installed next to the CPU build.

The packaged app (PyInstaller bundle, or a plain ``pip install``) is the CPU
build: ONNX Runtime's CPU provider. A user with an NVIDIA card may add

- ``tensorrt`` (TensorRT 10/11, module ``tensorrt``),
- TensorRT for RTX (``pip install tensorrt-rtx-cu13``, module ``tensorrt_rtx``),
- ``onnxruntime-gpu`` (CUDA and TensorRT execution providers).

:func:`detect_gpu_runtimes` reports which of them are importable without
importing the heavy ones (``importlib.util.find_spec`` only; ONNX Runtime is
imported only to list its providers, and it is a dependency of the app anyway).
The engines panel offers what it finds; the inference layer
(``avatar_app.inference.backends``) does the real probing (devices, compute
capability) when the user picks a backend.

Frozen bundles cannot see packages installed into a system Python. The user
points the bundle at one or more ``site-packages`` folders with the
environment variable ``AVATAR_APP_EXTRA_SITE`` (``os.pathsep``-separated);
:func:`add_extra_site_dirs` (called first thing by the bundle's entry script)
appends them to ``sys.path`` so ``tensorrt`` / ``tensorrt_rtx`` import from
there, and, when such a folder holds ``onnxruntime-gpu``, makes ``import
onnxruntime`` load that one instead of the bundled CPU build. Every other
package still comes from the bundle.
"""
from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

EXTRA_SITE_ENV = "AVATAR_APP_EXTRA_SITE"
"""Environment variable: extra ``site-packages`` folders for GPU runtimes (``os.pathsep``-separated)."""

#: Module name -> label shown to the user, in preference order (DESIGN.md: native TensorRT first).
TRT_MODULES: tuple[tuple[str, str], ...] = (("tensorrt", "TensorRT"), ("tensorrt_rtx", "TensorRT for RTX"))

#: ONNX Runtime execution providers that use an NVIDIA GPU.
ORT_GPU_PROVIDERS: tuple[str, ...] = ("TensorrtExecutionProvider", "CUDAExecutionProvider")

#: Distributions that ship ``import onnxruntime`` with the CUDA / TensorRT providers.
ORT_GPU_DISTS: tuple[str, ...] = ("onnxruntime-gpu", "onnxruntime_gpu")


@dataclass(frozen=True)
class GpuRuntime:
    """One GPU runtime and whether it can be imported here.

    Attributes:
        name: ``"tensorrt"``, ``"tensorrt_rtx"`` or ``"onnxruntime-gpu"``.
        label: name for the user ("TensorRT for RTX").
        available: the module can be imported (and, for ONNX Runtime, offers a GPU provider).
        version: the distribution's version, or None when unknown / absent.
        location: the folder the module would be imported from, or None.
        providers: for ONNX Runtime, the GPU execution providers it offers
            (subset of :data:`ORT_GPU_PROVIDERS`); empty otherwise.
        reason: why it is not available ("" when it is).
    """

    name: str
    label: str
    available: bool
    version: str | None = None
    location: Path | None = None
    providers: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class GpuReport:
    """What :func:`detect_gpu_runtimes` found.

    Attributes:
        runtimes: one entry per runtime, in :data:`TRT_MODULES` order, then ONNX Runtime.
        frozen: running from a PyInstaller bundle.
        extra_site_dirs: folders taken from :data:`EXTRA_SITE_ENV`.
    """

    runtimes: tuple[GpuRuntime, ...]
    frozen: bool
    extra_site_dirs: tuple[Path, ...] = ()

    @property
    def available(self) -> tuple[GpuRuntime, ...]:
        """The runtimes that can be offered."""
        return tuple(r for r in self.runtimes if r.available)

    def summary(self) -> str:
        """One line for the log and the engines panel."""
        if not self.available:
            hint = f" (bundle: set {EXTRA_SITE_ENV} to a site-packages folder that holds one)" if self.frozen else ""
            return "no GPU runtime installed: ONNX Runtime on the CPU" + hint
        parts = []
        for r in self.available:
            extra = f" [{', '.join(r.providers)}]" if r.providers else ""
            parts.append(f"{r.label} {r.version or '?'}{extra}")
        return "GPU runtimes found: " + "; ".join(parts)


def _is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False)) and hasattr(sys, "_MEIPASS")


def extra_site_dirs(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Existing folders listed in :data:`EXTRA_SITE_ENV` (missing ones are logged and skipped)."""
    env = os.environ if environ is None else environ
    out = []
    for item in (env.get(EXTRA_SITE_ENV) or "").split(os.pathsep):
        item = item.strip()
        if not item:
            continue
        p = Path(item).expanduser()
        if p.is_dir():
            out.append(p.resolve())
        else:
            logger.warning("%s lists %s, which is not a folder; ignored", EXTRA_SITE_ENV, p)
    return tuple(out)


def _dists_in(folder: Path) -> dict[str, str]:
    """Normalised distribution name -> version of the distributions installed in ``folder``."""
    out = {}
    for d in importlib.metadata.distributions(path=[str(folder)]):
        name = (d.metadata.get("Name") or "").lower().replace("_", "-")
        if name:
            out[name] = d.version
    return out


class _RedirectFinder:
    """A ``sys.meta_path`` finder that imports chosen top-level modules from one folder."""

    def __init__(self, names: Sequence[str], folder: Path):
        self.names = frozenset(names)
        self.folder = str(folder)

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 - importlib protocol
        if fullname not in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [self.folder])


def add_extra_site_dirs(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Make GPU runtimes from :data:`EXTRA_SITE_ENV` folders importable (call before importing onnxruntime).

    Each folder is appended to ``sys.path`` (bundled packages keep priority);
    if one holds ``onnxruntime-gpu``, ``import onnxruntime`` is redirected to
    it. Calling it again adds nothing twice.

    Args:
        environ: environment to read (default ``os.environ``).

    Returns:
        The folders added or already present.
    """
    dirs = extra_site_dirs(environ)
    for d in dirs:
        if str(d) not in sys.path:
            sys.path.append(str(d))
            logger.info("GPU runtimes may come from %s (%s)", d, EXTRA_SITE_ENV)
        if any(n in _dists_in(d) for n in ORT_GPU_DISTS) and not any(
            isinstance(f, _RedirectFinder) for f in sys.meta_path
        ):
            if "onnxruntime" in sys.modules:
                logger.warning("onnxruntime already imported; onnxruntime-gpu in %s is not used", d)
            else:
                sys.meta_path.insert(0, _RedirectFinder(["onnxruntime"], d))
                logger.info("onnxruntime-gpu from %s replaces the bundled onnxruntime", d)
    return dirs


def _dist_version(module: str) -> str | None:
    """Version of the distribution that provides top-level ``module`` (searched over ``sys.path``)."""
    for dist in importlib.metadata.packages_distributions().get(module, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - stale metadata
            continue
    return None


def _module_location(module: str) -> Path | None:
    """Folder of an importable top-level module without importing it, or None."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # broken package metadata / namespace oddities
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin).parent if spec.origin else None


def _probe_trt(module: str, label: str) -> GpuRuntime:
    loc = _module_location(module)
    if loc is None:
        return GpuRuntime(module, label, False, reason=f"Python module {module!r} is not installed")
    return GpuRuntime(module, label, True, _dist_version(module), loc)


def _probe_ort(import_module: bool) -> GpuRuntime:
    name, label = "onnxruntime-gpu", "ONNX Runtime GPU"
    loc = _module_location("onnxruntime")
    if loc is None:
        return GpuRuntime(name, label, False, reason="onnxruntime is not installed")
    if not import_module:
        return GpuRuntime(name, label, False, location=loc, reason="providers not probed")
    try:
        import onnxruntime
    except ImportError as exc:  # a broken GPU build (e.g. CUDA libraries missing)
        return GpuRuntime(name, label, False, location=loc, reason=f"onnxruntime does not import: {exc}")
    offered = tuple(onnxruntime.get_available_providers())
    gpu = tuple(p for p in ORT_GPU_PROVIDERS if p in offered)
    version = getattr(onnxruntime, "__version__", None)
    if not gpu:
        return GpuRuntime(name, label, False, version, loc,
                          reason=f"this onnxruntime offers only {', '.join(offered)}; install onnxruntime-gpu")
    return GpuRuntime(name, label, True, version, loc, gpu)


def detect_gpu_runtimes(probe_onnxruntime: bool = True) -> GpuReport:
    """Which GPU inference runtimes the user installed.

    Cheap: TensorRT modules are located with ``importlib.util.find_spec`` (not
    imported); ONNX Runtime is imported only when ``probe_onnxruntime`` (to
    call ``get_available_providers()``). Whether a GPU is present and which
    compute capability it has is the inference layer's business.

    Args:
        probe_onnxruntime: import onnxruntime to list its execution providers.

    Returns:
        A :class:`GpuReport`; its :meth:`GpuReport.summary` is logged at INFO.
    """
    report = GpuReport(
        runtimes=tuple(_probe_trt(m, lbl) for m, lbl in TRT_MODULES) + (_probe_ort(probe_onnxruntime),),
        frozen=_is_frozen(),
        extra_site_dirs=extra_site_dirs(),
    )
    logger.info("%s", report.summary())
    return report
