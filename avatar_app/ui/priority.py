"""Scheduling priority of the window's threads: the GUI thread first, the pipeline's workers after it.

On a machine with few cores the tracker, the software rasteriser (llvmpipe
threads), the video decoder and the encoder can keep every core busy. Left at
the same priority as the GUI thread, they make it wait in the run queue for
tens of milliseconds (measured on a 2-core machine: GUI heartbeats 50-170 ms
late, most of it run-queue wait). Raising a worker thread's nice value needs
no privilege and, on Linux, applies to one thread
(``setpriority(PRIO_PROCESS, tid, n)``, see ``man 7 sched``: nice is a
per-thread attribute); threads a worker starts inherit it. With the workers at
nice 10 (CFS/EEVDF weight 110 against 1024 for nice 0, kernel
``sched_prio_to_weight``) the GUI thread runs first whenever it is runnable,
and the workers still get every cycle the GUI thread does not use.

Kept at their priority: the GUI thread, Qt's own threads (named ``Q...``,
``gmain``, ``gdbus``: X event reader, D-Bus), and threads registered with
:meth:`ThreadPriorities.keep` (the audio callback threads: a late audio
callback is an audible dropout).

Other platforms: a no-op (Windows and macOS boost the foreground GUI thread
themselves).
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

log = logging.getLogger(__name__)

#: Nice value given to native worker threads (0 = GUI priority, 19 = lowest); the environment
#: variable AVATAR_APP_WORKER_NICE overrides it (0 turns the policy off).
WORKER_NICE = int(os.environ.get("AVATAR_APP_WORKER_NICE", "10"))
#: Nice value given to Python worker threads (AVATAR_APP_PYTHON_NICE overrides it).
PYTHON_NICE = int(os.environ.get("AVATAR_APP_PYTHON_NICE", "0"))
#: Name prefixes of threads left alone (kernel name ``/proc/self/task/<tid>/comm`` or Python
#: thread name): Qt's and GLib's, and the GUI watchdog's monitor.
KEEP_PREFIXES = ("Q", "gmain", "gdbus", "gui-watchdog")
#: Kernel-name prefixes of the tracker's own worker threads (MediaPipe's graph runs its
#: calculators on them while the pipeline thread waits): they get the pipeline thread's
#: priority, :data:`TRACKER_NICE`, not :data:`WORKER_NICE`. At nice 10 they lost the CPU to
#: the render thread (nice 0), so a frame's tracking waited for the previous frame's render
#: (issue 18: "the render thread competing with tracking").
TRACKER_PREFIXES = ("mediapipe",)
#: Nice value of the tracker's threads (AVATAR_APP_TRACKER_NICE overrides it; default: the
#: Python workers', i.e. the pipeline thread's).
TRACKER_NICE = int(os.environ.get("AVATAR_APP_TRACKER_NICE", str(PYTHON_NICE)))
_TASKS = "/proc/self/task"


def supported() -> bool:
    """Whether per-thread nice values work here (Linux with /proc)."""
    return sys.platform.startswith("linux") and hasattr(os, "setpriority") and os.path.isdir(_TASKS)


def thread_nice(tid: int | None = None) -> int | None:
    """Nice value of native thread ``tid`` (default: the calling thread); None where unsupported or gone."""
    if not supported():
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, tid if tid is not None else threading.get_native_id())
    except OSError:
        return None


def lower_thread(tid: int | None = None, nice: int = WORKER_NICE) -> bool:
    """Raise the nice value of thread ``tid`` (default: the calling thread) to at least ``nice``.

    Never lowers a nice value (that needs privilege). Threads started by the
    thread afterwards inherit the value.

    Args:
        tid: native thread id (``threading.get_native_id()``), None for the caller.
        nice: target nice value, 0..19.

    Returns:
        True if the thread now runs at ``nice`` or lower priority.
    """
    if not supported() or nice <= 0:
        return False
    tid = threading.get_native_id() if tid is None else int(tid)
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) >= nice:
            return True
        os.setpriority(os.PRIO_PROCESS, tid, int(nice))
        return True
    except OSError as exc:  # the thread ended meanwhile, or a sandbox forbids it
        log.debug("cannot renice thread %d: %s", tid, exc)
        return False


def _tids() -> set[int]:
    try:
        return {int(t) for t in os.listdir(_TASKS)}
    except OSError:
        return set()


def _comm(tid: int) -> str:
    try:
        with open(f"{_TASKS}/{tid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


class ThreadPriorities:
    """Keeps the GUI thread ahead of every other thread of the process.

    :meth:`sweep` gives every thread it has not seen yet ``nice`` unless it is
    the GUI thread, one of Qt's or a kept thread. The window sweeps after each
    source change and twice a second (threads that libraries start later,
    e.g. ONNX Runtime's pools, an encoder's).

    Args:
        nice: nice value for worker threads.

    Attributes:
        lowered: native ids of the threads this object reniced.

    Thread: create and sweep on the GUI thread; :meth:`keep` from any thread.
    """

    def __init__(self, nice: int = WORKER_NICE, python_nice: int = PYTHON_NICE):
        self.nice = int(nice)
        self.python_nice = int(python_nice)
        self.enabled = supported() and max(self.nice, self.python_nice) > 0
        self._gui = threading.get_native_id()
        self._seen: set[int] = {self._gui}
        self._keep: set[int] = {self._gui}
        self._lock = threading.Lock()
        self._holds = 0
        self.lowered: set[int] = set()

    def keep(self, tids) -> None:
        """Leave these native thread ids at their priority (e.g. audio callback threads)."""
        with self._lock:
            self._keep.update(int(t) for t in tids)

    @contextmanager
    def keeping_new_threads(self):
        """Context: threads started inside it (by any thread of the process) keep their priority.

        Sweeps wait until it ends. For audio streams: ``with prio.keeping_new_threads(): mic.start()``.
        """
        with self._lock:
            self._holds += 1
        before = self.threads()
        try:
            yield
        finally:
            with self._lock:
                self._keep.update(self.threads() - before)
                self._holds -= 1

    def kept_executor(self, name: str) -> ThreadPoolExecutor:
        """A one-thread executor whose thread (and what it starts) keeps the GUI's priority.

        Blocks until the thread runs (~1 ms); call on the GUI thread, which it inherits from.
        """
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.keep([pool.submit(threading.get_native_id).result()])
        return pool

    @staticmethod
    def threads() -> set[int]:
        """Native ids of the process's threads now (empty where unsupported)."""
        return _tids() if supported() else set()

    def sweep(self) -> int:
        """Lower the priority of threads not seen before. Returns how many were lowered (~50 us)."""
        if not self.enabled:
            return 0
        now = _tids()
        with self._lock:
            if self._holds:
                return 0
            new = now - self._seen
            self._seen = now | {self._gui}
            keep = set(self._keep)
        n = 0
        names = {t.native_id: t.name for t in threading.enumerate()} if new else {}
        for tid in new:
            comm = _comm(tid)
            if tid in keep or comm.startswith(KEEP_PREFIXES) or names.get(tid, "").startswith(KEEP_PREFIXES):
                continue
            nice = (TRACKER_NICE if comm.startswith(TRACKER_PREFIXES)
                    else self.python_nice if tid in names else self.nice)
            if nice > 0 and lower_thread(tid, nice):
                self.lowered.add(tid)
                n += 1
        self.lowered &= now
        return n


__all__ = ["KEEP_PREFIXES", "TRACKER_NICE", "TRACKER_PREFIXES", "ThreadPriorities", "WORKER_NICE", "lower_thread",
           "supported", "thread_nice"]
