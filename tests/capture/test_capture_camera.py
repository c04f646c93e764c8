"""CameraSource with a fake cv2.VideoCapture (no camera hardware in CI)."""
from __future__ import annotations

import threading
import time

import cv2
import numpy as np
import pytest

from avatar_app.capture.camera import CameraSource, driver_timestamp_ns, list_cameras
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import CaptureError


class FakeCapture:
    """cv2.VideoCapture stand-in: grants 640x360 @ 25 fps whatever is asked."""

    def __init__(self, index: int, api: int, *, opened: bool = True, frames: int | None = None,
                 driver_age_ms: float | None = 5.0, fail_with: Exception | None = None,
                 period_s: float = 0.002, deliver_size: tuple[int, int] = (640, 360)):
        self.index, self.api = index, api
        self.opened = opened
        self.frames_left = frames
        self.driver_age_ms = driver_age_ms
        self.fail_with = fail_with
        self.period_s = period_s
        self.deliver_size = deliver_size
        self.props: dict[int, float] = {}
        self.released = threading.Event()
        self.read_count = 0
        self.last_driver_ns: int | None = None

    def isOpened(self) -> bool:  # noqa: N802 - OpenCV's name
        return self.opened

    def set(self, prop: int, value: float) -> bool:
        self.props[prop] = value
        return True

    def get(self, prop: int) -> float:
        granted = {cv2.CAP_PROP_FRAME_WIDTH: 640.0, cv2.CAP_PROP_FRAME_HEIGHT: 360.0,
                   cv2.CAP_PROP_FPS: 25.0}
        if prop in granted:
            return granted[prop]
        if prop == cv2.CAP_PROP_POS_MSEC:
            return self.last_driver_ns / 1e6 if self.last_driver_ns is not None else 0.0
        return 0.0

    def read(self):
        if self.fail_with is not None and self.read_count >= 3:
            raise self.fail_with
        if self.frames_left is not None and self.frames_left <= 0:
            time.sleep(0.001)
            return False, None
        time.sleep(self.period_s)
        if self.frames_left is not None:
            self.frames_left -= 1
        self.read_count += 1
        if self.driver_age_ms is not None:
            self.last_driver_ns = now_ns() - int(self.driver_age_ms * 1e6)
        w, h = self.deliver_size
        return True, np.full((h, w, 3), self.read_count % 256, np.uint8)

    def release(self) -> None:
        self.released.set()


def _wait_for(condition, hang_s: float = 60.0) -> None:
    """Poll until ``condition()``; the deadline only guards against a hang."""
    deadline = time.monotonic() + hang_s
    while not condition():
        assert time.monotonic() < deadline, "hung"
        time.sleep(0.002)


def factory(**kw):
    made: list[FakeCapture] = []

    def make(index: int, api: int) -> FakeCapture:
        cap = FakeCapture(index, api, **kw)
        made.append(cap)
        return cap

    make.made = made  # type: ignore[attr-defined]
    return make


def test_negotiation_requests_mjpg_size_fps_and_reports_grant():
    make = factory()
    cam = CameraSource(2, size=(1280, 720), fps=60, capture_factory=make)
    cap = make.made[0]
    assert cap.index == 2
    assert cap.props[cv2.CAP_PROP_FOURCC] == cv2.VideoWriter_fourcc(*"MJPG")
    assert cap.props[cv2.CAP_PROP_FRAME_WIDTH] == 1280
    assert cap.props[cv2.CAP_PROP_FRAME_HEIGHT] == 720
    assert cap.props[cv2.CAP_PROP_FPS] == 60
    assert cam.granted == (640, 360, 25.0)
    cam.stop()
    assert cap.released.is_set()


def test_reader_delivers_newest_frames_with_driver_timestamps():
    make = factory(driver_age_ms=5.0)
    with CameraSource(0, capture_factory=make) as cam:
        frames = [cam.get_latest(timeout_s=2.0) for _ in range(5)]
        # let frames pile up (they are dropped, newest wins): wait for reads, not for a time
        reads = make.made[0].read_count
        _wait_for(lambda: make.made[0].read_count >= reads + 3)
        newest = cam.get_latest(timeout_s=2.0)
    assert all(f is not None for f in frames)
    idx = [f.index for f in frames] + [newest.index]
    assert idx == sorted(idx) and len(set(idx)) == len(idx)
    assert cam.dropped > 0
    assert cam.timestamp_source == "driver"
    for f in frames:
        t_cap, t_delivered = f.capture_stamps()["capture"]
        assert t_cap == f.t_capture_ns
        # the driver stamp lies 5 ms before the read returned
        assert 4_000_000 <= t_delivered - t_cap < 1_000_000_000
        assert f.image.shape == (360, 640, 3)
    assert make.made[0].released.is_set()


