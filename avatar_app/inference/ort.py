"""ONNX Runtime backend: CPU always, CUDA and TensorRT execution providers with onnxruntime-gpu.

The provider a session really runs on is read back with
``InferenceSession.get_providers()``: ONNX Runtime silently falls back to the
CPU when a GPU provider cannot load, and the engine layer must not report
"CUDA" for a session that runs on the CPU.
"""
from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatar_app.core.errors import BackendUnavailableError, ModelLoadError
from avatar_app.inference.base import BaseRunner, Precision, TensorSpec

logger = logging.getLogger(__name__)

CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
TRT_EP = "TensorrtExecutionProvider"

#: Backend registry name -> the execution provider that must end up first.
BACKEND_PROVIDER = {"ort_cpu": CPU_EP, "ort_cuda": CUDA_EP, "ort_tensorrt": TRT_EP}

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
              "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def ort_version() -> str | None:
    """Installed onnxruntime version, or None when it cannot be imported."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    return ort.__version__


def ort_available_providers() -> list[str]:
    """Execution providers this onnxruntime build offers (``[]`` without onnxruntime).

    Tests fake GPU machines by monkeypatching this function.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    return list(ort.get_available_providers())


def _probe_provider(provider: str) -> str:
    """Open a one-node session on ``provider`` (in a child process); "" when it runs there, else why not."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = ort.InferenceSession(model.SerializeToString(), sess_options=so,
                                           providers=[provider, CPU_EP])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        return f"a test session fails: {exc}"
    actual = session.get_providers()
    if not actual or actual[0] != provider:
        return (f"a test session runs on {', '.join(actual) or 'nothing'} (the provider failed to load: "
                "are the CUDA / cuDNN / TensorRT libraries it needs installed?)")
    return ""


@functools.lru_cache(maxsize=None)
def provider_load_problem(provider: str) -> str:
    """Why an execution provider this onnxruntime build offers cannot load here ("" when it can).

    onnxruntime-gpu lists ``CUDAExecutionProvider`` whether or not CUDA and cuDNN
    load; a session then silently runs on the CPU. The probe opens a one-node
    session in a child process (a crashing driver kills only the child), once per
    process and provider.

    Args:
        provider: e.g. ``"CUDAExecutionProvider"``.

    Returns:
        "" or the reason, for ``engines list`` and the Engines panel.
    """
    if provider == CPU_EP:
        return ""
    from avatar_app.core.errors import AvatarError
    from avatar_app.inference.isolation import run_isolated

    try:
        return run_isolated(_probe_provider, provider, label=f"probe {provider}", timeout_s=120.0)
    except AvatarError as exc:
        return f"probing it failed: {exc}"


@dataclass(frozen=True)
class ThreadSettings:
    """ONNX Runtime CPU thread settings.

    Defaults are chosen for low latency of small models on a 2-core machine
    shared with capture, tracking and rendering threads (benchmarks/engines.py
    measures the alternatives): one intra-op thread, one inter-op thread,
    sequential execution, no busy-wait spinning (spinning wins ~µs but burns a
    core other stages need).

    Override with ``AVATAR_APP_ORT_THREADS`` (intra-op count) and
    ``AVATAR_APP_ORT_SPIN`` (``1`` to allow spinning).
    """

    intra_op: int = 1
    inter_op: int = 1
    allow_spinning: bool = False

    @classmethod
    def from_env(cls) -> "ThreadSettings":
        """Defaults, overridden by the environment variables above."""
        intra = os.environ.get("AVATAR_APP_ORT_THREADS")
        spin = os.environ.get("AVATAR_APP_ORT_SPIN")
        return cls(intra_op=int(intra) if intra and intra.isdigit() else cls.intra_op,
                   allow_spinning=(spin == "1") if spin is not None else cls.allow_spinning)


class SessionFromOnnx:
    """Loader: builds an ``onnxruntime.InferenceSession`` when called (Polygraphy style).

    Args:
        model_path: the .onnx file (FP32, FP16 or QDQ INT8).
        backend: ``"ort_cpu"``, ``"ort_cuda"`` or ``"ort_tensorrt"``.
        threads: CPU thread settings.
        trt_cache_dir: where the TensorRT EP may cache its engines.
        model_bytes: a serialized ONNX model to load instead of reading ``model_path``
            (a graph derived in memory, e.g. :func:`~avatar_app.inference.conv_state.conv_state_graph`);
            ``model_path`` then only names it in messages.
    """

    def __init__(self, model_path: str | Path, backend: str = "ort_cpu",
                 threads: ThreadSettings | None = None, trt_cache_dir: Path | None = None,
                 model_bytes: bytes | None = None):
        if backend not in BACKEND_PROVIDER:
            raise BackendUnavailableError(f"unknown ONNX Runtime backend {backend!r}")
        self.model_path = Path(model_path)
        self.backend = backend
        self.threads = threads or ThreadSettings.from_env()
        self.trt_cache_dir = trt_cache_dir
        self.model_bytes = model_bytes

    def providers(self) -> list:
        """Provider list passed to ONNX Runtime, most preferred first."""
        if self.backend == "ort_cpu":
            return [CPU_EP]
        cuda = (CUDA_EP, {"device_id": 0, "cudnn_conv_algo_search": "HEURISTIC"})
        if self.backend == "ort_cuda":
            return [cuda, CPU_EP]
        trt_opts = {"device_id": 0}
        if self.trt_cache_dir is not None:
            trt_opts.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(self.trt_cache_dir))
        return [(TRT_EP, trt_opts), cuda, CPU_EP]

    def __call__(self):
        """Create the session.

        Raises:
            BackendUnavailableError: onnxruntime missing, the provider is not offered
                by this build, or the session did not end up on it.
            ModelLoadError: ONNX Runtime cannot load the file.
        """
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendUnavailableError(f"onnxruntime is not installed: {exc}") from exc
        wanted = BACKEND_PROVIDER[self.backend]
        offered = ort_available_providers()
        if wanted not in offered:
            raise BackendUnavailableError(
                f"{wanted} is not offered by this onnxruntime build "
                f"(offered: {', '.join(offered) or 'none'}); install onnxruntime-gpu for GPU providers")
        if self.model_bytes is None and not self.model_path.is_file():
            raise ModelLoadError(f"model file not found: {self.model_path}")
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads.intra_op
        so.inter_op_num_threads = self.threads.inter_op
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.add_session_config_entry("session.intra_op.allow_spinning",
                                    "1" if self.threads.allow_spinning else "0")
        so.log_severity_level = 3  # errors only; provider fallbacks are detected below
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                src = self.model_bytes if self.model_bytes is not None else str(self.model_path)
                session = ort.InferenceSession(src, sess_options=so,
                                               providers=self.providers())
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
            raise ModelLoadError(f"ONNX Runtime cannot load {self.model_path.name}: {exc}") from exc
        for w in caught:  # e.g. "Specified provider ... is not in available provider names"
            logger.info("ONNX Runtime: %s", w.message)
        actual = session.get_providers()
        if not actual or actual[0] != wanted:
            raise BackendUnavailableError(
                f"{wanted} was requested for {self.model_path.name} but the session runs on "
                f"{', '.join(actual) or 'nothing'} (the provider failed to load)")
        logger.info("ONNX Runtime session for %s on %s", self.model_path.name, actual)
        return session


class OrtRunner(BaseRunner):
    """Runner over an ONNX Runtime session.

    Args:
        loader: a :class:`SessionFromOnnx` (or any callable returning a session).
        precision: precision of the ONNX file the loader reads.
        name: label for messages.

    Attributes:
        providers: the providers the open session really runs on.
    """

    def __init__(self, loader: SessionFromOnnx, precision: Precision | str = Precision.FP32,
                 name: str = ""):
        super().__init__(precision, name or getattr(loader, "model_path", Path("model")).name)
        self._loader = loader
        self.backend = getattr(loader, "backend", "ort_cpu")
        self._session = None
        self._output_names: list[str] = []
        self.providers: list[str] = []

    @classmethod
    def from_path(cls, model_path: str | Path, backend: str = "ort_cpu",
                  precision: Precision | str = Precision.FP32, **kwargs) -> "OrtRunner":
        """Shortcut: ``OrtRunner(SessionFromOnnx(model_path, backend, **kwargs), precision)``."""
        return cls(SessionFromOnnx(model_path, backend, **kwargs), precision)

    @property
    def model_path(self) -> Path | None:
        """The ONNX file the loader reads (None when the loader names none)."""
        path = getattr(self._loader, "model_path", None)
        return Path(path) if path is not None else None

    def _open_impl(self) -> None:
        self._session = self._loader()
        self.providers = list(self._session.get_providers())
        self._input_specs = tuple(_spec(a) for a in self._session.get_inputs())
        self._output_specs = tuple(_spec(a) for a in self._session.get_outputs())
        self._output_names = [s.name for s in self._output_specs]

    def _infer_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self._session.run(self._output_names, dict(feeds))
        return dict(zip(self._output_names, outs))

    def _close_impl(self) -> None:
        self._session = None

    def describe(self) -> str:
        """Name, backend, precision and the provider really used."""
        prov = f" [{self.providers[0]}]" if self.providers else ""
        return f"{super().describe()}{prov}"


def _spec(arg) -> TensorSpec:
    dtype = _ORT_TYPES.get(arg.type)
    if dtype is None:
        raise ModelLoadError(f"tensor {arg.name!r} has unsupported type {arg.type}")
    shape, names = [], []
    for d in arg.shape:
        if isinstance(d, int) and d > 0:
            shape.append(d), names.append(None)
        else:
            shape.append(None), names.append(d if isinstance(d, str) else None)
    return TensorSpec(arg.name, np.dtype(dtype), tuple(shape), tuple(names))
