"""Identity (face-shape) morphs of the face model.

Each morph is a smooth, mirror-symmetric offset field over the 478 points;
coefficient +1 / -1 spans roughly one to two standard deviations of adult
variation of the named measurement (ranges from Farkas, "Anthropometry of the
Head and Face", 2nd ed., 1994, and for the interpupillary distance Dodgson,
SPIE 5291, 2004). ``docs/face_model.md`` lists the change each morph makes at
+1, which ``tests/avatar/test_face_model_identity.py`` checks.

Fields are either analytic (smoothsteps of position, e.g. face width) or
prescribed on a few landmark groups and spread over the mesh by biharmonic
interpolation (:class:`face_model_fields.MeshFields`), like the blendshapes.
"""
from __future__ import annotations

import numpy as np

from avatar_app.avatar.authoring.face_model_fields import smoothstep
from avatar_app.avatar.authoring.face_model_shapes import MM, ShapeBuilder, lip_handles
from avatar_app.core import landmarks as lmk

IDENTITY_NAMES: tuple[str, ...] = (
    "face_width", "face_length", "jaw_width", "chin", "cheekbones", "nose_length",
    "nose_width", "eye_size", "eye_spacing", "mouth_width", "lip_fullness", "brow_height",
    "nose_bridge", "face_depth", "eye_tilt",
)


def _eye_center(b: ShapeBuilder, left: bool = True) -> np.ndarray:
    lids = lmk.LEFT_EYE_UPPER_LID + lmk.LEFT_EYE_LOWER_LID
    c = b.p[list(lids)].mean(0)
    return c if left else c * np.array([-1.0, 1.0, 1.0])


def face_width(b: ShapeBuilder) -> np.ndarray:
    """Sides of the face out 5 mm each (bizygomatic breadth +10 mm); the centre stays."""
    out = b.zeros()
    x = b.p[:, 0]
    out[:, 0] = np.sign(x) * 5.0 * MM * smoothstep(np.abs(x), 20 * MM, 62 * MM)
    return out


def face_length(b: ShapeBuilder) -> np.ndarray:
    """Lower face 6 mm longer (chin down) and the forehead top 3 mm higher."""
    out = b.zeros()
    y = b.p[:, 1]
    y_nose, y_chin = b.p[lmk.FacePoint.SUBNASALE, 1], b.p[lmk.FacePoint.CHIN, 1]
    y_brow, y_top = b.p[lmk.FacePoint.NASION, 1], b.p[lmk.FacePoint.FOREHEAD, 1]
    out[:, 1] = (-6.0 * MM * smoothstep(y, y_nose, y_chin)
                 + 3.0 * MM * smoothstep(y, y_brow, y_top))
    return out


def jaw_width(b: ShapeBuilder) -> np.ndarray:
    """Jaw angles out 4 mm each (bigonial breadth +8 mm)."""
    out = b.zeros()
    x, y = b.p[:, 0], b.p[:, 1]
    w = smoothstep(np.abs(x), 15 * MM, 55 * MM) * smoothstep(y, b.p[61, 1], b.p[61, 1] - 15 * MM)
    out[:, 0] = np.sign(x) * 4.0 * MM * w
    return out


def chin(b: ShapeBuilder) -> np.ndarray:
    """Chin 4 mm more prominent and 2.5 mm lower."""
    idx, w = b.patch(lmk.FacePoint.CHIN, 40.0)
    h = {int(v): np.array([0.0, -2.5, 4.0]) * wi for v, wi in zip(idx, w)}
    return b.spread(h, 45.0)


def cheekbones(b: ShapeBuilder) -> np.ndarray:
    """Cheekbones 3.5 mm more prominent (out along the surface normal)."""
    h = {}
    for sign in (1, -1):
        c = b.nearest((sign * 50.0, 8.0, 50.0))
        idx, w = b.patch(c, 22.0)
        for v, wi in zip(idx, w):
            h[int(v)] = b.normals[v] * 3.5 * wi
    return b.spread(h, 32.0)


def nose_length(b: ShapeBuilder) -> np.ndarray:
    """Nose tip 3.5 mm lower and 2.5 mm more projecting; the bridge follows."""
    idx, w = b.patch(lmk.FacePoint.NOSE_TIP, 24.0)
    h = {int(v): np.array([0.0, -3.5, 2.5]) * wi for v, wi in zip(idx, w)}
    pinned = sorted(b.upper_lip) + list(lmk.LEFT_EYE_LOWER_LID + lmk.RIGHT_EYE_LOWER_LID)
    return b.spread(h, 30.0, pinned=pinned)


def nose_width(b: ShapeBuilder) -> np.ndarray:
    """Nose wings out 2 mm each (alar breadth +4 mm)."""
    weight = np.zeros(lmk.NUM_MESH)
    P = lmk.FacePoint
    for wing in (P.NOSE_WING_LEFT, P.NOSE_WING_RIGHT, P.NOSTRIL_LEFT, P.NOSTRIL_RIGHT):
        idx, w = b.patch(wing, 8.0)
        weight[idx] = np.maximum(weight[idx], w)
    h = {int(v): np.array([np.sign(b.p[v, 0]) * 2.0 * weight[v], 0.0, 0.0])
         for v in np.nonzero(weight)[0]}
    h[lmk.FacePoint.NOSE_TIP] = np.zeros(3)
    return b.spread(h, 16.0)


