"""``avatar-app serve``: the engines on Triton Inference Server (pytriton's ``tritonserver``, Python backend).

:class:`EngineServer` opens the served engines (:mod:`avatar_app.serve.engines`),
starts the ``tritonserver`` binary that ships in the nvidia-pytriton wheel with
one Python-backend model per engine and a dynamic batcher, and stops it again.
Triton answers gRPC (the app's remote backend), HTTP/REST and Prometheus
metrics itself: health and readiness are ``/v2/health/live`` and
``/v2/health/ready`` on the HTTP port, metrics are ``/metrics`` on the metrics port.

Every endpoint listens on :attr:`ServeOptions.host`, the loopback address by
default. There is no authentication on inference: listening elsewhere is the
user's explicit choice (``--host``). pytriton protects shared memory,
statistics, logging, tracing and the model repository with an access token;
the server writes it to a session file only its user can read
(:func:`~avatar_app.inference.remote.session_path`), so local clients of the
same user can use shared memory and statistics.

While running, the server keeps its Triton workspace (a copy of the binaries, the
model repository and pytriton's Unix sockets, about 25 MB) in the temporary folder
as ``avatar-serve-PID-*`` (a short path: Unix socket paths are limited to 107
bytes), removed at stop; one left by a killed server is removed at the next start.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from avatar_app.core.errors import AvatarError, BackendUnavailableError, InputError
from avatar_app.inference.remote import format_url, is_loopback, session_path
from avatar_app.serve.engines import EngineChoice, ServedEngine, bind_all, open_served_engines

logger = logging.getLogger(__name__)

#: Seconds Triton waits for in-flight requests at shutdown.
EXIT_TIMEOUT_S = 5


@dataclass
class ServeOptions:
    """Settings of one server.

    Attributes:
        host: address every endpoint binds to (loopback by default; ``0.0.0.0`` = all IPv4).
        grpc_port / http_port / metrics_port: Triton's ports (its defaults 8001 / 8000 / 8002).
        default: backend/precision for every model without an entry in ``engines``.
        engines: model name -> its backend/precision.
        models: the ONNX files to serve (default: every shipped ``models/*.onnx``).
        max_queue_delay_us: the dynamic batcher's longest wait for more requests, microseconds.
        instances: engines (Triton model instances) per model.
    """

    host: str = "127.0.0.1"
    grpc_port: int = 8001
    http_port: int = 8000
    metrics_port: int = 8002
    default: EngineChoice = field(default_factory=EngineChoice)
    engines: dict[str, EngineChoice] = field(default_factory=dict)
    models: list[Path] | None = None
    max_queue_delay_us: int = 1000
    instances: int = 1

    @property
    def grpc_url(self) -> str:
        """``grpc://HOST:PORT`` for ``--remote`` (the loopback address for a wildcard host)."""
        return format_url(_client_host(self.host), self.grpc_port)

    def http_url(self, path: str = "") -> str:
        """``http://HOST:PORT/path`` on the HTTP port."""
        return f"http://{_bracket(_client_host(self.host))}:{self.http_port}{path}"

    @property
    def metrics_url(self) -> str:
        """The Prometheus endpoint."""
        return f"http://{_bracket(_client_host(self.host))}:{self.metrics_port}/metrics"

    @property
    def exposed(self) -> bool:
        """Whether the endpoints listen beyond this machine's loopback interface."""
        return not is_loopback(self.host)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _client_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to ``host``."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def shipped_models() -> list[Path]:
    """The shipped ``models/*.onnx`` (checkout or installed package), sorted."""
    from avatar_app.inference.cli import _shipped_models

    return _shipped_models()


def check_port_free(host: str, port: int) -> None:
    """Refuse a port something already listens on.

    Raises:
        InputError: the address is in use, or cannot be bound (not this machine's).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InputError(f"port {port} on {host} is in use (another avatar-app serve or Triton?); "
                                 "choose others with --grpc-port/--http-port/--metrics-port") from None
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _nvidia_driver_loaded() -> bool:
    """Whether the NVIDIA kernel driver is loaded (Triton's GPU metrics need it; without it they fail to start)."""
    return Path("/proc/driver/nvidia/version").exists()


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


#: Prefix of the server workspaces in the temporary folder.
WORKSPACE_PREFIX = "avatar-serve-"


@contextmanager
def own_process_group():
    """While active, pytriton starts ``tritonserver`` in a process group of its own.

    A SIGTERM or Ctrl+C sent to the serve command's process group (``kill -TERM -PGID``,
    ``timeout``, a service manager, the terminal) then reaches only this process, which
    stops Triton in order (:meth:`EngineServer.stop`: SIGINT, in-flight requests finished,
    pytriton's tensor stores closed). Before, the Python-backend stubs got the signal too and
    died holding pytriton's shared memory: Python's resource tracker then printed "There appear
    to be 2 leaked shared_memory objects" per stub. ``tritonserver`` still dies with this process
    (pytriton sets its parent-death signal).

    pytriton starts the binary with the ``sh`` package, whose per-call default ``new_group``
    is set here and restored on exit.
    """
    import sh

    defaults = sh.Command._call_args
    before = defaults.get("new_group", False)
    defaults["new_group"] = True
    try:
        yield
    finally:
        defaults["new_group"] = before


def _remove_stale_workspaces(root: Path) -> None:
    """Delete this user's ``avatar-serve-PID-*`` folders of servers that are no longer running."""
    from avatar_app.inference.triton_client import _pid_alive

    for ws in root.glob(WORKSPACE_PREFIX + "*"):
        pid = ws.name[len(WORKSPACE_PREFIX):].split("-", 1)[0]
        try:
            mine = ws.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(ws, ignore_errors=True)
            logger.info("removed the workspace of a stopped server: %s", ws)


class EngineServer:
    """A running Triton server of the app's engines.

    Args:
        options: :class:`ServeOptions`.
        manager: engine manager (default: a new one on the user's engine cache).

    Attributes:
        engines: the :class:`ServedEngine` s (after :meth:`start`).
        failed: model name -> why it is not served.
        log_path: Triton's own log file.
        workspace: the running server's workspace folder (None when stopped).

    Thread: start/stop from one thread (the CLI's main thread).
    """

    def __init__(self, options: ServeOptions, manager=None):
        self.options = options
        self.manager = manager
        self.engines: list[ServedEngine] = []
        self.failed: dict[str, str] = {}
        self._triton = None
        self._session: Path | None = None
        self.workspace: Path | None = None
        from avatar_app.inference.dirs import user_cache_dir

        self.root = user_cache_dir() / "serve"
        self.log_path = self.root / f"triton-{options.grpc_port}.log"

    def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Open the engines, start Triton and wait until every model is ready.

        Args:
            progress: called with a line of text at each step.

        Raises:
            InputError: a port is in use, or bad options.
            BackendUnavailableError: nvidia-pytriton is not installed (or not on this platform).
            ModelLoadError: no model could be served.
            AvatarError: Triton did not start.
        """
        say = progress or (lambda _text: None)
        o = self.options
        ports = (o.grpc_port, o.http_port, o.metrics_port)
        if len(set(ports)) != 3:
            raise InputError(f"the gRPC, HTTP and metrics ports must differ, got {ports}")
        try:
            import pytriton  # noqa: F401
            from pytriton.triton import Triton, TritonConfig, TritonLifecyclePolicy, TritonSecurityConfig
        except ImportError as exc:
            raise BackendUnavailableError(
                f"nvidia-pytriton is not installed ({exc}): pip install 'avatar-app[serve]' "
                "(Linux x86-64; it ships the tritonserver binary)") from exc
        for port in ports:
            check_port_free(o.host, port)
        from avatar_app.core.errors import ModelLoadError
        from avatar_app.serve.environment import stub_environment

        stub_environment()  # before pytriton copies os.environ for tritonserver
        models = o.models if o.models is not None else shipped_models()
        if not models:
            raise ModelLoadError("no models to serve (models/ holds no .onnx file)")
        say(f"opening {len(models)} engine(s): {', '.join(Path(m).stem for m in models)}")
        self.engines, self.failed = open_served_engines(models, o.engines, o.default, self.manager, o.instances)
        if not self.engines:
            raise ModelLoadError("no engine could be opened: " +
                                 "; ".join(f"{k}: {v}" for k, v in self.failed.items()))
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.gettempdir())
        _remove_stale_workspaces(tmp)
        self.workspace = Path(tempfile.mkdtemp(prefix=f"{WORKSPACE_PREFIX}{os.getpid()}-", dir=tmp))
        workspace = self.workspace / "w"  # pytriton makes it (it must not exist)
        cfg = TritonConfig(
            grpc_address=o.host, grpc_port=o.grpc_port, http_address=o.host, http_port=o.http_port,
            metrics_address=o.host, metrics_port=o.metrics_port, allow_metrics=True, allow_cpu_metrics=True,
            allow_gpu_metrics=_nvidia_driver_loaded(),
            exit_timeout_secs=EXIT_TIMEOUT_S, strict_readiness=True, log_verbose=0, log_file=self.log_path)
        security = TritonSecurityConfig()  # a fresh token protects shared memory, statistics, logging ...
        say("starting Triton Inference Server")
        from avatar_app import __version__

        # local_model_store: bind() writes every model's config into the workspace's model store and
        # tritonserver loads them all at start-up, in parallel (its model-load threads), instead of
        # pytriton loading them one after another over gRPC (about 5 s sooner ready here, 3 models).
        policy = TritonLifecyclePolicy(launch_triton_on_startup=True, local_model_store=True)
        triton = Triton(config=cfg, workspace=workspace, triton_lifecycle_policy=policy, security_config=security)
        self._triton = triton
        try:
            bind_all(triton, self.engines, o.max_queue_delay_us, __version__)
            with own_process_group():
                triton.run()
        except Exception as exc:  # noqa: BLE001 - pytriton raises TimeoutError, RuntimeError, its own
            self.stop()
            tail = self.log_tail()
            raise AvatarError(f"Triton Inference Server did not start: {exc}" +
                              (f"; its log ({self.log_path}) ends: {tail}" if tail else "")) from exc
        self._session = session_path(o.grpc_port)
        _write_private(self._session, json.dumps({
            "pid": os.getpid(), "host": o.host, "grpc_port": o.grpc_port, "http_port": o.http_port,
            "metrics_port": o.metrics_port, "token": triton.get_access_token(), "started": time.time()}))

    def log_tail(self, lines: int = 3) -> str:
        """The last error lines of Triton's log, joined (for messages)."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        errors = [t for t in text if t[:1] == "E"] or text
        return " | ".join(t.strip() for t in errors[-lines:])

    @property
    def alive(self) -> bool:
        """Whether Triton and every served model's proxy are running."""
        return self._triton is not None and self._triton.is_alive()

    def tritonserver_pid(self) -> int | None:
        """Process id of the ``tritonserver`` process (None when not running)."""
        try:
            return int(self._triton._triton_server._tritonserver_running_cmd.pid)  # pytriton keeps it here
        except AttributeError:
            return None

    def wait(self, stop: threading.Event, poll_s: float = 0.5) -> bool:
        """Block until ``stop`` is set (True) or Triton stopped by itself (False)."""
        while not stop.wait(poll_s):
            if not self.alive:
                return False
        return True

    def stop(self) -> None:
        """Stop Triton (in-flight requests get :data:`EXIT_TIMEOUT_S`), close the engines. Idempotent."""
        triton, self._triton = self._triton, None
        if triton is not None:
            try:
                triton.stop()
            except Exception as exc:  # noqa: BLE001 - stopping must go on
                logger.warning("stopping Triton: %s", exc)
        if self._session is not None:
            self._session.unlink(missing_ok=True)
            self._session = None
        for e in self.engines:
            e.close()
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None

    def kill(self) -> None:
        """Stop Triton at once (a second Ctrl+C): SIGKILL to tritonserver, then :meth:`stop`."""
        import signal

        pid = self.tritonserver_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.stop()
