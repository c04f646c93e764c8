"""GeometricSolver: ARKit blendshapes, head pose and gaze from landmark geometry.

No learned model: each blendshape comes from one measurement of the 478
MediaPipe landmarks, taken in the head frame (the rigid head pose removed, see
:mod:`avatar_app.reconstruction.head_pose`) so head turns do not fake expressions,
and normalised per user:

- explicit: :meth:`GeometricSolver.calibrate_neutral` takes one neutral face;
- automatic (when none was given): causal running percentiles of every
  feature (:class:`~avatar_app.reconstruction.calibration.RunningPercentiles`),
  every frame over the first 5 s, one sample per 0.25 s afterwards: the 75th
  percentile of the eye aperture is "eyes open", the 10th percentile of the
  chin distance is "jaw closed", medians of the brows and irises are their
  rest positions; the mouth's width and corner positions at rest are medians
  over frames whose lips touch (inner-lip gap < 1.5 mm, which is also the
  closed lip gap for everyone, so a user who starts talking at once is still
  read right). The head-pose reference is then the first frame, levelled in
  yaw and roll.

Mouth and brows (``fit_shapes``, the default): the weights are fitted to the
visible displacement of the lip contours, chin and brows from the user's rest
position through the face model (:mod:`avatar_app.reconstruction.shape_fit`:
the model has MediaPipe's topology, so this is analysis by synthesis), which
gives jawOpen, mouthClose, funnel, pucker, smile, frown, stretch,
mouthUpperUp/LowerDown, mouthLeft/Right, jawLeft/Right and the five brow shapes;
the rest positions are running medians (the mouth's over frames whose lips
touch, sampled for 0.5 s and then every 2 s so that closed-lip frowns and
smiles do not drift into it; before the first such frame, over all frames with
their jaw opening taken out along the face model's jawOpen). The fit also holds
each mouth corner's height above the inner lips' midpoint (``shape_fit``'s
corner-height rows). Displacements are taken from the nose
ridge, which no expression moves. jawOpen is at least what the chin's drop
shows (the jaw bone: lips closed on an open jaw in /p b m/ must not read as a
closed jaw), the other mouth shapes fitted again around that jaw so that
mouthClose closes the extra opening and the corners stay as the face has them
(:meth:`GeometricSolver._hold_jaw`). A closed-mouth frame enters the rest
mouth only while the mouth reads as neutral (a held closed-lip pucker or
smile is not a rest). Until the user's own closed-mouth frames take over, the rest mouth is
at most as wide and its corners at most as high as a typical neutral mouth's
(London neutral photos), so a still smile or a first second of smiling is not
taken as the neutral. Measured by ``benchmarks/fidelity.py``.

The output is deterministic given the same landmarks and timestamps, so
offline rendering and live mode behave alike.

Left/Right are the subject's own sides; the head frame's +x points to the
subject's left (the image's right in an unmirrored camera image).

Blinks: MediaPipe's lids under-read closure (DESIGN.md notes a full blink
only halves the lid gap in some views), so eyeBlink reaches 1 at 35 % of the
open aperture and starts at 85 %. The eyes are independent (``blink_link`` 1:
a wink stays a wink even when the open eye squints with it), except during the
first ``blink_onset_s`` of a difference between them: the two eyes of a blink
close a frame or two apart, so then the lagging eye is pulled up to at most
``blink_onset_link`` times its own value. Linking the eyes for good is the
user's choice ("Link eyes" in the tuning).
"""
from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass

import numpy as np

from avatar_app.core import landmarks as lmk
from avatar_app.core.blendshapes import NUM_BLENDSHAPES, Blendshape
from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.landmarks import DEFAULT_HFOV_DEG, MEAN_IPD_M
from avatar_app.core.types import FaceParams, Landmarks
from avatar_app.reconstruction.calibration import RunningPercentiles
from avatar_app.reconstruction.head_pose import (
    HeadPose,
    HeadPoseFitter,
    NeutralFace,
    check_landmarks,
    estimate_head_pose,
    make_neutral_face,
)

EYEBALL_RADIUS_M = 0.012
"""Eyeball radius: half the mean adult axial length of ~24 mm (I. Bekerman,
P. Gottlieb, M. Vaiman, "Variations in eyeball diameters of the healthy adults",
J. Ophthalmology 2014, 503645). The iris centre moves on this radius as the eye turns."""


class Feature(enum.IntEnum):
    """Measurements taken from each frame (head frame, metres unless noted)."""

    EYE_APERTURE_R = 0  # mean lid gap / eye width (unitless)
    EYE_APERTURE_L = 1
    IRIS_X_R = 2  # iris centre minus eye-corner midpoint, +x = subject's left
    IRIS_Y_R = 3  # +y = up
    IRIS_X_L = 4
    IRIS_Y_L = 5
    CHIN = 6  # chin to nose-bridge distance
    LIP_GAP = 7  # inner lip gap
    MOUTH_WIDTH = 8  # corner to corner
    CORNER_Y_R = 9  # mouth corner height above the midpoint of the inner lips
    CORNER_Y_L = 10
    CORNER_X_R = 11  # mouth corner outward displacement (away from the midline)
    CORNER_X_L = 12
    BROW_INNER_R = 13  # brow heights (y)
    BROW_INNER_L = 14
    BROW_R = 15
    BROW_L = 16
    BROW_OUTER_R = 17
    BROW_OUTER_L = 18


NUM_FEATURES = len(Feature)

# Which percentile of the running distribution is the user's rest value.
_AUTO_PERCENTILES = np.full(NUM_FEATURES, 50.0)
_AUTO_PERCENTILES[[Feature.EYE_APERTURE_R, Feature.EYE_APERTURE_L]] = 75.0  # eyes open
_AUTO_PERCENTILES[[Feature.CHIN, Feature.LIP_GAP]] = 10.0  # mouth closed

# Rest values of the mouth, measured only on frames whose lips touch (better
# than percentiles of all frames when the user talks a lot or starts talking).
_CLOSED_MOUTH_FEATURES = np.array(
    [Feature.MOUTH_WIDTH, Feature.CORNER_Y_R, Feature.CORNER_Y_L,
     Feature.CORNER_X_R, Feature.CORNER_X_L],
    dtype=np.intp,
)

