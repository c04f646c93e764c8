"""The face's visible geometry, measured the same way on a tracked face and on the avatar's face model.

Each feature is a ratio of distances on the 478 MediaPipe-topology points in a
head frame (the rigid head pose removed), so it does not depend on image size,
camera distance or head pose, and it is normalised by the face's size: lengths
are divided by the distance between the two eye centres (the midpoints of each
eye's corners, 33/133 and 263/362), a rigid span that no expression moves.

Because the face model (:mod:`avatar_app.avatar.face_model`) has MediaPipe's
topology, the *same* function measures the avatar: the output blendshapes and
identity put through the model give its points in the model frame
(:func:`model_features`).

Features (Left/Right = the subject's own sides):

=====================  =====================================================
``eye_aperture_l/r``   mean lid gap over five lid pairs / that eye's width
``lip_gap``            inner-lip gap (13-14, 82-87, 312-317) / eye span
``mouth_width``        corner to corner (61-291) / eye span
``corner_height_l/r``  mouth corner above the midpoint of the inner lips
                       (13, 14) / eye span: smiles raise it, frowns lower it,
                       an opening jaw leaves it (the corners sit midway)
``brow_height_l/r``    mean height of the brow's upper edge above the nose
                       ridge (197) / eye span; not above the eye corners (a
                       squint or a frown moves the lid corners, which made a
                       frown read as raised brows) nor above the bridge between
                       the eyes (168, which the skin between the brows moves)
``eye_asymmetry``      ``eye_aperture_r - eye_aperture_l`` (winks)
``yaw, pitch, roll``   head pose, degrees (:func:`~avatar_app.core.rotations.euler_from_rotation`)
=====================  =====================================================
"""
from __future__ import annotations

import numpy as np

from avatar_app.core import landmarks as lmk

#: Expression features, in the column order of :func:`shape_features`.
SHAPE_FEATURES: tuple[str, ...] = (
    "eye_aperture_l", "eye_aperture_r", "lip_gap", "mouth_width", "corner_height_l", "corner_height_r",
    "brow_height_l", "brow_height_r", "eye_asymmetry",
)
POSE_FEATURES: tuple[str, ...] = ("yaw", "pitch", "roll")
FEATURES: tuple[str, ...] = SHAPE_FEATURES + POSE_FEATURES

#: Reported features and the per-side columns they pool (a per-eye figure pools both eyes).
GROUPS: dict[str, tuple[str, ...]] = {
    "eye_aperture": ("eye_aperture_l", "eye_aperture_r"),
    "lip_gap": ("lip_gap",),
    "mouth_width": ("mouth_width",),
    "corner_height": ("corner_height_l", "corner_height_r"),
    "brow_height": ("brow_height_l", "brow_height_r"),
    "eye_asymmetry": ("eye_asymmetry",),
    "yaw": ("yaw",), "pitch": ("pitch",), "roll": ("roll",),
}

_BRIDGE = 197  # the nose ridge: no brow, eye or mouth shape of the face model moves it
_EYES = {"l": (263, 362, lmk.LEFT_EYE_UPPER, lmk.LEFT_EYE_LOWER, lmk.LEFT_BROW_UPPER),
         "r": (33, 133, lmk.RIGHT_EYE_UPPER, lmk.RIGHT_EYE_LOWER, lmk.RIGHT_BROW_UPPER)}


