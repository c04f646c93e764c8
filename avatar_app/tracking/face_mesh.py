"""Face landmarks from MediaPipe's face mesh, with running modes and face selection.

MediaPipe's face landmark model with attention (``refine_landmarks=True``: 478
landmarks, the 468-point mesh plus 5 points per iris) and its face detectors,
run as two small graphs (:mod:`avatar_app.tracking.mp_graphs`) built from
MediaPipe's own subgraphs. mediapipe 0.10.21 bundles the models in its wheel,
so nothing is downloaded.

The legacy API has no timestamps; this wrapper owns the contract of the
MediaPipe Tasks API instead: one running mode per tracker, one method per
mode, and timestamps that strictly increase.

Tracking (VIDEO and LIVE), as MediaPipe's FaceMesh does for one face: the
landmark model runs on a region of interest (ROI) that follows the face from
its previous landmarks. The face detector runs only

- when no face is followed: the first frame, and every frame after the
  followed face was lost (its face presence score fell below
  ``min_tracking_confidence``; the detector then runs on that same frame);
- every ``redetect_s`` of media time while a face is followed, to count the
  faces in view (``faces_found``); the followed face keeps its ROI. That
  detector graph computes beside the frame's landmark graph, both on
  MediaPipe's threads (:meth:`FaceTracker._start_detection`): on the 2-core
  test machine a frame with it cost 1.3 ms more than one without, against
  2.4 ms with the two graphs one after the other (landmark graph 4.3 ms).

Legacy FaceMesh with ``max_num_faces=2`` ran its detector on every frame with
one face in view (about 1.5x the landmark model's cost).

Small faces: the short-range detector finds faces larger than about a fifth of
the image. When it finds none, the full-range detector
(``model_selection=1``, faces down to ~30 px) runs; the landmark model crops
and scales the face's ROI itself, and tracking from the landmarks needs no
detector, so a small face is tracked like a large one.

Face selection: when several faces are visible the tracker follows one. On the
first frame (and after the followed face has been lost for longer than
``reacquire_after_s``) it takes the largest detected face; afterwards it takes
the detection whose box overlaps the last landmarks' box most (intersection
over union), or if none overlaps the nearest one within ``gate`` box sizes; a
face elsewhere is another person and is ignored (the frame returns None) until
the re-acquire time has passed. Only the followed face is tracked, so another
face in view costs nothing and cannot take its place. IMAGE mode has no
history: always the largest face.
"""
from __future__ import annotations

import enum
import logging

import cv2
import numpy as np

from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.types import Landmarks

logger = logging.getLogger(__name__)

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


