"""TensorRT builder and runner over the Python API shared by TensorRT 10/11 and TensorRT for RTX.

``tensorrt`` (TensorRT 10/11) and ``tensorrt_rtx`` (TensorRT for RTX, which
also builds engines on a machine without a GPU) expose the same builder,
parser and runtime classes; the module is chosen by backend name and imported
lazily. Networks are strongly typed: the precision comes from the ONNX file
(FP32, FP16, or QDQ INT8), never from builder flags.

Device memory and streams go through cuda-python (``cuda.bindings.runtime``):
buffers are allocated once for the profile's maximum shapes, host buffers are
pinned, copies are asynchronous on one stream, and ``execute_async_v3`` runs
the engine; when every input shape is static the enqueue is captured once in a
CUDA graph and replayed.
"""
from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from avatar_app.core.errors import BackendUnavailableError, EngineBuildError, ModelLoadError
from avatar_app.inference.base import BaseRunner, Precision, TensorSpec
from avatar_app.inference.modelinfo import ModelInfo

logger = logging.getLogger(__name__)

#: Backend name -> Python module.
TRT_MODULES = {"tensorrt": "tensorrt", "tensorrt_rtx": "tensorrt_rtx"}

#: Compute capabilities TensorRT for RTX runs engines on (DESIGN.md: not 9.0).
RTX_RUNNABLE_CC = {(7, 5), (8, 0), (8, 6), (8, 9), (12, 0), (12, 1)}

#: Builder workspace limit, bytes.
WORKSPACE_BYTES = 1 << 30


def import_trt(backend: str):
    """Import the TensorRT module of ``backend`` (``"tensorrt"`` or ``"tensorrt_rtx"``).

    Raises:
        BackendUnavailableError: unknown backend or the package is not installed.
    """
    modname = TRT_MODULES.get(backend)
    if modname is None:
        raise BackendUnavailableError(f"unknown TensorRT backend {backend!r}")
    try:
        return importlib.import_module(modname)
    except ImportError as exc:
        hint = "pip install tensorrt-rtx-cu13" if backend == "tensorrt_rtx" else "install TensorRT"
        raise BackendUnavailableError(f"{modname} is not installed ({hint}): {exc}") from exc
    except OSError as exc:  # the package is there but its native libraries do not load
        raise BackendUnavailableError(f"{modname} is installed but cannot load: {exc}") from exc


def trt_version(backend: str) -> str | None:
    """Version of the backend's TensorRT module, or None when it does not import."""
    try:
        return import_trt(backend).__version__
    except BackendUnavailableError:
        return None


def cuda_devices() -> tuple[list[dict], str]:
    """CUDA devices seen through cuda-python.

    Returns:
        (devices, reason): each device ``{"index", "name", "cc": (major, minor),
        "memory_bytes"}``; ``reason`` says why the list is empty.
    """
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart  # cuda-python < 12.6 layout
        except ImportError as exc:
            return [], f"cuda-python is not installed ({exc})"
    err, count = cudart.cudaGetDeviceCount()
    if int(err) != 0:
        return [], f"no usable CUDA device ({_err_name(err)})"
    devices = []
    for i in range(count):
        err, prop = cudart.cudaGetDeviceProperties(i)
        if int(err) != 0:
            continue
        name = prop.name.decode(errors="replace").rstrip("\x00") if isinstance(prop.name, bytes) else str(prop.name)
        devices.append({"index": i, "name": name, "cc": (prop.major, prop.minor),
                        "memory_bytes": int(prop.totalGlobalMem)})
    return devices, "" if devices else "no CUDA device found"


def _err_name(err) -> str:
    return getattr(err, "name", str(err))


class _CapturingLogger:
    """A TensorRT ILogger that keeps messages for error reports and forwards them to logging."""

    def __new__(cls, trt):
        class Impl(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)
                self.messages: list[tuple[str, str]] = []

            def log(self, severity, msg):
                sev = getattr(severity, "name", str(severity))
                self.messages.append((sev, msg))
                # Errors are collected and raised with the failure they cause; GPU-less
                # builds log driver "errors" that are expected, so they go out as warnings.
                level = {"INTERNAL_ERROR": logging.ERROR, "ERROR": logging.WARNING,
                         "WARNING": logging.INFO}.get(sev, logging.DEBUG)
                logger.log(level, "TensorRT: %s", msg)

            def errors(self) -> list[str]:
                return [m for s, m in self.messages if s in ("ERROR", "INTERNAL_ERROR")]

        return Impl()


