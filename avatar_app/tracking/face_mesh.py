"""Face landmarks from MediaPipe's face mesh, with running modes and face selection.

Wraps the legacy ``mediapipe.solutions.face_mesh.FaceMesh`` with
``refine_landmarks=True`` (478 landmarks: the 468-point mesh plus 5 points per
iris). mediapipe 0.10.21 bundles the detector and landmark models in its
wheel, so nothing is downloaded.

The legacy API has no timestamps; this wrapper owns the contract of the
MediaPipe Tasks API instead: one running mode per tracker, one method per
mode, and timestamps that strictly increase.

Small faces: the face mesh's own detector is the short-range model (faces
larger than about a fifth of the image). When it finds no face, the tracker
runs MediaPipe's full-range face detector (``FaceDetection(model_selection=1)``),
crops a square around the chosen face, upscales it to 256 px and runs the
mesh on the crop; while that face stays small the next frames are cropped
around its previous landmarks ("track from the last box", as OpenSeeFace
does) without running the detector again.

Face selection: when several faces are visible the tracker follows one. On the
first frame (and after the followed face has been lost for longer than
``reacquire_after_s``) it takes the largest face; afterwards it takes the face
whose box overlaps the previous choice most (intersection over union), or if
none overlaps the nearest one within ``gate`` box sizes; a face elsewhere is
another person and is ignored (the frame returns None) until the re-acquire
time has passed. IMAGE mode has no history: always the largest face.
"""
from __future__ import annotations

import enum
import logging

import cv2
import numpy as np

from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.types import Landmarks
from avatar_app.core.landmarks import NUM_LANDMARKS
from avatar_app.tracking.native_log import QuietGraph

logger = logging.getLogger(__name__)

_CROP_PX = 256
"""Side of the square crop the mesh sees in the small-face path, pixels."""
_CROP_SCALE_FROM_DETECTION = 2.2
"""Crop side / detector box side (the detector's box spans brows to mouth)."""
_CROP_SCALE_FROM_LANDMARKS = 1.6
"""Crop side / landmark box side (MediaPipe's own ROI uses about 1.5)."""


class RunningMode(enum.Enum):
    """How frames arrive, as in MediaPipe Tasks' ``VisionTaskRunningMode``.

    IMAGE: unrelated still images (detection on every image).
    VIDEO: decoded video frames in media time (tracking between frames).
    LIVE: camera frames on the process clock (tracking between frames).
    """

    IMAGE = "image"
    VIDEO = "video"
    LIVE = "live"


def _landmark_box(points: np.ndarray, w: int, h: int) -> np.ndarray:
    """(4,) float64 box ``x0, y0, x1, y1`` in pixels of (478, 3) normalised points."""
    x = points[:, 0] * w
    y = points[:, 1] * h
    return np.array([x.min(), y.min(), x.max(), y.max()], dtype=np.float64)


def _area(b: np.ndarray) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = _area(np.array([max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])]))
    union = _area(a) + _area(b) - inter
    return inter / union if union > 0 else 0.0


def _mesh_points(result: object) -> list[np.ndarray]:
    """(478, 3) float32 arrays of every face in a legacy FaceMesh result."""
    faces = getattr(result, "multi_face_landmarks", None) or []
    pts = [np.array([(p.x, p.y, p.z) for p in f.landmark], dtype=np.float32) for f in faces]
    return [p for p in pts if p.shape == (NUM_LANDMARKS, 3)]