_B = Blendshape
# Shapes that move the mouth corners of a closed mouth: a closed-lip frame showing one of them
# does not enter the rest mouth (GeometricSolverConfig.closed_rest_max_shape).
_CORNER_SHAPES = np.array([_B.mouthSmileLeft, _B.mouthSmileRight, _B.mouthFrownLeft, _B.mouthFrownRight,
                           _B.mouthStretchLeft, _B.mouthStretchRight, _B.mouthPucker, _B.mouthLeft,
                           _B.mouthRight], np.intp)
_EYES = np.array([Feature.EYE_APERTURE_R, Feature.EYE_APERTURE_L], np.intp)
_IRIS = np.array([[Feature.IRIS_X_R, Feature.IRIS_X_L], [Feature.IRIS_Y_R, Feature.IRIS_Y_L]], np.intp)
_BLINK_OUT = np.array([_B.eyeBlinkRight, _B.eyeBlinkLeft], np.intp)
_WIDE_OUT = np.array([_B.eyeWideRight, _B.eyeWideLeft], np.intp)
# targets of clip([yaw_R, yaw_L, -yaw_R, -yaw_L, pitch_R, pitch_L, -pitch_R, -pitch_L] / full range)
_LOOK_OUT = np.array([_B.eyeLookInRight, _B.eyeLookOutLeft, _B.eyeLookOutRight, _B.eyeLookInLeft,
                      _B.eyeLookUpRight, _B.eyeLookUpLeft, _B.eyeLookDownRight, _B.eyeLookDownLeft], np.intp)


@dataclass(frozen=True)
class GeometricSolverConfig:
    """Tunable constants of the GeometricSolver (units in the names).

    Ranges are the displacement (from the user's rest value) that maps to a
    weight of 1, in metres on a face scaled to a 63 mm interpupillary
    distance; they are typical movement sizes of the features, not per-video
    constants. The blink thresholds and ``blink_link`` were checked against
    the hand-labelled GRID clips (tests/reconstruction/test_reconstruction_geometric.py).
    """

    hfov_deg: float = DEFAULT_HFOV_DEG
    ipd_m: float = MEAN_IPD_M
    blink_start_ratio: float = 0.85  # aperture / open aperture where eyeBlink starts
    blink_full_ratio: float = 0.35  # ... where eyeBlink reaches 1
    blink_link: float = 1.0  # bilateral-blink coupling (1 = independent eyes: winks stay winks)
    blink_onset_link: float = 2.0  # coupling while the eyes have differed for less than blink_onset_s
    blink_onset_s: float = 0.1  # eyes close 1-2 frames apart in a blink; a held difference is a wink
    eye_open_min: float = 0.19  # lowest open-eye aperture (lid gap / eye width) of the automatic reference
    # Each eye's open reference is at least this share of the other's. 1: one shared open aperture,
    # the wider eye's (a person's two eyes open equally wide: an identity trait), so an eye squeezed
    # or winked through the first seconds is not taken as open. 0.92 before: pooled eye-aperture r
    # 0.938 -> 0.942, eye asymmetry 0.805 -> 0.823, winks and GRID blinks unchanged (fidelity.py).
    eye_ref_symmetry: float = 1.0
    wide_start_ratio: float = 1.10
    wide_full_ratio: float = 1.35  # 1.40 before the rounded start
    # eyeWide starts smoothly: quadratic over the first wide_knee of its range, then linear to 1 at
    # wide_full_ratio (_soft_ramp). 0: the hard edge of before, where MediaPipe's lid jitter on a
    # small face crossed the threshold at full slope (a still GRID frame, 59 px between the irises,
    # 200 JPEG re-encodes shifted <= 1 px: aperture ratio sd 0.047, up to 1.18; eyeWideLeft sd
    # 0.061 -> 0.027). Full at 1.35 (1.40 before) keeps a wide eye's weight: pooled eye-aperture r
    # 0.9421 -> 0.9409, eye asymmetry 0.8233 -> 0.8218, eyes-wide event lift 0.559 -> 0.573, winks
    # and GRID blinks unchanged (benchmarks/fidelity.py). Knee 0.5 with full 1.40: sd 0.019 but lift
    # 0.509; knee 0.25 / 1.40: sd 0.032, lift 0.535; 1.0 / 1.40: lift 0.474.
    wide_knee: float = 0.5
    gaze_yaw_full_rad: float = math.radians(30.0)  # eyeLookIn/Out = 1
    gaze_pitch_full_rad: float = math.radians(25.0)  # eyeLookUp/Down = 1
    jaw_range_m: float = 0.025  # chin drop for jawOpen = 1 (the face model's jawOpen drops its chin 27 mm)
    jaw_from_chin: bool = True  # jawOpen at least the chin's (the jaw bone); the fit adds what the lips show
    lip_range_m: float = 0.030  # lip gap for a fully open mouth
    smile_range_m: float = 0.010  # corner lift + half the outward pull for mouthSmile = 1
    frown_range_m: float = 0.006
    narrow_start: float = 0.04  # relative mouth narrowing where pucker/funnel start
    narrow_range: float = 0.20
    funnel_gap_m: float = 0.008  # lip gap that turns a pucker into a funnel
    lips_closed_gap_m: float = 0.0015  # inner-lip gap below which the lips touch
    brow_up_range_m: float = 0.008
    brow_down_range_m: float = 0.005
    # The person's neutral mouth before their own closed-mouth frames are seen (a still, the first
    # second): the typical neutral mouth (London neutral photos: width 0.78 +- 0.05 eye spans, 49 mm
    # at a 63 mm span; corners 2.7 +- 1.7 mm below the inner lips' midpoint). Predicting it from the
    # person's identity landmarks (eye corners, nose, nose wings, face outline; ridge regression on
    # the odd London ids) was no better on the even ids than the mean (corner residual sd 1.5-1.9 mm
    # out, 1.2-1.4 mm up, vs 1.7-1.9 / 1.2-1.3 mm), and those points move 0.5-6 mm between a person's
    # neutral and smiling photo, so the regression absorbed the smile (docs/identity_neutral.md).
    # Until the user's own closed-mouth frames take over (the prior weighs as corner_prior_samples
    # of them), a wider or higher-cornered rest mouth is taken as a smile's. The operating point
    # (48 mm, 2.5 mm below: about the mean) was chosen on the odd London ids (both criteria met by
    # 38 % there, 38 % of the held-out even ids; 55 mm / 1.0 mm, mean + 1 sd, gave 24 % / 26 %).
    # One-sided (rest mouths are only narrowed and lowered, except below corner_prior_low_m): a
    # narrow mouth never reads as a pucker, nor a low one as a frown within 2 sd of the typical.
    corner_prior_width_m: float = 0.048
    corner_prior_height_m: float | None = -0.0025
    corner_prior_samples: float = 15.0
    # ... and, with the same weight, corners at least this high (the lowest typical neutral: London
    # mean - 2 sd, 6.1 mm below the inner lips' midpoint), so a frown held with open lips before the
    # first closed-mouth frame is not taken as the rest (lp_d3: rest corners 10 mm low, then 6 mm
    # once the lips met). Pooled corner-height r 0.861 -> 0.879 (lp_d3 0.868 -> 0.931); London
    # 0.394 -> 0.380 (one neutral photo of the 71, face 105, reads mouthFrownRight 0.28; dev ids
    # 0.378 -> 0.351, held-out 0.412 unchanged). A naturally low mouth within 2 sd never reads as a frown.
    corner_prior_low_m: float | None = -0.0061
    warmup_s: float = 5.0
    # The rest mouth over closed-mouth frames: every such frame for closed_warmup_s from the first,
    # then one per closed_slow_interval_s. A rest that kept every closed frame for 5 s took the
    # user's closed-lip frowns and smiles in (lp_d3: rest corners 2.4 mm lower after a frown), and
    # the avatar's corners drifted against the face's.
    # 0.5 s / 2 s: pooled corner-height r 0.823 -> 0.861, lip gap 0.973 -> 0.975, London unchanged
    # (benchmarks/fidelity.py); 1 s / 1 s gave 0.855, 5 s / 0.25 s (the brows' schedule) 0.823.
    closed_warmup_s: float = 0.5
    closed_slow_interval_s: float = 2.0
    # After that warm-up a closed-mouth frame enters the rest only while the mouth reads as neutral:
    # the last frame's corner shapes (smile, frown, stretch, pucker, mouthLeft/Right) at most
    # closed_rest_max_shape (issue 17's neutral criterion: every shape <= 0.25), or once
    # closed_rest_force_s have passed since the last sample (a rest that went wrong still adapts).
    # A closed-lip pucker held through a sample became the rest (lp_d11: pucker 0.57 at 8 s):
    # pooled corner-height r 0.8993 -> 0.9005 (lp_d11 0.874 -> 0.887), London unchanged. None: no gate.
    closed_rest_max_shape: float | None = 0.25
    closed_rest_force_s: float = 10.0
    slow_interval_s: float = 0.25
    fit_shapes: bool = True  # mouth and brows fitted through the face model (shape_fit)


