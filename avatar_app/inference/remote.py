"""The remote backend: engines served by Triton Inference Server (``avatar-app serve``), used over gRPC.

Three layers (the first in :mod:`avatar_app.inference.triton_client`), each a runner of the
engine layer (:class:`~avatar_app.inference.base.BaseRunner`):

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

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from avatar_app.core.clock import now_ns
from avatar_app.core.errors import BackendUnavailableError, EngineBuildError, InputError, ModelLoadError
from avatar_app.inference.backends import Backend, BackendStatus
from avatar_app.inference.base import BaseRunner, Precision
from avatar_app.inference.modelinfo import ModelInfo
from avatar_app.inference.triton_client import (  # noqa: F401 (re-exported: the remote backend's public names)
    ACCESS_HEADER, BACKEND_LABEL, BACKEND_NAME, CONNECT_TIMEOUT_S, DEFAULT_GRPC_PORT, DEFAULT_RETRY_S,
    DEFAULT_TIMEOUT_S, ENV_URL, INFO_MODEL, REFUSED_RETRY_S, ServerUnavailableError, TritonRunner, format_url,
    is_loopback, parse_url, read_session, remote_url, server_engines, session_path, set_remote_url,
    tritonclient_version, _detail,
)

logger = logging.getLogger(__name__)


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

