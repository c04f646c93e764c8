"""Webcam capture with OpenCV: newest-frame reader thread, driver timestamps.

Live mode drops stale frames (newest wins, DESIGN.md "Data flow"): a reader
thread reads as fast as the camera delivers and puts each Frame into a
:class:`~avatar_app.capture.ring.LatestSlot`; the processing thread takes the
newest one with :meth:`CameraSource.get_latest`.
"""
from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2

from avatar_app.capture.base import EndlessVideoMixin
from avatar_app.capture.ring import LatestSlot
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import CaptureError
from avatar_app.core.types import Frame

logger = logging.getLogger(__name__)

_NS_PER_S = 1_000_000_000
#: A driver timestamp older than this (or in the future) is not trusted.
_MAX_DRIVER_AGE_NS = 1 * _NS_PER_S
#: Slack for rounding of CAP_PROP_POS_MSEC (milliseconds as a double).
_FUTURE_SLACK_NS = 2_000_000


def default_api_preference() -> int:
    """OpenCV capture backend for this platform (V4L2 on Linux, DirectShow on
    Windows, AVFoundation on macOS, else CAP_ANY)."""
    if sys.platform.startswith("linux"):
        return cv2.CAP_V4L2
    if sys.platform == "win32":
        return cv2.CAP_DSHOW
    if sys.platform == "darwin":
        return cv2.CAP_AVFOUNDATION
    return cv2.CAP_ANY


def driver_timestamp_ns(pos_msec: float, now: int) -> int | None:
    """Convert V4L2's buffer timestamp to the process clock, if plausible.

    On Linux/V4L2, OpenCV reports the driver's buffer timestamp in
    ``CAP_PROP_POS_MSEC`` (``struct v4l2_buffer.timestamp``, CLOCK_MONOTONIC, the
    clock behind ``time.perf_counter`` on Linux; see the kernel's V4L2 docs,
    "V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC").

    Args:
        pos_msec: the value of ``CAP_PROP_POS_MSEC``, milliseconds.
        now: ``now_ns()`` when the read returned.

    Returns:
        The timestamp in ns if it lies within 1 s before ``now``, else None.
    """
    if not pos_msec or pos_msec <= 0:
        return None
    t = int(pos_msec * 1_000_000)
    if now - _MAX_DRIVER_AGE_NS <= t <= now + _FUTURE_SLACK_NS:
        return min(t, now)
    return None


def fourcc_text(value: float) -> str:
    """A FOURCC code read back from OpenCV (``CAP_PROP_FOURCC``, a float) as text: ``"MJPG"``, ``"YUYV"``.

    Returns:
        The four characters without trailing blanks, or "" for 0 (the backend does not say)
        or a code that is not printable ASCII.
    """
    code = int(value)
    if code <= 0:
        return ""
    text = "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4))
    return text.rstrip(" \0") if text.isascii() and text.rstrip("\0").isprintable() else ""


