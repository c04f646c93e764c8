"""Open the recorder of a recording format: :class:`ClipRecorder` or :class:`AlphaClipRecorder`.

Kept apart from :mod:`avatar_app.record.formats` (the format table), which
:mod:`avatar_app.record.alpha` imports, so that no module of ``record/`` imports
one that imports it back.
"""
from __future__ import annotations

from pathlib import Path

from avatar_app.record.alpha import AlphaClipRecorder
from avatar_app.record.formats import RecordingFormat, recording_format_for
from avatar_app.record.recorder import ClipRecorder


def open_recorder(path: str | Path, width: int, height: int, fps: float,
                  audio_sample_rate: int | None = None, *, fmt: RecordingFormat | str | None = None,
                  **kwargs):
    """Open the recorder for a format.

    Args:
        path: output file; with ``fmt`` None its suffix decides (".mp4" -> H.264,
            ".mov"/".webm" -> alpha formats).
        width, height: frame size in pixels (even).
        fps: nominal frame rate, Hz.
        audio_sample_rate: Hz of the audio given to ``write_audio``, or None.
        fmt: a :class:`RecordingFormat`, its key, or None.
        **kwargs: passed to the recorder class.

    Returns:
        A :class:`~avatar_app.record.recorder.ClipRecorder` (opaque formats,
        RGB frames) or :class:`~avatar_app.record.alpha.AlphaClipRecorder` (RGBA frames).

    Raises:
        InputError: unknown format, or a suffix that does not match the format.
        RecordingError: the encoder is missing or the file cannot be created.
    """
    path = Path(path)
    fmt = recording_format_for(path, fmt)
    if fmt.alpha:
        return AlphaClipRecorder(path, width, height, fps, audio_sample_rate,
                                 video_codec=fmt.video_codec, **kwargs)
    return ClipRecorder(path, width, height, fps, audio_sample_rate, video_codec=fmt.video_codec,
                        **kwargs)
