"""MediaPipe landmarks of real recordings and stills, tracked once and cached by file content.

Tracking a clip costs seconds; every benchmark, test and training script that
measures on the same recordings reads the same landmarks from a cache keyed by
the file's SHA-256, the MediaPipe version and the tracker settings, so a changed
file or tracker is tracked again and nothing stale is read.

The cache folder is ``$AVATAR_APP_LANDMARK_CACHE`` or, without it,
``<system temp>/avatar_app-landmarks`` (generated data: it never belongs in the
repository).
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatar_app.core.errors import InputError, NoFaceError
from avatar_app.core.types import Landmarks

_log = logging.getLogger(__name__)

#: Bump when the stored arrays or the way they are made change.
CACHE_VERSION = 1


@dataclass(frozen=True)
class TrackedClip:
    """Landmarks of every frame of one video (VIDEO mode, media time).

    Attributes:
        name: the file's stem.
        points: (F, 478, 3) float32 MediaPipe landmarks (NaN where no face was found).
        found: (F,) bool, a face was tracked in that frame.
        times: (F,) float64 media time of each frame, seconds.
        image_size: (width, height) pixels.
        fps: the stream's frame rate.
    """

    name: str
    points: np.ndarray
    found: np.ndarray
    times: np.ndarray
    image_size: tuple[int, int]
    fps: float

    def __len__(self) -> int:
        return len(self.times)

    def landmarks(self, i: int) -> Landmarks | None:
        """The Landmarks of frame ``i`` (None when no face was found there)."""
        if not self.found[i]:
            return None
        return Landmarks(points=self.points[i], image_size=self.image_size, t_ns=round(self.times[i] * 1e9))

    def frames(self):
        """Yield ``(index, time_s, Landmarks)`` of the frames with a face."""
        for i in np.flatnonzero(self.found):
            yield int(i), float(self.times[i]), self.landmarks(int(i))


def cache_dir() -> Path:
    """The landmark cache folder (created on demand)."""
    d = os.environ.get("AVATAR_APP_LANDMARK_CACHE")
    return Path(d) if d else Path(tempfile.gettempdir()) / "avatar_app-landmarks"


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _key(path: Path, kind: str) -> str:
    import mediapipe

    h = hashlib.sha256(f"{CACHE_VERSION}|{kind}|{mediapipe.__version__}|{file_sha256(path)}".encode())
    return f"{path.stem}-{kind}-{h.hexdigest()[:16]}.npz"


def _store(target: Path, **arrays) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".npz")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def track_video(path: str | Path, *, use_cache: bool = True) -> TrackedClip:
    """Landmarks of every frame of a video, as the offline render tracks them (VIDEO mode).

    Args:
        path: a video file.
        use_cache: read and write the landmark cache (:func:`cache_dir`).

    Returns:
        TrackedClip.

    Raises:
        InputError: the file is missing or holds no decodable video.
    """
    import av

    from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

    path = Path(path)
    if not path.is_file():
        raise InputError(f"video not found: {path}", path)
    target = cache_dir() / _key(path, "video")
    if use_cache and target.is_file():
        z = np.load(target)
        return TrackedClip(path.stem, z["points"], z["found"], z["times"], tuple(int(v) for v in z["size"]),
                           float(z["fps"]))
    pts, found, times = [], [], []
    size = (0, 0)
    try:
        with av.open(str(path)) as c, FaceTracker(RunningMode.VIDEO) as tracker:
            st = c.streams.video[0]
            fps = float(st.average_rate or 0.0) or 30.0
            for frame in c.decode(st):
                bgr = frame.to_ndarray(format="bgr24")
                size = (bgr.shape[1], bgr.shape[0])
                t = float(frame.time if frame.time is not None else len(times) / fps)
                if times and t <= times[-1]:
                    continue
                lm = tracker.process_video_frame(bgr, t * 1e3)
                times.append(t)
                found.append(lm is not None)
                pts.append(lm.points if lm is not None else np.full((478, 3), np.nan, np.float32))
    except av.FFmpegError as exc:
        raise InputError(f"cannot decode {path}: {exc}", path) from exc
    if not times:
        raise InputError(f"{path} holds no video frames", path)
    clip = TrackedClip(path.stem, np.array(pts, np.float32), np.array(found, bool), np.array(times, np.float64),
                       size, fps)
    if use_cache:
        _store(target, points=clip.points, found=clip.found, times=clip.times, size=np.array(size), fps=fps)
    _log.info("tracked %s: %d frames, face in %d", path.name, len(clip), int(clip.found.sum()))
    return clip


def track_image(path: str | Path, *, use_cache: bool = True, image=None, tracker=None) -> Landmarks:
    """Landmarks of the largest face in a still (IMAGE mode).

    Args:
        path: an image file (also the cache key unless ``image`` is given).
        use_cache: read and write the landmark cache.
        image: optional (H, W, 3) uint8 BGR pixels to track instead of reading ``path``
            (never cached).
        tracker: an open IMAGE-mode FaceTracker to reuse (default: a new one for this call).

    Returns:
        Landmarks.

    Raises:
        InputError: the file is missing or not an image.
        NoFaceError: no face in it.
    """
    import cv2

    from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

    path = Path(path)
    target = None
    if image is None:
        if not path.is_file():
            raise InputError(f"image not found: {path}", path)
        target = cache_dir() / _key(path, "image")
        if use_cache and target.is_file():
            z = np.load(target)
            return Landmarks(points=z["points"], image_size=tuple(int(v) for v in z["size"]))
        image = cv2.imread(str(path))
        if image is None:
            raise InputError(f"not an image: {path}", path)
    if tracker is not None:
        lm = tracker.process_image(image)
    else:
        with FaceTracker(RunningMode.IMAGE) as own:
            lm = own.process_image(image)
    if lm is None:
        raise NoFaceError(f"no face in {path}")
    if use_cache and target is not None:
        _store(target, points=lm.points, size=np.array(lm.image_size))
    return lm
