"""Virtual camera: disabled with a reason where no backend exists; frames reach a backend."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from avatar_app.core.errors import BackendUnavailableError, InputError
from avatar_app.outputs import virtual_camera as vc
from avatar_app.outputs.virtual_camera import VirtualCamera, virtual_camera_status


def _has_v4l2loopback() -> bool:
    from pathlib import Path

    return Path("/sys/module/v4l2loopback").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux") or _has_v4l2loopback(),
                    reason="checks the no-backend path: needs Linux without v4l2loopback")
def test_no_backend_here_gives_a_reason():
    ok, reason = virtual_camera_status()
    assert ok is False
    assert "v4l2loopback" in reason and "modprobe" in reason
    with pytest.raises(BackendUnavailableError, match="v4l2loopback"):
        VirtualCamera(640, 480, 30)


def test_missing_package_gives_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyvirtualcam", None)  # import fails
    ok, reason = virtual_camera_status()
    assert not ok and "pip install pyvirtualcam" in reason
    with pytest.raises(BackendUnavailableError, match="pyvirtualcam"):
        VirtualCamera(640, 480, 30)


class FakeCamera:
    """Stands in for pyvirtualcam.Camera (a backend this machine lacks)."""

    instances: list[FakeCamera] = []

    def __init__(self, width, height, fps, backend=None, device=None, **kw):
        self.width, self.height, self.fps = width, height, fps
        self.device, self.backend = device or "/dev/video10", backend or "v4l2loopback"
        self.frames: list[np.ndarray] = []
        self.closed = False
        FakeCamera.instances.append(self)

    def send(self, frame):
        assert frame.shape == (self.height, self.width, 3) and frame.dtype == np.uint8
        self.frames.append(frame.copy())

    def close(self):
        self.closed = True


@pytest.fixture
def fake_backend(monkeypatch):
    FakeCamera.instances.clear()
    monkeypatch.setitem(sys.modules, "pyvirtualcam", types.SimpleNamespace(Camera=FakeCamera))
    return FakeCamera


def test_status_with_a_backend_probes_and_closes(fake_backend):
    ok, desc = virtual_camera_status(320, 240, 30)
    assert ok and desc == "/dev/video10 via v4l2loopback"
    assert fake_backend.instances[-1].closed


def test_frames_reach_the_backend_and_alpha_is_composited(fake_backend):
    with VirtualCamera(4, 2, 30, background=(0, 177, 64)) as cam:
        rgb = np.full((2, 4, 3), 200, np.uint8)
        cam.send(rgb)
        rgba = np.zeros((2, 4, 4), np.uint8)
        rgba[..., 0] = 255
        rgba[0, :, 3] = 255  # top row opaque red, bottom row transparent
        cam.send(rgba)
        with pytest.raises(InputError, match="uint8"):
            cam.send(np.zeros((2, 4, 3), np.float32))
        with pytest.raises(InputError, match=r"\(2, 4, 3 or 4\)"):
            cam.send(np.zeros((4, 2, 3), np.uint8))
        assert cam.frames_sent == 2 and cam.device == "/dev/video10"
    fake = fake_backend.instances[-1]
    assert fake.closed
    assert np.array_equal(fake.frames[0], rgb)
    assert fake.frames[1][0].tolist() == [[255, 0, 0]] * 4
    assert fake.frames[1][1].tolist() == [[0, 177, 64]] * 4
    with pytest.raises(InputError, match="closed"):
        cam.send(rgb)


def test_backend_error_becomes_a_reason(monkeypatch):
    def refuse(*a, **k):
        raise RuntimeError("'obs' backend: OBS Virtual Camera is not installed.")

    monkeypatch.setitem(sys.modules, "pyvirtualcam", types.SimpleNamespace(Camera=refuse))
    monkeypatch.setattr(vc.sys, "platform", "win32")
    ok, reason = virtual_camera_status()
    assert not ok and "OBS Virtual Camera is not installed" in reason and "OBS Studio 26" in reason
    with pytest.raises(InputError, match="positive"):
        VirtualCamera(0, 480, 30)