# The ufunc that np.clip(a, lo, hi) ends in (ndarray.clip -> numpy.core._methods._clip -> this), the
# same loop and so the same bits, without the ~3-5 us of Python dispatch above it (numpy < 2).
_CLIP = getattr(getattr(getattr(np, "core", None), "umath", None), "clip", None) or np.clip


def _clip01(x: np.ndarray | float) -> np.ndarray | float:
    """``np.clip(x, 0, 1)``; a scalar stays a Python float (np.clip on a scalar costs ~3 us)."""
    if isinstance(x, np.ndarray) and x.ndim:
        return np.clip(x, 0.0, 1.0)
    return min(max(float(x), 0.0), 1.0)


def _soft_ramp(x: float, knee: float) -> float:
    """``clip(x, 0, 1)`` with its start rounded off: 0 below 0, ``x**2 / (2 knee)`` up to ``knee``,
    then linear (slope ``1 / (1 - knee / 2)``) to 1 at ``x = 1``; continuous with a continuous slope.

    A hard start turns landmark noise around the threshold into output jitter at full slope; the
    rounded one starts at slope 0. Plain Python floats (one value per eye and frame: numpy's per-call
    cost would be most of it).

    Args:
        x: the position in the mapping's range (0 at its start, 1 at full); finite.
        knee: share of the range rounded off, in [0, 1] (0: ``clip(x, 0, 1)``).

    Returns:
        float in [0, 1].
    """
    x = min(1.0, max(0.0, x))
    if knee <= 0.0:
        return x
    return (x * x / (2.0 * knee) if x < knee else x - 0.5 * knee) / (1.0 - 0.5 * knee)


class _FeatureIndex:
    """Landmark index arrays of :func:`measure_features`, built once (the per-frame cost was
    mostly Python: 30 small gathers and reductions; here they are six)."""

    def __init__(self) -> None:
        P = lmk.FacePoint
        self.lid_up = np.array(lmk.RIGHT_EYE_UPPER + lmk.LEFT_EYE_UPPER, np.intp)
        self.lid_lo = np.array(lmk.RIGHT_EYE_LOWER + lmk.LEFT_EYE_LOWER, np.intp)
        self.n_lid_r = len(lmk.RIGHT_EYE_UPPER)
        # segments whose lengths are measured: eye widths (R, L), chin to bridge, mouth width
        self.seg_a = np.array([P.RIGHT_EYE_OUTER, P.LEFT_EYE_OUTER, P.CHIN, P.MOUTH_LEFT], np.intp)
        self.seg_b = np.array([P.RIGHT_EYE_INNER, P.LEFT_EYE_INNER, 168, P.MOUTH_RIGHT], np.intp)
        self.iris = np.array([P.RIGHT_IRIS_CENTER, P.LEFT_IRIS_CENTER], np.intp)
        self.gap_up = np.array(lmk.LIP_GAP_UPPER, np.intp)
        self.gap_lo = np.array(lmk.LIP_GAP_LOWER, np.intp)
        self.corners = np.array([P.MOUTH_RIGHT, P.MOUTH_LEFT], np.intp)
        self.inner_mid = np.array([P.LIP_UPPER_INNER, P.LIP_LOWER_INNER], np.intp)
        brows = (lmk.RIGHT_BROW_INNER, lmk.LEFT_BROW_INNER, lmk.RIGHT_BROW_UPPER, lmk.LEFT_BROW_UPPER,
                 lmk.RIGHT_BROW_UPPER[:2], lmk.LEFT_BROW_UPPER[:2])  # Feature.BROW_INNER_R .. BROW_OUTER_L
        self.brow = np.array(sum(brows, ()), np.intp)
        self.brow_cuts = np.cumsum([0] + [len(b) for b in brows])
        self.brow_counts = np.array([len(b) for b in brows], np.float64)
        # All of them in one gather (rows of ``p[gather]``): the measured segments' ends (lid
        # pairs, the four segments, the inner-lip pairs) as ``a`` then ``b`` halves, the irises,
        # the corners, 13 and 14; the brows' y as their own gather (a contiguous column)
        self.n_seg = len(self.lid_up) + len(self.seg_a) + len(self.gap_up)
        self.gather = np.concatenate([self.lid_up, self.seg_a, self.gap_up, self.lid_lo, self.seg_b,
                                      self.gap_lo, self.iris, self.corners, self.inner_mid])


