"""GUI-thread watchdog: measures how long the event loop was kept from running, and why.

A precise 10 ms heartbeat timer runs on the GUI thread; a stall is the time
by which a beat came late (gap between two beats minus the interval). On Linux
each stall is split with the kernel's per-thread scheduler statistics
(``/proc/self/task/<tid>/schedstat``: time on a CPU, time waiting in the run
queue) into

- ``work``: the GUI thread ran on a CPU (our code, Qt painting);
- ``queued``: the GUI thread was runnable but the OS ran other processes
  (an oversubscribed machine; no application code can prevent it);
- ``blocked``: the rest: waiting for the GIL, a lock, or the X server.

A monitor thread samples the GUI thread's Python stack while a beat is
overdue by more than ``threshold_ms``, so a stall names its culprit.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer

log = logging.getLogger(__name__)


def _schedstat_path() -> Path | None:
    p = Path(f"/proc/self/task/{threading.get_native_id()}/schedstat")
    return p if p.is_file() else None


@dataclass(frozen=True)
class Stall:
    """One late heartbeat (all in ms).

    Attributes:
        t_s: perf_counter time of the late beat, seconds.
        wall_ms: how late the beat came.
        work_ms: of that, GUI-thread CPU time (None where the OS does not say).
        queued_ms: GUI thread runnable but not running (None where unknown).
    """

    t_s: float
    wall_ms: float
    work_ms: float | None
    queued_ms: float | None
    blocked_ms: float | None

    @property
    def app_ms(self) -> float:
        """The part the process is responsible for: wall minus OS queueing."""
        return self.wall_ms - (self.queued_ms or 0.0)


class GuiWatchdog(QObject):
    """Records event-loop stalls of the GUI thread.

    Args:
        threshold_ms: stalls above this are recorded with the GUI thread's stack.
        interval_ms: heartbeat period, ms.

    Attributes:
        max_stall_ms: the longest stall (wall time) seen since :meth:`start`, ms.
        max_app_stall_ms: the longest stall less the time the OS kept the
            runnable GUI thread waiting for a CPU, ms (= max_stall_ms where the
            OS gives no scheduler statistics).
        max_work_ms: the most CPU time the GUI thread used between two beats, ms.
        queued_total_ms: total time the runnable GUI thread waited for a CPU, ms.
        stalls: every :class:`Stall` over the threshold.
        stacks: the GUI thread's stack sampled during each long stall (text).
        others: for each of ``stacks``, the innermost frame of every other Python thread.
        beats: heartbeats seen.

    Thread: create, start and stop on the GUI thread.
    """

    def __init__(self, threshold_ms: float = 50.0, interval_ms: int = 10, parent=None):
        super().__init__(parent)
        self.threshold_ms = float(threshold_ms)
        self.interval_ms = int(interval_ms)
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(self.interval_ms)
        self._timer.timeout.connect(self._beat)
        self._gui_ident = threading.get_ident()
        self._sched = _schedstat_path()
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self.reset()

    def reset(self) -> None:
        """Forget what was recorded."""
        self.max_stall_ms = 0.0
        self.max_app_stall_ms = 0.0
        self.max_work_ms = 0.0
        self.queued_total_ms = 0.0
        self.stalls: list[Stall] = []
        self.stacks: list[str] = []
        self.others: list[str] = []
        self.beats = 0
        self._last = time.perf_counter()
        self._last_sched = self._read_sched()

    def _read_sched(self) -> tuple[float, float] | None:
        """(ms on a CPU, ms waiting in the run queue) of the GUI thread, or None."""
        if self._sched is None:
            return None
        try:
            run_ns, wait_ns = self._sched.read_text().split()[:2]
        except (OSError, ValueError):
            return None
        return int(run_ns) / 1e6, int(wait_ns) / 1e6

    def start(self) -> None:
        """Start the heartbeat and the monitor thread."""
        self.reset()
        self._stop.clear()
        self._timer.start()
        self._monitor = threading.Thread(target=self._watch, name="gui-watchdog", daemon=True)
        self._monitor.start()

    def stop(self) -> None:
        """Stop both."""
        self._timer.stop()
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout=2)
            self._monitor = None

    def _beat(self) -> None:
        now = time.perf_counter()
        sched = self._read_sched()
        stall = (now - self._last) * 1000.0 - self.interval_ms
        work = queued = blocked = None
        if sched is not None and self._last_sched is not None:
            work = sched[0] - self._last_sched[0]
            queued = sched[1] - self._last_sched[1]
            blocked = max(0.0, stall + self.interval_ms - work - queued)
        self._last, self._last_sched = now, sched
        self.beats += 1
        s = Stall(now, stall, work, queued, blocked)
        self.max_stall_ms = max(self.max_stall_ms, stall)
        self.max_app_stall_ms = max(self.max_app_stall_ms, s.app_ms)
        if work is not None:
            self.max_work_ms = max(self.max_work_ms, work)
            self.queued_total_ms += queued
        if stall > self.threshold_ms:
            self.stalls.append(s)
            log.debug("GUI thread late by %.0f ms (work %s ms, queued by the OS %s ms)", stall,
                      None if work is None else round(work), None if queued is None else round(queued))

    def _watch(self) -> None:
        sampled_for = None
        while not self._stop.wait(self.threshold_ms / 2000.0):
            late_ms = (time.perf_counter() - self._last) * 1000.0 - self.interval_ms
            if late_ms > self.threshold_ms and sampled_for != self._last:
                sampled_for = self._last
                frames = sys._current_frames()
                frame = frames.get(self._gui_ident)
                if frame is not None and len(self.stacks) < 20:
                    self.stacks.append("".join(traceback.format_stack(frame, limit=12)))
                    # where the other Python threads are: the one that kept the GIL is mid-code
                    names = {t.ident: t.name for t in threading.enumerate()}
                    self.others.append("; ".join(
                        f"{names.get(ident, ident)}: {f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno} "
                        f"{f.f_code.co_name}" for ident, f in frames.items()
                        if ident not in (self._gui_ident, threading.get_ident())))

    def summary(self) -> str:
        """One line per stall: wall, work, OS queueing, blocked (ms)."""
        def f(v):
            return "?" if v is None else f"{v:.0f}"
        return "; ".join(f"{s.wall_ms:.0f} (work {f(s.work_ms)}, queued {f(s.queued_ms)}, blocked {f(s.blocked_ms)})"
                         for s in self.stalls)


def threads_report(top: int = 12) -> str:
    """The process's busiest threads: CPU seconds, nice value, kernel name and Python name (Linux).

    Read from ``/proc/self/task/<tid>/stat`` (utime + stime, fields 14-15, in clock
    ticks; nice, field 19; ``man 5 proc``). Returns "" where /proc is missing.

    Args:
        top: number of threads listed, busiest first.
    """
    import os

    names = {t.native_id: t.name for t in threading.enumerate()}
    try:
        tids = os.listdir("/proc/self/task")
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return ""
    rows = []
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="utf-8", errors="replace") as f:
                head, _, rest = f.read().rpartition(")")
            fields = rest.split()
            rows.append(((int(fields[11]) + int(fields[12])) / tick, int(fields[16]),
                         head.partition("(")[2], names.get(int(tid), "")))
        except (OSError, ValueError, IndexError):
            continue
    rows.sort(reverse=True)
    return "\n".join(f"  {cpu:6.2f} s cpu, nice {nice:2d}, {comm} {name}".rstrip()
                     for cpu, nice, comm, name in rows[:top])