def test_implausible_driver_timestamp_falls_back_to_read_time():
    make = factory(driver_age_ms=5000.0)  # 5 s old: not believable
    with CameraSource(0, capture_factory=make) as cam:
        f = cam.get_latest(timeout_s=2.0)
    assert f is not None and cam.timestamp_source == "read"
    t_cap, t_delivered = f.capture_stamps()["capture"]
    # stamped when the read returned, not 5 s before (how soon after it is handed over depends on load)
    assert 0 <= t_delivered - t_cap < 1_000_000_000


def test_driver_timestamp_plausibility():
    now = 50 * 10**9
    assert driver_timestamp_ns((now - 3_000_000) / 1e6, now) == now - 3_000_000
    assert driver_timestamp_ns((now - 2 * 10**9) / 1e6, now) is None  # too old
    assert driver_timestamp_ns((now + 10**9) / 1e6, now) is None  # future
    assert driver_timestamp_ns(0.0, now) is None  # first frame / not supported
    assert driver_timestamp_ns((now + 1_000_000) / 1e6, now) == now  # rounding slack


def test_first_frame_size_corrects_the_grant():
    make = factory(deliver_size=(320, 240))
    with CameraSource(0, capture_factory=make) as cam:
        assert cam.get_latest(timeout_s=2.0) is not None
        assert cam.granted[:2] == (320, 240)


def test_camera_that_does_not_open():
    make = factory(opened=False)
    with pytest.raises(CaptureError, match="Camera 7 could not be opened") as err:
        CameraSource(7, capture_factory=make)
    assert err.value.device == 7
    assert make.made[0].released.is_set()


def test_missing_camera_index_with_opencv():
    with pytest.raises(CaptureError, match="Camera 7 could not be opened"):
        CameraSource(7)
    # through OpenCV itself (no /dev check), in the opener thread
    with pytest.raises(CaptureError, match="Camera 7 could not be opened"):
        CameraSource(7, capture_factory=lambda i, api: cv2.VideoCapture(i, api))


def test_driver_that_hangs_on_open():
    """A driver that answers only after the open timeout: the open fails, naming it (the driver's
    0.6 s is 6 times the timeout; the thread-leak check then waits for the driver's thread)."""
    def hanging(index: int, api: int):
        time.sleep(0.6)
        return FakeCapture(index, api)

    with pytest.raises(CaptureError, match=r"Camera 3 could not be opened: no response"):
        CameraSource(3, capture_factory=hanging, open_timeout_s=0.1)


def test_camera_that_stops_delivering_records_error():
    make = factory(frames=3)
    cam = CameraSource(1, capture_factory=make, stall_timeout_s=0.1).start()
    got = [cam.get_latest(timeout_s=2.0) for _ in range(4)]
    cam._thread.join(60)  # generous: returns once the reader ends
    assert not cam.running
    assert isinstance(cam.error, CaptureError)
    assert "Camera 1 stopped delivering frames" in str(cam.error)
    assert got[-1] is None  # slot closed once the reader ended
    assert make.made[0].released.is_set()
    cam.stop()


def test_read_exception_is_recorded_not_raised():
    make = factory(fail_with=cv2.error("USB gone"))
    cam = CameraSource(0, capture_factory=make).start()
    cam._thread.join(60)
    assert isinstance(cam.error, CaptureError)
    assert "Camera 0 failed" in str(cam.error) and "USB gone" in str(cam.error)
    cam.stop()


def test_stop_is_idempotent_and_restart_is_refused():
    cam = CameraSource(0, capture_factory=factory()).start()
    cam.stop()
    cam.stop()
    assert not cam.running
    with pytest.raises(CaptureError, match="was stopped"):
        cam.start()


def test_list_cameras_with_fake_factory():
    def make(index: int, api: int) -> FakeCapture:
        return FakeCapture(index, api, opened=index in (0, 2))

    assert list_cameras(4, capture_factory=make) == [0, 2]
