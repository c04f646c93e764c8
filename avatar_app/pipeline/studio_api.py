"""What the studio window (ui/) uses of the stages, in one place: ui/ reaches the stages only
through pipeline/ (the import-linter contract in pyproject.toml).

Light names (expression presets, tuning regions, the render thread the viewport
drives) are imported here; device listing, record formats, the virtual camera
probe and the default head are thin functions that import their stage when
called, as the window did, so start-up stays as fast and tests that patch the
stage's own module (e.g. ``avatar_app.avatar.default_head.build_default_head``)
patch what the window calls.

Importing this module also imports :mod:`avatar_app.capture` on the importing
thread: the window imports it on the GUI thread before any worker starts, since
the device-listing and opener threads importing the package at the same time
could see it half initialised (circular-import error).
"""
from __future__ import annotations

import avatar_app.capture  # noqa: F401 (see the module docstring)
from avatar_app.fusion.expressions import EXPRESSION_PRESETS, format_mix, parse_mix
from avatar_app.fusion.tuning import MIRROR_CONVENTION, REGION_NAMES, TuningSettings, smoothing_cutoff_hz
from avatar_app.render.thread import RenderedFrame, RenderPolicy, RenderThread


def list_cameras(max_index: int = 6) -> list[int]:
    """OpenCV indices of the cameras that open (:func:`avatar_app.capture.camera.list_cameras`)."""
    from avatar_app.capture.camera import list_cameras as _list

    return _list(max_index=max_index)


def list_microphones() -> list[tuple[int, str, float]]:
    """Input devices PortAudio knows: [(index, name, default rate Hz)] (``capture.mic.list_microphones``)."""
    from avatar_app.capture.mic import list_microphones as _list

    return _list()


def default_head():
    """The default head's AvatarMesh (:func:`avatar_app.avatar.default_head.build_default_head`)."""
    from avatar_app.avatar.default_head import build_default_head

    return build_default_head()


def virtual_camera_status(width: int, height: int, fps: float) -> tuple[bool, str]:
    """Whether a virtual camera can be opened here, and what to tell the user (:mod:`avatar_app.outputs`).

    Raises:
        ImportError: this installation has no virtual-camera output.
    """
    from avatar_app.outputs import virtual_camera_status as _status

    return _status(width, height, fps)


def record_formats():
    """The :mod:`avatar_app.record.formats` module (KNOWN_FORMATS, available_formats, choose_alpha_format,
    format_by_key), imported when first needed."""
    from avatar_app.record import formats

    return formats


__all__ = ["EXPRESSION_PRESETS", "MIRROR_CONVENTION", "REGION_NAMES", "RenderPolicy", "RenderThread", "RenderedFrame",
           "TuningSettings", "default_head", "format_mix", "list_cameras", "list_microphones", "parse_mix",
           "record_formats", "smoothing_cutoff_hz", "virtual_camera_status"]
