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
        cudart = _cudart()
    except BackendUnavailableError as exc:
        return [], str(exc)
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


def _cudart():
    """cuda-python's runtime module (``cuda.bindings.runtime``, or ``cuda.cudart`` before 12.6).

    Raises:
        BackendUnavailableError: cuda-python is not installed.
    """
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart
        except ImportError as exc:
            raise BackendUnavailableError(f"the TensorRT runner needs cuda-python: {exc}") from exc
    return cudart


def cuda_check(result):
    """Unpack a cuda-python ``(err, *values)`` tuple; raise on an error.

    Raises:
        ModelLoadError: the CUDA call failed (its error name in the message).
    """
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise ModelLoadError(f"CUDA call failed: {_err_name(err)}")
    return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)


class CudaBuffer:
    """One device buffer with a pinned host staging buffer of the same size.

    Allocated once (``cudaMalloc`` + ``cudaMallocHost``); copies are asynchronous
    on the caller's stream. ``host`` is a flat numpy view of the pinned memory,
    reused by every call: copy out of it before the next call.

    Args:
        nbytes: capacity in bytes.
        dtype: element type of ``host``.

    Raises:
        BackendUnavailableError: no cuda-python. ModelLoadError: allocation failed.
    """

    def __init__(self, nbytes: int, dtype: np.dtype):
        import ctypes

        self._rt = _cudart()
        self.nbytes = int(nbytes)
        self.dtype = np.dtype(dtype)
        self.device_ptr = int(cuda_check(self._rt.cudaMalloc(self.nbytes)))
        try:
            self.host_ptr = int(cuda_check(self._rt.cudaMallocHost(self.nbytes)))
        except ModelLoadError:
            self._rt.cudaFree(self.device_ptr)
            raise
        raw = (ctypes.c_byte * self.nbytes).from_address(self.host_ptr)
        self.host = np.ctypeslib.as_array(raw).view(self.dtype)

    def upload(self, array: np.ndarray, stream) -> None:
        """Stage ``array`` in pinned memory and enqueue a host-to-device copy on ``stream``."""
        flat = np.ascontiguousarray(array, dtype=self.dtype).reshape(-1)
        if flat.nbytes > self.nbytes:
            raise ModelLoadError(f"{flat.nbytes} bytes do not fit a {self.nbytes}-byte buffer")
        self.host[:flat.size] = flat
        cuda_check(self._rt.cudaMemcpyAsync(self.device_ptr, self.host_ptr, flat.nbytes,
                                            self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream))

    def download(self, nbytes: int, stream) -> None:
        """Enqueue a device-to-host copy of the first ``nbytes`` into the pinned buffer."""
        cuda_check(self._rt.cudaMemcpyAsync(self.host_ptr, self.device_ptr, int(nbytes),
                                            self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream))

    def result(self, shape: tuple[int, ...]) -> np.ndarray:
        """A new array of ``shape`` copied from the pinned buffer (after the stream synchronised)."""
        n = int(np.prod(shape))
        return self.host[:n].reshape(shape).copy()

    def free(self) -> None:
        """Release both buffers. Idempotent."""
        if self.device_ptr:
            self._rt.cudaFree(self.device_ptr)
            self._rt.cudaFreeHost(self.host_ptr)
            self.device_ptr = self.host_ptr = 0


