"""What the studio window uses of the stages, re-exported (ui/ reaches the stages only through pipeline/).

The import contract "ui/ uses the stages only through pipeline/ (and core/)" keeps the window
from growing its own wiring again (issue 16): a name the window needs from a stage is listed
here, so this module is the whole of the window's view of the stages. Device listing, formats
and the default head are loaded on first use (they import OpenCV, PyAV or the face model).
"""
from __future__ import annotations

# imported first, on the importing (GUI) thread, before any worker starts: the device-listing and
# opener threads importing the package at the same time could see it half initialised
import avatar_app.capture  # noqa: F401
from avatar_app.fusion.expressions import EXPRESSION_PRESETS, format_mix, parse_mix
from avatar_app.fusion.tuning import MIRROR_CONVENTION, REGION_NAMES, TuningSettings, smoothing_cutoff_hz
from avatar_app.inference import MIN_USER_SAMPLES
from avatar_app.render.thread import RenderedFrame, RenderPolicy, RenderThread

__all__ = [
    "EXPRESSION_PRESETS", "MIN_USER_SAMPLES", "MIRROR_CONVENTION", "REGION_NAMES", "RenderPolicy", "RenderThread",
    "RenderedFrame", "TuningSettings", "available_formats", "build_default_head", "choose_alpha_format",
    "format_by_key", "format_mix", "known_formats", "list_cameras", "list_microphones", "parse_mix",
    "smoothing_cutoff_hz", "virtual_camera_status",
]


def list_cameras(max_index: int = 6) -> list[int]:
    """Indices of the cameras OpenCV can open (:func:`avatar_app.capture.camera.list_cameras`)."""
    from avatar_app.capture.camera import list_cameras as _list

    return _list(max_index=max_index)


def list_microphones():
    """Input devices (:func:`avatar_app.capture.mic.list_microphones`)."""
    from avatar_app.capture.mic import list_microphones as _list

    return _list()


def build_default_head():
    """The shipped default head (:func:`avatar_app.avatar.default_head.build_default_head`)."""
    from avatar_app.avatar.default_head import build_default_head as _build

    return _build()


def virtual_camera_status():
    """Whether a virtual camera can be opened, and why not (:func:`avatar_app.outputs.virtual_camera_status`).

    Raises:
        ImportError: the outputs package (or its virtual-camera backend) is not installed.
    """
    from avatar_app.outputs import virtual_camera_status as _status

    return _status()


def available_formats(alpha: bool | None = None):
    """Recording formats this install can encode (:func:`avatar_app.record.formats.available_formats`)."""
    from avatar_app.record.formats import available_formats as _available

    return _available(alpha=alpha)


def known_formats():
    """Every recording format the app knows (:data:`avatar_app.record.formats.KNOWN_FORMATS`)."""
    from avatar_app.record.formats import KNOWN_FORMATS

    return KNOWN_FORMATS


def format_by_key(key: str):
    """The recording format of a settings key (:func:`avatar_app.record.formats.format_by_key`)."""
    from avatar_app.record.formats import format_by_key as _by_key

    return _by_key(key)


def choose_alpha_format(suffix: str | None = None):
    """The alpha format for a file suffix (:func:`avatar_app.record.formats.choose_alpha_format`)."""
    from avatar_app.record.formats import choose_alpha_format as _choose

    return _choose(suffix)
