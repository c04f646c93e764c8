"""The face model's neutral shape, measured from a public-domain photo and neutralised.

Source: scikit-image's ``skimage.data.astronaut()``, the NASA portrait of
astronaut Eileen Collins (public domain, as scikit-image's data README
states). MediaPipe's face mesh (the legacy ``FaceMesh`` solution bundled in
mediapipe 0.10.21, static image mode, ``refine_landmarks=True``) measures its
478 landmarks: x, y in pixels and a relative depth z in the same scale.

Steps (all deterministic):

1. Axes: model x = image x (the subject's left), y = -image y (up),
   z = -MediaPipe z (toward the camera).
2. Frontal frame: x is the normal of the face's plane of symmetry (principal
   direction of the differences between mirror-paired landmarks), y is the
   chin-to-forehead direction (landmark 152 to 10) made orthogonal to x, and
   z = x cross y. The mirror pairing itself comes from an optimal assignment
   (:func:`face_model_topology.mirror_map`), seeded with a few known pairs and
   refined twice.
3. Symmetrise: average each point with the mirror of its partner.
4. Metric scale: the distance between the iris centres (468, 473) becomes
   :data:`avatar_app.core.landmarks.MEAN_IPD_M` = 63 mm, the mean adult interpupillary distance (Dodgson,
   "Variation and extrema of human interpupillary distance", SPIE 5291, 2004).
   Origin: the midpoint of landmarks 234 and 454 (the mesh rim in front of the
   ears).
5. Irises: circles of the measured horizontal radius centred on the
   measured centres, facing +z (gaze straight ahead).
6. Neutral mouth: the astronaut smiles with parted lips (10 mm gap, corners
   6.5 mm above the lip line, mouth 63 mm wide). The lips are closed onto one
   lip line through the midpoint of the stomion landmarks (13, 14), the lip
   contours are narrowed so the mouth is :data:`MOUTH_WIDTH_M` = 51 mm wide
   (cheilion-cheilion of adult women about 50 mm, men about 54 mm: Farkas,
   "Anthropometry of the Head and Face", 1994), the corners sit 1 mm below
   the lip line, and the vermilion thickens as the stretch is released. The
   motion spreads over the lower face by biharmonic interpolation
   (:class:`face_model_fields.MeshFields`), holding the nose, eyes and the
   jaw rim still.
"""
from __future__ import annotations

import logging

import numpy as np

from avatar_app.avatar.authoring import face_model_topology as topo
from avatar_app.avatar.authoring.face_model_fields import MeshFields
from avatar_app.core import landmarks as lmk
from avatar_app.core.errors import ModelLoadError, NoFaceError

logger = logging.getLogger(__name__)

MOUTH_WIDTH_M = 0.051
LIP_GAP_M = 0.0004
"""Neutral gap between the inner lip contours: closed lips, kept non-degenerate."""
CORNER_DROP_M = 0.001
"""Neutral mouth corners sit this far below the lip line."""
VERMILION_GAIN = 0.4
"""Share of the inner-lip closing motion the outer lip contour does not follow (lips thicken)."""

_SEED_PAIRS = ((263, 33), (362, 133), (291, 61), (454, 234), (386, 159), (374, 145),
               (300, 70), (336, 107), (358, 129))
_SEED_MIDLINE = (0, 1, 4, 6, 10, 13, 14, 17, 152, 168)


def photo_rgb() -> np.ndarray:
    """The astronaut portrait from scikit-image (public domain).

    Returns:
        (512, 512, 3) uint8 RGB.

    Raises:
        ModelLoadError: scikit-image is not installed.
    """
    try:
        from skimage import data
    except ImportError as exc:
        raise ModelLoadError(
            "scikit-image is needed to build the face model (pip install scikit-image)"
        ) from exc
    return np.ascontiguousarray(data.astronaut())


