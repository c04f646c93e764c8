"""The region-of-interest logic MediaPipe's face mesh runs around its models, vectorised over a batch.

Everything here follows the graphs of the mediapipe wheel the app depends on
(``face_landmark_front_cpu``, expanded with its subgraphs; Apache-2.0):

- **Detection** (``FaceDetectionShortRange``): the whole image letterboxed into
  128 x 128 (ImageToTensor ``keep_aspect_ratio``, black border), 896 SSD anchors
  (:func:`ssd_anchors`), boxes and 6 keypoints decoded relative to the anchors
  (TensorsToDetections, ``reverse_output_order``), scores >= 0.5 kept, then
  weighted non-maximum suppression at IoU 0.3 (:func:`weighted_nms`).
- **Detection -> ROI** (``FaceDetectionFrontDetectionToRoi``): the box centre,
  rotated so that the line from keypoint 0 to keypoint 1 (the eyes) is
  horizontal, the longer side made square and scaled by 1.5.
- **Landmarks -> ROI** for the next frame (``FaceLandmarkLandmarksToRoi``): the
  box of all landmarks, rotation from landmark 33 to 263 (the outer eye
  corners), square, scaled by 1.5.
- **Crop** (ImageToTensor with a ROI): the rotated square mapped onto the model
  input so that its corners land on the input's corners (OpenCV pixel-index
  coordinates, bilinear, replicated border); landmarks are projected back with
  the same transform (LandmarkProjection; z scaled like x).

A rect is a row ``(cx, cy, w, h, rotation)``: centre and size in pixels of the
image, rotation in radians (positive turns the crop's x axis towards the
image's +y, i.e. clockwise on screen). Arrays of rects are ``(N, 5)`` float64.
"""
from __future__ import annotations

import cv2
import numpy as np

DETECTOR_SIZE = 128
"""Side of the face detector's input, pixels."""
MESH_SIZE = 192
"""Side of the face mesh's input, pixels."""
NUM_ANCHORS = 896
MIN_SCORE = 0.5
"""TensorsToDetections ``min_score_thresh`` (the FaceMesh ``min_detection_confidence`` default)."""
NMS_IOU = 0.3
"""NonMaxSuppression ``min_suppression_threshold`` (overlap type IoU, weighted)."""
ROI_SCALE = 1.5
"""RectTransformation ``scale_x``/``scale_y`` of both ROI graphs (``square_long``)."""
DETECTION_EYES = (0, 1)
"""Detector keypoints whose line sets the ROI rotation (the eyes)."""
LANDMARK_EYES = (33, 263)
"""Mesh landmarks whose line sets the next frame's ROI rotation (outer eye corners)."""


def ssd_anchors(size: int = DETECTOR_SIZE) -> np.ndarray:
    """Anchor centres of the short-range face detector, ``(896, 2)`` float32 in [0, 1].

    SsdAnchorsCalculator with the wheel's options: 4 layers, strides 8, 16, 16, 16,
    aspect ratio 1 plus one interpolated scale (2 anchors per layer and cell),
    ``fixed_anchor_size`` (every anchor is 1 x 1), offset 0.5. Layers with the
    same stride share one grid, so cells of the 16 x 16 grid hold 2 anchors and
    cells of the 8 x 8 grid 6: 512 + 384 = 896, in that order, row by row.
    """
    out = []
    for stride, per_cell in ((8, 2), (16, 6)):
        n = size // stride
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        centres = np.stack([(xs.ravel() + 0.5) / n, (ys.ravel() + 0.5) / n], axis=1)
        out.append(np.repeat(centres, per_cell, axis=0))
    return np.concatenate(out).astype(np.float32)


def letterbox_matrices(image_sizes: np.ndarray, size: int = DETECTOR_SIZE) -> np.ndarray:
    """Affine maps from detector-input pixels to image pixels, ``(N, 2, 3)`` float64.

    Args:
        image_sizes: ``(N, 2)`` (width, height) of each image.
        size: the detector's input side.

    The whole image is fitted into the square input, centred, keeping its aspect
    ratio (ImageToTensor ``keep_aspect_ratio``): input pixel ``(u, v)`` shows
    image point ``(W/2 - L/2 + u L/size, H/2 - L/2 + v L/size)`` with ``L = max(W, H)``.
    """
    wh = np.asarray(image_sizes, np.float64).reshape(-1, 2)
    side = wh.max(axis=1)
    k = side / size
    m = np.zeros((len(wh), 2, 3))
    m[:, 0, 0] = m[:, 1, 1] = k
    m[:, :, 2] = wh / 2 - side[:, None] / 2
    return m


