"""Rolling per-stage latency statistics for the overlay, the plots and benchmarks.

Each processed frame carries ``stamps`` (stage -> (start_ns, end_ns)) on the
process clock plus its ``t_capture_ns``. :class:`LatencyStats` keeps the last
``window_s`` seconds of per-stage durations and of camera-to-screen
(motion-to-photon) latency, and answers percentiles.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from avatar_app.core.clock import now_ns


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles over the window. All times in milliseconds.

    Attributes:
        stages: stage name -> (p50_ms, p95_ms), in first-seen order.
        camera_to_screen: (p50_ms, p95_ms) from t_capture_ns to presentation, or None.
        fps: presented frames per second over the window.
        dropped: camera frames the viewer lost in total: source frames that never reached
            the screen (gaps between the frame indices presented; see :meth:`LatencyStats.add_frame`).
            The one drop count the window shows (status bar, overlay, toolbar).
        count: frames in the window.
    """

    stages: dict[str, tuple[float, float]]
    camera_to_screen: tuple[float, float] | None
    fps: float
    dropped: int
    count: int

    def lines(self) -> list[str]:
        """Human-readable overlay lines, e.g. ``"track 6.1 / 8.0 ms"`` (p50 / p95)."""
        out = [f"{self.fps:5.1f} fps   dropped {self.dropped}"]
        if self.camera_to_screen is not None:
            p50, p95 = self.camera_to_screen
            out.append(f"camera-to-screen {p50:5.1f} / {p95:5.1f} ms")
        for name, (p50, p95) in self.stages.items():
            out.append(f"{name:<12s} {p50:5.1f} / {p95:5.1f} ms")
        return out

    def short_lines(self) -> list[str]:
        """The overlay's compact form, where the full table would cover the face: frame rate, drops
        and camera-to-screen p50, e.g. ``["12.4 fps", "dropped 8", "latency 287 ms"]``."""
        out = [f"{self.fps:.1f} fps", f"dropped {self.dropped}"]
        if self.camera_to_screen is not None:
            out.append(f"latency {self.camera_to_screen[0]:.0f} ms")
        return out


def _p50_p95(values: list[float]) -> tuple[float, float]:
    """(p50, p95) of ``values`` in one ``np.percentile`` call (the 5 Hz status tick runs ~10 of these)."""
    p50, p95 = np.percentile(np.asarray(values, np.float64), (50, 95))
    return float(p50), float(p95)


#: Shortest span (s) the frame rate is taken over (:meth:`LatencyStats.summary`).
FPS_MIN_SPAN_S = 1.0


class LatencyStats:
    """Thread-safe rolling window of per-frame stage durations.

    Args:
        window_s: how many seconds of frames to keep (overlay default 5 s;
            plots use 30 s).

    Attributes:
        dropped: camera frames lost between the camera and the screen so far: for each
            presented frame with a ``frame_index``, the indices skipped since the previous
            one (the source's newest-wins slot, the display tick and the render thread's
            newest-wins all count, once each). An index that does not increase (a source
            that restarted) starts a new run and counts nothing.
        presented: frames added so far.

    Thread: ``add_frame`` from the processing or GUI thread, ``summary`` from any.
    """

    def __init__(self, window_s: float = 5.0):
        self.window_ns = int(window_s * 1e9)
        self._lock = threading.Lock()
        self._frames: deque[tuple[int, dict[str, float], float | None]] = deque()
        self.dropped = 0
        self.presented = 0
        self._last_index: int | None = None

    def add_frame(
        self,
        stamps: dict[str, tuple[int, int]],
        t_capture_ns: int | None = None,
        t_present_ns: int | None = None,
        frame_index: int | None = None,
    ) -> None:
        """Add one presented frame.

        Args:
            stamps: stage -> (start_ns, end_ns).
            t_capture_ns: capture time; with ``t_present_ns`` gives camera-to-screen.
            t_present_ns: presentation time (defaults to now).
            frame_index: the source frame's index (``AvatarState.frame_index``); the gaps
                between consecutive indices are the frames the viewer lost (:attr:`dropped`).
        """
        t_present = now_ns() if t_present_ns is None else t_present_ns
        durations = {k: (e - s) / 1e6 for k, (s, e) in stamps.items()}
        c2s = None if t_capture_ns is None else (t_present - t_capture_ns) / 1e6
        with self._lock:
            self.presented += 1
            if frame_index is not None:
                last, self._last_index = self._last_index, int(frame_index)
                if last is not None and frame_index > last:
                    self.dropped += int(frame_index) - last - 1
            self._frames.append((t_present, durations, c2s))
            cutoff = t_present - self.window_ns
            while self._frames and self._frames[0][0] < cutoff:
                self._frames.popleft()

    def add_dropped(self, n: int) -> None:
        """Count ``n`` more lost frames that no presented index shows (frames a recording lost).

        Args:
            n: frames, >= 0 (negative values are ignored).
        """
        with self._lock:
            self.dropped += max(0, int(n))

    def summary(self) -> LatencySummary:
        """Percentiles (p50, p95) of every stage and of camera-to-screen over the window, and the
        presented frame rate: frames per second over the window's span, at least
        :data:`FPS_MIN_SPAN_S` (so a start-up burst never reads above the rate)."""
        with self._lock:
            frames = list(self._frames)
        stages: dict[str, list[float]] = {}
        c2s: list[float] = []
        for _, d, c in frames:
            for k, v in d.items():
                stages.setdefault(k, []).append(v)
            if c is not None:
                c2s.append(c)
        pct = {k: _p50_p95(v) for k, v in stages.items()}
        fps = 0.0
        if len(frames) >= 2:
            # over at least FPS_MIN_SPAN_S: the first frames of a source often come in a burst
            # (3 in 20 ms read 100 fps, the plots' start-up spike); a short span reads low instead,
            # rising to the rate once the frames span FPS_MIN_SPAN_S
            span = max((frames[-1][0] - frames[0][0]) / 1e9, FPS_MIN_SPAN_S)
            fps = (len(frames) - 1) / span
        c2s_pct = _p50_p95(c2s) if c2s else None
        return LatencySummary(pct, c2s_pct, fps, self.dropped, len(frames))