def measure_landmarks(image_rgb: np.ndarray) -> np.ndarray:
    """Run MediaPipe's face mesh once on a still image.

    Args:
        image_rgb: (H, W, 3) uint8 RGB.

    Returns:
        (478, 3) float64 in model axes, pixels: x right (the subject's left),
        y up, z toward the camera (MediaPipe's depth scaled like x).

    Raises:
        NoFaceError: no face found.
    """
    import mediapipe as mp

    h, w = image_rgb.shape[:2]
    with mp.solutions.face_mesh.FaceMesh(static_image_mode=True, refine_landmarks=True,
                                         max_num_faces=1) as mesh:
        result = mesh.process(image_rgb)
    if not result.multi_face_landmarks:
        raise NoFaceError("MediaPipe found no face in the face model's source photo")
    lm = result.multi_face_landmarks[0].landmark
    p = np.array([[q.x * w, q.y * h, q.z * w] for q in lm], np.float64)
    return p * np.array([1.0, -1.0, -1.0])


def _frame(points: np.ndarray, pairs, midline) -> np.ndarray:
    """Rotate and centre ``points`` into the frontal frame defined by mirror pairs."""
    d = np.array([points[a] - points[b] for a, b in pairs])
    _, vecs = np.linalg.eigh(d.T @ d)
    x = vecs[:, -1]
    if x @ (points[263] - points[33]) < 0:
        x = -x
    up = points[lmk.FacePoint.FOREHEAD] - points[lmk.FacePoint.CHIN]
    up -= x * (up @ x)
    y = up / np.linalg.norm(up)
    rot = np.stack([x, y, np.cross(x, y)])
    mids = [0.5 * (points[a] + points[b]) for a, b in pairs] + [points[m] for m in midline]
    return (points - np.mean(mids, axis=0)) @ rot.T


