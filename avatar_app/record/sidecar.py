"""Blendshape track beside a recording: JSON Lines, one line per video frame.

Format (UTF-8, one JSON object per line, ``\\n`` separated):

Line 1, the header::

    {"format": "avatar_app.blendshape_track", "version": 1,
     "blendshape_names": [52 ARKit names, core.blendshapes order],
     "fps": 30.0 | null,
     "units": {"t": "s", "translation": "m", "gaze": "rad"},
     "clip": "take.mp4"}    # the clip's file name (optional; absent in tracks before 2026-12)

Every further line, one per recorded video frame::

    {"frame": 0,            # 0-based index in the recording
     "source_frame": 17,    # AvatarState.frame_index (index in the source)
     "t": 0.0333,           # media time of the frame in the recording, s (6 d.p.)
     "face": true,          # the tracker saw a face
     "blendshapes": [52],   # final weights, header order, 4 d.p.
     "vision": [52],        # vision-only weights, 4 d.p.
     "audio": [52],         # speech-only weights, 4 d.p.
     "rotation": [[3], [3], [3]],   # head rotation, camera space, row-major, 6 d.p.
     "translation": [x, y, z],      # head position, metres, 5 d.p.
     "gaze": [yaw, pitch]}          # eyes relative to the head, radians, 5 d.p.

Weights are lists in the header's name order rather than name->value maps:
a third of the size, and the names are written once. Each line is flushed
as it is written, so a killed recording keeps every complete line;
:func:`read_sidecar` ignores a cut-off last line.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.core.errors import InputError, RecordingError
from avatar_app.core.types import AvatarState

_log = logging.getLogger(__name__)

SIDECAR_FORMAT = "avatar_app.blendshape_track"
SIDECAR_VERSION = 1


def _r(values: np.ndarray, digits: int) -> list:
    return np.round(np.asarray(values, dtype=np.float64), digits).tolist()


class SidecarWriter:
    """Writes the per-frame blendshape track of a recording.

    Args:
        path: output file, conventionally ``<clip>.blendshapes.jsonl`` next to the clip.
        fps: nominal frame rate for the header (None if unknown).
        clip: the file name of the clip this track belongs to (the header's ``clip``), so that
            a clip of another format with the same stem is not given this track silently
            (:func:`sidecar_owner`); None leaves it out.

    Raises:
        RecordingError: the file cannot be created.

    Thread: not thread-safe; one writer thread.
    """

    def __init__(self, path: str | Path, fps: float | None = None, clip: str | None = None):
        self.path = Path(path)
        self.frames_written = 0
        header = {
            "format": SIDECAR_FORMAT, "version": SIDECAR_VERSION,
            "blendshape_names": list(BLENDSHAPE_NAMES), "fps": fps,
            "units": {"t": "s", "translation": "m", "gaze": "rad"},
        }
        if clip is not None:
            header["clip"] = Path(clip).name
        try:
            self._file = open(self.path, "w", encoding="utf-8")
        except OSError as e:
            raise RecordingError(
                f"cannot create the blendshape track {self.path}: {e.strerror or e}") from e
        try:
            self._line(header)
        except OSError as e:
            self._close_quietly()
            raise RecordingError(
                f"cannot write the blendshape track {self.path}: {e.strerror or e}") from e

    def _line(self, obj: dict) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._file.flush()

    def write(self, state: AvatarState, media_time_s: float | None = None) -> None:
        """Append one frame.

        Args:
            state: the AvatarState rendered into this video frame.
            media_time_s: the frame's time in the recording, s; default
                ``state.media_time_s``.

        Raises:
            RecordingError: closed, or the write failed (disk full).
        """
        if self._file.closed:
            raise RecordingError(f"blendshape track {self.path} is closed (or a write failed)")
        t = state.media_time_s if media_time_s is None else media_time_s
        obj = {
            "frame": self.frames_written,
            "source_frame": int(state.frame_index),
            "t": round(float(t), 6),
            "face": bool(state.face_found),
            "blendshapes": _r(state.weights, 4),
            "vision": _r(state.vision_weights, 4),
            "audio": _r(state.audio_weights, 4),
            "rotation": _r(np.asarray(state.rotation).reshape(3, 3), 6),
            "translation": _r(np.asarray(state.translation).reshape(3), 5),
            "gaze": _r(np.asarray(state.gaze).reshape(2), 5),
        }
        try:
            self._line(obj)
        except OSError as e:
            self._close_quietly()  # a later close() would only repeat the error
            raise RecordingError(
                f"writing the blendshape track {self.path} failed: {e.strerror or e}"
            ) from e
        self.frames_written += 1

    def _close_quietly(self) -> None:
        try:
            self._file.close()
        except OSError as e:  # the unwritten buffer is lost either way
            _log.debug("closing %s after a failed write: %s", self.path, e)

    def close(self) -> None:
        """Close the file. Idempotent."""
        if not self._file.closed:
            try:
                self._file.close()
            except OSError as e:
                raise RecordingError(f"closing {self.path} failed: {e.strerror or e}") from e

    def __enter__(self) -> SidecarWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sidecar_owner(path: str | Path) -> str | None:
    """The clip file name a blendshape track's header names (``clip``), without reading the rest.

    Args:
        path: a blendshape track (``.blendshapes.jsonl``).

    Returns:
        The file name, or None when the file cannot be read, is not a track, or was written
        before tracks named their clip (none of these raise: the caller falls back on the
        clips beside it).
    """
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 16)
        header = json.loads(first.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(header, dict) or header.get("format") != SIDECAR_FORMAT:
        return None
    clip = header.get("clip")
    return Path(clip).name if isinstance(clip, str) and clip else None


@dataclass(frozen=True)
class SidecarTrack:
    """A blendshape track read back (T frames).

    Attributes:
        names: the 52 blendshape names of the header.
        fps: nominal frame rate from the header, or None.
        frame: (T,) int64 recording frame indices.
        source_frame: (T,) int64 source frame indices.
        t: (T,) float64 media times, s.
        face: (T,) bool.
        blendshapes, vision, audio: (T, 52) float32 weights.
        rotation: (T, 3, 3) float32.
        translation: (T, 3) float32, metres.
        gaze: (T, 2) float32, radians (yaw, pitch).
    """

    names: tuple[str, ...]
    fps: float | None
    frame: np.ndarray
    source_frame: np.ndarray
    t: np.ndarray
    face: np.ndarray
    blendshapes: np.ndarray
    vision: np.ndarray
    audio: np.ndarray
    rotation: np.ndarray
    translation: np.ndarray
    gaze: np.ndarray
    header: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.frame)


def read_sidecar(path: str | Path) -> SidecarTrack:
    """Read a blendshape track written by :class:`SidecarWriter`.

    A cut-off last line (killed recording: cut mid-JSON, or even mid-character)
    is skipped with a warning; the lines before it are read.

    Args:
        path: the ``.jsonl`` file.

    Returns:
        SidecarTrack with one row per complete frame line.

    Raises:
        InputError: missing file, not a blendshape track, unknown version, a
            broken line before the last, or a header cut off (the recording was
            killed before its first frame).
    """
    path = Path(path)
    try:
        raw = path.read_bytes().split(b"\n")
    except OSError as e:
        raise InputError(f"cannot read blendshape track {path}: {e.strerror or e}", path) from e
    lines = []
    for i, chunk in enumerate(raw):
        try:
            lines.append(chunk.decode("utf-8"))
        except UnicodeDecodeError as e:
            if i == len(raw) - 1:  # cut inside a multi-byte character: a cut-off last line
                lines.append(chunk.decode("utf-8", errors="replace"))
            else:
                raise InputError(f"{path}: line {i + 1} is not UTF-8 text", path) from e
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as e:
        start = '{"format":"' + SIDECAR_FORMAT + '"'
        if len(lines) == 1 and (lines[0].startswith(start) or start.startswith(lines[0])):
            raise InputError(
                f"{path}: the header line is cut off (the recording was stopped before its first "
                "frame); there are no frames to read", path) from e
        raise InputError(f"{path} is not a blendshape track (no header line)", path) from e
    if not isinstance(header, dict) or header.get("format") != SIDECAR_FORMAT:
        raise InputError(f"{path} is not a blendshape track (format {header!r:.60})", path)
    if header.get("version") != SIDECAR_VERSION:
        raise InputError(
            f"{path}: unsupported blendshape track version {header.get('version')}", path)
    names = tuple(header["blendshape_names"])
    rows = []
    body = lines[1:]
    while body and not body[-1].strip():
        body.pop()
    for i, ln in enumerate(body):
        try:
            rows.append(json.loads(ln))
        except json.JSONDecodeError as e:
            if i == len(body) - 1:
                _log.warning("%s: last line is cut off (recording was interrupted); skipped", path)
                break
            raise InputError(f"{path}: line {i + 2} is not valid JSON", path) from e
    n = len(names)

    def arr(key, shape, dtype=np.float32):
        return np.array([r[key] for r in rows], dtype=dtype).reshape((len(rows),) + shape)

    return SidecarTrack(
        names=names, fps=header.get("fps"),
        frame=arr("frame", (), np.int64), source_frame=arr("source_frame", (), np.int64),
        t=arr("t", (), np.float64), face=arr("face", (), bool),
        blendshapes=arr("blendshapes", (n,)), vision=arr("vision", (n,)), audio=arr("audio", (n,)),
        rotation=arr("rotation", (3, 3)), translation=arr("translation", (3,)),
        gaze=arr("gaze", (2,)), header=header,
    )

