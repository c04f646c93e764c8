"""A synthetic camera with a known capture-to-delivery delay, for tests and demos.

It has the interface of :class:`~avatar_app.capture.camera.CameraSource`
(start / get_latest / stop / granted / dropped / error), so a pipeline can run
without hardware and its latency measurement can be checked against
``delay_s``.
"""
from __future__ import annotations

import collections
import logging
import threading
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np

from avatar_app.capture.base import EndlessVideoMixin
from avatar_app.capture.ring import LatestSlot
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import CaptureError
from avatar_app.core.types import Frame

logger = logging.getLogger(__name__)

_NS_PER_S = 1_000_000_000


class FakeCamera(EndlessVideoMixin):
    """Generates frames at ``fps`` and hands each over ``delay_s`` after its capture.

    Frames are "captured" on a fixed schedule ``t_k = t_start + k / fps``; a frame
    is delivered (put into the newest-wins slot) at ``t_k + delay_s``. Its stamp
    is exact: ``t_capture_ns = t_delivered_ns - round(delay_s * 1e9)`` where
    ``t_delivered_ns`` is ``now_ns()`` read just before the hand-over, so
    ``t_delivered_ns - t_capture_ns == delay`` to the nanosecond even when the
    thread is woken late. ``frame.t_delivered_ns`` is that hand-over time.

    Images: a moving pattern (a bright square that moves left to right over a
    gradient, with the frame index encoded as 16 black/white cells in the top
    row, see :func:`decode_index`), or frames of a video file played in a loop.

    Args:
        size: (width, height) in pixels; None: 640x480 for the pattern, the
            video's own size for ``video_path``.
        fps: frame rate, Hz, > 0.
        delay_s: capture-to-delivery delay, seconds, >= 0.
        video_path: optional video file whose frames (at most ``max_video_frames``,
            decoded at :meth:`start`) are shown in a loop instead of the pattern.
        max_video_frames: cap on the frames kept in memory from ``video_path``.

    Raises:
        ValueError: ``fps`` <= 0 or ``delay_s`` < 0.
        InputError: ``video_path`` cannot be read (raised by :meth:`start`).
    """

    def __init__(self, size: tuple[int, int] | None = None, fps: float = 30.0,
                 delay_s: float = 0.0, video_path: str | Path | None = None,
                 max_video_frames: int = 300):
        if fps <= 0 or delay_s < 0:
            raise ValueError(f"fps must be > 0 and delay_s >= 0, got {fps}, {delay_s}")
        self.fps = float(fps)
        self.delay_s = float(delay_s)
        self.delay_ns = int(round(delay_s * _NS_PER_S))
        self.video_path = Path(video_path) if video_path is not None else None
        self.max_video_frames = int(max_video_frames)
        self._size = size
        w, h = size if size is not None else (640, 480)
        self.granted: tuple[int, int, float] = (int(w), int(h), self.fps)
        self.error: BaseException | None = None
        self.timestamp_source = "synthetic"
        self._video: list[np.ndarray] = []
        self._slot: LatestSlot[Frame] = LatestSlot()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.frames_generated = 0

    # -- images -----------------------------------------------------------------------
    def _load_video(self) -> None:
        from avatar_app.capture.video_file import VideoFileSource

        with VideoFileSource(self.video_path) as src:
            for fr in src.frames():
                img = fr.image
                if self._size is not None and (img.shape[1], img.shape[0]) != tuple(self._size):
                    img = cv2.resize(img, tuple(self._size), interpolation=cv2.INTER_AREA)
                self._video.append(img)
                if len(self._video) >= self.max_video_frames:
                    break
        h, w = self._video[0].shape[:2]
        self.granted = (w, h, self.fps)

    def _image(self, k: int) -> np.ndarray:
        if self._video:
            return self._video[k % len(self._video)].copy()
        return pattern_image(k, self.granted[0], self.granted[1])

    # -- running ----------------------------------------------------------------------
    def start(self) -> "FakeCamera":
        """Start generating frames (no-op if running).

        Raises:
            CaptureError: the camera was stopped.
            InputError: ``video_path`` cannot be read.
        """
        if self._stopped:
            raise CaptureError("FakeCamera was stopped; create a new one", device="fake")
        if self._thread is not None:
            return self
        if self.video_path is not None and not self._video:
            self._load_video()
        self._thread = threading.Thread(target=self._run, name="fake-camera", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        period_ns = int(round(_NS_PER_S / self.fps))
        t_start = now_ns()
        pending: collections.deque[tuple[int, Frame]] = collections.deque()  # (due_ns, frame)
        k = 0
        try:
            while not self._stop.is_set():
                t_next_capture = t_start + k * period_ns
                now = now_ns()
                if pending and pending[0][0] <= now:
                    _, frame = pending.popleft()
                    t_delivered = now_ns()
                    t_cap = t_delivered - self.delay_ns
                    frame = replace(frame, t_capture_ns=t_cap, t_delivered_ns=t_delivered)
                    self._slot.put(frame)
                    continue
                if t_next_capture <= now:
                    if now - t_next_capture > period_ns:  # fell behind: skip, as a camera would
                        k = (now - t_start) // period_ns
                        t_next_capture = t_start + k * period_ns
                    frame = Frame(index=k, t_capture_ns=t_next_capture, image=self._image(k),
                                  media_time_s=k * period_ns / _NS_PER_S)
                    pending.append((t_next_capture + self.delay_ns, frame))
                    self.frames_generated += 1
                    k += 1
                    continue
                due = min(t_next_capture, pending[0][0]) if pending else t_next_capture
                self._stop.wait(max(0.0, (due - now_ns()) / _NS_PER_S))
        except Exception as e:  # noqa: BLE001 - thread boundary: record, never crash the app
            self.error = CaptureError(f"FakeCamera failed: {e}", device="fake")
            logger.error("%s", self.error)
        finally:
            self._slot.close()

    def get_latest(self, timeout_s: float | None = 1.0) -> Frame | None:
        """The newest frame not yet taken, waiting up to ``timeout_s`` seconds.

        Returns:
            A Frame (image (H, W, 3) uint8 BGR), or None on timeout / after stop.
        """
        return self._slot.get(timeout_s)

    @property
    def dropped(self) -> int:
        """Frames overwritten before anyone took them."""
        return self._slot.dropped

    @property
    def running(self) -> bool:
        """True while the generator thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop generating. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._slot.close()

    def __enter__(self) -> "FakeCamera":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_INDEX_BITS = 16


def pattern_image(k: int, width: int, height: int) -> np.ndarray:
    """Synthetic frame ``k``: gradient, a moving bright square, index bits on top.

    Returns:
        (height, width, 3) uint8 BGR. The top ``cell`` rows hold 16 cells
        (white = 1), most significant bit first, encoding ``k mod 65536``.
    """
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[..., 0] = np.linspace(40, 200, width, dtype=np.float32).astype(np.uint8)[None, :]
    img[..., 1] = np.linspace(60, 160, height, dtype=np.float32).astype(np.uint8)[:, None]
    img[..., 2] = 90
    side = max(4, min(width, height) // 6)
    span = max(1, width - side)
    x = (k * 8) % (2 * span)
    x = x if x < span else 2 * span - x
    y = (height - side) // 2
    img[y:y + side, x:x + side] = 255
    cell = max(1, width // _INDEX_BITS)
    for b in range(_INDEX_BITS):
        bit = (k >> (_INDEX_BITS - 1 - b)) & 1
        img[:cell, b * cell:(b + 1) * cell] = 255 if bit else 0
    return img


def decode_index(image: np.ndarray) -> int:
    """Recover ``k mod 65536`` from an image made by :func:`pattern_image`.

    Args:
        image: (H, W, 3) uint8 BGR.
    """
    width = image.shape[1]
    cell = max(1, width // _INDEX_BITS)
    k = 0
    for b in range(_INDEX_BITS):
        v = image[: cell, b * cell:(b + 1) * cell].mean()
        k = (k << 1) | int(v > 127)
    return k