def frontalise(points: np.ndarray, triangles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Put measured landmarks into the frontal, symmetric frame and find the mirror map.

    Args:
        points: (478, 3) float64 from :func:`measure_landmarks`.
        triangles: (F, 3) mesh triangles.

    Returns:
        ``(frontal (478, 3) float64, mirror (478,) int32)``.
    """
    p = _frame(points, _SEED_PAIRS, _SEED_MIDLINE)
    mirror = topo.mirror_map(p, triangles)
    for _ in range(2):
        pairs = [(i, int(mirror[i])) for i in range(lmk.NUM_MESH) if mirror[i] > i]
        mid = [i for i in range(lmk.NUM_MESH) if mirror[i] == i]
        p = _frame(points, pairs, mid)
        mirror = topo.mirror_map(p, triangles)
    return p, mirror


def symmetrise(points: np.ndarray, mirror: np.ndarray) -> np.ndarray:
    """Average each point with the x-mirror of its partner.

    Args:
        points: (478, 3) float64.
        mirror: (478,) int permutation from :func:`face_model_topology.mirror_map`.

    Returns:
        (478, 3) float64, exactly symmetric (midline points get x = 0).
    """
    flip = np.array([-1.0, 1.0, 1.0])
    return 0.5 * (points + points[mirror] * flip)


def _regular_irises(p: np.ndarray) -> np.ndarray:
    """Replace the measured iris contours by circles facing +z.

    The radius is the mean horizontal one (points +x and -x of each iris):
    MediaPipe's vertical iris points sit closer to the centre (the lids cover
    the top and bottom of the iris), its horizontal ones give the usual adult
    iris diameter of about 12 mm.
    """
    out = p.copy()
    radii = [np.linalg.norm(p[[c + 1, c + 3]] - p[c], axis=1).mean() for c in (468, 473)]
    r = float(np.mean(radii))
    ring = np.array([[r, 0, 0], [0, r, 0], [-r, 0, 0], [0, -r, 0]])
    for c in (468, 473):
        out[c + 1:c + 5] = p[c] + ring
    return out


def neutralise_mouth(p: np.ndarray, fields: MeshFields) -> np.ndarray:
    """Close and relax a smiling mouth (see the module docstring, step 6).

    Args:
        p: (478, 3) float64 symmetric metric landmarks.
        fields: operators of the mesh at ``p[:468]``.

    Returns:
        (478, 3) float64 with the lips closed, the corners lowered and the
        mouth narrowed.
    """
    inner_up = np.array(lmk.LIP_INNER_UPPER)
    inner_lo = np.array(lmk.LIP_INNER_LOWER)
    outer_up = np.array(lmk.LIP_OUTER_UPPER)
    outer_lo = np.array(lmk.LIP_OUTER_LOWER)
    y_line = 0.5 * (p[lmk.FacePoint.LIP_UPPER_INNER, 1] + p[lmk.FacePoint.LIP_LOWER_INNER, 1])
    old_half = p[308, 0]
    new_half = MOUTH_WIDTH_M / 2 - (p[291, 0] - p[308, 0])
    sx = new_half / old_half
    handles: dict[int, np.ndarray] = {}
    # Inner contours meet at the lip line; the line droops by CORNER_DROP_M at the corners.
    for a, b in zip(inner_up, inner_lo):
        mid = 0.5 * (p[a] + p[b])
        t = abs(mid[0]) / old_half
        y = y_line - CORNER_DROP_M * t ** 2
        gap = 0.5 * LIP_GAP_M * (1.0 - t ** 2)
        target_a = np.array([mid[0] * sx, y + gap, mid[2]])
        target_b = np.array([mid[0] * sx, y - gap, mid[2]])
        handles[int(a)] = target_a - p[a]
        handles[int(b)] = target_b - p[b]
    # Outer contours follow the inner ones' vertical motion in part (the vermilion thickens),
    # and narrow in x with the same factor about the midline.
    for contour, inner in ((outer_up, inner_up), (outer_lo, inner_lo)):
        for a, b in zip(contour, inner):
            if int(a) in handles:  # corners: shared with the inner contour's handle
                continue
            dy = handles[int(b)][1] * (1.0 - VERMILION_GAIN)
            handles[int(a)] = np.array([p[a, 0] * (sx - 1.0), dy, 0.0])
    # Outer corners: to the new mouth width, on the drooped lip line.
    for c, ci in ((291, 308), (61, 78)):
        target = np.array([np.sign(p[c, 0]) * MOUTH_WIDTH_M / 2, y_line - CORNER_DROP_M, p[c, 2]])
        handles[c] = target - p[c]
    still = set(lmk.LEFT_EYE_UPPER_LID + lmk.LEFT_EYE_LOWER_LID + lmk.RIGHT_EYE_UPPER_LID
                + lmk.RIGHT_EYE_LOWER_LID + lmk.FACE_OVAL)
    nose = fields.geodesic([lmk.FacePoint.NOSE_TIP]) < 0.022
    still |= set(np.nonzero(nose)[0].tolist())
    off = fields.interpolate(handles, radius=0.045, pinned=still - set(handles))
    out = p.copy()
    out[:lmk.NUM_MESH] += off
    return out


def build_neutral(triangles: np.ndarray, image_rgb: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Measure, frontalise, symmetrise, scale and neutralise the face.

    Args:
        triangles: (F, 3) mesh triangles.
        image_rgb: the source photo; default :func:`photo_rgb`.

    Returns:
        ``(neutral (478, 3) float64 metres, mirror (478,) int32,
        measured (478, 3) float64 metres)``: the neutral shape, the mirror
        map and the symmetrised, scaled photo measurement before the mouth
        was neutralised (for the docs).
    """
    img = photo_rgb() if image_rgb is None else image_rgb
    raw = measure_landmarks(img)
    front, mirror = frontalise(raw, triangles)
    sym = symmetrise(front, mirror)
    scale = lmk.MEAN_IPD_M / np.linalg.norm(sym[lmk.FacePoint.RIGHT_IRIS_CENTER] - sym[lmk.FacePoint.LEFT_IRIS_CENTER])
    sym *= scale
    sym -= 0.5 * (sym[lmk.FacePoint.CHEEK_EAR_LEFT] + sym[lmk.FacePoint.CHEEK_EAR_RIGHT])
    sym[:, 0] = np.where(mirror == np.arange(len(mirror)), 0.0, sym[:, 0])
    sym = _regular_irises(sym)
    fields = MeshFields(sym[:lmk.NUM_MESH], topo.edges(triangles), triangles)
    neutral = symmetrise(neutralise_mouth(sym, fields), mirror)
    logger.info("face model neutral: scale %.6f m/px, mouth width %.1f mm",
                scale, 1000 * (neutral[291, 0] - neutral[61, 0]))
    return neutral, mirror, sym

