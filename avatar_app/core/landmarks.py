"""MediaPipe face-mesh topology: landmark counts, named points and index sets; camera constants.

Indices follow MediaPipe's face mesh with irises (``refine_landmarks=True``):
468 mesh vertices in landmark order plus the 10 iris points (468-472 the
subject's right iris, 473-477 the left; centre first, then +x, +y, -x, -y of
the model frame). Sets are read off the connection lists of
``mediapipe/python/solutions/face_mesh_connections.py`` (``FACEMESH_LIPS``,
``FACEMESH_LEFT_EYE``, ``FACEMESH_FACE_OVAL``, ...; Apache-2.0) and the
canonical face model in ``mediapipe/modules/face_geometry``.

"Left"/"Right" are the SUBJECT's own sides: in an unmirrored camera image the
subject's right eye is on the image's left (landmark 33 is its outer corner);
in the face model's frame +x is the subject's left.

The camera constants (:data:`MEAN_IPD_M`, :data:`DEFAULT_HFOV_DEG`,
:func:`focal_length_px`) give landmarks a metric scale and a pinhole camera.
"""
from __future__ import annotations

import enum
import math
from types import MappingProxyType

import numpy as np

from avatar_app.core.errors import InputError

NUM_LANDMARKS = 478
"""Landmarks per face with ``refine_landmarks=True`` (468 mesh + 2 x 5 iris)."""

NUM_MESH = 468
"""Mesh vertices (the landmarks without the irises)."""


class FacePoint(enum.IntEnum):
    """Single landmarks with a name (anatomical where one exists)."""

    RIGHT_EYE_OUTER = 33
    RIGHT_EYE_INNER = 133
    LEFT_EYE_OUTER = 263
    LEFT_EYE_INNER = 362
    RIGHT_IRIS_CENTER = 468
    LEFT_IRIS_CENTER = 473
    MOUTH_RIGHT = 61
    MOUTH_LEFT = 291
    LIP_UPPER_INNER = 13  # stomion, upper lip
    LIP_LOWER_INNER = 14  # stomion, lower lip
    LIP_UPPER_OUTER = 0
    LIP_LOWER_OUTER = 17
    CHIN = 152
    NOSE_TIP = 4
    SUBNASALE = 2
    NASION = 168
    FOREHEAD = 10
    CHEEK_EAR_LEFT = 454  # face-oval rim in front of the ear
    CHEEK_EAR_RIGHT = 234
    NOSE_WING_LEFT = 358
    NOSE_WING_RIGHT = 129
    NOSTRIL_LEFT = 327
    NOSTRIL_RIGHT = 98


# ----------------------------------------------------------------------------- eyes
# Eye aperture: pairs (upper, lower) across the eye, from the outer to the inner corner.
RIGHT_EYE_UPPER: tuple[int, ...] = (161, 160, 159, 158, 157)
RIGHT_EYE_LOWER: tuple[int, ...] = (163, 144, 145, 153, 154)
LEFT_EYE_UPPER: tuple[int, ...] = (388, 387, 386, 385, 384)
LEFT_EYE_LOWER: tuple[int, ...] = (390, 373, 374, 380, 381)

# Full eyelid contours, outer corner to inner corner; element i of the upper
# contour sits above element i of the lower one.
LEFT_EYE_UPPER_LID: tuple[int, ...] = (263, 466, 388, 387, 386, 385, 384, 398, 362)
LEFT_EYE_LOWER_LID: tuple[int, ...] = (263, 249, 390, 373, 374, 380, 381, 382, 362)
RIGHT_EYE_UPPER_LID: tuple[int, ...] = (33, 246, 161, 160, 159, 158, 157, 173, 133)
RIGHT_EYE_LOWER_LID: tuple[int, ...] = (33, 7, 163, 144, 145, 153, 154, 155, 133)

RIGHT_IRIS: tuple[int, ...] = (468, 469, 470, 471, 472)
LEFT_IRIS: tuple[int, ...] = (473, 474, 475, 476, 477)
#: Mirror partner of each right-iris point (centre, +x, +y, -x, -y): +x of one iris maps to -x of the other.
IRIS_MIRROR: MappingProxyType = MappingProxyType({468: 473, 469: 476, 470: 475, 471: 474, 472: 477})

# ----------------------------------------------------------------------------- brows
# Upper and lower edges, from the outer to the inner end.
LEFT_BROW_UPPER: tuple[int, ...] = (300, 293, 334, 296, 336)
LEFT_BROW_LOWER: tuple[int, ...] = (276, 283, 282, 295, 285)
RIGHT_BROW_UPPER: tuple[int, ...] = (70, 63, 105, 66, 107)
RIGHT_BROW_LOWER: tuple[int, ...] = (46, 53, 52, 65, 55)
# The inner ends (corrugator region), inner-most last.
RIGHT_BROW_INNER: tuple[int, ...] = (107, 66, 55, 65)
LEFT_BROW_INNER: tuple[int, ...] = (336, 296, 285, 295)

