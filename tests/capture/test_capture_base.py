"""capture.base.LiveSource: the camera, live-file and fake sources all implement it."""
from __future__ import annotations

import inspect
from pathlib import Path

import cv2
import numpy as np
import pytest

from avatar_app.capture import AudioRing, CameraSource, FakeCamera, LiveFileSource, LiveSource
from avatar_app.capture.base import EndlessVideoMixin

MEMBERS = ("granted", "error", "start", "stop", "get_latest", "dropped", "running", "finished", "ring",
           "__enter__", "__exit__")


class _StillCapture:
    """Minimal cv2.VideoCapture stand-in: always opened, one grey 64x48 image per read."""

    def __init__(self, index: int, api: int):
        self.index = index

    def isOpened(self) -> bool:  # noqa: N802 - OpenCV's name
        return True

    def set(self, prop: int, value: float) -> bool:
        return True

    def get(self, prop: int) -> float:
        return {cv2.CAP_PROP_FRAME_WIDTH: 64.0, cv2.CAP_PROP_FRAME_HEIGHT: 48.0, cv2.CAP_PROP_FPS: 30.0}.get(prop, 0.0)

    def read(self):
        return True, np.full((48, 64, 3), 128, np.uint8)

    def release(self) -> None:
        pass


@pytest.fixture
def sources(testdata: Path):
    made = [CameraSource(0, capture_factory=_StillCapture), FakeCamera(size=(64, 48), fps=60.0),
            LiveFileSource(testdata / "video" / "grid_s1_bbaf2n.mp4")]
    yield made
    for s in made:
        s.stop()


def test_protocol_lists_what_the_live_pipeline_uses():
    members = {n for n in dir(LiveSource) if not n.startswith("_") or n in ("__enter__", "__exit__")}
    members |= set(LiveSource.__annotations__)
    assert set(MEMBERS) <= members
    sig = inspect.signature(LiveSource.get_latest)
    assert list(sig.parameters) == ["self", "timeout_s"]


def test_every_live_source_implements_it(sources):
    for src in sources:
        assert isinstance(src, LiveSource), type(src).__name__
        for name in MEMBERS:
            assert hasattr(src, name), f"{type(src).__name__} lacks {name}"
        w, h, fps = src.granted
        assert w > 0 and h > 0 and fps > 0
        assert src.error is None and not src.running and src.dropped == 0


def test_cameras_never_finish_and_have_no_sound_a_file_has_both(sources):
    camera, fake, live_file = sources
    for src in (camera, fake):
        assert isinstance(src, EndlessVideoMixin)
        assert src.finished is False and src.ring is None
    assert isinstance(live_file.ring, AudioRing)
    assert live_file.finished is False  # not started: nothing delivered yet


def test_a_source_missing_a_member_is_not_a_live_source():
    class NoEnd:
        granted = (1, 1, 1.0)
        error = None
        dropped = 0
        running = False
        ring = None

        def start(self):
            return self

        def stop(self, timeout_s: float = 2.0) -> None:
            pass

        def get_latest(self, timeout_s=1.0):
            return None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    assert not isinstance(NoEnd(), LiveSource)  # no `finished`
    NoEnd.finished = False
    assert isinstance(NoEnd(), LiveSource)
    assert not isinstance(object(), LiveSource)


def test_a_consumer_written_against_the_protocol_runs_each_source(sources):
    def first_frame(src: LiveSource):
        with src:
            frame = src.get_latest(timeout_s=5.0)
            assert src.running or src.finished
        assert not src.running
        return frame

    for src in sources:
        frame = first_frame(src)
        assert frame is not None and frame.image.shape == (src.granted[1], src.granted[0], 3)
