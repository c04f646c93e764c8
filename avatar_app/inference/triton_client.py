"""Triton's gRPC client side of the remote backend: URLs, the server's session file, one served model as a runner.

:class:`TritonRunner` runs one served model through tritonclient's gRPC client. When
client and server share a host (a loopback address and the server's session file
readable, see :func:`session_path`) the tensors travel through system shared memory
registered with the server instead of inside the gRPC messages. The failover runner
and the registry entry built on it are in :mod:`avatar_app.inference.remote`.

Importing this module imports no tritonclient (it loads when a runner opens).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from avatar_app.core.errors import BackendUnavailableError, InputError, ModelLoadError
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
    """Whether process ``pid`` runs: it exists and, where ``/proc`` says so, is not a zombie (a
    killed server its parent has not reaped yet holds its PID but runs no more: new-user trial, a
    ``kill -9``-ed serve whose workspace the next serve kept)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ")"
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


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