class FaceTracker:
    """MediaPipe face mesh (478 landmarks) for one followed face.

    Example::

        with FaceTracker(RunningMode.VIDEO) as tracker:
            for i, bgr in enumerate(frames):
                lm = tracker.process_video_frame(bgr, timestamp_ms=i * 40.0)

    Thread: not thread-safe; use one tracker per thread (MediaPipe graphs are
    stateful).

    Args:
        mode: the running mode; only that mode's ``process_*`` method may be called.
        max_faces: how many faces the full-frame mesh looks for (1..10).
            MediaPipe runs its detector on every frame where fewer faces than
            this are tracked. Measured at 640x480 on a shared 2-core CPU
            (best of 3): one face in view 1.9 ms/frame with 1, 2.9 ms with 2;
            two faces in view 2.6 ms with 1, 4.6 ms with 2 (both tracked). The
            default 2 makes the selection rule hold for a second person in
            view: with 1, MediaPipe follows whichever face its detector scored
            highest when the user's face was lost (e.g. someone behind the user)
            and, while that face is tracked, never looks for the user again.
        min_detection_confidence: face detector threshold in [0, 1].
        min_tracking_confidence: landmark presence threshold in [0, 1] below
            which the face counts as lost and the detector runs again.
        small_faces: use the full-range detector and an upscaled crop when the
            mesh finds no face (faces down to ~30 px).
        reacquire_after_s: seconds without the followed face after which the
            largest visible face is taken instead (VIDEO and LIVE).
        gate: how far (in sizes of the previous box) a non-overlapping face may
            be from the previous choice to still count as the same face.

    Raises:
        InputError: a parameter out of range.
    """

    def __init__(
        self,
        mode: RunningMode = RunningMode.VIDEO,
        *,
        max_faces: int = 2,
        min_detection_confidence: float = 0.5,
        min_tracking_confidence: float = 0.5,
        small_faces: bool = True,
        reacquire_after_s: float = 0.5,
        gate: float = 0.5,
    ) -> None:
        if not isinstance(mode, RunningMode):
            raise InputError(f"mode must be a RunningMode, got {mode!r}")
        if not 1 <= int(max_faces) <= 10:
            raise InputError(f"max_faces must be between 1 and 10, got {max_faces}")
        for name, v in (
            ("min_detection_confidence", min_detection_confidence),
            ("min_tracking_confidence", min_tracking_confidence),
        ):
            if not 0.0 <= float(v) <= 1.0:
                raise InputError(f"{name} must be in [0, 1], got {v}")
        if reacquire_after_s < 0 or gate < 0:
            raise InputError("reacquire_after_s and gate must be non-negative")
        self._mode = mode
        self._max_faces = int(max_faces)
        self._min_detection_confidence = float(min_detection_confidence)
        self._min_tracking_confidence = float(min_tracking_confidence)
        self._small_faces = bool(small_faces)
        self._reacquire_after_s = float(reacquire_after_s)
        self._gate = float(gate)
        self._closed = False
        self._mesh = None
        self._crop_mesh = None
        self._detector = None
        self._open_graphs()
        self._last_ts: int | float | None = None
        self._prev_box: np.ndarray | None = None
        self._prev_small = False
        self._lost_since_s: float | None = None
        self._faces_found = 0

    # -- public API ---------------------------------------------------------

    @property
    def mode(self) -> RunningMode:
        """The running mode given at construction."""
        return self._mode

    @property
    def max_faces(self) -> int:
        """How many faces the full-frame mesh looks for."""
        return self._max_faces

    @property
    def faces_found(self) -> int:
        """Faces seen in the last processed frame (by the mesh, or by the detector
        when the small-face path ran; 1 while a small face is tracked from its box)."""
        return self._faces_found

    def process_image(self, bgr: np.ndarray) -> Landmarks | None:
        """Landmarks of the largest face in a still image.

        Args:
            bgr: (H, W, 3) uint8 BGR image.

        Returns:
            The face's Landmarks (``t_ns = 0``), or None when no face is found.

        Raises:
            TrackingError: the tracker is not in IMAGE mode, or it is closed.
            InputError: the image is not (H, W, 3) uint8.
        """
        self._check_mode(RunningMode.IMAGE, "process_image")
        image = self._check_image(bgr)
        return self._process(image, t_s=None, t_ns=0)

    def process_video_frame(self, bgr: np.ndarray, timestamp_ms: float) -> Landmarks | None:
        """Landmarks of the followed face in one video frame.

        Args:
            bgr: (H, W, 3) uint8 BGR frame.
            timestamp_ms: media time of the frame, milliseconds; must be larger
                than the previous call's.

        Returns:
            Landmarks (``t_ns`` = the timestamp in ns), or None when the
            followed face is not visible.

        Raises:
            TrackingError: wrong mode, closed, or the timestamp does not increase.
            InputError: the image is not (H, W, 3) uint8 or the timestamp is not finite.
        """
        self._check_mode(RunningMode.VIDEO, "process_video_frame")
        ts = float(timestamp_ms)
        if not np.isfinite(ts):
            raise InputError(f"timestamp_ms must be finite, got {timestamp_ms}")
        self._check_increasing(ts, "ms")
        image = self._check_image(bgr)
        self._last_ts = ts
        return self._process(image, t_s=ts / 1e3, t_ns=int(round(ts * 1e6)))

    def process_live(self, bgr: np.ndarray, timestamp_ns: int) -> Landmarks | None:
        """Landmarks of the followed face in one camera frame.

        Args:
            bgr: (H, W, 3) uint8 BGR frame.
            timestamp_ns: capture time on the process clock (``now_ns()``),
                integer nanoseconds; must be larger than the previous call's.

        Returns:
            Landmarks (``t_ns = timestamp_ns``), or None when the followed face
            is not visible.

        Raises:
            TrackingError: wrong mode, closed, or the timestamp does not increase.
            InputError: the image is not (H, W, 3) uint8 or the timestamp is not an integer.
        """
        self._check_mode(RunningMode.LIVE, "process_live")
        if isinstance(timestamp_ns, bool) or not isinstance(timestamp_ns, (int, np.integer)):
            raise InputError(f"timestamp_ns must be an integer (ns), got {timestamp_ns!r}")
        ts = int(timestamp_ns)
        self._check_increasing(ts, "ns")
        image = self._check_image(bgr)
        self._last_ts = ts
        return self._process(image, t_s=ts / 1e9, t_ns=ts)

    def reset(self) -> None:
        """Forget the followed face and the last timestamp (e.g. before a new video).

        Raises:
            TrackingError: the tracker is closed.
        """
        self._check_open()
        self._close_graphs()
        self._open_graphs()  # fresh graphs forget MediaPipe's own tracked regions too
        self._last_ts = None
        self._prev_box = None
        self._prev_small = False
        self._lost_since_s = None
        self._faces_found = 0

    def close(self) -> None:
        """Release the MediaPipe graphs. Idempotent."""
        if not self._closed:
            self._close_graphs()
            self._closed = True

    def __enter__(self) -> "FaceTracker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------

    def _open_graphs(self) -> None:
        import mediapipe as mp  # heavy import, only when a tracker is made

        fm = mp.solutions.face_mesh
        self._mesh = QuietGraph(lambda: fm.FaceMesh(
            static_image_mode=self._mode is RunningMode.IMAGE,
            max_num_faces=self._max_faces,
            refine_landmarks=True,
            min_detection_confidence=self._min_detection_confidence,
            min_tracking_confidence=self._min_tracking_confidence,
        ))
        self._crop_mesh = None
        self._detector = None

    def _close_graphs(self) -> None:
        for g in (self._mesh, self._crop_mesh, self._detector):
            if g is not None:
                g.close()
        self._mesh = self._crop_mesh = self._detector = None

    def _small_face_graphs(self) -> tuple[object, object]:
        """The full-range detector and the crop mesh, created on first use."""
        if self._detector is None:
            import mediapipe as mp

            self._detector = QuietGraph(lambda: mp.solutions.face_detection.FaceDetection(
                model_selection=1, min_detection_confidence=self._min_detection_confidence
            ))
            # Static mode: the crop moves with the face, so no state may carry over.
            self._crop_mesh = QuietGraph(lambda: mp.solutions.face_mesh.FaceMesh(
                static_image_mode=True,
                max_num_faces=1,
                refine_landmarks=True,
                min_detection_confidence=self._min_detection_confidence,
            ))
        return self._detector, self._crop_mesh

    # -- the three graph calls (an ONNX tracker overrides them) ------------------

    def _frame_faces(self, rgb: np.ndarray) -> list[np.ndarray]:
        """(478, 3) normalised landmarks of each face the full-frame mesh tracks in an RGB frame."""
        return _mesh_points(self._mesh.process(rgb))

    def _small_face_boxes(self, rgb: np.ndarray) -> list[np.ndarray]:
        """(4,) pixel boxes ``x0, y0, x1, y1`` of the full-range detector's faces in an RGB frame."""
        detector, _ = self._small_face_graphs()
        h, w = rgb.shape[:2]
        boxes = []
        for d in getattr(detector.process(rgb), "detections", None) or []:
            b = d.location_data.relative_bounding_box
            boxes.append(np.array([b.xmin * w, b.ymin * h, (b.xmin + b.width) * w, (b.ymin + b.height) * h]))
        return boxes

    def _crop_faces(self, crop: np.ndarray) -> list[np.ndarray]:
        """(478, 3) crop-normalised landmarks of the faces the static mesh finds in an RGB crop."""
        _, crop_mesh = self._small_face_graphs()
        return _mesh_points(crop_mesh.process(crop))

    def _check_open(self) -> None:
        if self._closed:
            raise TrackingError("the face tracker is closed")

    def _check_mode(self, wanted: RunningMode, method: str) -> None:
        self._check_open()
        if self._mode is not wanted:
            raise TrackingError(
                f"{method}() needs a tracker in {wanted.name} mode, but this tracker runs in "
                f"{self._mode.name} mode; create a FaceTracker(RunningMode.{wanted.name})"
            )

    def _check_increasing(self, ts: int | float, unit: str) -> None:
        if self._last_ts is not None and not ts > self._last_ts:
            raise TrackingError(
                f"timestamps must strictly increase: got {ts} {unit} after {self._last_ts} {unit}"
            )

    @staticmethod
    def _check_image(bgr: np.ndarray) -> np.ndarray:
        if bgr is None:
            raise InputError("no image given to the face tracker (None)")
        if not isinstance(bgr, np.ndarray):
            raise InputError(f"image must be a numpy array, got {type(bgr).__name__}")
        if bgr.dtype != np.uint8:
            raise InputError(f"image must be uint8 BGR, got dtype {bgr.dtype}")
        if bgr.ndim != 3 or bgr.shape[2] != 3 or bgr.shape[0] < 1 or bgr.shape[1] < 1:
            raise InputError(f"image must have shape (H, W, 3) BGR, got {bgr.shape}")
        return bgr

    def _process(self, image: np.ndarray, t_s: float | None, t_ns: int) -> Landmarks | None:
        h, w = image.shape[:2]
        rgb = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        pts: np.ndarray | None = None
        small = False
        if self._small_faces and self._prev_small and self._prev_box is not None:
            # Track a small face from its last box, without the detector; a face in
            # the crop that does not overlap the last box is someone else.
            pts = self._mesh_in_box(rgb, self._prev_box, _CROP_SCALE_FROM_LANDMARKS)
            if pts is not None and _iou(_landmark_box(pts, w, h), self._prev_box) <= 0.0:
                pts = None
            small = pts is not None
            self._faces_found = int(small)
        if pts is None:
            faces = self._frame_faces(rgb)
            self._faces_found = len(faces)
            if faces:
                choice = self._select([_landmark_box(p, w, h) for p in faces], t_s)
                pts = None if choice is None else faces[choice]
        if pts is None and self._small_faces:
            pts = self._detect_small(rgb, t_s)
            small = pts is not None
        if pts is None:
            if t_s is not None and self._lost_since_s is None:
                self._lost_since_s = t_s
            self._prev_small = False
            return None
        if t_s is not None:  # IMAGE mode keeps no history
            box = _landmark_box(pts, w, h)
            self._prev_box = box
            # Stay on the crop path while the face is too small for the mesh's own detector.
            self._prev_small = small and max(box[2] - box[0], box[3] - box[1]) < 0.25 * min(w, h)
            self._lost_since_s = None
        return Landmarks(points=pts, image_size=(w, h), t_ns=t_ns)

    def _detect_small(self, rgb: np.ndarray, t_s: float | None) -> np.ndarray | None:
        """Full-range detection, selection, then the mesh on a crop of the chosen face."""
        boxes = self._small_face_boxes(rgb)
        self._faces_found = max(self._faces_found, len(boxes))
        if not boxes:
            return None
        choice = self._select(boxes, t_s)
        if choice is None:
            return None
        return self._mesh_in_box(rgb, boxes[choice], _CROP_SCALE_FROM_DETECTION)

    def _mesh_in_box(self, rgb: np.ndarray, box: np.ndarray, scale: float) -> np.ndarray | None:
        """Run the crop mesh on a square of ``scale`` box sizes; points in full-image coords."""
        h, w = rgb.shape[:2]
        side = scale * max(box[2] - box[0], box[3] - box[1])
        if side < 8:
            return None
        x0 = 0.5 * (box[0] + box[2]) - 0.5 * side
        y0 = 0.5 * (box[1] + box[3]) - 0.5 * side
        k = _CROP_PX / side
        m = np.array([[k, 0.0, -x0 * k], [0.0, k, -y0 * k]])
        crop = cv2.warpAffine(
            rgb, m, (_CROP_PX, _CROP_PX), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT
        )
        faces = self._crop_faces(crop)
        if not faces:
            return None
        p = faces[0]
        out = np.empty_like(p)
        out[:, 0] = (x0 + p[:, 0] * side) / w
        out[:, 1] = (y0 + p[:, 1] * side) / h
        out[:, 2] = p[:, 2] * side / w
        return out

    def _select(self, boxes: list[np.ndarray], t_s: float | None) -> int | None:
        """Index of the face to follow, or None when only other people are visible."""
        largest = int(np.argmax([_area(b) for b in boxes]))
        prev = self._prev_box
        if t_s is None or prev is None:
            return largest
        ious = [_iou(prev, b) for b in boxes]
        best = int(np.argmax(ious))
        if ious[best] > 0.0:
            return best
        size = max(prev[2] - prev[0], prev[3] - prev[1])
        pc = 0.5 * (prev[:2] + prev[2:])
        dists = [float(np.linalg.norm(0.5 * (b[:2] + b[2:]) - pc)) for b in boxes]
        nearest = int(np.argmin(dists))
        if dists[nearest] <= self._gate * size:
            return nearest
        lost_for = 0.0 if self._lost_since_s is None else t_s - self._lost_since_s
        if lost_for >= self._reacquire_after_s:
            logger.debug("followed face lost for %.2f s; taking the largest face", lost_for)
            return largest
        return None