def eye_size(b: ShapeBuilder) -> np.ndarray:
    """Eye openings 12% larger about their centres (the iris stays the same size)."""
    out = b.zeros()
    for left in (True, False):
        c = _eye_center(b, left)
        d = b.p[:lmk.NUM_MESH] - c
        r = np.linalg.norm(d, axis=1)
        out[:lmk.NUM_MESH] += 0.12 * d * smoothstep(r, 24 * MM, 12 * MM)[:, None]
    return out


def eye_spacing(b: ShapeBuilder) -> np.ndarray:
    """Eyes (lids and irises) 3 mm farther from the midline each (IPD +6 mm)."""
    out = b.zeros()
    for left in (True, False):
        c = _eye_center(b, left)
        r = np.linalg.norm(b.p - c, axis=1)
        out[:, 0] += np.sign(c[0]) * 3.0 * MM * smoothstep(r, 30 * MM, 14 * MM)
    return out


def mouth_width(b: ShapeBuilder) -> np.ndarray:
    """Mouth corners out 3.5 mm each (mouth width +7 mm)."""
    def fn(v, x, depth, upper):
        return (3.5 * x / b.corner_x, 0.0, 0.0)
    return b.spread(lip_handles(b, fn), 20.0)


def lip_fullness(b: ShapeBuilder) -> np.ndarray:
    """Vermilion fuller: upper border up 1.8 mm, lower border down 2.2 mm, both forward."""
    def fn(v, x, depth, upper):
        prof = b.lip_profile(x) ** 0.5
        if upper:
            return (0.0, 1.8 * depth * prof, 1.2 * depth * prof)
        return (0.0, -2.2 * depth * prof, 1.4 * depth * prof)
    return b.spread(lip_handles(b, fn), 10.0)


def brow_height(b: ShapeBuilder) -> np.ndarray:
    """Both brows 4 mm higher (the lid margins stay)."""
    pts = (lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER + lmk.RIGHT_BROW_UPPER
           + lmk.RIGHT_BROW_LOWER)
    h = {v: np.array([0.0, 4.0, 0.0]) for v in pts}
    pinned = (lmk.LEFT_EYE_UPPER_LID + lmk.LEFT_EYE_LOWER_LID + lmk.RIGHT_EYE_UPPER_LID
              + lmk.RIGHT_EYE_LOWER_LID)
    return b.spread(h, 22.0, pinned=pinned)


def nose_bridge(b: ShapeBuilder) -> np.ndarray:
    """Nasal bridge 3 mm higher (more projecting) between the eyes."""
    idx, w = b.patch(6, 16.0)
    h = {int(v): np.array([0.0, 0.0, 3.0]) * wi for v, wi in zip(idx, w)}
    pinned = lmk.LEFT_EYE_UPPER_LID + lmk.RIGHT_EYE_UPPER_LID + (lmk.FacePoint.NOSE_TIP,)
    return b.spread(h, 22.0, pinned=pinned)


def face_depth(b: ShapeBuilder) -> np.ndarray:
    """Central face 4 mm more projecting relative to the sides (a less flat face)."""
    out = b.zeros()
    out[:, 2] = 4.0 * MM * smoothstep(np.abs(b.p[:, 0]), 45 * MM, 0.0)
    return out


def eye_tilt(b: ShapeBuilder) -> np.ndarray:
    """Eyes tilted 5 degrees outer-corner-up (canthal tilt); irises stay."""
    out = b.zeros()
    ang = np.radians(5.0)
    for left in (True, False):
        c = _eye_center(b, left)
        a = ang if left else -ang
        rot = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
        d = b.p[:lmk.NUM_MESH] - c
        w = smoothstep(np.linalg.norm(d, axis=1), 26 * MM, 12 * MM)
        out[:lmk.NUM_MESH] += (d @ rot.T - d) * w[:, None]
    return out


_BUILDERS = {
    "face_width": face_width, "face_length": face_length, "jaw_width": jaw_width, "chin": chin,
    "cheekbones": cheekbones, "nose_length": nose_length, "nose_width": nose_width,
    "eye_size": eye_size, "eye_spacing": eye_spacing, "mouth_width": mouth_width,
    "lip_fullness": lip_fullness, "brow_height": brow_height, "nose_bridge": nose_bridge,
    "face_depth": face_depth, "eye_tilt": eye_tilt,
}


def build_identity(neutral: np.ndarray, triangles: np.ndarray, mirror: np.ndarray
                   ) -> tuple[tuple[str, ...], np.ndarray]:
    """All identity morphs of a neutral face.

    Args:
        neutral: (478, 3) float metres, mirror-symmetric.
        triangles: (F, 3) int mesh triangles.
        mirror: (478,) int mirror map.

    Returns:
        ``(names, offsets)``: :data:`IDENTITY_NAMES` and (K, 478, 3) float64
        metres at coefficient +1, each exactly mirror-symmetric; the irises
        translate rigidly (an adult iris is about 11.8 mm wide in every face).
    """
    b = ShapeBuilder(neutral, triangles, mirror)
    flip = np.array([-1.0, 1.0, 1.0])
    out = np.zeros((len(IDENTITY_NAMES), lmk.NUM_LANDMARKS, 3))
    for i, name in enumerate(IDENTITY_NAMES):
        shape = _BUILDERS[name](b)
        for c in (468, 473):  # irises move rigidly with their centres: iris size is constant
            shape[c + 1:c + 5] = shape[c]
        out[i] = 0.5 * (shape + shape[b.mirror] * flip)
    return IDENTITY_NAMES, out
