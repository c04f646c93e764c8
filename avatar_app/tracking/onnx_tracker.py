"""Face landmarks from MediaPipe's models run as engines (ONNX Runtime, TensorRT; FP32/FP16/INT8), batched.

Two engines from ``models/`` (converted by ``training/landmarks/convert.py``):
``face_detection`` (the short-range detector, 128 x 128) and ``face_landmark``
(the 478-point attention mesh, 192 x 192). :mod:`avatar_app.tracking.roi` holds
the region-of-interest rules MediaPipe's graph runs around them.

- :class:`LandmarkEngines` runs both engines on batches of crops from any
  number of images.
- :func:`track_step` is one step of MediaPipe's ``FaceLandmarkFrontCpu`` graph
  for a batch of streams: the detector runs only for streams that track fewer
  faces than ``max_faces``; its ROIs that overlap a ROI from the previous
  frame's landmarks by IoU > 0.5 are dropped (AssociationNormRectCalculator);
  the mesh runs on all ROIs of all streams in one batch; faces whose flag is
  below ``min_tracking_confidence`` are lost, and the others give the next ROIs.
- :class:`OnnxFaceTracker` is :class:`~avatar_app.tracking.face_mesh.FaceTracker`
  (running modes, timestamps, face selection, periodic re-detection, small faces)
  with these engines in place of MediaPipe's graphs: it overrides FaceTracker's
  three graph calls (frame, detector -> ROIs, mesh on one ROI -> the next ROI). For small faces, where FaceTracker runs
  MediaPipe's full-range detector (a sparse model that does not convert), it
  runs the short-range detector on overlapping tiles of the frame.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from avatar_app.core.errors import ModelLoadError
from avatar_app.tracking import roi as R
from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

logger = logging.getLogger(__name__)

DETECTOR_MODEL = "models/face_detection.onnx"
MESH_MODEL = "models/face_landmark.onnx"
ASSOCIATION_IOU = 0.5
"""AssociationNormRectCalculator ``min_similarity_threshold``."""
TILE_GRID = 3
"""Small-face search: the frame is cut into TILE_GRID x TILE_GRID overlapping square tiles."""


def model_paths() -> tuple[Path, Path]:
    """Paths of the shipped detector and mesh models (they may not exist in a partial install)."""
    from avatar_app.resources import resource_path

    return resource_path(DETECTOR_MODEL), resource_path(MESH_MODEL)


class LandmarkEngines:
    """The face detector and face mesh engines, batched.

    Args:
        backend / precision: the engine layer's choice (None: the fastest verified
            engine, else ONNX Runtime CPU FP32); one choice for both engines.
        manager: an :class:`~avatar_app.inference.EngineManager` (default: a new one).
        max_batch: crops per engine call (the models' dynamic batch range).

    Raises:
        ModelLoadError: a model file is missing or no engine of it loads.

    Thread: one processing thread.
    """

    def __init__(self, backend: str | None = None, precision: str | None = None, *, manager=None,
                 max_batch: int = 64) -> None:
        from avatar_app.inference import EngineManager, EngineSlot

        manager = manager or EngineManager()
        self.max_batch = int(max_batch)
        self.slots = []
        try:
            for path in model_paths():
                if not path.is_file():
                    raise ModelLoadError(f"landmark model not found: {path} (made by training/landmarks/convert.py)")
                slot = EngineSlot(manager, path)
                slot.open(backend, precision)
                self.slots.append(slot)
        except Exception:
            self.close()
            raise
        self.detector, self.mesh = self.slots
        self._anchors = R.ssd_anchors()

    def describe(self) -> str:
        """``face_detection.onnx on ort_cpu (fp32) [..]; face_landmark.onnx on ...``."""
        return "; ".join(s.active.describe() for s in self.slots)

    def _run(self, slot, batch: np.ndarray) -> dict[str, np.ndarray]:
        outs: dict[str, list] = {}
        for i in range(0, len(batch), self.max_batch):
            for k, v in slot.infer({"image": batch[i:i + self.max_batch]}).items():
                outs.setdefault(k, []).append(v)
        return {k: np.concatenate(v) for k, v in outs.items()}

    def detect(self, images: Sequence[np.ndarray], min_score: float = R.MIN_SCORE
               ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Faces in each RGB image: ``(boxes (F, 4) px, keypoints (F, 6, 2) px, scores (F,))``, best first."""
        if not len(images):
            return []
        sizes = np.array([(im.shape[1], im.shape[0]) for im in images])
        lb = R.letterbox_matrices(sizes)
        batch = R.crops_nchw(list(images), lb, R.DETECTOR_SIZE, border=cv2.BORDER_CONSTANT)
        out = self._run(self.detector, batch)
        result = []
        for i, (b, k, s) in enumerate(R.decode_detections(out["regressors"], out["scores"], self._anchors, min_score)):
            b, k, s = R.weighted_nms(b, k, s)
            bp, kp = R.detections_to_image(b, k, lb[i])
            result.append((bp, kp, s))
        return result

    def landmarks(self, images: Sequence[np.ndarray], rects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The mesh on one ROI per image (an image may repeat).

        Args:
            images: N RGB uint8 images.
            rects: ``(N, 5)`` ROIs (:mod:`~avatar_app.tracking.roi` rects).

        Returns:
            ``(points (N, 478, 3) float32 image-normalised, face_flag (N,) in [0, 1])``.
        """
        if not len(images):
            return np.zeros((0, 478, 3), np.float32), np.zeros(0, np.float32)
        batch = R.crops_nchw(list(images), R.crop_matrices(rects, R.MESH_SIZE), R.MESH_SIZE)
        out = self._run(self.mesh, batch)
        sizes = np.array([(im.shape[1], im.shape[0]) for im in images])
        return R.project(out["landmarks"], rects, sizes), out["face_flag"][:, 0]

    def close(self) -> None:
        """Close both engines. Idempotent."""
        for s in self.slots:
            s.close()
        self.slots = []


@dataclass
class StreamState:
    """What one stream carries from frame to frame: the ROIs from its last landmarks, ``(K, 5)``."""

    rects: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))


def track_step(engines: LandmarkEngines, images: Sequence[np.ndarray], states: Sequence[StreamState] | None,
               max_faces: int = 1, min_detection_confidence: float = R.MIN_SCORE,
               min_tracking_confidence: float = 0.5) -> list[list[np.ndarray]]:
    """One frame of MediaPipe's face mesh for each of several streams, batched across them.

    Args:
        engines: the two engines.
        images: one RGB uint8 frame per stream.
        states: one :class:`StreamState` per stream (updated in place), or None for
            still images (the detector runs on every image, nothing is remembered).
        max_faces: faces looked for per stream (FaceMesh ``max_num_faces``).
        min_detection_confidence / min_tracking_confidence: as in MediaPipe's FaceMesh.

    Returns:
        Per stream, the (478, 3) float32 image-normalised landmarks of each face
        found, in MediaPipe's order (new detections first, then tracked faces).
    """
    n = len(images)
    prev = [s.rects if states is not None else np.zeros((0, 5)) for s in (states or [None] * n)]
    need = [i for i in range(n) if len(prev[i]) < max_faces]
    dets = dict(zip(need, engines.detect([images[i] for i in need], min_detection_confidence)))
    rois: list[np.ndarray] = []
    for i in range(n):
        rects = prev[i]
        if i in dets:
            bp, kp, _ = dets[i]
            new = R.detection_rects(bp[:max_faces], kp[:max_faces])
            if len(rects) and len(new):
                overlap = R.box_iou(R.rect_boxes(new), R.rect_boxes(rects)).max(axis=1)
                new = new[overlap <= ASSOCIATION_IOU]
            rects = np.concatenate([new, rects]) if len(rects) else new
        rois.append(rects)
    owner = np.concatenate([np.full(len(r), i) for i, r in enumerate(rois)]).astype(int) if n else np.zeros(0, int)
    flat = np.concatenate(rois) if n else np.zeros((0, 5))
    pts, flags = engines.landmarks([images[i] for i in owner], flat)
    out: list[list[np.ndarray]] = [[] for _ in range(n)]
    keep = flags >= min_tracking_confidence
    for j in np.flatnonzero(keep):
        out[owner[j]].append(pts[j])
    if states is not None:
        sizes = np.array([(images[i].shape[1], images[i].shape[0]) for i in owner], np.float64)
        next_rects = R.landmark_rects(pts[:, :, :2] * sizes[:, None, :]) if len(pts) else np.zeros((0, 5))
        for i, s in enumerate(states):
            s.rects = next_rects[(owner == i) & keep]
    return out


def tiles(width: int, height: int, grid: int = TILE_GRID) -> np.ndarray:
    """Overlapping square tiles covering a frame, ``(grid*grid, 4)`` pixel boxes ``x0, y0, x1, y1``.

    Each tile's side is ``2 / (grid + 1)`` of the longer image side, so neighbours
    overlap by half a tile: a face up to a quarter of a tile lies wholly inside one.
    """
    side = 2.0 * max(width, height) / (grid + 1)
    xs = np.linspace(0, max(width - side, 0), grid)
    ys = np.linspace(0, max(height - side, 0), grid)
    return np.array([(x, y, x + side, y + side) for y in ys for x in xs])


class OnnxFaceTracker(FaceTracker):
    """:class:`~avatar_app.tracking.face_mesh.FaceTracker` on the landmark engines instead of MediaPipe's graphs.

    Same running modes, timestamp contract, face selection rule and small-face
    path; see :class:`FaceTracker`. Example::

        with OnnxFaceTracker(RunningMode.VIDEO) as tracker:
            lm = tracker.process_video_frame(bgr, timestamp_ms=40.0)

    Args:
        mode, max_faces, min_detection_confidence, min_tracking_confidence,
        small_faces, reacquire_after_s, gate: as for FaceTracker.
        engines: the :class:`LandmarkEngines` to use (shared, not closed by the
            tracker); default: made from ``backend``/``precision`` and closed with it.
        backend / precision: engine choice when ``engines`` is None.
        manager: the :class:`~avatar_app.inference.EngineManager` that opens them when
            ``engines`` is None (default: a new one; the studio passes its own, for its cache).

    Raises:
        InputError: a parameter out of range.
        ModelLoadError: a landmark model is missing or does not load.
    """

    runs_meanwhile = False  # the engines run on the calling thread: nothing to overlap there

    def __init__(self, mode: RunningMode = RunningMode.VIDEO, *, engines: LandmarkEngines | None = None,
                 backend: str | None = None, precision: str | None = None, manager=None, **kwargs) -> None:
        self._own_engines = engines is None
        self._engines = engines if engines is not None else LandmarkEngines(backend, precision, manager=manager)
        self._state = StreamState()
        try:
            super().__init__(mode, **kwargs)
        except Exception:
            self._release_engines()
            raise

    @property
    def engines(self) -> LandmarkEngines:
        """The engines this tracker runs on."""
        return self._engines

    def describe(self) -> str:
        """``ONNX tracker: face_detection.onnx on ort_cpu (fp32) ...``."""
        return f"ONNX tracker: {self._engines.describe()}"

    def close(self) -> None:
        """Forget the state and close the engines when the tracker made them. Idempotent."""
        super().close()
        self._release_engines()

    def _release_engines(self) -> None:
        if self._own_engines and self._engines is not None:
            self._engines.close()
        self._own_engines = False

    # -- FaceTracker's graph calls, on the engines --------------------------------
    def _open_graphs(self) -> None:
        self._state = StreamState()

    def _close_graphs(self) -> None:
        self._state = StreamState()

    def _frame(self, bgr: np.ndarray) -> np.ndarray:
        """The frame as the engines take it: (H, W, 3) uint8 RGB."""
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)

    def _detect_faces(self, frame: np.ndarray, w: int, h: int, far: bool) -> tuple[list[np.ndarray], list[object]]:
        """Faces (pixel boxes) and their ROIs ((5,) rects of :mod:`~avatar_app.tracking.roi`).

        ``far`` (small faces): MediaPipe's full-range detector does not convert, so the
        short-range detector runs on overlapping tiles of the frame (:func:`tiles`); a
        face in two tiles counts once.
        """
        if not far:
            bp, kp, _ = self._engines.detect([frame], self._min_detection_confidence)[0]
            return list(bp), list(R.detection_rects(bp, kp))
        boxes = tiles(w, h)
        crops = [frame[int(y0):int(np.ceil(y1)), int(x0):int(np.ceil(x1))] for x0, y0, x1, y1 in boxes]
        found, points, scores = [], [], []
        for (x0, y0, _, _), (bp, kp, s) in zip(boxes, self._engines.detect(crops, self._min_detection_confidence)):
            found.extend(bp + np.array([int(x0), int(y0)] * 2))
            points.extend(kp + np.array([int(x0), int(y0)]))
            scores.extend(s)
        if not found:
            return [], []
        found, points = np.array(found), np.array(points)
        kept: list[int] = []
        for i in np.argsort(-np.array(scores), kind="stable"):
            if not kept or R.box_iou(found[i:i + 1], found[kept]).max() <= R.NMS_IOU:
                kept.append(int(i))
        return [found[i] for i in kept], list(R.detection_rects(found[kept], points[kept]))

    def _landmarks(self, frame: np.ndarray, roi) -> tuple[np.ndarray | None, object | None]:
        """The mesh on one ROI: ((478, 3) float32 image-normalised points, the next frame's ROI),
        or (None, None) when the face flag is below ``min_tracking_confidence``."""
        pts, flags = self._engines.landmarks([frame], np.asarray(roi, np.float64)[None])
        if flags[0] < self._min_tracking_confidence:
            return None, None
        h, w = frame.shape[:2]
        return pts[0], R.landmark_rects(pts[:1, :, :2] * np.array([w, h], np.float64))[0]