_FEATURE_INDEX = _FeatureIndex()


def _left_sum(values: list[float]) -> float:
    """``((v0 + v1) + v2) + ...``: what ndarray.sum gives for fewer than 8 float64 values >= +0 (numpy
    < 2; pairwise summation from 8; builtin sum starts from 0 and, from Python 3.12, compensates)."""
    total = values[0]
    for x in values[1:]:
        total += x
    return total


def measure_features(points_m: np.ndarray) -> np.ndarray:
    """Measure the :class:`Feature` vector of one face in the head frame.

    Eye aperture: mean lid gap over the five lid pairs / the corner-to-corner width; iris
    offsets from the corners' midpoint; chin to nose bridge (168); mean inner-lip gap over
    three pairs; mouth width and corner positions (heights above the inner lips' midpoint,
    outward offsets from the midline); brow heights as means of their points' y.

    Args:
        points_m: (478, 3) float, landmarks in the head frame, metres
            (``HeadPose.points_m`` or ``NeutralFace.points_m``).

    Returns:
        (NUM_FEATURES,) float64, indexed by :class:`Feature`.
    """
    ix = _FEATURE_INDEX
    p = np.asarray(points_m, dtype=np.float64)
    f = np.empty(NUM_FEATURES)
    q = p[ix.gather]
    m = ix.n_seg
    v = q[:m] - q[m:2 * m]
    # the lengths as np.linalg.norm(v, axis=1) computes them; the rest in Python floats (the same
    # IEEE operations, sums left to right as ndarray.sum adds fewer than 8 values)
    lengths = np.sqrt(np.add.reduce(v * v, axis=1)).tolist()
    n, n_lid = ix.n_lid_r, len(ix.lid_up)
    width_r, width_l, chin, width = lengths[n_lid:n_lid + 4]
    (out_r, out_l), (in_r, in_l) = q[n_lid:n_lid + 2, :2].tolist(), q[m + n_lid:m + n_lid + 2, :2].tolist()
    k = 2 * m  # the irises, then the corners, then 13 and 14
    iris_r, iris_l, cr, cl, up, lo = q[k:k + 6].tolist()
    # The corners sit about midway between the lips as the jaw opens, so their
    # height above that midpoint changes with smiles and frowns, not with jawOpen.
    mid_y = 0.5 * (up[1] + lo[1])
    f[:Feature.BROW_INNER_R] = [  # Feature.EYE_APERTURE_R .. CORNER_X_L, in order
        _left_sum(lengths[:n]) / n / max(width_r, 1e-9),
        _left_sum(lengths[n:n_lid]) / (n_lid - n) / max(width_l, 1e-9),
        iris_r[0] - 0.5 * (out_r[0] + in_r[0]), iris_r[1] - 0.5 * (out_r[1] + in_r[1]),  # from the corners' midpoint
        iris_l[0] - 0.5 * (out_l[0] + in_l[0]), iris_l[1] - 0.5 * (out_l[1] + in_l[1]),
        chin,
        _left_sum(lengths[n_lid + 4:]) / len(ix.gap_up),
        width,
        cr[1] - mid_y, cl[1] - mid_y, -cr[0], cl[0],
    ]
    # BROW_INNER_R .. BROW_OUTER_L are consecutive features: the means of six point sets
    f[Feature.BROW_INNER_R:] = np.add.reduceat(p[ix.brow, 1], ix.brow_cuts[:-1]) / ix.brow_counts
    return f


def _fit_points(region: str) -> list[int]:
    from avatar_app.reconstruction import shape_fit

    return list({"mouth": shape_fit.MOUTH_POINTS, "brow": shape_fit.BROW_POINTS,
                 "anchor": shape_fit.ANCHOR_POINTS}[region])


class _Regions:
    """Index arrays of the fitted regions (mouth, brows, nose-ridge anchor), built once.

    Attributes:
        points: (P,) landmark indices, mouth then brow then anchor points.
        n_mouth, n_brow, n_anchor: how many of each.
        lip_up, lip_lo: rows (into the mouth points) of the inner lip contours, paired.
        corner_r, corner_l, inner_up, inner_lo, chin: rows of the mouth corners, of 13 and 14
            and of the chin (152).
    """

    def __init__(self) -> None:
        mouth, brow, anchor = _fit_points("mouth"), _fit_points("brow"), _fit_points("anchor")
        self.points = np.array(mouth + brow + anchor, np.intp)
        self.n_mouth, self.n_brow, self.n_anchor = len(mouth), len(brow), len(anchor)
        pairs = [(u, lo) for u, lo in zip(lmk.LIP_INNER_UPPER, lmk.LIP_INNER_LOWER) if u != lo]
        self.lip_up = np.array([mouth.index(u) for u, _ in pairs], np.intp)
        self.lip_lo = np.array([mouth.index(lo) for _, lo in pairs], np.intp)
        self.corner_r = mouth.index(int(lmk.FacePoint.MOUTH_RIGHT))
        self.corner_l = mouth.index(int(lmk.FacePoint.MOUTH_LEFT))
        self.inner_up = mouth.index(int(lmk.FacePoint.LIP_UPPER_INNER))
        self.inner_lo = mouth.index(int(lmk.FacePoint.LIP_LOWER_INNER))
        self.chin = mouth.index(int(lmk.FacePoint.CHIN))


@functools.lru_cache(maxsize=1)
def _regions() -> _Regions:
    return _Regions()


def _region_points(points_m: np.ndarray) -> np.ndarray:
    """(P, 3) float64 mouth then brow then anchor points of head-frame points (``HeadPose.points_m``).

    The head frame has the face model's axes and scale (+x the subject's left, +y up,
    63 mm between the irises), so displacements in it are the model's offsets; it is
    fitted to the user's own neutral, so head turns leave no residual (fitting the
    model's template instead left 0.2-0.3 of mouth shapes at 15 degrees of pitch).
    """
    return np.asarray(points_m, np.float64)[_regions().points]