# ----------------------------------------------------------------------------- lips
# Contours from the subject's right corner (61 / 78) to the left corner (291 / 308).
LIP_OUTER_UPPER: tuple[int, ...] = (61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291)
LIP_OUTER_LOWER: tuple[int, ...] = (61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291)
LIP_INNER_UPPER: tuple[int, ...] = (78, 191, 80, 81, 82, 13, 312, 311, 310, 415, 308)
LIP_INNER_LOWER: tuple[int, ...] = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308)
# Inner lip pairs (upper, lower) near the centre: the mouth opening.
LIP_GAP_UPPER: tuple[int, ...] = (82, 13, 312)
LIP_GAP_LOWER: tuple[int, ...] = (87, 14, 317)
# Rows of vertices from the outer to the inner mouth corner: they split the lip
# band into the upper and the lower lip.
MOUTH_CORNER_ROW_LEFT: tuple[int, ...] = (291, 306, 292, 308)
MOUTH_CORNER_ROW_RIGHT: tuple[int, ...] = (61, 76, 62, 78)

# ----------------------------------------------------------------------------- face oval
#: Clockwise from the forehead top (``FACEMESH_FACE_OVAL``).
FACE_OVAL: tuple[int, ...] = (
    10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377,
    152, 148, 176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109,
)

# ----------------------------------------------------------------------------- rigid points
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


def _stable_weights() -> np.ndarray:
    w = np.array([1.0] * len(STABLE_FOREHEAD + STABLE_NOSE + STABLE_EYE_CORNERS)
                 + [0.5] * len(STABLE_CHEEKBONES + STABLE_NOSE_WINGS), np.float64)
    w.setflags(write=False)
    return w


#: (len(STABLE),) float64 read-only fit weights of :data:`STABLE`, in its order: eye
#: corners, nose and forehead are the most rigid (1.0); cheekbones and nose wings move
#: a little with smiles (0.5).
STABLE_WEIGHTS: np.ndarray = _stable_weights()

#: Symmetric (subject's left, subject's right) pairs among the stable points.
STABLE_SYMMETRIC_PAIRS: tuple[tuple[int, int], ...] = (
    (263, 33), (362, 133), (345, 116), (346, 117), (352, 123), (372, 143), (358, 129),
    (338, 109), (297, 67),
)

#: MediaPipe's blendshape-model landmark subset (``kLandmarksSubsetIdxs``, 146
#: indices, mediapipe/tasks/cc/vision/face_landmarker/face_blendshapes_graph.cc,
#: Apache-2.0): full eyelid and lip contours, both irises, brows, nose ridge and
#: the face oval.
BLENDSHAPE_SUBSET: tuple[int, ...] = (
    0, 1, 4, 5, 6, 7, 8, 10, 13, 14, 17, 21, 33, 37, 39, 40, 46, 52, 53, 54, 55, 58,
    61, 63, 65, 66, 67, 70, 78, 80, 81, 82, 84, 87, 88, 91, 93, 95, 103, 105, 107,
    109, 127, 132, 133, 136, 144, 145, 146, 148, 149, 150, 152, 153, 154, 155, 157,
    158, 159, 160, 161, 162, 163, 168, 172, 173, 176, 178, 181, 185, 191, 195, 197,
    234, 246, 249, 251, 263, 267, 269, 270, 276, 282, 283, 284, 285, 288, 291, 293,
    295, 296, 297, 300, 308, 310, 311, 312, 314, 317, 318, 321, 323, 324, 332, 334,
    336, 338, 356, 361, 362, 365, 373, 374, 375, 377, 378, 379, 380, 381, 382, 384,
    385, 386, 387, 388, 389, 390, 397, 398, 400, 402, 405, 409, 415, 454, 466, 468,
    469, 470, 471, 472, 473, 474, 475, 476, 477,
)

# ----------------------------------------------------------------------------- camera
MEAN_IPD_M = 0.063
"""Mean adult interpupillary distance in metres: the one metric figure landmarks are scaled by
(N. A. Dodgson, "Variation and extrema of human interpupillary distance", Proc. SPIE 5291,
2004: mean 63 mm, s.d. ~3.5 mm), measured between the iris centres."""

DEFAULT_HFOV_DEG = 60.0
"""Assumed horizontal field of view of a webcam, degrees."""


def focal_length_px(image_width_px: float, hfov_deg: float = DEFAULT_HFOV_DEG) -> float:
    """Pinhole focal length in pixels for a horizontal field of view.

    Args:
        image_width_px: image width, pixels.
        hfov_deg: horizontal field of view, degrees (0 < hfov < 180).

    Returns:
        ``f = (W / 2) / tan(hfov / 2)`` in pixels.

    Raises:
        InputError: hfov outside (0, 180) degrees.
    """
    if not 0.0 < hfov_deg < 180.0:
        raise InputError(f"horizontal field of view must be in (0, 180) degrees, got {hfov_deg}")
    return 0.5 * image_width_px / math.tan(math.radians(hfov_deg) / 2.0)
