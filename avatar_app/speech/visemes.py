"""Visemes and their ARKit mouth shapes.

Viseme set: the 15 visemes of the Oculus (Meta) Lipsync viseme reference
(developers.meta.com/horizon/documentation/unity/audio-ovrlipsync-viseme-reference):
``sil PP FF TH DD kk CH SS nn RR aa E ih oh ou``, with their example phones
(PP: p b m, FF: f v, TH: th dh, DD: t d, kk: k g, CH: ch jh sh, SS: s z,
nn: n l, RR: r, aa: "car", E: "bed", ih: "tip", oh: "toe", ou: "book").

Each viseme has an ARKit weight vector (52,). :data:`HAND_TABLE` is a
documented hand table (values chosen by looking at the ARKit reference shapes
and at the lip/jaw geometry each viseme needs: lips together for PP, lower lip
under the upper teeth for FF, tongue tip visible for TH, rounded lips for ou/oh,
wide jaw for aa). :func:`derive_viseme_table` fits the weights on a face rig
(neutral + 52 blendshape deltas in MediaPipe landmark order) to geometric
targets per viseme, so that a given weight means the same mouth opening for
audio as for vision (the rig is the one the reconstruction engine is trained
on).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES
from avatar_app.core.errors import InputError

_log = logging.getLogger(__name__)

#: The 15 Oculus visemes, in the reference's order; the index is the viseme id.
VISEMES: tuple[str, ...] = ("sil", "PP", "FF", "TH", "DD", "kk", "CH", "SS", "nn", "RR",
                            "aa", "E", "ih", "oh", "ou")
NUM_VISEMES = len(VISEMES)

_H = {
    "sil": {},
    "PP": {"jawOpen": 0.06, "mouthClose": 0.06, "mouthPressLeft": 0.4, "mouthPressRight": 0.4,
           "mouthRollLower": 0.15, "mouthRollUpper": 0.1},
    "FF": {"jawOpen": 0.1, "mouthClose": 0.04, "mouthRollLower": 0.5, "mouthUpperUpLeft": 0.15,
           "mouthUpperUpRight": 0.15, "mouthShrugUpper": 0.1},
    "TH": {"jawOpen": 0.15, "tongueOut": 0.3, "mouthStretchLeft": 0.1, "mouthStretchRight": 0.1},
    "DD": {"jawOpen": 0.18, "mouthStretchLeft": 0.1, "mouthStretchRight": 0.1,
           "mouthSmileLeft": 0.05, "mouthSmileRight": 0.05},
    "kk": {"jawOpen": 0.22, "mouthStretchLeft": 0.1, "mouthStretchRight": 0.1},
    "CH": {"jawOpen": 0.12, "mouthFunnel": 0.45, "mouthPucker": 0.2, "mouthUpperUpLeft": 0.1,
           "mouthUpperUpRight": 0.1},
    "SS": {"jawOpen": 0.08, "mouthStretchLeft": 0.25, "mouthStretchRight": 0.25,
           "mouthSmileLeft": 0.15, "mouthSmileRight": 0.15},
    "nn": {"jawOpen": 0.15, "mouthStretchLeft": 0.05, "mouthStretchRight": 0.05},
    "RR": {"jawOpen": 0.15, "mouthFunnel": 0.3, "mouthPucker": 0.3},
    "aa": {"jawOpen": 0.55, "mouthLowerDownLeft": 0.2, "mouthLowerDownRight": 0.2,
           "mouthUpperUpLeft": 0.05, "mouthUpperUpRight": 0.05, "mouthStretchLeft": 0.05,
           "mouthStretchRight": 0.05},
    "E": {"jawOpen": 0.35, "mouthStretchLeft": 0.25, "mouthStretchRight": 0.25, "mouthSmileLeft": 0.15,
          "mouthSmileRight": 0.15, "mouthLowerDownLeft": 0.15, "mouthLowerDownRight": 0.15},
    "ih": {"jawOpen": 0.2, "mouthSmileLeft": 0.3, "mouthSmileRight": 0.3, "mouthStretchLeft": 0.3,
           "mouthStretchRight": 0.3},
    "oh": {"jawOpen": 0.4, "mouthFunnel": 0.5, "mouthPucker": 0.2},
    "ou": {"jawOpen": 0.15, "mouthPucker": 0.7, "mouthFunnel": 0.35},
}


def _as_matrix(table: Mapping[str, Mapping[str, float]]) -> np.ndarray:
    m = np.zeros((NUM_VISEMES, NUM_BLENDSHAPES), np.float32)
    for vi, v in enumerate(VISEMES):
        for name, w in table.get(v, {}).items():
            m[vi, BLENDSHAPE_NAMES.index(name)] = w
    return m


#: (15, 52) float32 hand table: row = viseme (VISEMES order), column = ARKit weight.
HAND_TABLE: np.ndarray = _as_matrix(_H)


# ----------------------------------------------------------------------------- rig fitting
#: MediaPipe face-mesh landmark indices used for the mouth geometry
#: (canonical_face_model / face_model_with_iris topology).
LM_UPPER_LIP_INNER = 13
LM_LOWER_LIP_INNER = 14
LM_UPPER_LIP_OUTER = 0
LM_LOWER_LIP_OUTER = 17
LM_MOUTH_LEFT = 291    # subject's left corner
LM_MOUTH_RIGHT = 61    # subject's right corner
LM_CHIN = 152
LM_NOSE_TIP = 1


@dataclass(frozen=True)
class MouthGeometry:
    """Mouth measures of one rig pose, in the rig's units (same for all poses).

    Attributes:
        lip_gap: inner lip distance (13-14).
        width: corner-to-corner distance (61-291).
        protrusion: forward (+z) offset of the lips' mid points from the corners' mean.
        jaw_drop: nose-tip to chin distance.
        lower_lip_raise: lower outer lip (17) height above the chin, minus neutral's.
    """

    lip_gap: float
    width: float
    protrusion: float
    jaw_drop: float
    lower_lip_raise: float

    def vector(self) -> np.ndarray:
        """(5,) float64 in field order."""
        return np.array([self.lip_gap, self.width, self.protrusion, self.jaw_drop, self.lower_lip_raise])


def mouth_geometry(landmarks: np.ndarray) -> MouthGeometry:
    """Mouth measures of a (478, 3) (or (468, 3)) landmark set in MediaPipe order.

    Args:
        landmarks: (>=468, 3) float, any metric unit, +y up, +z towards the viewer.

    Returns:
        MouthGeometry.

    Raises:
        InputError: wrong shape.
    """
    p = np.asarray(landmarks, np.float64)
    if p.ndim != 2 or p.shape[1] != 3 or p.shape[0] < 468:
        raise InputError(f"mouth_geometry needs (478, 3) landmarks; got shape {p.shape}")
    gap = np.linalg.norm(p[LM_UPPER_LIP_INNER] - p[LM_LOWER_LIP_INNER])
    width = np.linalg.norm(p[LM_MOUTH_LEFT] - p[LM_MOUTH_RIGHT])
    corners_z = 0.5 * (p[LM_MOUTH_LEFT, 2] + p[LM_MOUTH_RIGHT, 2])
    prot = 0.5 * (p[LM_UPPER_LIP_OUTER, 2] + p[LM_LOWER_LIP_OUTER, 2]) - corners_z
    jaw = np.linalg.norm(p[LM_NOSE_TIP] - p[LM_CHIN])
    raise_ = p[LM_LOWER_LIP_OUTER, 1] - p[LM_CHIN, 1]
    return MouthGeometry(float(gap), float(width), float(prot), float(jaw), float(raise_))


#: Free weights of the fit (the mouth shapes a viseme may use; tongue is not visible in landmarks).
FIT_SHAPES: tuple[str, ...] = (
    "jawOpen", "mouthClose", "mouthFunnel", "mouthPucker", "mouthSmileLeft", "mouthSmileRight",
    "mouthStretchLeft", "mouthStretchRight", "mouthRollLower", "mouthRollUpper",
    "mouthPressLeft", "mouthPressRight", "mouthLowerDownLeft", "mouthLowerDownRight",
    "mouthUpperUpLeft", "mouthUpperUpRight", "mouthShrugUpper",
)


#: Target mouth geometry per viseme as changes from a relaxed closed mouth, millimetres:
#: (lip gap, mouth width, lip protrusion, jaw drop). Vowel lip apertures and widths
#: follow Fromkin, "Lip positions in American English vowels", Language and Speech
#: 7(4), 1964 (open /a/ ~18 mm gap; spread /i/ wide, rounded /u/ ~14 mm narrower and
#: protruded); consonants from their articulation (bilabial closure 0 mm, labiodental
#: ~3 mm, alveolar/velar 5-8 mm with the jaw nearly closed, postalveolar rounding).
GEOMETRY_TARGETS_MM: dict[str, tuple[float, float, float, float]] = {
    "sil": (0.0, 0.0, 0.0, 0.0),
    "PP": (0.0, -1.0, 0.5, 1.0),
    "FF": (3.0, 0.0, -0.5, 2.0),
    "TH": (6.0, 2.0, 0.0, 4.0),
    "DD": (6.0, 2.0, 0.0, 4.0),
    "kk": (8.0, 1.0, 0.0, 5.0),
    "CH": (6.0, -8.0, 4.0, 3.0),
    "SS": (4.0, 4.0, 0.0, 2.0),
    "nn": (6.0, 1.0, 0.0, 4.0),
    "RR": (6.0, -6.0, 3.0, 3.0),
    "aa": (18.0, 0.0, 0.0, 12.0),
    "E": (11.0, 4.0, 0.0, 8.0),
    "ih": (7.0, 6.0, -0.5, 5.0),
    "oh": (13.0, -8.0, 4.0, 9.0),
    "ou": (6.0, -14.0, 7.0, 4.0),
}


def derive_viseme_table(neutral: np.ndarray, blendshapes: np.ndarray,
                        targets: np.ndarray | None = None, prior: np.ndarray = HAND_TABLE,
                        prior_weight: float = 0.05) -> np.ndarray:
    """Fit ARKit weights per viseme so the rig's mouth meets target geometry.

    For each viseme, bounded linear least squares (scipy ``lsq_linear``,
    bounds [0, 1]) over the :data:`FIT_SHAPES` weights of the linearised
    geometry ``g(w) ~ g(0) + J w`` (J by finite differences on the rig), with a
    small Tikhonov pull toward ``prior`` so shapes the geometry cannot see stay
    as the hand table has them. Left/right pairs are tied by averaging.

    Args:
        neutral: (478, 3) float rig neutral (MediaPipe order).
        blendshapes: (52, 478, 3) float deltas in core.blendshapes order.
        targets: (15, 4) geometry changes per viseme in METRES (lip gap, width,
            protrusion, jaw drop); default :data:`GEOMETRY_TARGETS_MM` / 1000.
        prior: (15, 52) prior weights (default :data:`HAND_TABLE`).
        prior_weight: strength of the pull toward ``prior`` relative to geometry
            measured in units of the neutral mouth width.

    Returns:
        (15, 52) float32 table (shapes outside FIT_SHAPES copied from ``prior``).

    Raises:
        InputError: arrays of the wrong shape.
    """
    from scipy.optimize import lsq_linear

    neutral = np.asarray(neutral, np.float64)
    bs = np.asarray(blendshapes, np.float64)
    if bs.shape[0] != NUM_BLENDSHAPES or bs.shape[1:] != neutral.shape:
        raise InputError(f"rig blendshapes must be (52, {neutral.shape[0]}, 3); got {bs.shape}")
    if targets is None:
        targets = np.array([GEOMETRY_TARGETS_MM[v] for v in VISEMES]) / 1000.0
    targets = np.asarray(targets, np.float64)[:, :4]
    scale = mouth_geometry(neutral).width
    g0 = mouth_geometry(neutral).vector()[:4]
    cols = [BLENDSHAPE_NAMES.index(n) for n in FIT_SHAPES]
    eps = 0.5  # secant over half the shape's range (shapes are close to linear per landmark)
    jac = np.stack([(mouth_geometry(neutral + eps * bs[c]).vector()[:4] - g0) / eps for c in cols], 1)
    out = prior.astype(np.float64).copy()
    lam = np.sqrt(prior_weight)
    for v in range(1, NUM_VISEMES):
        a = np.vstack([jac / scale, lam * np.eye(len(cols))])
        b = np.concatenate([targets[v] / scale, lam * prior[v, cols]])
        res = lsq_linear(a, b, bounds=(0.0, 1.0))
        out[v, cols] = res.x
    out[0] = 0.0
    for i, n in enumerate(BLENDSHAPE_NAMES):  # tie left/right
        if n.endswith("Left"):
            j = BLENDSHAPE_NAMES.index(n[:-4] + "Right")
            m = 0.5 * (out[:, i] + out[:, j])
            out[:, i] = out[:, j] = m
    _log.info("derived viseme table on the rig (jawOpen per viseme: %s)",
              dict(zip(VISEMES, np.round(out[:, BLENDSHAPE_NAMES.index('jawOpen')], 3))))
    return out.astype(np.float32)