def _progress_monitor(trt, progress: Callable[[str, float], None] | None):
    if progress is None or not hasattr(trt, "IProgressMonitor"):
        return None

    class Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)
            self._phases: dict[str, tuple[int, int]] = {}
            self._lock = threading.Lock()

        def phase_start(self, phase_name, parent_phase, num_steps):
            with self._lock:
                self._phases[phase_name] = (0, max(int(num_steps), 1))
            if parent_phase is None:
                progress(f"TensorRT: {phase_name}", 0.0)

        def step_complete(self, phase_name, step):
            with self._lock:
                _, total = self._phases.get(phase_name, (0, 1))
                self._phases[phase_name] = (step + 1, total)
            return True  # False would cancel the build

        def phase_finish(self, phase_name):
            with self._lock:
                self._phases.pop(phase_name, None)

    return Monitor()


def parse_onnx(trt, onnx_path: Path, trt_logger):
    """Parse an ONNX file into a strongly typed network.

    Returns:
        (builder, network, parser) - keep all three alive while building.

    Raises:
        EngineBuildError: listing every parser error (node, operator, description).
    """
    builder = trt.Builder(trt_logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, trt_logger)
    ok = parser.parse_from_file(str(onnx_path))
    if not ok or parser.num_errors:
        errors = []
        for i in range(parser.num_errors):
            e = parser.get_error(i)
            where = ", ".join(x for x in (
                f"node {e.node()}" if e.node() >= 0 else "",
                f"{e.node_name()!r}" if e.node_name() else "",
                f"op {e.node_operator()}" if e.node_operator() else "") if x)
            errors.append(f"[{getattr(e.code(), 'name', e.code())}] {where}: {e.desc()}".strip())
        if not errors:
            errors = trt_logger.errors() or ["the parser reported failure without an error message"]
        raise EngineBuildError(f"TensorRT cannot parse {onnx_path.name} ({len(errors)} error(s)):\n  "
                               + "\n  ".join(errors))
    return builder, network, parser


def build_plan(backend: str, info: ModelInfo, onnx_path: Path, plan_path: Path,
               progress: Callable[[str, float], None] | None = None) -> dict:
    """Build a serialized TensorRT engine from an FP32/FP16/QDQ ONNX file.

    Args:
        backend: ``"tensorrt"`` or ``"tensorrt_rtx"``.
        info: the source model (its dynamic dimension ranges make the profile).
        onnx_path: the precision's ONNX file.
        plan_path: where the plan is written.
        progress: optional ``progress(stage, fraction)`` callback.

    Returns:
        Build details for the manifest: TensorRT version, layer count, profile,
        warnings.

    Raises:
        BackendUnavailableError: the TensorRT module is missing.
        EngineBuildError: parser errors, missing dimension ranges, or a failed build.
    """
    trt = import_trt(backend)
    tlog = _CapturingLogger(trt)
    builder, network, parser = parse_onnx(trt, onnx_path, tlog)
    config = builder.create_builder_config()
    if hasattr(config, "set_memory_pool_limit"):
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    monitor = _progress_monitor(trt, progress)
    if monitor is not None:
        config.progress_monitor = monitor
    profile_shapes = {}
    dynamic = [network.get_input(i) for i in range(network.num_inputs)
               if any(d < 0 for d in network.get_input(i).shape)]
    if dynamic:
        ranges = info.profile()
        profile = builder.create_optimization_profile()
        for tensor in dynamic:
            if tensor.name not in ranges:
                raise EngineBuildError(f"input {tensor.name!r} of the network is not an input of {info.path.name}")
            mn, opt, mx = ranges[tensor.name]
            profile.set_shape(tensor.name, mn, opt, mx)
            profile_shapes[tensor.name] = [list(mn), list(opt), list(mx)]
        config.add_optimization_profile(profile)
    if progress:
        progress("TensorRT: building", 0.0)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        errs = tlog.errors() or ["no error message from TensorRT"]
        raise EngineBuildError(f"TensorRT could not build {onnx_path.name}:\n  " + "\n  ".join(errs))
    plan_path.write_bytes(bytes(plan))
    return {"trt_module": TRT_MODULES[backend], "trt_version": trt.__version__,
            "layers": network.num_layers, "profile": profile_shapes,
            "warnings": [m for s, m in tlog.messages if s == "WARNING"][:20]}


