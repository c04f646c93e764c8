"""FakeCamera: exact delay stamps, pattern, video frames, interface."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from avatar_app.capture.fake import FakeCamera, decode_index, pattern_image
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import CaptureError


@pytest.mark.parametrize("delay_s", [0.0, 0.05])
def test_delivery_is_exactly_delay_after_capture(delay_s: float):
    with FakeCamera(size=(160, 120), fps=100.0, delay_s=delay_s) as cam:
        frames = []
        for _ in range(5):
            f = cam.get_latest(timeout_s=5.0)
            assert f is not None
            # taken after delivery, so at least the delay after capture
            assert now_ns() - f.t_capture_ns >= int(round(delay_s * 1e9))
            frames.append(f)
    for f in frames:
        t_cap, t_delivered = f.capture_stamps()["capture"]
        assert t_cap == f.t_capture_ns
        assert t_delivered - t_cap == int(round(delay_s * 1e9))
        assert f.image.shape == (120, 160, 3) and f.image.dtype == np.uint8
    idx = [f.index for f in frames]
    assert idx == sorted(idx) and len(set(idx)) == len(idx)
    assert [f.t_capture_ns for f in frames] == sorted(f.t_capture_ns for f in frames)
    assert cam.granted == (160, 120, 100.0)


def test_frames_carry_their_index_in_the_image():
    with FakeCamera(fps=200.0) as cam:
        f = cam.get_latest(timeout_s=5.0)
    assert f.image.shape == (480, 640, 3)
    assert decode_index(f.image) == f.index
    assert f.media_time_s == pytest.approx(f.index / 200.0)


def test_pattern_moves_and_encodes_index():
    a, b = pattern_image(3, 320, 240), pattern_image(4, 320, 240)
    assert not np.array_equal(a, b)
    assert decode_index(a) == 3 and decode_index(pattern_image(40000, 320, 240)) == 40000


def test_unread_frames_are_dropped():
    cam = FakeCamera(size=(64, 48), fps=500.0).start()
    first = cam.get_latest(timeout_s=5.0)
    for _ in range(500):  # nobody reads for a while
        if cam.frames_generated >= first.index + 20:
            break
        cam._stop.wait(0.01)
    cam.stop()
    assert cam.dropped > 0
    cam.get_latest(timeout_s=None)  # the last delivered frame, if unread
    assert cam.get_latest(timeout_s=None) is None  # closed slot: returns at once


def test_frames_from_a_video(testdata: Path):
    path = testdata / "video" / "grid_s1_bbaf2n.mp4"
    with FakeCamera(fps=50.0, video_path=path, max_video_frames=10) as cam:
        f = cam.get_latest(timeout_s=5.0)
        assert cam.granted == (360, 288, 50.0)
        assert f.image.shape == (288, 360, 3)
    with FakeCamera(size=(180, 144), fps=50.0, video_path=path, max_video_frames=3) as cam:
        assert cam.get_latest(timeout_s=5.0).image.shape == (144, 180, 3)


def test_bad_arguments_and_restart():
    with pytest.raises(ValueError, match="fps must be > 0"):
        FakeCamera(fps=0)
    with pytest.raises(ValueError, match="delay_s >= 0"):
        FakeCamera(delay_s=-0.1)
    cam = FakeCamera(fps=30.0).start()
    cam.stop()
    cam.stop()
    assert not cam.running and cam.error is None
    with pytest.raises(CaptureError, match="was stopped"):
        cam.start()
