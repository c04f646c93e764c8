"""Input normalisation of the face_recon engine, defined once for training and runtime.

The engine never sees raw MediaPipe coordinates. Every face (the current
frame and the user's neutral) is first **aligned** to the face model's neutral
template (:func:`avatar_app.avatar.face_model.load_face_model`, the training
rig) by the same rigid fit the head-pose module uses
(:func:`avatar_app.reconstruction.head_pose.estimate_head_pose`, batched here):

1. MediaPipe's normalised x, y and relative z become a right-handed pixel
   space (x right, y up, z toward the camera, origin at the image centre);
2. a weighted similarity fit (Umeyama 1991) of the template's stable
   landmarks (forehead, nose ridge, eye corners, cheekbones, nose wings:
   :data:`avatar_app.core.landmarks.STABLE`) gives the image scale
   in pixels per metre;
3. each landmark is un-projected with a pinhole camera of an assumed
   horizontal field of view (60 degrees: a typical webcam) at its own depth,
   and the fit is repeated in metres (DeMenthon and Davis 1995, the POSIT
   idea), giving the coarse pose ``R0, t0`` and the **head-frame points**
   ``p = R0^T (cam - t0)`` in metres of the rig's model frame (+x the
   subject's left, +y up, +z out of the face, origin between the ear rims).

The network's inputs (:func:`network_inputs`) are then

``landmarks`` (B, 478, 3) float32, metres
    head-frame points of the frame minus those of the user's neutral face:
    the expression as a displacement field, free of head pose, image size and
    camera distance (so in-plane rotation and rescaling cannot change it);
``neutral`` (B, 478, 3) float32, metres
    head-frame points of the user's neutral minus the rig's template: the
    face shape, from which the engine reads the identity coefficients and the
    size of each feature (a blink closes a large eye further than a small one).

The network reads only the :data:`SUBSET` of 146 landmarks MediaPipe's own
blendshape model reads (``kLandmarksSubsetIdxs`` in MediaPipe's
``face_blendshapes_graph.cc``, Apache-2.0): full eyelid and lip contours,
both irises, brows, nose ridge and the face oval. The rest of the 478 points
are interpolated between these by the face mesh and add no information.

Pose outputs refine the coarse pose: the engine's rotation is
``R0 @ rotation_from_6d(out)``, its translation ``t0 + out``
(:func:`compose_pose`); the refinement removes the bias that expressions and
the tracker's errors put into the stable points.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from avatar_app.core import landmarks as lmk
from avatar_app.core.errors import InputError
from avatar_app.core.landmarks import DEFAULT_HFOV_DEG, focal_length_px
from avatar_app.core.rotations import rigid_fit

#: Bump when anything below changes: the model card records the version it was trained with.
NORMALISATION_VERSION = 1

#: The landmarks the network reads: MediaPipe's blendshape-model subset (146 indices).
SUBSET: tuple[int, ...] = lmk.BLENDSHAPE_SUBSET

_STABLE = np.array(lmk.STABLE, dtype=np.intp)
# The same weights as the head-pose fit: eye corners and nose are the most rigid.
_STABLE_WEIGHTS = lmk.STABLE_WEIGHTS


@functools.lru_cache(maxsize=1)
def template() -> np.ndarray:
    """(478, 3) float64 read-only: the rig's neutral landmarks (metres, model frame)."""
    from avatar_app.avatar.face_model import load_face_model

    t = np.asarray(load_face_model().neutral, np.float64).copy()
    t.setflags(write=False)
    return t


