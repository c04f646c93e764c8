"""Recording formats this PyAV/FFmpeg build can write, and the factory that opens one.

The settings panel lists :func:`available_formats` (only encoders present in
the running FFmpeg build appear); :func:`open_recorder` opens the right
recorder class for a choice. Formats with ``alpha=True`` keep a transparent
background (see :mod:`avatar_app.record.alpha`).

Preference order (first available wins for :func:`choose_alpha_format`):

- ProRes 4444 in QuickTime MOV: the editing-software standard for alpha video
  (Apple, "Apple ProRes" white paper: 4444 carries a 16-bit alpha channel).
  FFmpeg has two encoders; ``prores_aw`` encodes 1280x720 about 5x faster than
  ``prores_ks`` on the 2-core development machine (86 vs 16 fps), so it comes first.
- VP9 in WebM with ``yuva420p`` (the alpha plane travels as a Matroska
  BlockAdditional): small files, plays in browsers and OBS; needs the libvpx
  decoder to read the alpha back (FFmpeg's native vp9 decoder drops it).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av

from avatar_app.core.errors import InputError, RecordingError


@dataclass(frozen=True)
class RecordingFormat:
    """One way to write a clip.

    Attributes:
        key: stable identifier for settings files, e.g. ``"h264-mp4"``.
        label: text for the settings panel.
        suffix: file suffix including the dot (".mp4", ".mov", ".webm").
        container: FFmpeg muxer name ("mp4", "mov", "webm").
        video_codec: FFmpeg encoder name.
        pix_fmt: encoder pixel format.
        alpha: whether transparency is kept.
        audio_codec: FFmpeg audio encoder used in this container.
    """

    key: str
    label: str
    suffix: str
    container: str
    video_codec: str
    pix_fmt: str
    alpha: bool
    audio_codec: str


#: Every format the app knows, in preference order within the opaque and alpha groups.
KNOWN_FORMATS: tuple[RecordingFormat, ...] = (
    RecordingFormat("h264-mp4", "H.264 (MP4)", ".mp4", "mp4", "libx264", "yuv420p", False, "aac"),
    RecordingFormat("mpeg4-mp4", "MPEG-4 Part 2 (MP4)", ".mp4", "mp4", "mpeg4", "yuv420p", False, "aac"),
    RecordingFormat("prores4444-mov", "ProRes 4444 with alpha (MOV)", ".mov", "mov", "prores_aw",
                    "yuva444p10le", True, "aac"),
    RecordingFormat("prores4444ks-mov", "ProRes 4444 with alpha (MOV, prores_ks)", ".mov", "mov",
                    "prores_ks", "yuva444p10le", True, "aac"),
    RecordingFormat("vp9-webm", "VP9 with alpha (WebM)", ".webm", "webm", "libvpx-vp9", "yuva420p",
                    True, "libopus"),
)


def _encoder_supports(codec: str, pix_fmt: str) -> bool:
    try:
        c = av.codec.Codec(codec, "w")
    except (av.FFmpegError, ValueError):  # UnknownCodecError derives from ValueError
        return False
    fmts = c.video_formats
    return fmts is None or any(f.name == pix_fmt for f in fmts)


def _audio_encoder_exists(codec: str) -> bool:
    try:
        av.codec.Codec(codec, "w")
    except (av.FFmpegError, ValueError):
        return False
    return True


def available_formats(alpha: bool | None = None) -> list[RecordingFormat]:
    """Formats whose video and audio encoders exist in this FFmpeg build.

    Args:
        alpha: True = only formats that keep transparency, False = only opaque
            ones, None = all.

    Returns:
        Available formats in preference order (possibly empty).
    """
    out = []
    for f in KNOWN_FORMATS:
        if alpha is not None and f.alpha != alpha:
            continue
        if _encoder_supports(f.video_codec, f.pix_fmt) and _audio_encoder_exists(f.audio_codec):
            out.append(f)
    return out


def format_by_key(key: str) -> RecordingFormat:
    """The known format called ``key`` (e.g. from a settings file).

    Raises:
        InputError: unknown key.
    """
    for f in KNOWN_FORMATS:
        if f.key == key:
            return f
    raise InputError(
        f"unknown recording format {key!r}; known: {', '.join(f.key for f in KNOWN_FORMATS)}")


def choose_alpha_format(suffix: str | None = None) -> RecordingFormat:
    """The preferred available format that keeps alpha.

    Args:
        suffix: ".mov" or ".webm" to restrict the choice to one container, or None.

    Returns:
        The first available alpha format (ProRes 4444 MOV before VP9 WebM).

    Raises:
        InputError: ``suffix`` is not a container that can carry alpha.
        RecordingError: this FFmpeg build has no suitable encoder.
    """
    if suffix is not None:
        suffix = suffix.lower()
        if suffix not in {f.suffix for f in KNOWN_FORMATS if f.alpha}:
            raise InputError(
                f"a transparent recording needs a .mov (ProRes 4444) or .webm (VP9) file; got "
                f"{suffix!r}")
    for f in available_formats(alpha=True):
        if suffix is None or f.suffix == suffix:
            return f
    raise RecordingError(
        "this FFmpeg build has no encoder that keeps transparency "
        f"(looked for {', '.join(f.video_codec for f in KNOWN_FORMATS if f.alpha)})"
        + (f" for {suffix} files" if suffix else ""))


def recording_format_for(path: str | Path, fmt: RecordingFormat | str | None = None) -> RecordingFormat:
    """The format a recording at ``path`` is made in, checked against the file name.

    Args:
        path: the output file the user named; with ``fmt`` None its suffix decides
            (".mov"/".webm" -> alpha formats, anything else H.264 MP4).
        fmt: a :class:`RecordingFormat`, its key, or None.

    Raises:
        InputError: unknown format, or a suffix that does not match the format.
    """
    path = Path(path)
    if isinstance(fmt, str):
        fmt = format_by_key(fmt)
    if fmt is None:
        fmt = choose_alpha_format(path.suffix) if path.suffix.lower() in (".mov", ".webm") else KNOWN_FORMATS[0]
    if path.suffix.lower() != fmt.suffix:
        got = f", not {path.suffix}" if path.suffix else f"; {path.name} has no extension"
        raise InputError(f"{fmt.label} recordings need a {fmt.suffix} file name{got}")
    return fmt
