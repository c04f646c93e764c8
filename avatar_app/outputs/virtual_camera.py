"""Virtual camera output through pyvirtualcam (v4l2loopback on Linux, OBS on Windows/macOS).

pyvirtualcam (https://github.com/letmaik/pyvirtualcam) drives an existing
virtual-camera backend; it cannot create one. Backends: ``v4l2loopback`` (the
Linux kernel module; load it with ``sudo modprobe v4l2loopback
exclusive_caps=1 card_label="avatar_app"``), ``obs`` (OBS Studio 26+ Virtual
Camera on Windows, 30+ on macOS) and ``unitycapture`` (Windows).

:func:`virtual_camera_status` says whether one is usable here and, if not, why,
in words for the settings panel (the option is shown disabled with that text).
Only the ``ui/`` layer decides what to show; nothing here imports Qt.
"""
from __future__ import annotations

import logging
import sys

import numpy as np

from avatar_app.core.errors import BackendUnavailableError, InputError

_log = logging.getLogger(__name__)

_INSTALL_HINT = {
    "linux": "install the v4l2loopback kernel module and load it "
             "(sudo modprobe v4l2loopback exclusive_caps=1)",
    "win32": "install OBS Studio 26 or newer and start its Virtual Camera once",
    "darwin": "install OBS Studio 30 or newer and start its Virtual Camera once",
}


def _hint() -> str:
    key = "linux" if sys.platform.startswith("linux") else sys.platform
    return _INSTALL_HINT.get(key, "no virtual camera backend is known for this system")


def virtual_camera_status(width: int = 1280, height: int = 720, fps: float = 30.0) -> tuple[bool, str]:
    """Whether a virtual camera can be opened here.

    Opens (and at once closes) a camera of the given size with pyvirtualcam,
    which is the only reliable test (a backend may be installed but busy).

    Args:
        width, height: frame size in pixels to try.
        fps: frame rate to try, Hz.

    Returns:
        (True, "<device> via <backend>") or (False, reason for the user).
    """
    try:
        import pyvirtualcam
    except ImportError:
        return False, "the virtual camera needs the pyvirtualcam package (pip install pyvirtualcam)"
    try:
        cam = pyvirtualcam.Camera(width=width, height=height, fps=fps)
    except RuntimeError as e:  # pyvirtualcam reports a missing/busy backend this way
        return False, f"no virtual camera available: {e} To enable it, {_hint()}."
    try:
        desc = f"{cam.device} via {cam.backend}"
    finally:
        cam.close()
    return True, desc


class VirtualCamera:
    """Sends rendered frames to a virtual camera.

    Args:
        width, height: frame size in pixels.
        fps: frame rate announced to the backend, Hz.
        background: RGB bytes that transparent pixels of RGBA frames are
            composited over (chroma green by default).
        backend: pyvirtualcam backend name, or None for the platform default.
        device: backend device (e.g. "/dev/video10"), or None.

    Raises:
        BackendUnavailableError: pyvirtualcam or a backend is missing (the
            message is the reason from :func:`virtual_camera_status`).
        InputError: bad size or fps.

    Thread: one thread.
    """

    def __init__(self, width: int, height: int, fps: float, *,
                 background: tuple[int, int, int] = (0, 177, 64), backend: str | None = None,
                 device: str | None = None):
        if width <= 0 or height <= 0 or not fps > 0:
            raise InputError(f"virtual camera needs a positive size and fps; got {width}x{height} "
                             f"@ {fps}")
        try:
            import pyvirtualcam
        except ImportError as e:
            raise BackendUnavailableError(
                "the virtual camera needs the pyvirtualcam package (pip install pyvirtualcam)") from e
        try:
            self._cam = pyvirtualcam.Camera(width=width, height=height, fps=fps, backend=backend,
                                            device=device)
        except RuntimeError as e:
            raise BackendUnavailableError(
                f"no virtual camera available: {e} To enable it, {_hint()}.") from e
        self.width, self.height, self.fps = int(width), int(height), float(fps)
        self._bg = np.asarray(background, np.float32).reshape(1, 1, 3)
        self.frames_sent = 0
        _log.info("virtual camera %s via %s: %dx%d @ %.3g fps", self._cam.device, self._cam.backend,
                  width, height, fps)

    @property
    def device(self) -> str:
        """The backend's device name (e.g. "/dev/video10", "OBS Virtual Camera")."""
        return self._cam.device

    def send(self, image: np.ndarray) -> None:
        """Show one frame.

        Args:
            image: (height, width, 3) uint8 RGB, or (height, width, 4) uint8
                straight-alpha RGBA (composited over ``background``).

        Raises:
            InputError: wrong shape or dtype, or closed.
        """
        if self._cam is None:
            raise InputError("the virtual camera is closed")
        img = np.asarray(image)
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[:2] != (self.height, self.width) \
                or img.shape[2] not in (3, 4):
            raise InputError(f"virtual camera frames must be ({self.height}, {self.width}, 3 or 4) "
                             f"uint8; got {img.shape} {img.dtype}")
        if img.shape[2] == 4:
            a = img[..., 3:4].astype(np.float32) / 255.0
            img = np.rint(img[..., :3] * a + self._bg * (1.0 - a)).astype(np.uint8)
        self._cam.send(np.ascontiguousarray(img))
        self.frames_sent += 1

    def close(self) -> None:
        """Release the device. Idempotent."""
        cam, self._cam = getattr(self, "_cam", None), None
        if cam is not None:
            cam.close()

    def __enter__(self) -> VirtualCamera:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
