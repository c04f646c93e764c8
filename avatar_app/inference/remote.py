"""The remote backend: engines served by Triton Inference Server (``avatar-app serve``), used over gRPC.

Three layers, each a runner of the engine layer (:class:`~avatar_app.inference.base.BaseRunner`):

- :class:`TritonRunner` runs one served model through tritonclient's gRPC client.
  When client and server share a host (a loopback address and the server's session
  file readable, see :func:`session_path`) the tensors travel through system shared
  memory registered with the server instead of inside the gRPC messages.
- :class:`RemoteRunner` is what the app uses: a :class:`TritonRunner` verified on
  the model's validation set against the FP32 reference (like every local engine),
  with a local engine beside it. If the server goes away, the call that notices it
  (within the call timeout, 0.5 s by default) is answered by the local engine and
  every later call too, until a background thread finds the server again, verifies
  it again and switches back. Each switch is a :class:`SwitchEvent`.
- :class:`RemoteBackend` is the registry entry ``"remote"``. It builds nothing (the
  server builds and verifies its own engines), so :class:`EngineManager` opens it
  through :meth:`RemoteBackend.open_direct`, and plans without an explicit backend
  choice leave it out (:attr:`Backend.automatic`). The server's URL is set with
  :func:`set_remote_url` or ``AVATAR_APP_REMOTE=grpc://HOST:PORT``.

The server describes its engines (model file SHA-256, backend, precision,
verification) through a small served model, :data:`INFO_MODEL`; a client uses a
served engine only when its SHA-256 equals the local model file's, so both sides
run the same weights. The precision is the server's choice (``avatar-app serve
--precision``); the client verifies at the tolerance of that precision.

Importing this module imports no tritonclient (it loads when a runner opens).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatar_app.core.clock import now_ns
from avatar_app.core.errors import BackendUnavailableError, EngineBuildError, InputError, ModelLoadError
from avatar_app.inference.backends import Backend, BackendStatus
from avatar_app.inference.base import BaseRunner, Precision
from avatar_app.inference.modelinfo import ModelInfo

logger = logging.getLogger(__name__)

#: Registry name of the backend.
BACKEND_NAME = "remote"
#: The label the UI shows for it.
BACKEND_LABEL = "Remote (Triton)"
#: Triton's default gRPC port.
DEFAULT_GRPC_PORT = 8001
#: Name of the served model that describes the served engines (JSON, see ``avatar_app.serve``).
INFO_MODEL = "avatar_app_engines"
#: Environment variable holding the server URL (``grpc://HOST:PORT``).
ENV_URL = "AVATAR_APP_REMOTE"
#: gRPC header Triton checks on the endpoints pytriton protects (shared memory, statistics):
#: Triton's ``--grpc-restricted-protocol`` key ``triton-access-token`` with its gRPC prefix.
ACCESS_HEADER = "triton-grpc-protocol-triton-access-token"
#: Default limit of one remote call, seconds: the fallback to the local engine
#: starts at most this long after the server stopped answering.
DEFAULT_TIMEOUT_S = 0.5
#: Limit of the calls made while (re)connecting (verification batches), seconds.
CONNECT_TIMEOUT_S = 10.0
#: Limit of the first questions to a server (is it live, what does it serve), seconds.
PROBE_TIMEOUT_S = 2.0
#: Seconds between two reconnection attempts while the server is away.
DEFAULT_RETRY_S = 0.5
#: Seconds between attempts while the server answers but its engine is refused
#: (another model file, or a failed verification): such a server rarely fixes itself.
REFUSED_RETRY_S = 30.0

_url_lock = threading.Lock()
_url_override: str | None = None


class ServerUnavailableError(BackendUnavailableError):
    """The Triton server cannot be reached, timed out, or failed a call.

    Attributes:
        detail: the gRPC/Triton error alone (without the server's address), for reports.
    """

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail or message


# -- URLs and the session file ---------------------------------------------------------
def parse_url(text: str) -> tuple[str, int]:
    """Host and port of ``grpc://HOST:PORT`` (also ``HOST:PORT``, ``HOST``, ``grpc://[::1]:8001``).

    Returns:
        (host without brackets, port); the port defaults to :data:`DEFAULT_GRPC_PORT`.

    Raises:
        InputError: another scheme, an empty host or a bad port.
    """
    raw = str(text).strip()
    rest = raw
    if "://" in raw:
        scheme, rest = raw.split("://", 1)
        if scheme.lower() != "grpc":
            raise InputError(f"remote server {raw!r}: only grpc://HOST:PORT is supported "
                             f"(Triton's gRPC endpoint, port {DEFAULT_GRPC_PORT} by default)")
    rest = rest.rstrip("/")
    port = DEFAULT_GRPC_PORT
    if rest.startswith("["):  # [IPv6]:port
        host, _, tail = rest[1:].partition("]")
        if tail:
            if not tail.startswith(":"):
                raise InputError(f"remote server {raw!r}: expected [HOST]:PORT")
            port_text = tail[1:]
        else:
            port_text = ""
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    else:  # a bare name or an IPv6 address without a port
        host, port_text = rest, ""
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise InputError(f"remote server {raw!r}: port must be 1..65535, not {port_text!r}")
        port = int(port_text)
    if not host:
        raise InputError(f"remote server {raw!r} has no host; write grpc://HOST:PORT")
    return host, port


def format_url(host: str, port: int) -> str:
    """``grpc://HOST:PORT`` (IPv6 hosts in brackets)."""
    return f"grpc://{_host_port(host, port)}"


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def session_path(grpc_port: int) -> Path:
    """The file a running ``avatar-app serve`` writes for local clients (mode 0600).

    It holds the server's process id, its ports and pytriton's access token for the
    protected endpoints (shared memory, statistics): a client that can read it runs
    as the same user on the same host, so it may use shared memory.
    """
    from avatar_app.inference.dirs import user_cache_dir

    return user_cache_dir() / "serve" / f"triton-{int(grpc_port)}.json"


def read_session(grpc_port: int) -> dict | None:
    """The session file of the server on ``grpc_port`` as a dict, or None (absent, unreadable, stale)."""
    path = session_path(grpc_port)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid = data.get("pid")
    if not isinstance(pid, int) or not _pid_alive(pid):
        return None
    return data


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def set_remote_url(url: str | None) -> None:
    """Choose the server the ``remote`` backend uses (None: back to ``AVATAR_APP_REMOTE``).

    Raises:
        InputError: a malformed URL.
    """
    global _url_override
    if url is not None:
        host, port = parse_url(url)
        url = format_url(host, port)
    with _url_lock:
        _url_override = url


def remote_url() -> str | None:
    """The server URL in effect (:func:`set_remote_url`, else ``AVATAR_APP_REMOTE``), or None."""
    with _url_lock:
        if _url_override is not None:
            return _url_override
    env = os.environ.get(ENV_URL, "").strip()
    return env or None


def tritonclient_version() -> str | None:
    """Installed tritonclient version, or None when it (or its gRPC part) cannot be imported."""
    from importlib.metadata import version

    try:
        import tritonclient.grpc  # noqa: F401
    except ImportError:
        return None
    try:
        return version("tritonclient")
    except Exception:  # noqa: BLE001 - metadata missing in odd installs
        return "unknown"


def _client(host: str, port: int):
    """A new tritonclient gRPC client (a new channel: no reconnection back-off inherited)."""
    try:
        import tritonclient.grpc as grpcclient
    except ImportError as exc:
        raise BackendUnavailableError(
            f"tritonclient is not installed ({exc}); install it with pip install 'avatar-app[serve]'") from exc
    return grpcclient.InferenceServerClient(_host_port(host, port))


def _error_text(exc: BaseException) -> str:
    msg = getattr(exc, "message", None)
    text = msg() if callable(msg) else str(exc)
    return " ".join(str(text).split())[:300] or type(exc).__name__


def _detail(exc: BaseException) -> str:
    """What went wrong, without the address the message around it names already."""
    return getattr(exc, "detail", None) or _error_text(exc)


def server_engines(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S, client=None) -> dict:
    """What the server at ``host:port`` serves: the JSON of its :data:`INFO_MODEL`.

    Returns:
        ``{"app_version": str, "models": {name: {"sha256", "backend", "precision",
        "engine", "max_batch_size", "verification"}}}``.

    Raises:
        ServerUnavailableError: the server does not answer, or is not an ``avatar-app serve``.
    """
    import tritonclient.grpc as grpcclient

    own = client is None
    client = client or _client(host, port)
    try:
        if not client.is_server_live(client_timeout=timeout_s):
            raise ServerUnavailableError(f"the server at {format_url(host, port)} is not live")
        inp = grpcclient.InferInput("request", [1], "INT32")
        inp.set_data_from_numpy(np.zeros(1, np.int32))
        res = client.infer(INFO_MODEL, [inp], client_timeout=timeout_s)
        raw = res.as_numpy("engines")
        return json.loads(bytes(raw.reshape(-1)[0]).decode())
    except ServerUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - grpc/tritonclient raise their own types
        raise ServerUnavailableError(
            f"no avatar-app server answers at {format_url(host, port)}: {_error_text(exc)}",
            _error_text(exc)) from exc
    finally:
        if own:
            client.close()


# -- one served model ----------------------------------------------------------------
class _ShmRegion:
    """One POSIX shared-memory object registered with the server as a system shared-memory region.

    Made with the standard library (:class:`multiprocessing.shared_memory.SharedMemory`);
    Triton maps the same object by its key (``shm_open`` name).
    """

    def __init__(self, client, name: str, nbytes: int, headers: dict):
        from multiprocessing import shared_memory

        self.name = name
        self.nbytes = int(nbytes)
        self.shm = shared_memory.SharedMemory(name=name, create=True, size=self.nbytes)
        self.key = "/" + self.shm.name.lstrip("/")
        try:
            client.register_system_shared_memory(name, self.key, self.nbytes, headers=headers,
                                                 client_timeout=CONNECT_TIMEOUT_S)
        except BaseException:
            self._free()
            raise

    def write(self, arr: np.ndarray) -> None:
        """Copy ``arr`` (C-contiguous) to the start of the region."""
        view = np.ndarray(arr.shape, arr.dtype, buffer=self.shm.buf)
        view[...] = arr
        del view

    def read(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A copy of the first ``prod(shape)`` values of the region."""
        view = np.ndarray(shape, dtype, buffer=self.shm.buf)
        out = view.copy()
        del view
        return out

    def _free(self) -> None:
        self.shm.close()
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass

    def release(self, client, headers: dict) -> None:
        """Unregister (when the server still answers) and delete the region."""
        if client is not None:
            try:
                client.unregister_system_shared_memory(self.name, headers=headers, client_timeout=1.0)
            except Exception as exc:  # noqa: BLE001 - the server may be gone already
                logger.debug("unregistering %s failed: %s", self.name, exc)
        self._free()


class TritonRunner(BaseRunner):
    """One model served by ``avatar-app serve``, over tritonclient gRPC (no fallback).

    Args:
        url: ``grpc://HOST:PORT`` of the server.
        info: the local model file's :class:`ModelInfo` (tensor specs; its SHA-256
            must equal the served model's).
        timeout_s: limit of one call, seconds.
        shared_memory: True/False to force the shared-memory path on or off; None
            (default): on when the host is a loopback address and the server's
            session file (:func:`session_path`) is readable.

    Attributes:
        server_engine: the server's own description of the engine
            (``face_recon.onnx on ort_cpu (fp32)``).
        server_info: the server's JSON entry of this model.
        uses_shared_memory: whether tensors travel through shared memory.

    Raises (from ``open``/``infer``):
        ServerUnavailableError: the server does not answer, times out or fails.
        ModelLoadError: the server does not serve this model file.

    Thread: ``infer`` from one thread at a time.
    """

    backend = BACKEND_NAME

    def __init__(self, url: str, info: ModelInfo, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 shared_memory: bool | None = None):
        super().__init__(Precision.FP32, info.path.name)
        self.host, self.port = parse_url(url)
        self.url = format_url(self.host, self.port)
        self.info = info
        self.model = info.name
        self.timeout_s = float(timeout_s)
        self._want_shm = shared_memory
        self._client = None
        self._regions: dict[str, _ShmRegion] = {}
        self._headers: dict = {}
        self.server_engine = ""
        self.server_info: dict = {}
        self.uses_shared_memory = False

    def _open_impl(self) -> None:
        client = _client(self.host, self.port)
        try:
            served = server_engines(self.host, self.port, PROBE_TIMEOUT_S, client).get("models", {})
            entry = served.get(self.model)
            if entry is None:
                raise ModelLoadError(f"the server at {self.url} does not serve {self.model} "
                                     f"(it serves {', '.join(sorted(served)) or 'nothing'})")
            if entry.get("sha256") != self.info.sha256:
                raise ModelLoadError(
                    f"the server at {self.url} serves another {self.model} model file "
                    f"(SHA-256 {str(entry.get('sha256'))[:12]}, here {self.info.sha256[:12]}): "
                    "install the same avatar-app version on both machines")
            if not client.is_model_ready(self.model, client_timeout=CONNECT_TIMEOUT_S):
                raise ServerUnavailableError(f"{self.model} is not ready on the server at {self.url}")
        except (ModelLoadError, ServerUnavailableError):
            client.close()
            raise
        except Exception as exc:  # noqa: BLE001
            client.close()
            raise ServerUnavailableError(f"{self.url}: {_error_text(exc)}") from exc
        self._client = client
        self.server_info = entry
        self.server_engine = str(entry.get("engine", ""))
        self.precision = Precision.parse(entry.get("precision", "fp32"))
        self._input_specs = tuple(self.info.inputs)
        self._output_specs = tuple(self.info.outputs)
        self.uses_shared_memory = False
        self._setup_shared_memory()

    def _setup_shared_memory(self) -> None:
        want = self._want_shm
        session = read_session(self.port) if is_loopback(self.host) else None
        if want is False or (want is None and session is None):
            return
        if session is None or not session.get("token"):
            logger.info("shared memory with %s not possible: no readable session file %s", self.url,
                        session_path(self.port))
            return
        self._headers = {ACCESS_HEADER: session["token"]}
        self.uses_shared_memory = True

    def _region(self, tensor: str, nbytes: int) -> _ShmRegion:
        """The region of ``tensor`` with at least ``nbytes`` bytes (made or regrown here)."""
        r = self._regions.get(tensor)
        if r is not None and r.nbytes >= nbytes:
            return r
        if r is not None:
            r.release(self._client, self._headers)
        size = max(int(nbytes), 4096)
        size = 1 << (size - 1).bit_length()  # powers of two: few regrowths
        name = f"avatar_app_{os.getpid()}_{id(self) & 0xFFFFFF:x}_{self.model}_{tensor}"
        r = _ShmRegion(self._client, name, size, self._headers)
        self._regions[tensor] = r
        return r

    def _output_shapes(self, feeds: Mapping[str, np.ndarray]) -> dict[str, tuple[int, ...]] | None:
        """Output shapes known before the call (dynamic dims named like an input's), else None."""
        sizes: dict[str, int] = {}
        for spec in self._input_specs:
            for axis, name in enumerate(spec.dim_names):
                if name:
                    sizes[name] = feeds[spec.name].shape[axis]
        out = {}
        for spec in self._output_specs:
            shape = []
            for size, name in zip(spec.shape, spec.dim_names or (None,) * len(spec.shape)):
                if size is None:
                    if not name or name not in sizes:
                        return None
                    size = sizes[name]
                shape.append(size)
            out[spec.name] = tuple(shape)
        return out

    def _infer_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import np_to_triton_dtype

        if self._client is None:
            raise ServerUnavailableError(f"not connected to {self.url}")
        try:
            out_shapes = self._output_shapes(feeds) if self.uses_shared_memory else None
            inputs = [grpcclient.InferInput(s.name, list(feeds[s.name].shape), np_to_triton_dtype(s.dtype))
                      for s in self._input_specs]
            outputs = [grpcclient.InferRequestedOutput(s.name) for s in self._output_specs]
            if out_shapes is not None:
                try:
                    self._bind_shared_memory(feeds, out_shapes, inputs, outputs)
                except Exception as exc:  # noqa: BLE001 - e.g. another /dev/shm (a container): plain gRPC
                    logger.warning("shared memory with %s failed (%s); sending tensors over gRPC", self.url,
                                   _error_text(exc))
                    self._release_regions()
                    self.uses_shared_memory, out_shapes = False, None
                    outputs = [grpcclient.InferRequestedOutput(s.name) for s in self._output_specs]
            if out_shapes is None:
                for spec, inp in zip(self._input_specs, inputs):
                    inp.set_data_from_numpy(np.ascontiguousarray(feeds[spec.name]))
            res = self._client.infer(self.model, inputs, outputs=outputs, client_timeout=self.timeout_s)
            result = {}
            for spec in self._output_specs:
                if out_shapes is not None:
                    meta = res.get_output(spec.name)
                    shape = tuple(int(d) for d in meta.shape)
                    arr = self._regions["out_" + spec.name].read(shape, spec.dtype)
                else:
                    arr = res.as_numpy(spec.name)
                if arr is None:
                    raise ServerUnavailableError(f"the server's {self.model} gave no output {spec.name!r}")
                result[spec.name] = np.array(arr, dtype=spec.dtype, copy=True)
            return result
        except ServerUnavailableError:
            raise
        except Exception as exc:  # noqa: BLE001 - grpc/tritonclient/shm raise their own types
            raise ServerUnavailableError(f"{self.model} on {self.url}: {_error_text(exc)}",
                                         _error_text(exc)) from exc

    def _bind_shared_memory(self, feeds, out_shapes, inputs, outputs) -> None:
        """Copy the inputs into their regions and point every input and output at its region."""
        for spec, inp in zip(self._input_specs, inputs):
            arr = np.ascontiguousarray(feeds[spec.name])
            region = self._region("in_" + spec.name, arr.nbytes)
            region.write(arr)
            inp.set_shared_memory(region.name, arr.nbytes)
        for spec, req in zip(self._output_specs, outputs):
            nbytes = int(np.prod(out_shapes[spec.name])) * spec.dtype.itemsize
            region = self._region("out_" + spec.name, nbytes)
            req.set_shared_memory(region.name, region.nbytes)

    def _release_regions(self) -> None:
        regions, self._regions = self._regions, {}
        for r in regions.values():
            try:
                r.release(self._client, self._headers)
            except Exception as exc:  # noqa: BLE001 - releasing must not raise
                logger.debug("releasing %s failed: %s", r.name, exc)

    def _close_impl(self) -> None:
        self._release_regions()
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - closing must not raise
                logger.debug("closing the client of %s: %s", self.url, exc)

    def describe(self) -> str:
        """``face_recon.onnx on remote grpc://HOST:PORT (ort_cpu (fp32) on the server, shared memory)``."""
        how = ", shared memory" if self.uses_shared_memory else ""
        engine = self.server_engine.split(" on ", 1)[-1] if self.server_engine else self.precision.value
        return f"{self.name} on {BACKEND_NAME} {self.url} ({engine} on the server{how})"


# -- remote with a local fallback -----------------------------------------------------------
@dataclass(frozen=True)
class SwitchEvent:
    """One switch of a :class:`RemoteRunner` between the server and the local engine.

    Attributes:
        to: ``"local"`` (the server went away or was refused) or ``"remote"`` (it answers again).
        t_ns: process clock (:func:`~avatar_app.core.clock.now_ns`) of the switch.
        wall_s: wall-clock time of the switch (``time.time()``), seconds since the epoch.
        reason: why, for the user.
        model: the model name.
    """

    to: str
    t_ns: int
    wall_s: float
    reason: str
    model: str

    def clock(self) -> str:
        """The wall-clock time as ``HH:MM:SS.mmm`` (local time)."""
        return time.strftime("%H:%M:%S", time.localtime(self.wall_s)) + f".{int(self.wall_s * 1000) % 1000:03d}"


class RemoteRunner(BaseRunner):
    """A served engine with a local engine standing by (the ``remote`` backend's runner).

    Args:
        url: ``grpc://HOST:PORT``.
        info: the local model's :class:`ModelInfo`.
        local: the local fallback engine (opened by :meth:`open` if it is not open).
        reference: returns an open FP32 reference runner (for the verification's
            expected outputs); None: no verification of the served engine.
        timeout_s: limit of one remote call, seconds (the fallback starts within it).
        retry_s: seconds between reconnection attempts.
        shared_memory: passed to :class:`TritonRunner`.
        on_switch: called with each :class:`SwitchEvent` (from the thread that saw it).

    Attributes:
        events: every :class:`SwitchEvent`, oldest first.
        verification: the verification the served engine passed at the latest connection.

    Raises (from ``open``):
        ModelLoadError, BackendUnavailableError: the local engine cannot open (the server is
            not needed to open: without it, calls run locally until it answers).

    Thread: ``infer`` from one thread at a time; reconnection runs on a daemon thread.
    """

    backend = BACKEND_NAME

    def __init__(self, url: str, info: ModelInfo, local: BaseRunner, *,
                 reference: Callable[[], BaseRunner] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retry_s: float = DEFAULT_RETRY_S, shared_memory: bool | None = None,
                 on_switch: Callable[[SwitchEvent], None] | None = None):
        super().__init__(local.precision, info.path.name)
        self.host, self.port = parse_url(url)
        self.url = format_url(self.host, self.port)
        self.info = info
        self.local = local
        self.timeout_s = float(timeout_s)
        self.retry_s = float(retry_s)
        self.on_switch = on_switch
        self.events: list[SwitchEvent] = []
        self._reference = reference
        self._shm = shared_memory
        self._expected: tuple[dict, list] | None = None
        self._remote: TritonRunner | None = None
        self._swap = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.remote_calls = 0
        self.local_calls = 0

    # -- state ---------------------------------------------------------------------
    @property
    def is_remote(self) -> bool:
        """Whether calls go to the server now."""
        return self._remote is not None

    def _event(self, to: str, reason: str) -> SwitchEvent:
        ev = SwitchEvent(to, now_ns(), time.time(), reason, self.info.name)
        self.events.append(ev)
        (logger.warning if to == "local" else logger.info)(
            "%s: %s at %s (%s)", self.info.name,
            "local engine" if to == "local" else f"server {self.url}", ev.clock(), reason)
        if self.on_switch is not None:
            try:
                self.on_switch(ev)
            except Exception:  # noqa: BLE001 - a listener must not break inference
                logger.exception("on_switch listener failed")
        return ev

    # -- lifecycle -----------------------------------------------------------------------
    def _open_impl(self) -> None:
        self.local.open()
        self._input_specs = tuple(self.local.input_specs)
        self._output_specs = tuple(self.local.output_specs)
        self._closed.clear()
        try:
            self._connect()
        except Exception as exc:  # noqa: BLE001 - any failure: local engine until the server answers
            self._event("local", f"the server at {self.url} cannot be used ({_detail(exc)})")
            self._start_reconnect(exc)

    def _connect(self) -> None:
        """Open, verify and switch to the served engine.

        Raises:
            ServerUnavailableError, ModelLoadError, EngineBuildError: not usable now.
        """
        runner = TritonRunner(self.url, self.info, timeout_s=CONNECT_TIMEOUT_S, shared_memory=self._shm)
        runner.open()
        try:
            if self._reference is not None:
                from avatar_app.inference.verify import verify

                data, source, expected, batch = self._expected_outputs()
                tol = self.info.tolerances[runner.precision]
                result = verify(runner, data, tol, expected=expected, batch=batch, data_source=source)
                if not result.passed:
                    raise EngineBuildError(f"the served {self.info.name} failed verification: {result.reason}")
                self.verification = result
            runner.timeout_s = self.timeout_s
        except BaseException:
            runner.close()
            raise
        with self._swap:
            old, self._remote = self._remote, runner
            self.precision = runner.precision
        if old is not None:
            old.close()

    def _expected_outputs(self):
        """Validation set, its source, the FP32 reference outputs and the batch size (computed once)."""
        if self._expected is None:
            from avatar_app.inference.calibration import validation_set
            from avatar_app.inference.verify import reference_outputs

            data, source = validation_set(self.info)
            b = self.info.dynamic_dims.get("B")
            batch = b.max if b is not None else 1
            ref = self._reference()
            try:
                expected = reference_outputs(ref, data, batch)
            finally:
                ref.close()
            self._expected = (data, source, expected, batch)
        return self._expected

    def _start_reconnect(self, cause: BaseException | None = None) -> None:
        if self._closed.is_set() or (self._thread is not None and self._thread.is_alive()):
            return
        refused = isinstance(cause, (ModelLoadError, EngineBuildError))
        self._thread = threading.Thread(target=self._reconnect_loop, args=(refused,),
                                        name=f"remote-reconnect-{self.info.name}", daemon=True)
        self._thread.start()

    def _reconnect_loop(self, refused: bool) -> None:
        while not self._closed.wait(REFUSED_RETRY_S if refused else self.retry_s):
            if self._remote is not None:
                return
            try:
                self._connect()
            except (ModelLoadError, EngineBuildError) as exc:
                if not refused:
                    logger.warning("%s: the server at %s answers but is refused: %s", self.info.name, self.url, exc)
                refused = True
                continue
            except Exception as exc:  # noqa: BLE001 - still away
                logger.debug("%s: %s still unavailable: %s", self.info.name, self.url, exc)
                refused = False
                continue
            if self._closed.is_set():
                return
            self._event("remote", f"the server at {self.url} answers again ({self._remote.server_engine})")
            return

    def _lost(self, runner: TritonRunner, exc: BaseException) -> None:
        with self._swap:
            if self._remote is not runner:
                return
            self._remote = None
            self.precision = self.local.precision
        self._event("local", f"the server at {self.url} stopped answering ({_detail(exc)})")
        threading.Thread(target=runner.close, name="remote-close", daemon=True).start()
        self._start_reconnect(exc)

    def _infer_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        runner = self._remote
        if runner is not None:
            try:
                out = runner.infer(feeds)
                self.remote_calls += 1
                return out
            except (ServerUnavailableError, ModelLoadError) as exc:
                self._lost(runner, exc)
        self.local_calls += 1
        return self.local.infer(feeds)

    def _close_impl(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=CONNECT_TIMEOUT_S)
        with self._swap:
            runner, self._remote = self._remote, None
        if runner is not None:
            runner.close()
        self.local.close()

    def describe(self) -> str:
        """Where calls go now, and the local engine standing by."""
        runner = self._remote
        local = self.local.describe().split(" on ", 1)[-1]
        if runner is not None:
            return f"{runner.describe()}; local fallback {local}"
        return f"{self.name} on {local} (local; {BACKEND_NAME} {self.url} not answering)"


# -- the registry entry --------------------------------------------------------------------
class RemoteBackend(Backend):
    """Registry entry ``remote``: engines on an ``avatar-app serve`` server.

    Builds nothing (the server builds, verifies and caches its own engines), so
    :meth:`open_direct` opens the runner; not part of automatic plans.
    """

    name = BACKEND_NAME
    artifact_name = "remote.json"
    default_precisions = (Precision.FP32,)
    automatic = False

    def status(self) -> BackendStatus:
        version = tritonclient_version()
        if version is None:
            why = "tritonclient is not installed (pip install 'avatar-app[serve]')"
            return BackendStatus(self.name, False, None, False, False, why,
                                 precisions={p.value: why for p in Precision})
        url = remote_url()
        precisions = {p.value: None for p in Precision}
        if url is None:
            why = ("no server chosen: start one with 'avatar-app serve' and use it with "
                   "'avatar-app render IN -o OUT --remote grpc://HOST:PORT'")
            return BackendStatus(self.name, True, version, False, False, why,
                                 precisions={p.value: why for p in Precision})
        try:
            host, port = parse_url(url)
        except InputError as exc:
            return BackendStatus(self.name, True, version, False, False, str(exc), [url],
                                 {p.value: str(exc) for p in Precision})
        try:
            served = server_engines(host, port, timeout_s=1.0).get("models", {})
        except ServerUnavailableError as exc:
            # still usable: its runner serves locally until the server answers
            why = f"{exc}; engines run locally until it answers"
            return BackendStatus(self.name, True, version, False, True, why, [url], precisions)
        devices = [f"{url}: " + ", ".join(str(m.get("engine", name)) for name, m in sorted(served.items()))]
        return BackendStatus(self.name, True, version, False, True, "", devices, precisions)

    def build(self, info, precision_onnx, out_path, progress=None) -> dict:
        raise BackendUnavailableError("the remote backend builds no engines here: the server "
                                      "(avatar-app serve) builds and verifies its own")

    def open_direct(self, manager, info: ModelInfo, precision: Precision) -> BaseRunner:
        """A :class:`RemoteRunner` for ``info`` with the best local engine as its fallback.

        Raises:
            BackendUnavailableError: no server URL is set or tritonclient is missing.
            ModelLoadError: not even the local reference engine opens.
        """
        url = remote_url()
        if url is None:
            raise BackendUnavailableError("no remote server chosen (--remote grpc://HOST:PORT)")
        if tritonclient_version() is None:
            raise BackendUnavailableError("tritonclient is not installed (pip install 'avatar-app[serve]')")
        local = manager.open_engine(info.path).runner
        runner = RemoteRunner(url, info, local, reference=lambda: manager.open_reference(info.path))
        try:
            runner.open()
        except BaseException:
            local.close()
            raise
        return runner


def remote_runners(*objects) -> list[RemoteRunner]:
    """The :class:`RemoteRunner` s serving the given engine users (solvers, slots, runners).

    Accepts anything with a ``slot`` (EngineReconstructor, EngineSpeechAnimator), an
    EngineSlot (``active``) or a runner; others are skipped.
    """
    from avatar_app.core.errors import AvatarError

    out = []
    for obj in objects:
        target = getattr(obj, "slot", obj)
        if hasattr(target, "active"):  # an EngineSlot: its serving engine
            try:
                target = target.active
            except AvatarError:
                continue
        if isinstance(target, RemoteRunner):
            out.append(target)
    return out