class CameraSource(EndlessVideoMixin):
    """A webcam opened with OpenCV, read by a newest-frame thread.

    Construction opens the camera and negotiates its format; :meth:`start`
    begins reading. Frames that the consumer did not take in time are dropped
    (newest wins) and counted in :attr:`dropped`.

    ``t_capture_ns`` of each Frame is the driver's buffer timestamp when it is
    plausible (V4L2 on Linux), else ``now_ns()`` when the read returned;
    :attr:`timestamp_source` says which ("driver" or "read").
    ``frame.t_delivered_ns`` is when it was put into the slot.

    Thread: construct, start, stop and get_latest from one thread (the reader
    thread is internal). A camera that stops delivering ends the reader thread
    with :attr:`error` set; it never raises into the app.

    Args:
        index: camera index (``/dev/video<index>`` on Linux).
        size: requested (width, height) in pixels.
        fps: requested frame rate, Hz.
        capture_factory: called as ``capture_factory(index, api_preference)``;
            returns an object with the ``cv2.VideoCapture`` interface (tests pass
            a fake).
        api_preference: OpenCV backend, default :func:`default_api_preference`.
        open_timeout_s: seconds to wait for the driver to open the camera.
        stall_timeout_s: seconds without a frame after which the camera counts
            as stopped.

    Attributes:
        granted: (width, height, fps) the driver granted (the size corrected by the first frame).
        pixel_format: FOURCC the driver delivers (``"MJPG"``, ``"YUYV"``; "" when unknown).
        format_note: one sentence for the user when the camera refused MJPG ("" otherwise).

    Raises:
        CaptureError: the camera cannot be opened (missing index, busy, no
            response within ``open_timeout_s``).
    """

    def __init__(self, index: int = 0, size: tuple[int, int] = (640, 480), fps: float = 30.0,
                 capture_factory: Callable[..., Any] = cv2.VideoCapture,
                 api_preference: int | None = None, open_timeout_s: float = 5.0,
                 stall_timeout_s: float = 2.0):
        self.index = int(index)
        self.requested = (int(size[0]), int(size[1]), float(fps))
        self.stall_timeout_s = float(stall_timeout_s)
        self.error: BaseException | None = None
        self.timestamp_source = "read"
        self.pixel_format = ""
        self.format_note = ""
        self._slot: LatestSlot[Frame] = LatestSlot()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._t_start_ns = 0
        api = default_api_preference() if api_preference is None else api_preference
        self._cap = self._open(capture_factory, api, open_timeout_s)
        try:
            self.granted = self._negotiate()
        except cv2.error as e:
            self._cap.release()
            raise CaptureError(f"Camera {self.index} could not be configured: {e}",
                               device=self.index) from e

    # -- opening ----------------------------------------------------------------------
    def _open(self, factory: Callable[..., Any], api: int, timeout_s: float) -> Any:
        idx = self.index
        if (factory is cv2.VideoCapture and sys.platform.startswith("linux")
                and api in (cv2.CAP_V4L2, cv2.CAP_ANY) and not Path(f"/dev/video{idx}").exists()):
            raise CaptureError(f"Camera {idx} could not be opened: /dev/video{idx} does not exist",
                               device=idx)
        result: dict[str, Any] = {}

        def opener() -> None:
            try:
                result["cap"] = factory(idx, api)
            except (cv2.error, OSError, RuntimeError) as e:
                result["error"] = e

        t = threading.Thread(target=opener, name=f"camera{idx}-open", daemon=True)
        t.start()
        t.join(timeout_s)
        if t.is_alive():
            raise CaptureError(f"Camera {idx} could not be opened: no response from the driver "
                               f"within {timeout_s:.0f} s", device=idx)
        if "error" in result:
            raise CaptureError(f"Camera {idx} could not be opened: {result['error']}",
                               device=idx) from result["error"]
        cap = result["cap"]
        if not cap.isOpened():
            cap.release()
            raise CaptureError(f"Camera {idx} could not be opened (missing, in use by another "
                               "program, or no permission)", device=idx)
        return cap

    def _negotiate(self) -> tuple[int, int, float]:
        """Ask for MJPG at the requested size and rate; read back what the driver granted.

        Sets :attr:`pixel_format` (the FOURCC read back, "" when the backend does not
        say) and :attr:`format_note` (a sentence for the user when the camera refused
        MJPG: uncompressed formats over USB 2 cap the frame rate, the usual cause of a
        low fps).
        """
        w, h, fps = self.requested
        cap = self._cap
        cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*"MJPG"))
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, w)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, h)
        cap.set(cv2.CAP_PROP_FPS, fps)
        cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # fewer queued frames: lower latency
        granted = (int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
                   float(cap.get(cv2.CAP_PROP_FPS)))
        if granted[:2] != (w, h) or abs(granted[2] - fps) > 0.5:
            logger.info("camera %d: asked for %dx%d @ %.1f fps, granted %dx%d @ %.1f fps",
                        self.index, w, h, fps, *granted)
        self.pixel_format = fourcc_text(cap.get(cv2.CAP_PROP_FOURCC))
        self.format_note = ""
        if self.pixel_format and self.pixel_format != "MJPG":
            self.format_note = (f"Camera {self.index} refused MJPG and sends {self.pixel_format} "
                                f"(uncompressed): {granted[0]}x{granted[1]} at {granted[2]:.0f} fps granted; "
                                "a lower size gives more frames per second")
            logger.warning("%s", self.format_note)
        return granted

    # -- running ----------------------------------------------------------------------
    def start(self) -> "CameraSource":
        """Start the reader thread (no-op if running).

        Raises:
            CaptureError: the source was stopped (create a new one).
        """
        if self._stopped:
            raise CaptureError(f"Camera {self.index} was stopped; open it again",
                               device=self.index)
        if self._thread is not None:
            return self
        self._t_start_ns = now_ns()
        self._thread = threading.Thread(target=self._run, name=f"camera{self.index}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        cap = self._cap
        index = 0
        last_ok = now_ns()
        on_linux = sys.platform.startswith("linux")
        try:
            while not self._stop.is_set():
                ok, image = cap.read()
                t_read = now_ns()
                if not ok or image is None:
                    if t_read - last_ok > self.stall_timeout_s * _NS_PER_S:
                        raise CaptureError(
                            f"Camera {self.index} stopped delivering frames "
                            f"(nothing for {self.stall_timeout_s:.1f} s)", device=self.index)
                    self._stop.wait(0.005)
                    continue
                last_ok = t_read
                t_cap = None
                if on_linux:
                    t_cap = driver_timestamp_ns(cap.get(cv2.CAP_PROP_POS_MSEC), t_read)
                if t_cap is None:
                    t_cap = t_read
                    self.timestamp_source = "read"
                else:
                    self.timestamp_source = "driver"
                if index == 0:
                    self._check_first(image)
                frame = Frame(index=index, t_capture_ns=t_cap, image=image,
                              media_time_s=(t_cap - self._t_start_ns) / _NS_PER_S, t_delivered_ns=now_ns())
                self._slot.put(frame)
                index += 1
        except Exception as e:  # noqa: BLE001 - thread boundary: record, never crash the app
            if not isinstance(e, CaptureError):
                e = CaptureError(f"Camera {self.index} failed: {e}", device=self.index)
            self.error = e
            logger.error("%s", e)
        finally:
            cap.release()
            self._slot.close()

    def _check_first(self, image: Any) -> None:
        h, w = image.shape[:2]
        if (w, h) != self.granted[:2]:
            logger.info("camera %d delivers %dx%d (reported %dx%d)", self.index, w, h,
                        *self.granted[:2])
            self.granted = (w, h, self.granted[2])

    def get_latest(self, timeout_s: float | None = 1.0) -> Frame | None:
        """The newest frame not yet taken, waiting up to ``timeout_s`` seconds.

        Returns:
            A Frame (image (H, W, 3) uint8 BGR), or None on timeout or once the
            reader has stopped (check :attr:`error`).
        """
        return self._slot.get(timeout_s)

    @property
    def dropped(self) -> int:
        """Frames overwritten before anyone took them."""
        return self._slot.dropped

    @property
    def running(self) -> bool:
        """True while the reader thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop reading and release the camera. Idempotent.

        Args:
            timeout_s: seconds to wait for the reader thread; a driver stuck in a
                read releases the camera when the read returns.
        """
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._thread is None:  # never started: release here
            self._cap.release()
            self._slot.close()
            return
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.warning("camera %d reader did not stop within %.1f s", self.index, timeout_s)

    def __enter__(self) -> "CameraSource":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"CameraSource({self.index}, granted={self.granted}, pixel format {self.pixel_format or '?'})"


def list_cameras(max_index: int = 10,
                 capture_factory: Callable[..., Any] = cv2.VideoCapture) -> list[int]:
    """Indices of cameras that open (best effort; opening a camera takes time).

    On Linux only indices with a ``/dev/video<i>`` node are tried.

    Args:
        max_index: indices 0..max_index-1 are tried.
        capture_factory: as in :class:`CameraSource`.

    Returns:
        Sorted list of indices that opened.
    """
    found = []
    for i in range(max_index):
        try:
            cam = CameraSource(i, capture_factory=capture_factory, open_timeout_s=3.0)
        except CaptureError:
            continue
        cam.stop()
        found.append(i)
    return found
