"""Run engine builds and first loads in a child process.

A crash inside a native library (TensorRT, a CUDA driver, an ONNX Runtime
provider) kills only the child: the parent gets a :class:`ChildCrashError`
naming the signal, and the engine layer falls back or rebuilds. Children are
started with the ``spawn`` method (no forked copy of the app's threads, Qt or
CUDA state).

A child never competes with the live pipeline (issue 18: an INT8 build raised
camera-to-screen from ~0.15 s to over 1 s): it runs at the lowest CPU priority
(nice 19 and, on Linux, ``SCHED_IDLE``: it only gets a core nothing else wants,
``man 7 sched``), on at most :func:`child_thread_cap` CPUs (its affinity), and
its native thread pools are capped to that many threads (``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, ``AVATAR_APP_ORT_THREADS`` for the
project's ONNX Runtime sessions) before it imports numpy or ONNX Runtime.

A low priority does not stop a busy child from slowing the live threads on a
machine with few cores: the cores share caches and memory bandwidth, and the
vCPUs of a VM may be hyperthreads of one physical core, so work the scheduler
gives only to an idle CPU still takes cycles from the other. While the studio
plays, a child job is therefore also *paced* (``duty`` of :func:`run_isolated`,
:func:`live_child_duty`): the parent stops it (``SIGSTOP``) as soon as it has
used ``duty`` of its wall time as CPU time over the last period, and continues
it (``SIGCONT``) when its share has fallen back, so it never uses more than that
share of a core; a child starved by other work anyway is not stopped at all.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from avatar_app.core.errors import AvatarError, EngineBuildError

logger = logging.getLogger(__name__)

#: Default wall-clock limit of one child job, seconds.
DEFAULT_TIMEOUT_S = 900.0
#: Nice value of a child job: the lowest priority (``man 2 setpriority``: -20..19).
CHILD_NICE = 19

#: Environment variable: ``normal`` keeps a child job at its parent's priority and scheduling
#: policy (its CPUs and thread pools are still capped). The test suite sets it: a ``SCHED_IDLE``
#: child gets next to no CPU while other work keeps the cores busy (another pytest worker), so a
#: test's build would then wait on how busy the machine is. Anything else (unset): the lowest priority.
CHILD_PRIORITY_ENV = "AVATAR_APP_CHILD_PRIORITY"


def _background_priority() -> bool:
    """Whether child jobs run at the lowest priority (nice 19, ``SCHED_IDLE``): unless
    :data:`CHILD_PRIORITY_ENV` is ``normal``."""
    return os.environ.get(CHILD_PRIORITY_ENV, "").strip().lower() != "normal"


#: Share of one core a paced child job may use while the live view plays (:func:`live_child_duty`).
LIVE_CHILD_DUTY = 0.5
#: Environment variable overriding :data:`LIVE_CHILD_DUTY` (a fraction in (0, 1]; ``1``: no pacing).
CHILD_DUTY_ENV = "AVATAR_APP_CHILD_DUTY"
#: Pacing period, seconds: the child's CPU share is checked (and it is stopped or continued) this often.
PACE_PERIOD_S = 0.05


def live_child_duty() -> float | None:
    """The CPU share (of one core, in (0, 1)) child jobs get while the live view plays, or None: not paced.

    :data:`LIVE_CHILD_DUTY` unless :data:`CHILD_DUTY_ENV` says otherwise; None where pacing is off:
    the variable is ``1`` (or unreadable), the children run at normal priority (:data:`CHILD_PRIORITY_ENV`
    ``normal``, the test suite's setting), or the OS has no ``SIGSTOP`` or no ``/proc``.
    """
    if not _background_priority() or not hasattr(signal, "SIGSTOP") or not os.path.isdir("/proc/self"):
        return None
    raw = os.environ.get(CHILD_DUTY_ENV, "").strip()
    try:
        duty = float(raw) if raw else LIVE_CHILD_DUTY
    except ValueError:
        logger.warning("%s=%r is not a number; child jobs are not paced", CHILD_DUTY_ENV, raw)
        return None
    return duty if 0.0 < duty < 1.0 else None


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _process_cpu_s(pid: int, fd: int | None = None) -> float | None:
    """CPU seconds (user + system, all threads) of process ``pid`` (Linux /proc), or None if gone.

    ``fd``: ``/proc/<pid>/stat`` opened already (read again with ``pread``: no open per call).
    """
    try:
        if fd is not None:
            stat = os.pread(fd, 1024, 0)
        else:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


class _Pacer:
    """Keeps a child process at ``duty`` of one core: called every :data:`PACE_PERIOD_S` or so, it
    stops the child once its CPU time reaches ``duty`` of the wall time since the pacer started,
    counted over a sliding window, and continues it when it is back below.

    CPU time is read from /proc at clock-tick resolution (10 ms), so the share is kept over the
    window (``window_s``, 0.5 s), not per period; a step costs the parent one ``pread``.
    ``resume()`` (or ``close()``) must run before the child is joined, terminated or left (a
    stopped process neither exits nor handles SIGTERM).
    """

    def __init__(self, pid: int, duty: float, window_s: float = 0.5):
        self.pid, self.duty, self.window_s = pid, duty, window_s
        self.stopped = False
        self.stopped_s = 0.0
        self._since = 0.0
        self._marks: list[tuple[float, float]] = []  # (wall, child cpu) samples
        try:
            self._fd: int | None = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        except OSError:
            self._fd = None

    def step(self) -> None:
        now, cpu = time.monotonic(), _process_cpu_s(self.pid, self._fd)
        if cpu is None:
            self.resume()
            return
        self._marks.append((now, cpu))
        while len(self._marks) > 2 and now - self._marks[1][0] >= self.window_s:
            self._marks.pop(0)
        t0, c0 = self._marks[0]
        over = (cpu - c0) > self.duty * max(now - t0, PACE_PERIOD_S)
        if over and not self.stopped:
            self._signal(signal.SIGSTOP)
            self.stopped, self._since = True, now
        elif not over and self.stopped:
            self.resume()

    def resume(self) -> None:
        if self.stopped:
            self._signal(signal.SIGCONT)
            self.stopped = False
            self.stopped_s += time.monotonic() - self._since

    def close(self) -> None:
        """Continue the child (if stopped) and close the /proc file."""
        self.resume()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _signal(self, sig) -> None:
        try:
            os.kill(self.pid, sig)
        except OSError:  # already gone
            pass
#: Environment variables that size native thread pools; a child gets each set to its cap.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                   "VECLIB_MAXIMUM_THREADS", "AVATAR_APP_ORT_THREADS")
_ENV_LOCK = threading.Lock()


def child_thread_cap(cpus: int | None = None) -> int:
    """Threads (and CPUs) a child job may use: half the CPUs this process may run on, 1 to 4.

    On the 2-core development machine that is one core, so the live pipeline always
    has the other one.

    Args:
        cpus: CPUs available (default: this process's affinity, else ``os.cpu_count()``).
    """
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
    return max(1, min(4, int(cpus) // 2))


def _task_ids() -> list[int]:
    """Native ids of this process's threads (Linux /proc), else just the process."""
    try:
        return sorted(int(t) for t in os.listdir("/proc/self/task"))
    except OSError:
        return [0]


def lower_process_priority(threads: int, nice: int = CHILD_NICE) -> dict:
    """Make this whole process a background job: lowest priority, ``threads`` CPUs, capped pools.

    Every thread that exists now gets nice ``nice`` and ``SCHED_IDLE`` (where the OS
    has it) and the affinity of ``threads`` CPUs (the last ones this process may use);
    threads started later inherit all three. The thread-pool variables
    (:data:`THREAD_ENV_VARS`) are set to ``threads`` for libraries loaded later.
    Called first thing in a child job; nothing fails if the OS refuses a step. With
    :data:`CHILD_PRIORITY_ENV` ``normal`` the priority and policy are left as they are.

    Args:
        threads: CPUs and native threads allowed, >= 1.
        nice: nice value, 0..19 (raised only; lowering needs privilege).

    Returns:
        What was applied: {"nice": bool, "idle": bool, "cpus": the CPU ids or None}.
    """
    threads = max(1, int(threads))
    for var in THREAD_ENV_VARS:
        os.environ[var] = str(threads)
    done = {"nice": False, "idle": False, "cpus": None}
    cpus = None
    try:
        allowed = sorted(os.sched_getaffinity(0))
        cpus = set(allowed[-threads:])
    except (AttributeError, OSError):
        pass
    background = _background_priority()
    for tid in _task_ids():
        try:
            if background and os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, int(nice))
            done["nice"] = background
        except (AttributeError, OSError) as exc:
            logger.debug("cannot renice thread %d: %s", tid, exc)
        if background and hasattr(os, "SCHED_IDLE"):
            try:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                done["idle"] = True
            except OSError as exc:
                logger.debug("cannot set SCHED_IDLE on thread %d: %s", tid, exc)
        if cpus:
            try:
                os.sched_setaffinity(tid, cpus)
                done["cpus"] = sorted(cpus)
            except OSError as exc:
                logger.debug("cannot pin thread %d: %s", tid, exc)
    return done


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


def _die_with_parent() -> None:
    """Linux: have the kernel kill this process when its parent dies (``PR_SET_PDEATHSIG``), so a
    paced child stopped by a parent that was killed meanwhile does not stay stopped for ever."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError) as exc:
        logger.debug("cannot set PR_SET_PDEATHSIG: %s", exc)


def _child_main(conn, fn: Callable, args: tuple, kwargs: dict, log_level: int,
                with_progress: bool, threads: int = 1) -> None:
    logging.basicConfig(level=log_level, format="[child] %(levelname)s %(name)s: %(message)s")
    _die_with_parent()
    lower_process_priority(threads)
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


def _start_capped(proc, threads: int) -> None:
    """Start ``proc`` with the thread-pool variables set to ``threads`` and at the lowest priority.

    The variables must be in the child's environment before it imports numpy (it does
    so while unpickling its job, before :func:`_child_main` runs), so they are set in
    this process's environment just while the child is spawned (it copies the
    environment), under a lock, and restored at once; libraries already loaded here
    read them only at load. The child's first thread is pinned to its CPUs, reniced and
    given ``SCHED_IDLE`` from here at once, so its start-up imports already run in the
    background; :func:`_child_main` then applies the full :func:`lower_process_priority`.
    """
    with _ENV_LOCK:
        saved = {var: os.environ.get(var) for var in THREAD_ENV_VARS}
        os.environ.update({var: str(threads) for var in THREAD_ENV_VARS})
        try:
            proc.start()
        finally:
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
    try:  # its start-up imports (~1.5 s of CPU) already on the child's CPUs, not the live view's
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(proc.pid, set(allowed[-threads:]))
    except (AttributeError, OSError) as exc:
        logger.debug("cannot pin child %s: %s", proc.pid, exc)
    if not _background_priority():
        return
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, CHILD_NICE)
    except (AttributeError, OSError) as exc:  # the child already exited, or no such call here
        logger.debug("cannot renice child %s: %s", proc.pid, exc)
    if hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(proc.pid, os.SCHED_IDLE, os.sched_param(0))
        except OSError as exc:
            logger.debug("cannot set SCHED_IDLE on child %s: %s", proc.pid, exc)


def run_isolated(fn: Callable[..., Any], *args, label: str = "engine job", isolate: bool = True,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 progress: Callable[[str, float], None] | None = None,
                 duty: float | None = None, **kwargs) -> Any:
    """Call ``fn(*args, **kwargs)`` in a spawned child process and return its result.

    Args:
        fn: a module-level (picklable) function; its arguments and result must pickle.
        label: what the job does, for messages (``"build fp16 of face_recon.onnx"``).
        isolate: False runs ``fn`` inline (tests, or when the caller is itself a child).
        timeout_s: wall-clock limit; the child is terminated after it.
        progress: if given, ``fn`` is called with ``progress=`` a callable whose
            ``(stage, fraction)`` calls reach this callback in the parent.
        duty: pace the child to this share of one core, in (0, 1) (see the module docstring and
            :func:`live_child_duty`: what the studio passes while it plays); None or >= 1: not paced.
            The timeout counts wall time, stopped time included.

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
    threads = child_thread_cap()
    proc = ctx.Process(target=_child_main, name=f"avatar-app {label}",
                       args=(child_conn, fn, args, kwargs, logging.getLogger().getEffectiveLevel(),
                             progress is not None, threads),
                       daemon=True)
    _start_capped(proc, threads)
    child_conn.close()
    message = None
    deadline = time.monotonic() + timeout_s
    pacer = _Pacer(proc.pid, duty) if duty is not None and 0.0 < duty < 1.0 and proc.pid else None
    try:
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            if pacer is not None:
                if left <= 0.0:
                    break
                pacer.step()
                if not parent_conn.poll(min(left, PACE_PERIOD_S)):  # (a child that died: EOF, below)
                    continue
            elif not parent_conn.poll(left):
                break
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
        if pacer is not None:
            pacer.close()
            if pacer.stopped_s:
                logger.debug("%s: paced to %.0f %% of a core, stopped %.1f s", label, 100 * duty,
                             pacer.stopped_s)
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