def plan_validity(backend: str, plan: bytes) -> tuple[bool, str]:
    """The runtime's own validity check of a plan (where the runtime has one).

    Returns:
        (usable, reason). Without ``get_engine_validity`` or without a GPU (the check
        needs the driver) the plan is reported usable, with the reason it was not checked.
    """
    trt = import_trt(backend)
    devices, why = cuda_devices()
    if not devices:
        return True, f"validity not checked: {why}"
    runtime = trt.Runtime(_CapturingLogger(trt))
    if not hasattr(runtime, "get_engine_validity"):
        return True, ""
    validity, diag = runtime.get_engine_validity(plan)
    name = getattr(validity, "name", str(validity))
    if name == "INVALID":
        flags = [f.name for f in trt.EngineInvalidityDiagnostics.__members__.values()
                 if int(diag) & int(f)] if hasattr(trt, "EngineInvalidityDiagnostics") else []
        return False, f"TensorRT reports the plan invalid here ({', '.join(flags) or diag})"
    return True, "" if name == "VALID" else f"plan usable but {name.lower()} here"


class TrtRunner(BaseRunner):
    """Runs a serialized TensorRT plan through cuda-python.

    Buffers are allocated once for the optimisation profile's maximum shapes
    (device buffers plus pinned host buffers); each ``infer`` copies inputs
    host-to-device asynchronously, enqueues ``execute_async_v3`` and copies the
    outputs back on one stream. Outputs are returned as new arrays.

    Args:
        plan_path: the plan file.
        backend: ``"tensorrt"`` or ``"tensorrt_rtx"``.
        precision: precision of the ONNX file the plan was built from.
        max_shapes: input name to the largest shape that will be fed (default: the
            engine's profile maximum).
        use_cuda_graph: capture the enqueue in a CUDA graph when all shapes are static.

    Raises (from ``open``):
        BackendUnavailableError: TensorRT or cuda-python missing, no GPU.
        ModelLoadError: the plan cannot be deserialized.
    """

    def __init__(self, plan_path: Path, backend: str = "tensorrt_rtx",
                 precision: Precision | str = Precision.FP32, name: str = "",
                 max_shapes: Mapping[str, tuple[int, ...]] | None = None, use_cuda_graph: bool = True):
        super().__init__(precision, name or Path(plan_path).name)
        self.backend = backend
        self.plan_path = Path(plan_path)
        self._max_shapes = dict(max_shapes or {})
        self._use_cuda_graph = use_cuda_graph
        self._graph_exec = None
        self._graph_shapes = None

    def _open_impl(self) -> None:
        trt = import_trt(self.backend)
        try:
            from cuda.bindings import runtime as cudart
        except ImportError as exc:
            raise BackendUnavailableError(f"the TensorRT runner needs cuda-python: {exc}") from exc
        self._cudart = cudart
        devices, reason = cuda_devices()
        if not devices:
            raise BackendUnavailableError(f"{self.backend} cannot run engines here: {reason}")
        self._trt = trt
        self._tlog = _CapturingLogger(trt)
        self._runtime = trt.Runtime(self._tlog)
        self._engine = self._runtime.deserialize_cuda_engine(self.plan_path.read_bytes())
        if self._engine is None:
            errs = "; ".join(self._tlog.errors()) or "no message"
            raise ModelLoadError(f"TensorRT cannot deserialize {self.plan_path}: {errs}")
        self._context = self._engine.create_execution_context()
        if self._context is None:
            raise ModelLoadError(f"TensorRT cannot create an execution context for {self.plan_path}")
        self._stream = self._check(cudart.cudaStreamCreate())
        # name -> (device ptr, pinned host view, bytes, pinned host ptr)
        self._buffers: dict[str, tuple[int, np.ndarray, int, int]] = {}
        ins, outs = [], []
        for i in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
            shape = tuple(self._engine.get_tensor_shape(name))
            is_input = self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            spec = TensorSpec(name, dtype, tuple(None if d < 0 else int(d) for d in shape),
                              tuple(None for _ in shape))
            (ins if is_input else outs).append(spec)
            if is_input:
                if any(d < 0 for d in shape):
                    max_shape = (self._max_shapes.get(name)
                                 or tuple(self._engine.get_tensor_profile_shape(name, 0)[2]))
                else:
                    max_shape = shape
                self._max_shapes[name] = tuple(max_shape)
        self._input_specs, self._output_specs = tuple(ins), tuple(outs)
        # Output maxima follow from the input maxima.
        for spec in self._input_specs:
            self._context.set_input_shape(spec.name, self._max_shapes[spec.name])
        for spec in self._input_specs + self._output_specs:
            shape = self._max_shapes.get(spec.name) or tuple(self._context.get_tensor_shape(spec.name))
            self._alloc(spec.name, spec.dtype, shape)
        self._static = all(None not in s.shape for s in self._input_specs)

    def _check(self, result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            raise ModelLoadError(f"CUDA call failed: {_err_name(err)}")
        return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)

    def _alloc(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        cudart = self._cudart
        nbytes = int(np.prod(shape)) * dtype.itemsize
        dptr = self._check(cudart.cudaMalloc(nbytes))
        hptr = self._check(cudart.cudaMallocHost(nbytes))
        import ctypes

        host = np.ctypeslib.as_array((ctypes.c_byte * nbytes).from_address(int(hptr))).view(dtype)
        self._buffers[name] = (int(dptr), host, nbytes, int(hptr))
        self._context.set_tensor_address(name, int(dptr))

    def _infer_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cudart, stream = self._cudart, self._stream
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        shapes = {}
        for spec in self._input_specs:
            arr = np.ascontiguousarray(feeds[spec.name])
            mx = self._max_shapes[spec.name]
            if any(a > m for a, m in zip(arr.shape, mx)):
                from avatar_app.core.errors import InputError

                raise InputError(f"input {spec.name!r} shape {arr.shape} exceeds the engine's "
                                 f"maximum {mx} (optimisation profile)")
            dptr, host, _, hptr = self._buffers[spec.name]
            host[:arr.size] = arr.reshape(-1)
            self._check(cudart.cudaMemcpyAsync(dptr, hptr, arr.nbytes, h2d, stream))
            if not self._context.set_input_shape(spec.name, arr.shape):
                raise ModelLoadError(f"TensorRT rejected input shape {arr.shape} for {spec.name!r}")
            shapes[spec.name] = arr.shape
        if self._static and self._use_cuda_graph and self._graph_exec is not None:
            self._check(cudart.cudaGraphLaunch(self._graph_exec, stream))
        elif not self._context.execute_async_v3(int(stream)):
            raise ModelLoadError(f"TensorRT execution of {self.name} failed: "
                                 + ("; ".join(self._tlog.errors()[-3:]) or "no message"))
        out = {}
        out_shapes = {s.name: tuple(self._context.get_tensor_shape(s.name)) for s in self._output_specs}
        for spec in self._output_specs:
            dptr, host, _, hptr = self._buffers[spec.name]
            n = int(np.prod(out_shapes[spec.name])) * spec.dtype.itemsize
            self._check(cudart.cudaMemcpyAsync(hptr, dptr, n, d2h, stream))
        self._check(cudart.cudaStreamSynchronize(stream))
        for spec in self._output_specs:
            shape = out_shapes[spec.name]
            out[spec.name] = self._buffers[spec.name][1][:int(np.prod(shape))].reshape(shape).copy()
        if self._static and self._use_cuda_graph and self._graph_exec is None:
            self._capture_graph()
        return out

    def _capture_graph(self) -> None:
        """Capture one enqueue in a CUDA graph (after a first normal enqueue, as TensorRT requires)."""
        cudart, stream = self._cudart, self._stream
        try:
            self._check(cudart.cudaStreamBeginCapture(
                stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
            ok = self._context.execute_async_v3(int(stream))
            graph = self._check(cudart.cudaStreamEndCapture(stream))
            if not ok:
                raise ModelLoadError("enqueue failed during capture")
            self._graph_exec = self._check(cudart.cudaGraphInstantiate(graph, 0))
        except ModelLoadError as exc:
            logger.info("CUDA graph capture not used for %s: %s", self.name, exc)
            self._use_cuda_graph = False

    def _close_impl(self) -> None:
        cudart = self._cudart
        for dptr, _, _, hptr in self._buffers.values():
            cudart.cudaFree(dptr)
            cudart.cudaFreeHost(hptr)
        self._buffers.clear()
        if self._graph_exec is not None:
            cudart.cudaGraphExecDestroy(self._graph_exec)
            self._graph_exec = None
        cudart.cudaStreamDestroy(self._stream)
        self._context = self._engine = self._runtime = None
