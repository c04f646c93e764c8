"""How closely two face trackers agree on real recordings: landmarks per frame, in % of face width.

Used by the landmark-engine tests and benchmarks (the ONNX tracker against
MediaPipe's own). The face width is the distance between the face-oval points
234 and 454 of the reference tracker, in pixels.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatar_app.core.errors import InputError

FACE_WIDTH_POINTS = (234, 454)
"""Face-oval landmarks (right and left cheek) whose distance is the face width."""


def video_frames(path: str | Path, limit: int | None = None) -> Iterator[tuple[float, np.ndarray]]:
    """(media time ms, BGR uint8 frame) of a video file, decoded with PyAV.

    Raises:
        InputError: the file cannot be opened.
    """
    import av

    try:
        container = av.open(str(path))
    except (OSError, av.FFmpegError) as exc:
        raise InputError(f"cannot open video {path}: {exc}", path) from exc
    with container:
        stream = container.streams.video[0]
        for i, f in enumerate(container.decode(stream)):
            if limit is not None and i >= limit:
                return
            t = float(f.time) * 1e3 if f.time is not None else i * 1e3 / float(stream.average_rate or 30)
            yield t, f.to_ndarray(format="bgr24")


def track_frames(tracker, frames) -> list[np.ndarray | None]:
    """Run a VIDEO-mode tracker over ``(ms, bgr)`` frames: (478, 3) pixel landmarks or None per frame."""
    out = []
    last = None
    for t, bgr in frames:
        t = t if last is None or t > last else last + 1e-3  # a repeated timestamp in a file
        last = t
        lm = tracker.process_video_frame(bgr, t)
        out.append(None if lm is None else lm.pixels())
    return out


@dataclass
class Agreement:
    """Agreement of a candidate tracker with a reference on one clip.

    Attributes:
        frames: frames in the clip.
        both: frames where both found a face (the errors are over these).
        only_reference / only_candidate: frames where just one of them found one.
        other_face: frames where both found a face but not the same one (landmark
            boxes overlap by IoU < 0.3); left out of the errors.
        mean_pct / p99_pct / max_pct: landmark distance (x, y) in % of face width,
            over all 478 landmarks of the ``both`` frames.
    """

    frames: int
    both: int
    only_reference: int
    only_candidate: int
    other_face: int
    mean_pct: float
    p99_pct: float
    max_pct: float

    def row(self) -> dict:
        """A JSON-ready dict."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _box(p: np.ndarray) -> np.ndarray:
    return np.array([p[:, 0].min(), p[:, 1].min(), p[:, 0].max(), p[:, 1].max()])


def compare(reference: list[np.ndarray | None], candidate: list[np.ndarray | None]) -> Agreement:
    """Per-landmark distances of ``candidate`` from ``reference`` (both from :func:`track_frames`).

    Raises:
        InputError: the lists differ in length.
    """
    from avatar_app.tracking.roi import box_iou

    if len(reference) != len(candidate):
        raise InputError(f"{len(reference)} reference frames but {len(candidate)} candidate frames")
    errs, only_r, only_c, other = [], 0, 0, 0
    for r, c in zip(reference, candidate):
        if r is None or c is None:
            only_r += int(c is None and r is not None)
            only_c += int(r is None and c is not None)
            continue
        if box_iou(_box(r)[None], _box(c)[None])[0, 0] < 0.3:
            other += 1
            continue
        width = float(np.linalg.norm(r[FACE_WIDTH_POINTS[0], :2] - r[FACE_WIDTH_POINTS[1], :2]))
        errs.append(np.linalg.norm(c[:, :2] - r[:, :2], axis=1) / max(width, 1e-6) * 100.0)
    e = np.concatenate(errs) if errs else np.zeros(0)

    def stat(f: Callable) -> float:
        return float(f(e)) if e.size else float("nan")

    return Agreement(len(reference), len(errs), only_r, only_c, other, stat(np.mean),
                     stat(lambda x: np.percentile(x, 99)), stat(np.max))
