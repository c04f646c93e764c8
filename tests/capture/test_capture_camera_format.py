"""A camera that refuses MJPG says so: the pixel format is read back (issue 21, item 12)."""
from __future__ import annotations

import cv2
import pytest

from avatar_app.capture.camera import CameraSource


class _Capture:
    """cv2.VideoCapture stand-in that keeps the size asked for and answers CAP_PROP_FOURCC with ``fourcc``."""

    def __init__(self, fourcc: str | None):
        self.fourcc = fourcc
        self.props: dict[int, float] = {}

    def isOpened(self) -> bool:  # noqa: N802 - OpenCV's name
        return True

    def set(self, prop: int, value: float) -> bool:
        if prop != cv2.CAP_PROP_FOURCC:
            self.props[prop] = value
        return True

    def get(self, prop: int) -> float:
        if prop == cv2.CAP_PROP_FOURCC:
            return float(cv2.VideoWriter_fourcc(*self.fourcc)) if self.fourcc else 0.0
        if prop == cv2.CAP_PROP_FPS:
            return 10.0 if self.fourcc == "YUYV" else 30.0  # what USB 2 gives uncompressed 1280x720
        return self.props.get(prop, 0.0)

    def read(self):
        return False, None

    def release(self) -> None:
        pass


@pytest.mark.parametrize("fourcc, note", [("YUYV", "YUYV"), ("MJPG", None), (None, None)])
def test_granted_pixel_format_is_read_back_and_said(fourcc, note, caplog):
    cam = CameraSource(0, size=(1280, 720), fps=30, capture_factory=lambda i, api: _Capture(fourcc))
    try:
        assert cam.pixel_format == (fourcc or "")
        if note is None:
            assert cam.format_note == ""
        else:
            text = cam.format_note
            assert "MJPG" in text and note in text and "10 fps" in text, text
            assert any(cam.format_note in r.getMessage() for r in caplog.records)
        assert (fourcc or "?") in repr(cam)
    finally:
        cam.stop()