def decode_detections(regressors: np.ndarray, scores: np.ndarray, anchors: np.ndarray,
                      min_score: float = MIN_SCORE) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Boxes, keypoints and scores above ``min_score`` per image, before suppression.

    Args:
        regressors: ``(B, 896, 16)`` float32, the detector's ``regressors`` output
            (offsets in units of the input side: box centre x, y, width, height, then
            6 keypoints x, y).
        scores: ``(B, 896)`` float32 in [0, 1] (sigmoid of the logits, clipped at +-100).
        anchors: ``(896, 2)`` from :func:`ssd_anchors`.
        min_score: keep scores >= this.

    Returns:
        One ``(boxes (K, 4) xmin/ymin/xmax/ymax, keypoints (K, 6, 2), scores (K,))``
        per image, in detector-input units [0, 1], highest score first.
    """
    reg = np.asarray(regressors, np.float64)
    centre = reg[..., 0:2] + anchors[None]
    half = reg[..., 2:4] / 2
    boxes = np.concatenate([centre - half, centre + half], axis=-1)
    kps = reg[..., 4:16].reshape(*reg.shape[:2], 6, 2) + anchors[None, :, None, :]
    out = []
    for b in range(reg.shape[0]):
        keep = np.flatnonzero(scores[b] >= min_score)
        order = keep[np.argsort(-scores[b][keep], kind="stable")]
        out.append((boxes[b, order], kps[b, order], np.asarray(scores[b][order], np.float64)))
    return out


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of axis-aligned boxes ``(N, 4)`` x ``(M, 4)`` (xmin, ymin, xmax, ymax) -> ``(N, M)``."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=-1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def weighted_nms(boxes: np.ndarray, keypoints: np.ndarray, scores: np.ndarray,
                 iou: float = NMS_IOU) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MediaPipe's weighted non-maximum suppression of one image's detections.

    Args:
        boxes: ``(K, 4)`` xmin, ymin, xmax, ymax, sorted by score (highest first).
        keypoints: ``(K, 6, 2)``.
        scores: ``(K,)`` descending.
        iou: boxes overlapping the best remaining one by more than this merge into it.

    Returns:
        ``(boxes (F, 4), keypoints (F, 6, 2), scores (F,))``: each face's box and
        keypoints are the score-weighted means of its merged detections; its score
        is the best one's (NonMaxSuppressionCalculator, ``WEIGHTED``).
    """
    out_b, out_k, out_s = [], [], []
    rest = np.arange(len(scores))
    while rest.size:
        overlap = box_iou(boxes[rest[:1]], boxes[rest])[0]
        merged = rest[overlap > iou]
        if merged.size == 0:  # only when the best box has no area: it stands alone
            merged = rest[:1]
        w = scores[merged][:, None]
        out_b.append((boxes[merged] * w).sum(0) / w.sum())
        out_k.append((keypoints[merged] * w[:, :, None]).sum(0) / w.sum())
        out_s.append(scores[rest[0]])
        rest = rest[~np.isin(rest, merged)]  # keeps the score order
    if not out_s:
        return np.zeros((0, 4)), np.zeros((0, 6, 2)), np.zeros(0)
    return np.array(out_b), np.array(out_k), np.array(out_s)