class FaceTracker:
    """MediaPipe face mesh (478 landmarks) for one followed face.

    Example::

        with FaceTracker(RunningMode.VIDEO) as tracker:
            for i, bgr in enumerate(frames):
                lm = tracker.process_video_frame(bgr, timestamp_ms=i * 40.0)

    Thread: not thread-safe; use one tracker per thread (it carries the
    followed face from frame to frame).

    Args:
        mode: the running mode; only that mode's ``process_*`` method may be called.
        max_faces: IMAGE mode: how many detected faces (largest first) the
            landmark model tries until one holds a face (1..10). VIDEO and
            LIVE consider every detected face for selection and track one.
        min_detection_confidence: face detector threshold in [0, 1].
        min_tracking_confidence: landmark presence threshold in [0, 1] below
            which the face counts as lost and the detector runs again.
        small_faces: run the full-range detector when the short-range one finds
            no face (faces down to ~30 px).
        reacquire_after_s: seconds without the followed face after which the
            largest visible face is taken instead (VIDEO and LIVE).
        gate: how far (in sizes of the previous box) a non-overlapping face may
            be from the previous choice to still count as the same face.
        redetect_s: media time between detector runs while a face is followed
            (VIDEO and LIVE), seconds; None: only when no face is followed. They
            only count the faces in view (``faces_found``: a second person is
            counted within ``redetect_s``); which face is followed does not depend
            on them. The default keeps them at 2 % of frames at 25 fps (1.7 % at
            30), so that with the speech-order probes (1.6 %,
            :class:`~avatar_app.pipeline.processor.OrderChooser`) the frames that do
            more than the median one stay under 5 %, out of the 95th percentile of
            the frame time (at 1 s: 4 %, and the p95 was one of those frames).

    Attributes:
        runs_meanwhile: True: the ``meanwhile`` callable of ``process_video_frame`` /
            ``process_live`` runs while MediaPipe's own threads compute the frame (the
            calling thread only waits for them then), so a caller's other work overlaps
            tracking without a second Python thread. False for a tracker whose models
            run on the calling thread (it calls ``meanwhile`` after tracking).

    Raises:
        InputError: a parameter out of range.
    """

    runs_meanwhile = True

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
        redetect_s: float | None = 2.0,
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
        if redetect_s is not None and not float(redetect_s) > 0:
            raise InputError(f"redetect_s must be positive or None, got {redetect_s}")
        self._mode = mode
        self._max_faces = int(max_faces)
        self._min_detection_confidence = float(min_detection_confidence)
        self._min_tracking_confidence = float(min_tracking_confidence)
        self._small_faces = bool(small_faces)
        self._reacquire_after_s = float(reacquire_after_s)
        self._gate = float(gate)
        self._redetect_s = None if redetect_s is None else float(redetect_s)
        self._closed = False
        self._meanwhile = None
        self._landmarker = self._detector = self._far_detector = None
        self._open_graphs()
        self._forget()

    def _forget(self) -> None:
        self._last_ts: int | float | None = None
        self._roi = None  # MediaPipe's ROI of the followed face for the next frame (a packet)
        self._prev_box: np.ndarray | None = None  # the followed face's last landmark box, pixels
        self._lost_since_s: float | None = None
        self._detected_at_s = -np.inf  # media time of the last detector run
        self._faces_found = 0

    # -- public API ---------------------------------------------------------

    @property
    def mode(self) -> RunningMode:
        """The running mode given at construction."""
        return self._mode

    @property
    def max_faces(self) -> int:
        """IMAGE mode: how many of the largest detected faces are tried."""
        return self._max_faces

    @property
    def faces_found(self) -> int:
        """Faces in view: found by the last detector run (at most ``redetect_s`` ago
        while a face is followed, and then at least 1); 0 when no face was found."""
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

    def process_video_frame(self, bgr: np.ndarray, timestamp_ms: float, meanwhile=None) -> Landmarks | None:
        """Landmarks of the followed face in one video frame.

        Args:
            bgr: (H, W, 3) uint8 BGR frame.
            timestamp_ms: media time of the frame, milliseconds; must be larger
                than the previous call's.
            meanwhile: a callable (no arguments, must not raise) to call once on this
                thread while MediaPipe's threads run the frame's first graph (see
                :attr:`runs_meanwhile`); called after tracking when no graph took it;
                not called when tracking raises before it.

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
        return self._process_meanwhile(image, ts / 1e3, int(round(ts * 1e6)), meanwhile)

    def process_live(self, bgr: np.ndarray, timestamp_ns: int, meanwhile=None) -> Landmarks | None:
        """Landmarks of the followed face in one camera frame.

        Args:
            bgr: (H, W, 3) uint8 BGR frame.
            timestamp_ns: capture time on the process clock (``now_ns()``),
                integer nanoseconds; must be larger than the previous call's.
            meanwhile: as in :meth:`process_video_frame`.

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
        return self._process_meanwhile(image, ts / 1e9, ts, meanwhile)

    def reset(self) -> None:
        """Forget the followed face and the last timestamp (e.g. before a new video).

        Raises:
            TrackingError: the tracker is closed.
        """
        self._check_open()
        self._forget()  # the graphs keep no state between frames

    def describe(self) -> str:
        """What tracks the face, for reports (``render``'s summary line): ``"MediaPipe face mesh"``."""
        return "MediaPipe face mesh"

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
        from avatar_app.tracking import mp_graphs

        self._landmarker = mp_graphs.landmark_graph(self._min_tracking_confidence)
        self._detector = mp_graphs.detection_graph(False, self._min_detection_confidence)
        self._far_detector = None  # the full-range detector, made on first use

    def _close_graphs(self) -> None:
        for g in (self._landmarker, self._detector, self._far_detector):
            if g is not None:
                g.close()
        self._landmarker = self._detector = self._far_detector = None

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

    def _process_meanwhile(self, image: np.ndarray, t_s: float, t_ns: int, meanwhile) -> Landmarks | None:
        """:meth:`_process`, handing ``meanwhile`` to the frame's first graph run (:meth:`_take_meanwhile`)."""
        self._meanwhile = meanwhile
        try:
            out = self._process(image, t_s=t_s, t_ns=t_ns)
        except BaseException:
            self._meanwhile = None
            raise
        rest = self._take_meanwhile()
        if rest is not None:  # no graph took it (a tracker on other engines)
            rest()
        return out

    def _take_meanwhile(self):
        """The frame's ``meanwhile`` callable for the graph run about to start (once), or None."""
        fn, self._meanwhile = self._meanwhile, None
        return fn

    def _process(self, image: np.ndarray, t_s: float | None, t_ns: int) -> Landmarks | None:
        h, w = image.shape[:2]
        frame = self._frame(image)
        pts: np.ndarray | None = None
        found: tuple[list[np.ndarray], list[object]] | None = None
        if self._roi is not None:
            pending = None
            if self._redetect_s is not None and t_s - self._detected_at_s >= self._redetect_s:
                pending = self._start_detection(frame, w, h, t_s)
            try:
                pts, self._roi = self._landmarks(frame, self._roi)
            finally:
                if pending is not None:  # the detector is idle again whatever the landmark model did
                    found = pending()
            if found is not None:
                self._faces_found = max(len(found[0]), 1)
            if pts is None:
                logger.debug("followed face lost at %s s; detecting", t_s)
        if pts is None:
            if found is None or (not found[0] and self._small_faces):
                found = self._find_faces(frame, w, h, t_s, near=found is None, far=self._small_faces)
            boxes, rois = found
            self._faces_found = len(boxes)
            for choice in self._candidates(boxes, t_s):
                pts, self._roi = self._landmarks(frame, rois[choice])
                if pts is not None:
                    break
                self._faces_found -= 1  # a detection without a face in it
        if pts is None:
            self._roi = None
            if t_s is not None and self._lost_since_s is None:
                self._lost_since_s = t_s
            return None
        if t_s is None:  # IMAGE mode keeps no history
            self._roi = None
        else:
            self._prev_box = _landmark_box(pts, w, h)
            self._lost_since_s = None
        return Landmarks(points=pts, image_size=(w, h), t_ns=t_ns)

    def _find_faces(self, frame, w: int, h: int, t_s: float | None, near: bool, far: bool
                    ) -> tuple[list[np.ndarray], list[object]]:
        """Face boxes (pixels) and ROIs: the short-range detector (``near``), then, when
        ``far`` and nothing was found, the full-range one."""
        if t_s is not None:
            self._detected_at_s = t_s
        boxes, rois = self._detect_faces(frame, w, h, far=False) if near else ([], [])
        if not boxes and far:
            boxes, rois = self._detect_faces(frame, w, h, far=True)
        return boxes, rois

    def _start_detection(self, frame, w: int, h: int, t_s: float):
        """The periodic detection (:meth:`_find_faces` with the short-range detector only), started
        so that it computes beside the landmark model: a callable (no arguments) that waits for it
        and returns its ``(boxes, rois)`` as :meth:`_detect_faces` does.

        Here the detection graph runs on MediaPipe's threads while the caller runs the landmark
        graph; the detections are those of :meth:`_find_faces` (the same graph on the same
        packet). A tracker on other engines (one that overrides :meth:`_detect_faces`) detects
        at once, on the calling thread.
        """
        if type(self)._detect_faces is not FaceTracker._detect_faces:
            found = self._find_faces(frame, w, h, t_s, near=True, far=False)
            return lambda: found
        from avatar_app.tracking import mp_graphs

        self._detected_at_s = t_s
        wait = self._detector.start({"image": frame})
        return lambda: self._boxes_and_rois(mp_graphs.detections(wait()), w, h)

    # -- the graph calls (a tracker on other engines overrides these three) ---------

    def _frame(self, bgr: np.ndarray) -> object:
        """The frame as the graphs take it: an RGB ImageFrame packet."""
        from avatar_app.tracking import mp_graphs

        # The RGB copy is the graph's input as it is (shared, not copied again).
        return mp_graphs.image_packet(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))

    def _detect_faces(self, frame, w: int, h: int, far: bool) -> tuple[list[np.ndarray], list[object]]:
        """One detector's faces: (4,) float64 pixel boxes ``x0, y0, x1, y1`` and, in the same
        order, the ROIs :meth:`_landmarks` takes (here NormalizedRect packets)."""
        from avatar_app.tracking import mp_graphs

        if far and self._far_detector is None:
            self._far_detector = mp_graphs.detection_graph(True, self._min_detection_confidence)
        graph = self._far_detector if far else self._detector
        found = mp_graphs.detections(graph.run({"image": frame}, meanwhile=self._take_meanwhile()))
        return self._boxes_and_rois(found, w, h)

    @staticmethod
    def _boxes_and_rois(found: tuple[list[np.ndarray], list[object]], w: int, h: int
                        ) -> tuple[list[np.ndarray], list[object]]:
        """:func:`mp_graphs.detections`' normalised boxes in pixels, its rects as packets."""
        from avatar_app.tracking import mp_graphs

        boxes, rects = found
        scale = np.array([w, h, w, h], np.float64)
        return [b * scale for b in boxes], [mp_graphs.rect_packet(r) for r in rects]

    def _landmarks(self, frame, roi) -> tuple[np.ndarray | None, object | None]:
        """The landmark model on one ROI: ((478, 3) float32 normalised points, the ROI
        for the next frame), or (None, None) when the ROI holds no face."""
        from avatar_app.tracking import mp_graphs

        out = self._landmarker.run({"image": frame, "roi": roi}, meanwhile=self._take_meanwhile())
        if "landmarks" not in out:
            return None, None
        return mp_graphs.landmarks_array(out["landmarks"]), out.get("roi_next")

    def _candidates(self, boxes: list[np.ndarray], t_s: float | None) -> list[int]:
        """Detections to try, in order: IMAGE mode the ``max_faces`` largest; else the followed face."""
        if not boxes:
            return []
        if t_s is None:
            return [int(i) for i in np.argsort([-_area(b) for b in boxes], kind="stable")[: self._max_faces]]
        choice = self._select(boxes, t_s)
        return [] if choice is None else [choice]

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