def align(points: np.ndarray, image_size, hfov_deg: float = DEFAULT_HFOV_DEG
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Align faces to the rig's template: head-frame points and the coarse head pose.

    Args:
        points: (478, 3) or (B, 478, 3) float MediaPipe landmarks: x, y
            image-normalised in [0, 1] (y down), z relative depth in x's scale.
        image_size: (width, height) pixels, or (B, 2) per face.
        hfov_deg: assumed horizontal field of view of the camera, degrees.

    Returns:
        ``(head, rotation, translation)``: head-frame points (B, 478, 3)
        float32 metres, rotation (B, 3, 3) float64 (head -> camera, camera
        looking down -Z), translation (B, 3) float64 metres of the template
        origin in camera space. B = 1 for a single face.

    Raises:
        InputError: wrong shapes, non-finite values or degenerate faces.
    """
    p = np.asarray(points, np.float64)
    if p.ndim == 2:
        p = p[None]
    if p.ndim != 3 or p.shape[1:] != (lmk.NUM_LANDMARKS, 3):
        raise InputError(f"landmarks must have shape (478, 3) or (B, 478, 3), got {np.shape(points)}")
    if not np.all(np.isfinite(p)):
        raise InputError("landmarks contain NaN or infinite values")
    size = np.broadcast_to(np.asarray(image_size, np.float64).reshape(-1, 2), (len(p), 2))
    if np.any(size <= 0):
        raise InputError(f"image size must be positive, got {image_size}")
    w, h = size[:, 0:1], size[:, 1:2]
    px = np.empty_like(p)
    px[..., 0] = (p[..., 0] - 0.5) * w
    px[..., 1] = (0.5 - p[..., 1]) * h
    px[..., 2] = -p[..., 2] * w
    f = np.array([focal_length_px(float(wi), hfov_deg) for wi in size[:, 0]])
    tmpl = template()
    ref = tmpl[_STABLE]
    rot, t, c = rigid_fit(ref, px[:, _STABLE], _STABLE_WEIGHTS, with_scale=True)
    if np.any(~(c > 1e-9)):
        raise InputError("face landmarks are degenerate (zero size)")
    # Pinhole un-projection at the fitted distance f / c, each point at its own depth.
    depth = (f / c)[:, None] - (px[..., 2] - t[:, 2:3]) / c[:, None]
    cam = np.empty_like(px)
    cam[..., 0] = px[..., 0] * depth / f[:, None]
    cam[..., 1] = px[..., 1] * depth / f[:, None]
    cam[..., 2] = -depth
    rot, trans, scale = rigid_fit(ref, cam[:, _STABLE], _STABLE_WEIGHTS, with_scale=True)
    trans = trans / scale[:, None]
    head = np.einsum("bni,bij->bnj", cam / scale[:, None, None] - trans[:, None, :], rot)
    return head.astype(np.float32), rot, trans


def network_inputs(head: np.ndarray, neutral_head: np.ndarray) -> dict[str, np.ndarray]:
    """The engine's feeds from aligned faces.

    Args:
        head: (B, 478, 3) float head-frame points of the frames (:func:`align`).
        neutral_head: (B, 478, 3) or (478, 3) head-frame points of the user's neutral.

    Returns:
        ``{"landmarks": head - neutral_head, "neutral": neutral_head - template}``,
        both (B, 478, 3) float32 metres.
    """
    hd = np.asarray(head, np.float32)
    nh = np.broadcast_to(np.asarray(neutral_head, np.float32), hd.shape)
    return {"landmarks": np.ascontiguousarray(hd - nh),
            "neutral": np.ascontiguousarray(nh - template().astype(np.float32))}


def rotation_from_6d(v: np.ndarray) -> np.ndarray:
    """Rotation matrices from the 6D representation (first two columns, Gram-Schmidt).

    Zhou, Barnes, Lu, Yang, Li, "On the continuity of rotation representations
    in neural networks", CVPR 2019.

    Args:
        v: (..., 6) float: column 1 then column 2 (not necessarily orthonormal).

    Returns:
        (..., 3, 3) float64 proper rotations.
    """
    v = np.asarray(v, np.float64)
    if v.shape == (6,):  # one face (the runtime's case): the same formulas on floats, ~10x cheaper
        return _rotation_from_6d_one(*v.tolist())
    a, b = v[..., :3], v[..., 3:]
    c1 = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    b = b - (c1 * b).sum(-1, keepdims=True) * c1
    c2 = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    c3 = np.cross(c1, c2)
    return np.stack([c1, c2, c3], axis=-1)


def _rotation_from_6d_one(a0: float, a1: float, a2: float, b0: float, b1: float, b2: float) -> np.ndarray:
    """:func:`rotation_from_6d` of one (6,) vector as Python floats: (3, 3) float64."""
    n = max(math.sqrt(a0 * a0 + a1 * a1 + a2 * a2), 1e-12)
    c10, c11, c12 = a0 / n, a1 / n, a2 / n
    d = c10 * b0 + c11 * b1 + c12 * b2
    b0, b1, b2 = b0 - d * c10, b1 - d * c11, b2 - d * c12
    n = max(math.sqrt(b0 * b0 + b1 * b1 + b2 * b2), 1e-12)
    c20, c21, c22 = b0 / n, b1 / n, b2 / n
    c30, c31, c32 = c11 * c22 - c12 * c21, c12 * c20 - c10 * c22, c10 * c21 - c11 * c20
    return np.array([[c10, c20, c30], [c11, c21, c31], [c12, c22, c32]], np.float64)


def rotation_to_6d(r: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotations -> (..., 6): the first two columns."""
    r = np.asarray(r, np.float64)
    return np.concatenate([r[..., :, 0], r[..., :, 1]], -1)


def compose_pose(r0: np.ndarray, t0: np.ndarray, rot6d: np.ndarray, dt: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The engine's head pose: the coarse alignment refined by the network's outputs.

    Args:
        r0: (..., 3, 3) coarse rotation from :func:`align`.
        t0: (..., 3) coarse translation, metres.
        rot6d: (..., 6) network output ``rotation_6d`` (the rotation of the face in the aligned frame).
        dt: (..., 3) network output ``translation``: a correction in metres, camera space.

    Returns:
        ``(rotation (..., 3, 3), translation (..., 3))`` float64.
    """
    return np.matmul(r0, rotation_from_6d(rot6d)), np.asarray(t0) + np.asarray(dt)


def mirror_points(points: np.ndarray) -> np.ndarray:
    """Mirror head-frame points or displacements across the face's midline (x -> -x, sides swapped).

    Args:
        points: (..., 478, 3).

    Returns:
        Same shape and dtype.
    """
    from avatar_app.avatar.face_model import load_face_model

    return load_face_model().mirror_shape(points)