class TrtRunner(BaseRunner):
    """Runs a serialized TensorRT plan through cuda-python.

    Buffers are allocated once for the optimisation profile's maximum shapes
    (:class:`CudaBuffer`: device memory plus pinned host memory); each ``infer``
    copies inputs host-to-device asynchronously, enqueues ``execute_async_v3``
    and copies the outputs back on one stream. When every input shape is
    static, the enqueue is captured once in a CUDA graph and replayed.
    Outputs are returned as new arrays.

    Args:
        plan_path: the plan file.
        backend: ``"tensorrt"`` or ``"tensorrt_rtx"``.
        precision: precision of the ONNX file the plan was built from.
        name: label for messages.
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
        self._buffers: dict[str, CudaBuffer] = {}
        self._stream = None

    def _open_impl(self) -> None:
        trt = import_trt(self.backend)
        cudart = self._rt = _cudart()
        devices, reason = cuda_devices()
        if not devices:
            raise BackendUnavailableError(f"{self.backend} cannot run engines here: {reason}")
        self._tlog = _CapturingLogger(trt)
        self._runtime = trt.Runtime(self._tlog)
        self._engine = self._runtime.deserialize_cuda_engine(self.plan_path.read_bytes())
        if self._engine is None:
            errs = "; ".join(self._tlog.errors()) or "no message"
            raise ModelLoadError(f"TensorRT cannot deserialize {self.plan_path}: {errs}")
        self._context = self._engine.create_execution_context()
        if self._context is None:
            raise ModelLoadError(f"TensorRT cannot create an execution context for {self.plan_path}")
        self._stream = cuda_check(cudart.cudaStreamCreate())
        ins, outs = [], []
        for i in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
            shape = tuple(self._engine.get_tensor_shape(name))
            spec = TensorSpec(name, dtype, tuple(None if d < 0 else int(d) for d in shape),
                              tuple(None for _ in shape))
            if self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                ins.append(spec)
                if any(d < 0 for d in shape):
                    self._max_shapes.setdefault(name, tuple(self._engine.get_tensor_profile_shape(name, 0)[2]))
                else:
                    self._max_shapes[name] = shape
            else:
                outs.append(spec)
        self._input_specs, self._output_specs = tuple(ins), tuple(outs)
        for spec in self._input_specs:  # output maxima follow from the input maxima
            self._context.set_input_shape(spec.name, self._max_shapes[spec.name])
        for spec in self._input_specs + self._output_specs:
            shape = self._max_shapes.get(spec.name) or tuple(self._context.get_tensor_shape(spec.name))
            buf = CudaBuffer(int(np.prod(shape)) * spec.dtype.itemsize, spec.dtype)
            self._buffers[spec.name] = buf
            self._context.set_tensor_address(spec.name, buf.device_ptr)
        self._static = all(None not in s.shape for s in self._input_specs)

    def _infer_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from avatar_app.core.errors import InputError

        cudart, stream = self._rt, self._stream
        for spec in self._input_specs:
            arr = feeds[spec.name]
            mx = self._max_shapes[spec.name]
            if any(a > m for a, m in zip(arr.shape, mx)):
                raise InputError(f"input {spec.name!r} shape {arr.shape} exceeds the engine's "
                                 f"maximum {mx} (optimisation profile)")
            self._buffers[spec.name].upload(arr, stream)
            if not self._context.set_input_shape(spec.name, arr.shape):
                raise ModelLoadError(f"TensorRT rejected input shape {arr.shape} for {spec.name!r}")
        if self._graph_exec is not None:
            cuda_check(cudart.cudaGraphLaunch(self._graph_exec, stream))
        elif not self._context.execute_async_v3(int(stream)):
            raise ModelLoadError(f"TensorRT execution of {self.name} failed: "
                                 + ("; ".join(self._tlog.errors()[-3:]) or "no message"))
        shapes = {s.name: tuple(self._context.get_tensor_shape(s.name)) for s in self._output_specs}
        for spec in self._output_specs:
            self._buffers[spec.name].download(int(np.prod(shapes[spec.name])) * spec.dtype.itemsize, stream)
        cuda_check(cudart.cudaStreamSynchronize(stream))
        out = {s.name: self._buffers[s.name].result(shapes[s.name]) for s in self._output_specs}
        if self._static and self._use_cuda_graph and self._graph_exec is None:
            self._graph_exec = capture_graph(stream, lambda: self._context.execute_async_v3(int(stream)))
            self._use_cuda_graph = self._graph_exec is not None
        return out

    def _close_impl(self) -> None:
        for buf in self._buffers.values():
            buf.free()
        self._buffers.clear()
        if self._graph_exec is not None:
            self._rt.cudaGraphExecDestroy(self._graph_exec)
            self._graph_exec = None
        if self._stream is not None:
            self._rt.cudaStreamDestroy(self._stream)
            self._stream = None
        self._context = self._engine = self._runtime = None


def capture_graph(stream, enqueue: Callable[[], object]):
    """Capture the work ``enqueue()`` puts on ``stream`` into an instantiated CUDA graph.

    TensorRT requires one ordinary enqueue before capture (shape-dependent setup);
    call this after the first inference.

    Returns:
        The ``cudaGraphExec_t``, or None when capture is not possible (logged).
    """
    rt = _cudart()
    try:
        cuda_check(rt.cudaStreamBeginCapture(stream, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
        ok = enqueue()
        graph = cuda_check(rt.cudaStreamEndCapture(stream))
        if ok is False:
            raise ModelLoadError("enqueue failed during capture")
        graph_exec = cuda_check(rt.cudaGraphInstantiate(graph, 0))
        rt.cudaGraphDestroy(graph)
        return graph_exec
    except ModelLoadError as exc:
        logger.info("CUDA graph capture not used: %s", exc)
        return None