def _apply(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Affine ``(2, 3)`` applied to ``(..., 2)`` points."""
    return pts @ m[:, :2].T + m[:, 2]


def detections_to_image(boxes: np.ndarray, keypoints: np.ndarray, letterbox: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Detector-unit boxes ``(F, 4)`` and keypoints ``(F, 6, 2)`` to image pixels (DetectionProjection).

    ``letterbox`` is the image's ``(2, 3)`` row of :func:`letterbox_matrices`.
    """
    m = np.array(letterbox, np.float64).reshape(2, 3)
    m[:, :2] *= DETECTOR_SIZE  # detector units [0, 1] -> input pixels -> image pixels
    corners = _apply(m, boxes.reshape(-1, 2, 2)).reshape(-1, 4)
    return corners, _apply(m, keypoints)


def _rotation(p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """DetectionsToRects rotation (target 0): ``-atan2(-(y1 - y0), x1 - x0)`` wrapped to [-pi, pi)."""
    r = -np.arctan2(-(p1[..., 1] - p0[..., 1]), p1[..., 0] - p0[..., 0])
    return r - 2 * np.pi * np.floor((r + np.pi) / (2 * np.pi))


def _square_scaled(cx, cy, w, h, rot, scale: float = ROI_SCALE) -> np.ndarray:
    side = np.maximum(w, h) * scale  # RectTransformation: square_long, then scale
    return np.stack([cx, cy, side, side, rot], axis=-1)


def detection_rects(boxes_px: np.ndarray, keypoints_px: np.ndarray) -> np.ndarray:
    """Face ROIs ``(F, 5)`` from detections in image pixels (FaceDetectionFrontDetectionToRoi)."""
    cx = (boxes_px[:, 0] + boxes_px[:, 2]) / 2
    cy = (boxes_px[:, 1] + boxes_px[:, 3]) / 2
    rot = _rotation(keypoints_px[:, DETECTION_EYES[0]], keypoints_px[:, DETECTION_EYES[1]])
    return _square_scaled(cx, cy, boxes_px[:, 2] - boxes_px[:, 0], boxes_px[:, 3] - boxes_px[:, 1], rot)


def landmark_rects(points_px: np.ndarray) -> np.ndarray:
    """Next-frame ROIs ``(N, 5)`` from landmarks ``(N, P, 2+)`` in image pixels (FaceLandmarkLandmarksToRoi)."""
    xy = points_px[..., :2]
    lo, hi = xy.min(axis=1), xy.max(axis=1)
    rot = _rotation(xy[:, LANDMARK_EYES[0]], xy[:, LANDMARK_EYES[1]])
    return _square_scaled((lo[:, 0] + hi[:, 0]) / 2, (lo[:, 1] + hi[:, 1]) / 2,
                          hi[:, 0] - lo[:, 0], hi[:, 1] - lo[:, 1], rot)


def rect_boxes(rects: np.ndarray) -> np.ndarray:
    """Axis-aligned boxes ``(N, 4)`` of rects, ignoring their rotation (as MediaPipe's rect IoU does)."""
    c, half = rects[:, :2], rects[:, 2:4] / 2
    return np.concatenate([c - half, c + half], axis=1)


def crop_matrices(rects: np.ndarray, size: int) -> np.ndarray:
    """Affine maps from crop pixels to image pixels, ``(N, 2, 3)`` float64.

    Crop pixel ``(u, v)`` (OpenCV pixel-index coordinates, ``0..size``) shows image
    point ``c + R(rot) . ((u/size - 0.5) w, (v/size - 0.5) h)``: the rect's corners map
    to the crop's corners, as ImageToTensor's perspective transform of the rect's
    box points does.
    """
    r = np.asarray(rects, np.float64).reshape(-1, 5)
    cos, sin = np.cos(r[:, 4]), np.sin(r[:, 4])
    sx, sy = r[:, 2] / size, r[:, 3] / size
    m = np.empty((len(r), 2, 3))
    m[:, 0, 0], m[:, 0, 1] = cos * sx, -sin * sy
    m[:, 1, 0], m[:, 1, 1] = sin * sx, cos * sy
    m[:, 0, 2] = r[:, 0] - 0.5 * (cos * r[:, 2] - sin * r[:, 3])
    m[:, 1, 2] = r[:, 1] - 0.5 * (sin * r[:, 2] + cos * r[:, 3])
    return m


def warp(image: np.ndarray, matrix: np.ndarray, size: int, border: int = cv2.BORDER_REPLICATE) -> np.ndarray:
    """One ``(size, size, 3)`` uint8 crop of ``image`` through a crop-to-image ``(2, 3)`` matrix (bilinear)."""
    return cv2.warpAffine(image, matrix, (size, size), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                          borderMode=border, borderValue=0)


def crops_nchw(images: list[np.ndarray], matrices: np.ndarray, size: int,
               border: int = cv2.BORDER_REPLICATE, out: np.ndarray | None = None) -> np.ndarray:
    """Crops of several images as one float32 ``(N, 3, size, size)`` batch of 0..255 RGB values.

    Args:
        images: N RGB uint8 images (one per matrix; the same image may repeat).
        matrices: ``(N, 2, 3)`` crop-to-image maps.
        size: crop side.
        border: OpenCV border mode (replicate for the mesh, constant 0 for the detector).
        out: optional preallocated ``(>= N, 3, size, size)`` float32 array to fill.
    """
    n = len(images)
    if out is None:
        out = np.empty((n, 3, size, size), np.float32)
    for i in range(n):
        out[i] = warp(images[i], matrices[i], size, border).transpose(2, 0, 1)
    return out[:n]


def project(points: np.ndarray, rects: np.ndarray, image_sizes: np.ndarray) -> np.ndarray:
    """Crop-unit landmarks to image-normalised ones (LandmarkProjection).

    Args:
        points: ``(N, P, 3)`` x, y in crop units [0, 1], z in crop-width units.
        rects: ``(N, 5)`` the crops' rects.
        image_sizes: ``(N, 2)`` (width, height) of each image.

    Returns:
        ``(N, P, 3)`` float32: x / W, y / H of the image point, z in image-width units.
    """
    r = np.asarray(rects, np.float64)
    wh = np.asarray(image_sizes, np.float64).reshape(-1, 2)
    x = (points[..., 0] - 0.5) * r[:, None, 2]
    y = (points[..., 1] - 0.5) * r[:, None, 3]
    cos, sin = np.cos(r[:, None, 4]), np.sin(r[:, None, 4])
    out = np.empty(points.shape, np.float32)
    out[..., 0] = (cos * x - sin * y + r[:, None, 0]) / wh[:, None, 0]
    out[..., 1] = (sin * x + cos * y + r[:, None, 1]) / wh[:, None, 1]
    out[..., 2] = points[..., 2] * r[:, None, 2] / wh[:, None, 0]
    return out
