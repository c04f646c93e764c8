"""Index sets of the MediaPipe face mesh (478 landmarks with irises).

Indices follow MediaPipe's face mesh topology (``face_mesh_connections.py``
and the canonical face model in ``mediapipe/modules/face_geometry``).
"Left"/"Right" are the SUBJECT's own sides: in an unmirrored camera image the
subject's right eye is on the image's left (landmark 33 is its outer corner).
"""
from __future__ import annotations

import enum

NUM_LANDMARKS = 478
"""Landmarks per face with ``refine_landmarks=True`` (468 mesh + 2 x 5 iris)."""


class FacePoint(enum.IntEnum):
    """Single landmarks used by the geometric solver and the head-pose fit."""

    RIGHT_EYE_OUTER = 33
    RIGHT_EYE_INNER = 133
    LEFT_EYE_OUTER = 263
    LEFT_EYE_INNER = 362
    RIGHT_IRIS_CENTER = 468
    LEFT_IRIS_CENTER = 473
    MOUTH_RIGHT = 61
    MOUTH_LEFT = 291
    LIP_UPPER_INNER = 13
    LIP_LOWER_INNER = 14
    LIP_UPPER_OUTER = 0
    LIP_LOWER_OUTER = 17
    CHIN = 152
    NOSE_TIP = 4
    FOREHEAD = 10


# Eyelids: pairs (upper, lower) across the eye, from the outer to the inner corner.
RIGHT_EYE_UPPER: tuple[int, ...] = (161, 160, 159, 158, 157)
RIGHT_EYE_LOWER: tuple[int, ...] = (163, 144, 145, 153, 154)
LEFT_EYE_UPPER: tuple[int, ...] = (388, 387, 386, 385, 384)
LEFT_EYE_LOWER: tuple[int, ...] = (390, 373, 374, 380, 381)

RIGHT_IRIS: tuple[int, ...] = (468, 469, 470, 471, 472)
LEFT_IRIS: tuple[int, ...] = (473, 474, 475, 476, 477)

# Brows (upper edge), from the outer to the inner end.
RIGHT_BROW: tuple[int, ...] = (70, 63, 105, 66, 107)
LEFT_BROW: tuple[int, ...] = (300, 293, 334, 296, 336)
RIGHT_BROW_INNER: tuple[int, ...] = (107, 66, 55, 65)
LEFT_BROW_INNER: tuple[int, ...] = (336, 296, 285, 295)

# Inner lip contour pairs (upper, lower) near the centre.
LIP_INNER_UPPER: tuple[int, ...] = (82, 13, 312)
LIP_INNER_LOWER: tuple[int, ...] = (87, 14, 317)

# Rigid landmarks for the head-pose fit: forehead, nose bridge and ridge,
# cheekbones, eye corners, nose wings. Not the mouth, jaw, lids or brows,
# which move with expressions. (Chosen from the same regions as MediaPipe's
# face-geometry Procrustes basis, without its jaw and lower-cheek points.)
STABLE_FOREHEAD: tuple[int, ...] = (10, 151, 109, 338, 67, 297)
STABLE_NOSE: tuple[int, ...] = (168, 6, 197, 195, 5, 4)
STABLE_EYE_CORNERS: tuple[int, ...] = (33, 133, 362, 263)
STABLE_CHEEKBONES: tuple[int, ...] = (116, 345, 117, 346, 123, 352, 143, 372)
STABLE_NOSE_WINGS: tuple[int, ...] = (129, 358)
STABLE: tuple[int, ...] = (
    STABLE_FOREHEAD + STABLE_NOSE + STABLE_EYE_CORNERS + STABLE_CHEEKBONES + STABLE_NOSE_WINGS
)

# Symmetric (subject's left, subject's right) pairs among the stable points.
STABLE_SYMMETRIC_PAIRS: tuple[tuple[int, int], ...] = (
    (263, 33), (362, 133), (345, 116), (346, 117), (352, 123), (372, 143), (358, 129),
    (338, 109), (297, 67),
)