def shape_features(points: np.ndarray) -> np.ndarray:
    """The expression features of faces in a head frame.

    Args:
        points: (..., 478, 3) float, head-frame points (+x the subject's left, +y up),
            any length unit (the features are ratios).

    Returns:
        (..., len(SHAPE_FEATURES)) float64, columns in :data:`SHAPE_FEATURES` order.
    """
    p = np.asarray(points, np.float64)
    centre = {s: 0.5 * (p[..., a, :] + p[..., b, :]) for s, (a, b, *_) in _EYES.items()}
    span = np.linalg.norm(centre["l"] - centre["r"], axis=-1)
    span = np.maximum(span, 1e-12)
    out = {}
    for s, (outer, inner, up, lo, brow) in _EYES.items():
        width = np.maximum(np.linalg.norm(p[..., outer, :] - p[..., inner, :], axis=-1), 1e-12)
        gap = np.linalg.norm(p[..., list(up), :] - p[..., list(lo), :], axis=-1).mean(-1)
        out[f"eye_aperture_{s}"] = gap / width
        out[f"brow_height_{s}"] = (p[..., list(brow), 1].mean(-1) - p[..., _BRIDGE, 1]) / span
    out["lip_gap"] = np.linalg.norm(
        p[..., list(lmk.LIP_GAP_UPPER), :] - p[..., list(lmk.LIP_GAP_LOWER), :], axis=-1).mean(-1) / span
    cr, cl = p[..., lmk.FacePoint.MOUTH_RIGHT, :], p[..., lmk.FacePoint.MOUTH_LEFT, :]
    out["mouth_width"] = np.linalg.norm(cl - cr, axis=-1) / span
    mid_y = 0.5 * (p[..., lmk.FacePoint.LIP_UPPER_INNER, 1] + p[..., lmk.FacePoint.LIP_LOWER_INNER, 1])
    out["corner_height_l"] = (cl[..., 1] - mid_y) / span
    out["corner_height_r"] = (cr[..., 1] - mid_y) / span
    out["eye_asymmetry"] = out["eye_aperture_r"] - out["eye_aperture_l"]
    return np.stack([out[k] for k in SHAPE_FEATURES], -1)


def pose_features(rotation: np.ndarray) -> np.ndarray:
    """(yaw, pitch, roll) in degrees of head rotations.

    Args:
        rotation: (..., 3, 3) head -> camera rotations.

    Returns:
        (..., 3) float64 degrees.
    """
    from avatar_app.core.rotations import euler_from_rotation

    r = np.asarray(rotation, np.float64)
    flat = r.reshape(-1, 3, 3)
    out = np.degrees(np.array([euler_from_rotation(m) for m in flat], np.float64).reshape(-1, 3))
    return out.reshape(r.shape[:-2] + (3,))


def face_features(points: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    """All :data:`FEATURES`: shape features of head-frame points and the pose of ``rotation``.

    Args:
        points: (F, 478, 3) head-frame points.
        rotation: (F, 3, 3) head rotations.

    Returns:
        (F, len(FEATURES)) float64.
    """
    return np.concatenate([shape_features(points), pose_features(rotation)], -1)


def input_features(clip) -> tuple[np.ndarray, np.ndarray]:
    """The visible geometry of every tracked frame of a clip (MediaPipe's landmarks, aligned).

    The landmarks are aligned to the face model's template by the engine's
    normalisation (:func:`avatar_app.reconstruction.normalise.align`: a weighted
    similarity fit on the rigid points, un-projected with a pinhole camera), which
    gives head-frame points and the head rotation.

    Args:
        clip: a :class:`~avatar_app.evaluation.landmarks.TrackedClip`.

    Returns:
        ``(features (F, len(FEATURES)) float64, NaN rows where no face was found;
        head points (F, 478, 3) float32, NaN where no face)``.
    """
    from avatar_app.reconstruction import normalise as N

    f = np.full((len(clip), len(FEATURES)), np.nan)
    head = np.full((len(clip), 478, 3), np.nan, np.float32)
    idx = np.flatnonzero(clip.found)
    if len(idx):
        h, rot, _ = N.align(clip.points[idx], clip.image_size)
        head[idx] = h
        f[idx] = face_features(h, rot)
    return f, head


def model_features(weights: np.ndarray, rotation: np.ndarray, identity: np.ndarray | None = None,
                   model=None) -> np.ndarray:
    """The same geometry measured on the avatar's face model driven by the output.

    Args:
        weights: (F, 52) output blendshapes.
        rotation: (F, 3, 3) output head rotations.
        identity: None, (K,) or (F, K) identity coefficients of the face model (an
            engine's estimate; a solver without one gives None or K = 0).
        model: a FaceModel (default: the shipped one).

    Returns:
        (F, len(FEATURES)) float64.
    """
    from avatar_app.avatar.face_model import load_face_model

    model = model or load_face_model()
    ident = None
    if identity is not None and np.size(identity) and np.shape(identity)[-1] == model.num_identity:
        ident = np.asarray(identity, np.float32)
    pts = model.evaluate(np.asarray(weights, np.float32), ident)
    return face_features(pts.reshape(-1, 478, 3), rotation)
