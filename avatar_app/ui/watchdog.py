"""GUI-thread watchdog: measures how long the event loop was kept from running.

A precise 10 ms heartbeat timer runs on the GUI thread; a stall is the time
by which a heartbeat came late (gap between two beats minus the interval). A
monitor thread samples the GUI thread's Python stack while a beat is overdue
by more than ``threshold_ms``, so a stall names its culprit in the log.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
import traceback

from PySide6.QtCore import QObject, Qt, QTimer

log = logging.getLogger(__name__)


class GuiWatchdog(QObject):
    """Records event-loop stalls of the GUI thread.

    Args:
        threshold_ms: stalls above this are recorded with the GUI thread's stack.
        interval_ms: heartbeat period, ms.

    Attributes:
        max_stall_ms: the longest stall seen since :meth:`start`, ms.
        stalls: (perf_counter seconds, stall ms) of every stall over the threshold.
        stacks: the GUI thread's stack sampled during each long stall (text).
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
        self._last = 0.0
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self.reset()

    def reset(self) -> None:
        """Forget what was recorded."""
        self.max_stall_ms = 0.0
        self.stalls: list[tuple[float, float]] = []
        self.stacks: list[str] = []
        self.beats = 0
        self._last = time.perf_counter()

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
        stall = (now - self._last) * 1000.0 - self.interval_ms
        self._last = now
        self.beats += 1
        if stall > self.max_stall_ms:
            self.max_stall_ms = stall
        if stall > self.threshold_ms:
            self.stalls.append((now, stall))
            log.warning("GUI thread stalled for %.0f ms", stall)

    def _watch(self) -> None:
        sampled_for = None
        while not self._stop.wait(self.threshold_ms / 2000.0):
            late_ms = (time.perf_counter() - self._last) * 1000.0 - self.interval_ms
            if late_ms > self.threshold_ms and sampled_for != self._last:
                sampled_for = self._last
                frame = sys._current_frames().get(self._gui_ident)
                if frame is not None and len(self.stacks) < 20:
                    self.stacks.append("".join(traceback.format_stack(frame, limit=12)))