@functools.lru_cache(maxsize=1)
def _jaw_offsets() -> np.ndarray:
    """(n_mouth, 3) float64 read-only: the face model's jawOpen offsets at the mouth points, metres."""
    from avatar_app.avatar.face_model import load_face_model

    r = _regions()
    off = np.asarray(load_face_model().blendshapes[Blendshape.jawOpen], np.float64)[r.points[:r.n_mouth]].copy()
    off.setflags(write=False)
    return off


@functools.lru_cache(maxsize=1)
def _upper_up_offsets() -> tuple[np.ndarray, np.ndarray]:
    """``(indices (2,), offsets (2, n_mouth, 3) float64 read-only)``: mouthUpperUpLeft/Right at the mouth points."""
    from avatar_app.avatar.face_model import load_face_model

    r = _regions()
    idx = np.array([Blendshape.mouthUpperUpLeft, Blendshape.mouthUpperUpRight], np.intp)
    off = np.asarray(load_face_model().blendshapes, np.float64)[idx][:, r.points[:r.n_mouth]].copy()
    off.setflags(write=False)
    return idx, off


def _close_rest_mouth(ref: np.ndarray) -> None:
    """Close the jaw of a rest mouth taken over open-mouthed frames, in place.

    Before the user's first closed-mouth frame the mouth's rest positions are medians over
    frames whose lips part. The jaw opening they hold (the inner lips' mean gap) is taken
    out along the face model's jawOpen, which drops the lower lip and, by about half as
    much, the mouth corners; then the lower inner lip is laid onto the upper one (touching
    lips have no gap, whoever the user is). Raising only the lower inner lip (before) left
    the corners where the open jaw had put them: rest corners 4-6 mm too low until the first
    closed frame, read as a smile that vanished when the lips first met (grid_lbax4n:
    corner-height r 0.59; benchmarks/fidelity.py). The chin (152) keeps its median: closed
    too, the open-mouthed silence before grid_s2_swwp2s's first word read as a jaw open
    wider than in its words (jawOpen in words - silence -0.015; +0.010 with the chin kept).

    Args:
        ref: (P, 3) float64 rest positions of the fitted points (mouth rows first), metres.
    """
    r = _regions()
    jaw = _jaw_offsets()
    gap = float(np.mean(ref[r.lip_up, 1] - ref[r.lip_lo, 1]))
    per_unit = float(np.mean(jaw[r.lip_up, 1] - jaw[r.lip_lo, 1]))
    if gap > 0.0 and per_unit > 0.0:
        chin = ref[r.chin].copy()
        ref[:r.n_mouth] -= (gap / per_unit) * jaw
        ref[r.chin] = chin
    ref[r.lip_lo, 1] = ref[r.lip_up, 1]  # an opening jaw drops the lower lip; the upper one stays


