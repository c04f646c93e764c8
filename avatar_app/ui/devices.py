"""Camera names and stable ids for the Sources panel.

PySide6-Essentials (the app's Qt dependency) does not contain QtMultimedia
(it ships in PySide6-Addons), so :func:`list_camera_devices` uses, in order:

1. QtMultimedia's ``QMediaDevices.videoInputs()`` when it is installed;
2. on Linux, the V4L2 device names in ``/sys/class/video4linux/video<N>/name``
   with stable ids from ``/dev/v4l/by-id`` (no camera is opened);
3. elsewhere, OpenCV index probing (:func:`avatar_app.capture.list_cameras`,
   which opens each index: slow, so call it off the GUI thread), named
   "Camera <N>".

A device id survives unplugging and re-plugging (by-id link name, or the
QtMultimedia id), so the window can reopen the same camera when it returns
(:func:`resolve_camera_id`).
"""
from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SYSFS_V4L = Path("/sys/class/video4linux")
BY_ID = Path("/dev/v4l/by-id")


@dataclass(frozen=True)
class CameraDevice:
    """One camera.

    Attributes:
        id: stable id ("usb-Logitech_C920_ABC-video-index0", a QtMultimedia id, or
            "index:<N>" when nothing better exists).
        name: human-readable name.
        index: the OpenCV index to open now.
    """

    id: str
    name: str
    index: int


def _qt_multimedia() -> list[CameraDevice] | None:
    try:
        from PySide6.QtMultimedia import QMediaDevices  # type: ignore[import-not-found]
    except ImportError:
        return None
    out = []
    for i, dev in enumerate(QMediaDevices.videoInputs()):
        raw = bytes(dev.id()).decode(errors="replace")
        m = re.search(r"video(\d+)$", raw)
        out.append(CameraDevice(raw, dev.description(), int(m.group(1)) if m else i))
    return out


def _v4l2(sysfs: Path = SYSFS_V4L, by_id: Path = BY_ID) -> list[CameraDevice] | None:
    if not sysfs.is_dir():
        return None
    ids: dict[int, str] = {}
    if by_id.is_dir():
        for link in by_id.iterdir():
            try:
                target = os.path.realpath(link)
            except OSError:
                continue
            m = re.search(r"video(\d+)$", target)
            if m:
                ids[int(m.group(1))] = link.name
    out = []
    for node in sorted(sysfs.glob("video*"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0)):
        m = re.fullmatch(r"video(\d+)", node.name)
        if not m:
            continue
        n = int(m.group(1))
        try:
            # Each UVC camera has a capture node (index 0) and a metadata node (index 1).
            if (node / "index").is_file() and (node / "index").read_text().strip() not in ("", "0"):
                continue
            name = (node / "name").read_text().strip() or f"Camera {n}"
        except OSError:
            continue
        out.append(CameraDevice(ids.get(n, f"index:{n}"), f"{name} (/dev/video{n})", n))
    return out


def list_camera_devices(probe: bool = True) -> tuple[list[CameraDevice], str]:
    """Cameras of this machine and how they were found.

    Args:
        probe: allow OpenCV index probing (opens cameras; seconds) when nothing else works.

    Returns:
        (devices, method) with method "QtMultimedia", "V4L2 names (QtMultimedia not installed)"
        or "OpenCV index probing (QtMultimedia not installed)".

    Thread: any (call off the GUI thread: probing can take seconds).
    """
    devs = _qt_multimedia()
    if devs is not None:
        return devs, "QtMultimedia"
    if sys.platform.startswith("linux"):
        devs = _v4l2()
        if devs is not None:
            return devs, "V4L2 names (QtMultimedia not installed)"
    if not probe:
        return [], "not probed"
    from avatar_app.pipeline.studio_api import list_cameras

    return ([CameraDevice(f"index:{i}", f"Camera {i}", i) for i in list_cameras(max_index=6)],
            "OpenCV index probing (QtMultimedia not installed)")


def resolve_camera_id(camera_id: str, devices: list[CameraDevice] | None = None) -> int | None:
    """The OpenCV index of the camera with ``camera_id`` now, or None when it is absent.

    Args:
        camera_id: a :attr:`CameraDevice.id` ("index:<N>" resolves to N).
        devices: a fresh listing (default: :func:`list_camera_devices` without probing).
    """
    if camera_id.startswith("index:"):
        try:
            return int(camera_id.split(":", 1)[1])
        except ValueError:
            return None
    for d in devices if devices is not None else list_camera_devices(probe=False)[0]:
        if d.id == camera_id:
            return d.index
    return None
