"""Run engine builds and first loads in a child process.

A crash inside a native library (TensorRT, a CUDA driver, an ONNX Runtime
provider) kills only the child: the parent gets a :class:`ChildCrashError`
naming the signal, and the engine layer falls back or rebuilds. Children are
started with the ``spawn`` method (no forked copy of the app's threads, Qt or
CUDA state).
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from avatar_app.core.errors import AvatarError, EngineBuildError

logger = logging.getLogger(__name__)

#: Default wall-clock limit of one child job, seconds.
DEFAULT_TIMEOUT_S = 900.0


class ChildCrashError(EngineBuildError):
    """The child process died without an answer (native crash, killed, or timed out).

    Attributes:
        exitcode: the child's exit code (negative: killed by that signal number).
        label: what the child was doing.
    """

    def __init__(self, message: str, exitcode: int | None = None, label: str = ""):
        super().__init__(message)
        self.exitcode = exitcode
        self.label = label


def _child_main(conn, fn: Callable, args: tuple, kwargs: dict, log_level: int,
                with_progress: bool) -> None:
    logging.basicConfig(level=log_level, format="[child] %(levelname)s %(name)s: %(message)s")
    if with_progress:
        send_lock = threading.Lock()  # native builders report from their own threads

        def progress(stage: str, fraction: float) -> None:
            with send_lock:
                conn.send(("progress", stage, fraction))

        kwargs = dict(kwargs, progress=progress)
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        tb = traceback.format_exc()
        try:
            conn.send(("error", exc, tb))
        except Exception:  # noqa: BLE001 - the exception itself did not pickle
            conn.send(("error", EngineBuildError(f"{type(exc).__name__}: {exc}"), tb))
    else:
        conn.send(("ok", result, ""))
    finally:
        conn.close()


def run_isolated(fn: Callable[..., Any], *args, label: str = "engine job", isolate: bool = True,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 progress: Callable[[str, float], None] | None = None, **kwargs) -> Any:
    """Call ``fn(*args, **kwargs)`` in a spawned child process and return its result.

    Args:
        fn: a module-level (picklable) function; its arguments and result must pickle.
        label: what the job does, for messages (``"build fp16 of face_recon.onnx"``).
        isolate: False runs ``fn`` inline (tests, or when the caller is itself a child).
        timeout_s: wall-clock limit; the child is terminated after it.
        progress: if given, ``fn`` is called with ``progress=`` a callable whose
            ``(stage, fraction)`` calls reach this callback in the parent.

    Returns:
        ``fn``'s return value.

    Raises:
        ChildCrashError: the child died (signal or exit code) or timed out.
        AvatarError: the one ``fn`` raised, re-raised in the parent.
        EngineBuildError: any other exception ``fn`` raised, with its message.
    """
    if progress is not None:
        kwargs["progress"] = progress
    if not isolate:
        return fn(*args, **kwargs)
    kwargs.pop("progress", None)
    ctx = mp.get_context("spawn")
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, name=f"avatar-app {label}",
                       args=(child_conn, fn, args, kwargs, logging.getLogger().getEffectiveLevel(),
                             progress is not None),
                       daemon=True)
    proc.start()
    child_conn.close()
    message = None
    deadline = time.monotonic() + timeout_s
    try:
        while parent_conn.poll(max(deadline - time.monotonic(), 0.0)):
            try:
                msg = parent_conn.recv()
            except EOFError:
                break
            if msg[0] == "progress":
                progress(msg[1], msg[2])
                continue
            message = msg
            break
    finally:
        if message is None and proc.is_alive():
            proc.join(1.0)
            if proc.is_alive():
                logger.error("%s: child %s timed out after %.0f s; terminating it", label, proc.pid, timeout_s)
                proc.terminate()
        proc.join(10.0)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
        parent_conn.close()
    if message is None:
        code = proc.exitcode
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        elif code is None or code == 0:
            how = f"gave no answer within {timeout_s:.0f} s" if code is None else "exited without an answer"
        else:
            how = f"exited with code {code}"
        msg = f"{label}: the child process {how} (a crash inside a native library?)"
        logger.error(msg)
        raise ChildCrashError(msg, exitcode=code, label=label)
    status, payload, tb = message
    if status == "ok":
        return payload
    logger.debug("%s failed in the child:\n%s", label, tb)
    if isinstance(payload, AvatarError):
        raise payload
    raise EngineBuildError(f"{label} failed: {type(payload).__name__}: {payload}") from payload