class GeometricSolver:
    """FaceReconstructor from landmark geometry (no model), per-user normalised.

    Produces eyeBlink, eyeWide, eyeLookIn/Out/Up/Down (per eye) and, fitted
    through the face model, the mouth and brow shapes listed in
    :data:`avatar_app.reconstruction.shape_fit.MOUTH_SHAPES` / ``BROW_SHAPES``
    (Left/Right = the subject's sides); the other ARKit weights stay 0.
    Cost: under 1 ms per frame on one CPU core.

    Thread: one instance per processing thread; calls must come in time order.

    Args:
        config: tunable constants (defaults documented in GeometricSolverConfig).

    Attributes:
        last_pose: the HeadPose of the last frame (None before the first).
        last_features: (NUM_FEATURES,) float64 measurements of the last frame,
            indexed by :class:`Feature` (None before the first).
    """

    def __init__(self, config: GeometricSolverConfig | None = None) -> None:
        self.config = config or GeometricSolverConfig()
        self._auto = RunningPercentiles(
            _AUTO_PERCENTILES,
            warmup_s=self.config.warmup_s,
            slow_interval_s=self.config.slow_interval_s,
        )
        self._auto_closed = RunningPercentiles(
            np.full(len(_CLOSED_MOUTH_FEATURES), 50.0),
            warmup_s=self.config.warmup_s,
            slow_interval_s=self.config.slow_interval_s,
        )
        self._fits = None
        self._jaw_fits = None
        regions = _regions()
        n_mouth, n_brow = regions.n_mouth, regions.n_brow + regions.n_anchor
        self._n_mouth = n_mouth
        self._auto_region = RunningPercentiles(  # brows (and the mouth until the lips touch)
            np.full(3 * (n_mouth + n_brow), 50.0), warmup_s=self.config.warmup_s,
            slow_interval_s=self.config.slow_interval_s)
        self._auto_region_closed = RunningPercentiles(  # the mouth over frames whose lips touch
            np.full(3 * n_mouth, 50.0), warmup_s=self.config.closed_warmup_s,
            slow_interval_s=self.config.closed_slow_interval_s)
        self.reset()

    # -- FaceReconstructor --------------------------------------------------

    def reset(self) -> None:
        """Forget the user: neutral face, running calibration, last time."""
        self._neutral: NeutralFace | None = None
        self._pose_fitter: HeadPoseFitter | None = None
        self._explicit_ref: np.ndarray | None = None
        self._auto.reset()
        self._auto_closed.reset()
        self._auto_region.reset()
        self._auto_region_closed.reset()
        self._explicit_region: np.ndarray | None = None
        self._ref: np.ndarray | None = None  # the automatic rest values, until a sample is kept
        self._region_ref: np.ndarray | None = None  # ... and rest positions of the fitted points
        self._closed_t0: float | None = None  # the first closed-mouth frame kept in the rest
        self._closed_last_t: float | None = None  # ... and the last
        self._last_corner_shape: float | None = None  # the largest corner shape of the last frame
        self._last_t_s: float | None = None
        self._eye_angles = np.zeros((2, 2))  # (yaw, pitch) x (right eye, left eye), radians
        self._asym_since: float | None = None  # when one eye began to be clearly more closed
        self.last_pose: HeadPose | None = None
        self.last_features: np.ndarray | None = None

    def calibrate_neutral(self, landmarks: Landmarks) -> None:
        """Take these landmarks as the user's neutral face (treated as facing the camera).

        Args:
            landmarks: (478, 3) points of a relaxed face, eyes open, mouth
                closed, looking at the screen.

        Raises:
            InputError: invalid landmarks.
        """
        check_landmarks(landmarks)
        self._neutral = make_neutral_face(
            landmarks, ipd_m=self.config.ipd_m, hfov_deg=self.config.hfov_deg
        )
        # the calibration frame seen through the same fit as every later frame
        points = estimate_head_pose(landmarks, self._neutral, self.config.hfov_deg).points_m
        self._explicit_ref = measure_features(points)
        self._explicit_region = _region_points(points)

    @property
    def neutral(self) -> NeutralFace | None:
        """The head-pose reference (explicit, or automatic from the first frame)."""
        return self._neutral

    @property
    def is_calibrated(self) -> bool:
        """Whether an explicit neutral was given (else the running estimate is used)."""
        return self._explicit_ref is not None

    def reconstruct(self, landmarks: Landmarks, t_s: float) -> FaceParams:
        """Blendshapes, head pose and gaze of one frame.

        Args:
            landmarks: (478, 3) image-normalised points of the tracked face.
            t_s: frame time, seconds; strictly increasing across calls.

        Returns:
            FaceParams (blendshapes (52,) float32 in [0, 1]; rotation (3, 3);
            translation (3,) metres; gaze (yaw, pitch) radians; identity (0,)).

        Raises:
            InputError: invalid landmarks or time.
            TrackingError: ``t_s`` does not increase.
        """
        check_landmarks(landmarks)
        t = float(t_s)
        if not math.isfinite(t):
            raise InputError(f"frame time must be finite, got {t_s}")
        if self._last_t_s is not None and not t > self._last_t_s:
            raise TrackingError(
                f"frame times must strictly increase: got {t} s after {self._last_t_s} s"
            )
        self._last_t_s = t
        if self._neutral is None:
            self._neutral = make_neutral_face(
                landmarks, self.config.ipd_m, level_yaw_roll=True, hfov_deg=self.config.hfov_deg
            )
        if self._pose_fitter is None or self._pose_fitter.neutral is not self._neutral:
            self._pose_fitter = HeadPoseFitter(self._neutral, self.config.hfov_deg)
        pose = self._pose_fitter.fit(landmarks)  # estimate_head_pose, precomputed for this neutral
        feats = measure_features(pose.points_m)
        if self._explicit_ref is not None:
            ref = self._explicit_ref
        else:
            ref = self._auto_reference(feats, t)
        self.last_pose = pose
        self.last_features = feats
        weights, gaze = self._solve(feats, ref)
        if self.config.fit_shapes:
            self._fit_regions(pose.points_m, feats, t, weights)
        return FaceParams(
            blendshapes=weights,
            rotation=pose.rotation,
            translation=pose.translation,
            gaze=gaze,
            identity=np.zeros(0, np.float32),
        )

    def _auto_reference(self, feats: np.ndarray, t: float) -> np.ndarray:
        """Rest values from the running percentiles (automatic calibration)."""
        c = self.config
        kept = self._auto.update(feats, t)
        if feats[Feature.LIP_GAP] < c.lips_closed_gap_m:
            kept = self._auto_closed.update(feats[_CLOSED_MOUTH_FEATURES], t) or kept
        if not kept and self._ref is not None:
            return self._ref  # no new sample: the rest values are those of the last frame
        ref = self._auto.value.copy()
        if self._auto_closed.value is not None:
            ref[_CLOSED_MOUTH_FEATURES] = self._auto_closed.value
        # Touching lips have no gap, whoever the user is: a mouth open from the
        # first frame must not become the "closed" reference.
        ref[Feature.LIP_GAP] = min(ref[Feature.LIP_GAP], c.lips_closed_gap_m)
        # An eye that was shut through much of the first seconds (a wink, a squint) must
        # not become "open": a person's two eyes open about equally wide, and no open eye
        # is narrower than eye_open_min (London neutral photos: 0.25 +- 0.03, here -2 sd).
        e = ref[_EYES]
        ref[_EYES] = np.maximum(np.maximum(e, c.eye_ref_symmetry * e[::-1]), c.eye_open_min)
        self._ref = ref
        return ref

    # -- the fitted regions -------------------------------------------------

    def _fit_regions(self, points_m: np.ndarray, feats: np.ndarray, t: float, w: np.ndarray) -> None:
        """Replace the mouth and brow weights by the face-model fit (``shape_fit``), in place."""
        if self._fits is None:
            from avatar_app.reconstruction.shape_fit import default_fits

            self._fits = default_fits()
        pts = _region_points(points_m)
        if self._explicit_region is not None:
            ref = self._explicit_region
        else:
            ref = self._region_reference(pts, feats, t)
        r = _regions()
        d = pts - ref
        # Measured from the nose ridge: the forehead and the bridge between the brows, part of
        # the head-pose fit, move with the brows and shift the whole head frame a little.
        d = d[:-r.n_anchor] - d[-r.n_anchor:].sum(0) / r.n_anchor
        chin_jaw = float(w[Blendshape.jawOpen])
        mouth, brow = self._fits  # their points are the mouth and the brow rows of d, in order
        w[mouth.shapes] = mouth.solve_points(d[:r.n_mouth])
        w[brow.shapes] = brow.solve_points(d[r.n_mouth:])
        if self.config.jaw_from_chin:
            self._hold_jaw(d[:r.n_mouth], chin_jaw, w)
        self._last_corner_shape = max(w[_CORNER_SHAPES].tolist())  # float(ndarray.max()), in Python

    def _hold_jaw(self, d: np.ndarray, chin_jaw: float, w: np.ndarray) -> None:
        """Hold jawOpen at least as open as the chin shows; refit the other mouth shapes around it, in place.

        The jaw bone: lips closed on an open jaw (/p b m/) must not read as a closed jaw. Two
        readings of the chin, each a lower bound of jawOpen:

        1. its drop below the nose ridge (the fit's anchor), ``jaw_range_m`` per unit: the other
           mouth shapes are fitted again to what that jaw leaves (``shape_fit.jaw_fixed_fits``),
           so mouthClose closes the extra opening and the corners stay where the face has them;
        2. the chin-to-bridge distance (``chin_jaw``, the jaw of :meth:`_solve`): what it shows
           beyond that is refitted with mouthUpperUp held as fitted. That distance also grows
           when a smile stretches the face (a London smiling still: 0.12 of jawOpen, 0.07 when
           the photo is turned 12 degrees), and refitted freely it came back as mouthUpperUp
           0.37 / 0.20 (the face model's mouthClose lowers the upper lip, which a raised upper
           lip undid; tests/reconstruction/test_reconstruction_relations.py).

        Adding the extra opening to mouthClose alone (before) raised the corners 0.025 eye spans
        per unit of it (the face model's jawOpen and mouthClose both lift them): pooled
        corner-height r 0.893 -> 0.9005 with the corner-height weight 9 (benchmarks/fidelity.py),
        lip gap 0.9706 -> 0.9692, GRID jaw in words unchanged.

        Args:
            d: (n_mouth, 3) float64 displacements of the mouth points from the rest, metres.
            chin_jaw: jawOpen from the chin-to-bridge distance.
            w: (52,) float32 weights with the mouth fitted; updated.
        """
        if self._jaw_fits is None:
            from avatar_app.reconstruction.shape_fit import jaw_fixed_fits

            self._jaw_fits = jaw_fixed_fits()
        free, held = self._jaw_fits
        r = _regions()
        jaw = _jaw_offsets()
        drop = min(max(-float(d[r.chin, 1]) / self.config.jaw_range_m, 0.0), 1.0)
        if drop > w[Blendshape.jawOpen]:
            w[Blendshape.jawOpen] = drop
            w[free.shapes] = free.solve_points(d - drop * jaw)
        if chin_jaw > w[Blendshape.jawOpen]:
            w[Blendshape.jawOpen] = chin_jaw
            up, up_off = _upper_up_offsets()
            # np.tensordot(w[up], up_off, 1) is this dot of (1, 2) by (2, 3 n_mouth), without its ~10 us of
            # reshaping in Python: the same call on the same arrays, the same bits
            lifted = np.dot(w[up].astype(np.float64).reshape(1, 2), up_off.reshape(2, -1)).reshape(d.shape)
            w[held.shapes] = held.solve_points(d - chin_jaw * jaw - lifted)

    def _region_reference(self, pts: np.ndarray, feats: np.ndarray, t: float) -> np.ndarray:
        """The user's rest position of the fitted points (automatic calibration).

        Brows: running medians. Mouth: running medians over frames whose lips touch
        (``closed_warmup_s``, ``closed_slow_interval_s``), or, before the first such frame,
        over all frames with their jaw opening taken out (:func:`_close_rest_mouth`).
        """
        c = self.config
        n = self._n_mouth
        kept = self._auto_region.update(pts.reshape(-1), t)
        if feats[Feature.LIP_GAP] < c.lips_closed_gap_m and self._rest_like(t):
            if self._closed_t0 is None:
                self._closed_t0 = t
            if self._auto_region_closed.update(pts[:n].reshape(-1), t):
                kept, self._closed_last_t = True, t
        if not kept and self._region_ref is not None:
            return self._region_ref  # no new sample: the rest positions are those of the last frame
        ref = self._auto_region.value.reshape(-1, 3).copy()
        if self._auto_region_closed.value is not None:
            ref[:n] = self._auto_region_closed.value.reshape(-1, 3)
        else:
            _close_rest_mouth(ref)
        if c.corner_prior_samples > 0:
            self._corner_prior(ref, self._auto_region_closed.count)
        self._region_ref = ref
        return ref

    def _rest_like(self, t: float) -> bool:
        """Whether this frame's closed mouth may enter the rest mouth (``closed_rest_max_shape``).

        True during the closed-mouth warm-up, once ``closed_rest_force_s`` have passed since the
        last sample, and while the last frame's largest corner shape is at most the threshold
        (the last frame's: this one's weights are fitted against the rest being chosen).
        """
        c = self.config
        if c.closed_rest_max_shape is None or self._last_corner_shape is None:
            return True
        if self._closed_t0 is None or t - self._closed_t0 < c.closed_warmup_s:
            return True
        if self._closed_last_t is not None and t - self._closed_last_t >= c.closed_rest_force_s:
            return True
        return self._last_corner_shape <= c.closed_rest_max_shape

    def _corner_prior(self, ref: np.ndarray, n_closed: int) -> None:
        """Narrow and lower a rest mouth wider or higher-cornered than a typical neutral one, in place.

        With few frames of this user's closed mouth (a still, the first second), its own rest
        corners are whatever it shows, a smile included; a rest mouth at most
        ``corner_prior_width_m`` wide (about the inner lips' midline) with corners at most
        ``corner_prior_height_m`` and at least ``corner_prior_low_m`` above the inner lips'
        midpoint is a better guess. The prior
        weighs as ``corner_prior_samples`` closed-mouth frames: a shrinkage estimate that the
        user's own frames take over within a second.

        Args:
            ref: (P, 3) float64 rest positions of the fitted points (mouth rows first), metres.
            n_closed: closed-mouth frames of this user seen so far.
        """
        c = self.config
        r = _regions()
        mid_x = 0.5 * (ref[r.inner_up, 0] + ref[r.inner_lo, 0])
        k = c.corner_prior_samples / (n_closed + c.corner_prior_samples)
        mid_y = 0.5 * (ref[r.inner_up, 1] + ref[r.inner_lo, 1])
        for row, side in ((r.corner_r, -1.0), (r.corner_l, 1.0)):
            half = min(side * (ref[row, 0] - mid_x), 0.5 * c.corner_prior_width_m)  # only ever narrower
            ref[row, 0] = (1.0 - k) * ref[row, 0] + k * (mid_x + side * half)
            if c.corner_prior_height_m is not None:  # only ever lower
                ref[row, 1] = (1.0 - k) * ref[row, 1] + k * min(ref[row, 1], mid_y + c.corner_prior_height_m)
            if c.corner_prior_low_m is not None:  # ... and never below the lowest typical neutral
                ref[row, 1] = (1.0 - k) * ref[row, 1] + k * max(ref[row, 1], mid_y + c.corner_prior_low_m)

    # -- the mapping --------------------------------------------------------

    def _blink_link(self, blink: np.ndarray) -> float:
        """Coupling of the eyes this frame: ``blink_onset_link`` while one eye has been clearly
        more closed than the other for less than ``blink_onset_s`` (the eyes of a blink close a
        frame or two apart), ``blink_link`` once the difference is held (a wink)."""
        c = self.config
        t = self._last_t_s if self._last_t_s is not None else 0.0
        b0, b1 = map(float, blink)  # (R, L); Python floats: the same comparisons without numpy scalars
        if max(b0, b1) > 0.5 and abs(b0 - b1) > 0.3:
            if self._asym_since is None:
                self._asym_since = t
            return c.blink_onset_link if t - self._asym_since < c.blink_onset_s else c.blink_link
        self._asym_since = None
        return c.blink_link

    def _solve(self, f: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(52,) float32 weights and (2,) float32 gaze from the features and their rest values.

        With ``fit_shapes`` the mouth and brow weights are left to :meth:`_fit_regions`
        (which replaces every one of them), except jawOpen: the chin's, the fit's lower bound.
        """
        c = self.config
        d = f - ref
        w = np.zeros(NUM_BLENDSHAPES, dtype=np.float64)
        # The eyes' and the gaze's few values as Python floats: the same IEEE operations as numpy's
        # elementwise ones (np.clip(x, 0, 1) is min(1, max(0, x)) and np.maximum(a, b) max(a, b) for
        # values without NaN, the inputs being finite), without numpy's per-call cost; arcsin stays
        # numpy's. Bit-identical to the array code (tests/reconstruction/test_reconstruction_fast_paths.py).
        er, el = f[_EYES].tolist()
        rr, rl = ref[_EYES].tolist()

        # Eyes: aperture relative to the open eye.
        ratio = (er / max(rr, 1e-6), el / max(rl, 1e-6))
        span = c.blink_start_ratio - c.blink_full_ratio
        b0, b1 = (min(1.0, max(0.0, (c.blink_start_ratio - r) / span)) for r in ratio)
        link = self._blink_link((b0, b1))
        l0, l1 = max(b0, min(b1, link * b0)), max(b1, min(b0, link * b1))
        w[_BLINK_OUT[0]], w[_BLINK_OUT[1]] = l0, l1
        wide = c.wide_full_ratio - c.wide_start_ratio
        w[_WIDE_OUT[0]], w[_WIDE_OUT[1]] = (_soft_ramp((r - c.wide_start_ratio) / wide, c.wide_knee)
                                            for r in ratio)

        # Gaze: iris displacement on an eyeball of known radius. A closing lid
        # hides the iris, so each eye keeps its previous angles in proportion
        # to its blink weight.
        (m0, m1), (m2, m3) = np.arcsin(_CLIP(d[_IRIS] * (1.0 / EYEBALL_RADIUS_M), -1.0, 1.0)).tolist()
        (p0, p1), (p2, p3) = self._eye_angles.tolist()  # (yaw, pitch) x (R, L)
        yaw = ((1.0 - l0) * m0 + l0 * p0, (1.0 - l1) * m1 + l1 * p1)
        pitch = ((1.0 - l0) * m2 + l0 * p2, (1.0 - l1) * m3 + l1 * p3)
        self._eye_angles = np.array([yaw, pitch])
        # the rows' means as np.add.reduce sums a row of two (a + (0 + b)), then halved
        gaze = np.array([(yaw[0] + (0.0 + yaw[1])) / 2, (pitch[0] + (0.0 + pitch[1])) / 2], np.float32)
        hy = (yaw[0] / c.gaze_yaw_full_rad, yaw[1] / c.gaze_yaw_full_rad)
        vp = (pitch[0] / c.gaze_pitch_full_rad, pitch[1] / c.gaze_pitch_full_rad)
        # +yaw = toward the subject's left: "out" for the left eye, "in" for the right eye.
        for k, v in zip(_LOOK_OUT.tolist(), (hy[0], hy[1], -hy[0], -hy[1], vp[0], vp[1], -vp[0], -vp[1])):
            w[k] = min(1.0, max(0.0, v))

        # Jaw and lips (scalars: Python floats, the same IEEE arithmetic as numpy's, without its
        # per-call cost).
        dl = d.tolist()
        jaw = _clip01(dl[Feature.CHIN] / c.jaw_range_m)
        w[Blendshape.jawOpen] = jaw
        if not c.fit_shapes:
            self._solve_mouth_brows(dl, float(ref[Feature.MOUTH_WIDTH]), jaw, w)
        return w.astype(np.float32), gaze

    def _solve_mouth_brows(self, d: list[float], ref_width: float, jaw: float, w: np.ndarray) -> None:
        """The mouth and brow weights from single features (``fit_shapes`` off), into ``w``."""
        c = self.config
        B = Blendshape
        lips_open = _clip01(d[Feature.LIP_GAP] / c.lip_range_m)
        w[B.mouthClose] = _clip01(jaw - lips_open)
        narrow = _clip01((-d[Feature.MOUTH_WIDTH] / max(ref_width, 1e-6) - c.narrow_start) / c.narrow_range)
        rounded = _clip01(d[Feature.LIP_GAP] / c.funnel_gap_m)
        w[B.mouthFunnel] = narrow * rounded
        w[B.mouthPucker] = narrow * (1.0 - rounded)
        for lift_f, pull_f, smile, frown in (
            (Feature.CORNER_Y_R, Feature.CORNER_X_R, B.mouthSmileRight, B.mouthFrownRight),
            (Feature.CORNER_Y_L, Feature.CORNER_X_L, B.mouthSmileLeft, B.mouthFrownLeft),
        ):
            lift, pull = d[lift_f], d[pull_f]
            w[smile] = _clip01((lift + 0.5 * pull) / c.smile_range_m)
            w[frown] = _clip01(-lift / c.frown_range_m)
        inner = 0.5 * (d[Feature.BROW_INNER_R] + d[Feature.BROW_INNER_L])
        w[B.browInnerUp] = _clip01(inner / c.brow_up_range_m)
        w[B.browDownRight] = _clip01(-d[Feature.BROW_R] / c.brow_down_range_m)
        w[B.browDownLeft] = _clip01(-d[Feature.BROW_L] / c.brow_down_range_m)
        w[B.browOuterUpRight] = _clip01(d[Feature.BROW_OUTER_R] / c.brow_up_range_m)
        w[B.browOuterUpLeft] = _clip01(d[Feature.BROW_OUTER_L] / c.brow_up_range_m)
