"""Head pose from MediaPipe landmarks by a rigid fit to the user's neutral face.

Coordinate frames
-----------------
*Camera space* (the project's contract, DESIGN.md): right-handed, metres,
x to the image's right, y up, the camera looks down -Z, so a face in front of
the camera has negative z.

*Pixel space* (internal): MediaPipe's x, y are image-normalised with y down and
z is a relative depth "in roughly the same scale as x" (negative = nearer the
camera). :func:`landmarks_to_pixel_space` flips y and z so that pixel space is
right-handed like camera space: x right, y up, z toward the camera, in pixels,
origin at the image centre.

*Head frame*: the user's neutral face in metres, origin at the centroid of the
stable landmarks (:data:`~avatar_app.core.landmarks.STABLE`). The
neutral face is treated as facing the camera, so its axes are the camera's:
+x toward the subject's left, +y up, +z out of the face toward the camera.

Angles
------
``rotation`` maps head-frame directions into camera space; its yaw, pitch and
roll follow the project's one convention (:mod:`avatar_app.core.rotations`:
``R = Ry(yaw) @ Rx(-pitch) @ Rz(roll)``, yaw > 0 = the subject turns to their
own left, pitch > 0 = looks up, roll > 0 = tilts toward the right shoulder).

Scale
-----
Metric size comes from one anthropometric figure: the mean adult
interpupillary distance, 63 mm (N. A. Dodgson, "Variation and extrema of
human interpupillary distance", Proc. SPIE 5291, 2004: mean 63 mm, s.d.
~3.5 mm), measured between the iris centres of the neutral face. Distance
from the camera follows from a pinhole camera with an assumed horizontal field
of view of 60 degrees (a typical webcam); both are parameters (defaults in
:mod:`avatar_app.core.landmarks`). Each landmark
is then un-projected at its own depth (pinhole camera), so the perspective
magnification of near points (the nose at webcam distance) is not read as
shape change.

Rigid fit: Kabsch (1976) with Umeyama's (1991) scale,
:func:`avatar_app.core.rotations.rigid_fit`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from avatar_app.core import landmarks as lmk
from avatar_app.core.errors import InputError
from avatar_app.core.landmarks import DEFAULT_HFOV_DEG, MEAN_IPD_M, focal_length_px
from avatar_app.core.rotations import rigid_fit, svd3
from avatar_app.core.types import Landmarks

_STABLE = np.array(lmk.STABLE, dtype=np.intp)
_STABLE_WEIGHTS = lmk.STABLE_WEIGHTS


@dataclass(frozen=True)
class NeutralFace:
    """The user's neutral face: the reference shape of the head frame.

    Attributes:
        points_m: (478, 3) float32, the neutral landmarks in the head frame,
            metres (origin at the stable-landmark centroid, +y up, +z toward
            the camera).
        ipd_m: the interpupillary distance assumed for the scale, metres.
    """

    points_m: np.ndarray
    ipd_m: float = MEAN_IPD_M


@dataclass(frozen=True)
class HeadPose:
    """Result of :func:`estimate_head_pose`.

    Attributes:
        rotation: (3, 3) float32, head frame -> camera space, right-handed.
        translation: (3,) float32, camera-space position of the head-frame
            origin in metres (z < 0 in front of the camera).
        points_m: (478, 3) float32, this frame's landmarks expressed in the
            head frame (pose removed), metres; compare with ``NeutralFace.points_m``.
        px_per_m: image scale of the face, pixels per metre.
        rms_px: root-mean-square residual of the fit over the stable landmarks, pixels.
    """

    rotation: np.ndarray
    translation: np.ndarray
    points_m: np.ndarray
    px_per_m: float
    rms_px: float


def check_landmarks(landmarks: Landmarks) -> np.ndarray:
    """Validate a Landmarks value and return its points.

    Args:
        landmarks: one face's landmarks.

    Returns:
        (478, 3) float32 points, as stored.

    Raises:
        InputError: not a Landmarks, wrong shape, non-finite values or a bad image size.
    """
    if not isinstance(landmarks, Landmarks):
        raise InputError(f"expected Landmarks, got {type(landmarks).__name__}")
    pts = np.asarray(landmarks.points)
    if pts.shape != (lmk.NUM_LANDMARKS, 3):
        raise InputError(
            f"face landmarks must have shape ({lmk.NUM_LANDMARKS}, 3) (MediaPipe face mesh with "
            f"irises), got {pts.shape}"
        )
    if not np.isfinite(pts).all():
        raise InputError("face landmarks contain NaN or infinite values")
    w, h = landmarks.image_size
    if w <= 0 or h <= 0:
        raise InputError(f"landmarks carry an invalid image size {landmarks.image_size}")
    return pts


_PIXEL_SHIFT = np.array([0.5, 0.5, 0.0])
_PIXEL_SHIFT_FLAT = np.tile(_PIXEL_SHIFT, lmk.NUM_LANDMARKS)
_XYZ = np.tile(np.arange(3), lmk.NUM_LANDMARKS)  # (1434,) the coordinate of each flat entry
_POINT = np.repeat(np.arange(lmk.NUM_LANDMARKS), 3)  # (1434,) the point of each flat entry


def landmarks_to_pixel_space(landmarks: Landmarks) -> np.ndarray:
    """Convert MediaPipe landmarks to a right-handed pixel space.

    Args:
        landmarks: one face; points (478, 3) image-normalised (y down, z relative
            depth in x's scale, negative = nearer).

    Returns:
        (478, 3) float64 in pixels, origin at the image centre: x right, y up,
        z toward the camera.

    Raises:
        InputError: invalid landmarks.
    """
    out = check_landmarks(landmarks).astype(np.float64)  # a new array, scaled in place
    # per column (x - 0.5) w, (0.5 - y) h = (y - 0.5) (-h), -z w = (z - 0) (-w): the same roundings,
    # on the flat array against the (shift, scale) repeated per point: one inner loop, not 478
    flat = out.reshape(-1)
    flat -= _PIXEL_SHIFT_FLAT
    flat *= _pixel_scale(landmarks.image_size)
    return out


_PIXEL_SCALES: dict[tuple[int, int], np.ndarray] = {}


def _pixel_scale(image_size: tuple[int, int]) -> np.ndarray:
    """(1434,) float64 read-only ``[w, -h, -w]`` repeated per point for an image size, made once per size."""
    w, h = image_size
    scale = _PIXEL_SCALES.get((w, h))
    if scale is None:
        scale = np.array([w, -h, -w], np.float64)[_XYZ]
        scale.flags.writeable = False
        if len(_PIXEL_SCALES) < 64:
            _PIXEL_SCALES[(w, h)] = scale
    return scale


def _minimal_rotation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(3, 3) rotation turning unit vector ``a`` onto ``b`` about ``a x b`` (Rodrigues)."""
    v = np.cross(a, b)
    c = float(np.dot(a, b))
    s = float(np.linalg.norm(v))
    if s < 1e-12:
        return np.eye(3)  # parallel (a face turned by 180 degrees is not a face)
    k = v / s
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + s * kx + (1 - c) * kx @ kx


def _unproject(p: np.ndarray, px_per_m: float, z_ref_px: float, f_px: float) -> np.ndarray:
    """Camera-space metres of pixel-space points under a pinhole camera.

    A point's depth is the reference depth ``f / px_per_m`` minus its relative
    depth (``(z_px - z_ref_px) / px_per_m``, MediaPipe's z in x's scale); its
    x, y are the image offsets scaled by depth / f. This undoes the perspective
    magnification of near points (a nose 5 cm nearer than the cheeks at 0.5 m
    looks 10 % larger) that a weak-perspective fit would read as expression.
    """
    depth = f_px / px_per_m - (p[:, 2] - z_ref_px) / px_per_m
    out = np.empty_like(p)
    out[:, :2] = p[:, :2] * depth[:, None] / f_px  # x depth / f, y depth / f
    out[:, 2] = -depth
    return out


def make_neutral_face(
    landmarks: Landmarks,
    ipd_m: float = MEAN_IPD_M,
    level_yaw_roll: bool = False,
    hfov_deg: float = DEFAULT_HFOV_DEG,
) -> NeutralFace:
    """Build the head-frame reference shape from a neutral face.

    The neutral face is treated as facing the camera. With ``level_yaw_roll``
    (used for automatic calibration, when the user never said "this is my
    neutral") the face is first turned so that its left-right axis, from the
    symmetric stable landmarks, is parallel to camera x: this removes yaw and
    roll but keeps the camera's pitch.

    Args:
        landmarks: the neutral face (478 points).
        ipd_m: interpupillary distance used for the metric scale, metres
            (default: the adult mean, Dodgson 2004).
        level_yaw_roll: remove the face's own yaw and roll.
        hfov_deg: assumed horizontal field of view of the camera, degrees
            (for the perspective correction).

    Returns:
        The NeutralFace.

    Raises:
        InputError: invalid landmarks, non-positive ipd, bad field of view, or
            eyes that coincide.
    """
    if not ipd_m > 0:
        raise InputError(f"interpupillary distance must be positive, got {ipd_m}")
    p = landmarks_to_pixel_space(landmarks)
    f = focal_length_px(landmarks.image_size[0], hfov_deg)
    iris_r = p[lmk.FacePoint.RIGHT_IRIS_CENTER]
    iris_l = p[lmk.FacePoint.LEFT_IRIS_CENTER]
    ipd_px = float(np.linalg.norm(iris_l - iris_r))
    if ipd_px <= 1e-6:
        raise InputError("neutral face landmarks are degenerate (the two iris centres coincide)")
    pts = _unproject(p, ipd_px / ipd_m, 0.5 * (iris_l[2] + iris_r[2]), f)
    centroid = _STABLE_WEIGHTS @ pts[_STABLE] / _STABLE_WEIGHTS.sum()
    pts = pts - centroid
    if level_yaw_roll:
        left = np.array([a for a, _ in lmk.STABLE_SYMMETRIC_PAIRS])
        right = np.array([b for _, b in lmk.STABLE_SYMMETRIC_PAIRS])
        axis = (pts[left] - pts[right]).sum(axis=0)
        axis /= np.linalg.norm(axis)
        pts = pts @ _minimal_rotation(axis, np.array([1.0, 0.0, 0.0])).T
    return NeutralFace(points_m=pts.astype(np.float32), ipd_m=float(ipd_m))


def estimate_head_pose(
    landmarks: Landmarks,
    neutral: NeutralFace,
    hfov_deg: float = DEFAULT_HFOV_DEG,
    perspective: bool = True,
) -> HeadPose:
    """Head rotation and translation by a weighted fit of the stable landmarks.

    First a similarity fit ``pixel_space ~ c * R @ neutral + t`` (Umeyama
    1991; weak perspective): ``c`` is the face's image scale in pixels per
    metre, so its distance is ``f / c``. With ``perspective`` the landmarks are
    then un-projected with a pinhole camera at that distance, each point at its
    own depth, and the neutral is fitted again in metres; the fitted scale
    corrects the distance (the POSIT idea: D. DeMenthon, L. Davis, "Model-based
    object pose in 25 lines of code", IJCV 15, 1995). Un-projection is
    homogeneous in ``1 / c``, so one refinement is the fixed point.

    Args:
        landmarks: one face (478 points) of the current frame.
        neutral: the user's neutral face.
        hfov_deg: assumed horizontal field of view of the camera, degrees.
        perspective: refine with the pinhole model (else weak perspective only).

    Returns:
        The HeadPose (rotation head->camera, translation in metres, the frame's
        landmarks in the head frame).

    Raises:
        InputError: invalid landmarks or field of view.
    """
    p = landmarks_to_pixel_space(landmarks)
    f = focal_length_px(landmarks.image_size[0], hfov_deg)
    ref_s = neutral.points_m[_STABLE].astype(np.float64)
    rot, t, c = rigid_fit(ref_s, p[_STABLE], _STABLE_WEIGHTS, with_scale=True)
    if not c > _MIN_PX_PER_M:
        raise InputError("face landmarks are degenerate (zero size)")
    if perspective:
        cam = _unproject(p, c, float(t[2]), f)
        rot, trans, scale = rigid_fit(ref_s, cam[_STABLE], _STABLE_WEIGHTS, with_scale=True)
        c *= scale  # the scene looked `scale` times the neutral's size: it is that much nearer
        trans = trans / scale
        points_m = ((cam / scale - trans) @ rot)
        resid_m = points_m[_STABLE] - ref_s
        rms_px = float(np.sqrt(np.mean(np.einsum("ij,ij->i", resid_m, resid_m)))) * c
    else:
        trans = np.array([t[0] / c, t[1] / c, -f / c])
        points_m = ((p - t) @ rot) / c
        resid = p[_STABLE] - (c * ref_s @ rot.T + t)
        rms_px = float(np.sqrt(np.mean(np.einsum("ij,ij->i", resid, resid))))
    return HeadPose(
        rotation=rot.astype(np.float32),
        translation=np.asarray(trans, dtype=np.float32),
        points_m=points_m.astype(np.float32),
        px_per_m=float(c),
        rms_px=rms_px,
    )


#: Image scales at or below this (pixels per metre) are a degenerate face: all points in one spot give
#: a scale of rounding noise (~1e-27), not exactly 0; a real face is 10^3-10^4 px/m.
_MIN_PX_PER_M = 1e-9
_NO_REFLECT = np.ones(3)
_REFLECT = np.array([1.0, 1.0, -1.0])
def _det3(m: np.ndarray) -> float:
    """Determinant of a 3x3 matrix (its sign is what the reflection test needs), without LAPACK."""
    (a, b, c), (d, e, f), (g, h, i) = m.tolist()
    return a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)


class HeadPoseFitter:
    """:func:`estimate_head_pose` (with ``perspective``) for one neutral face, precomputed.

    The neutral's stable points are the source of both rigid fits of every frame, so
    their weighted centroid, centred coordinates and variance (Umeyama 1991, eqs. 34-36)
    are computed once here instead of twice per frame, and the 3x3 algebra of
    :func:`~avatar_app.core.rotations.rigid_fit` is done unbatched (the SVD by numpy's own
    LAPACK gufunc, without ``np.linalg.svd``'s wrapper). Same formulas; the results agree
    with :func:`estimate_head_pose` to rounding (1e-12 m,
    tests/reconstruction/test_reconstruction_fast_paths.py). The per-point arithmetic runs on
    the flat (1434,) arrays against constants repeated per point (one ufunc inner loop, not
    one per point), the same operations in the same order: the bytes of the fit as merged at
    ceffc40 (tests/reconstruction/test_reconstruction_frozen_calibration.py). Measured per
    frame on GRID + LivePortrait landmarks (1324 fits, A/B interleaved in one process, thread
    CPU time, 2-core dev VM, load average 6-7): p50 184 -> 117 us, p95 268 -> 185 us.

    Args:
        neutral: the user's neutral face.
        hfov_deg: assumed horizontal field of view of the camera, degrees.

    Thread: read-only after construction; :meth:`fit` may be called from any thread.
    """

    def __init__(self, neutral: NeutralFace, hfov_deg: float = DEFAULT_HFOV_DEG) -> None:
        self.neutral = neutral
        self.hfov_deg = float(hfov_deg)
        self._ref_s = neutral.points_m[_STABLE].astype(np.float64)
        self._w = _STABLE_WEIGHTS / _STABLE_WEIGHTS.sum()
        self._mu_s = self._w @ self._ref_s
        self._xs = self._ref_s - self._mu_s
        self._var_s = float(self._w @ np.einsum("ni,ni->n", self._xs, self._xs))
        if not self._var_s > 0:
            raise InputError("neutral face landmarks are degenerate (all stable points coincide)")
        self._wxs = self._xs * self._w[:, None]
        self._f_cache: tuple[int, float] = (-1, 0.0)

    def _similarity(self, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """``dst ~ s R ref + t`` (Kabsch-Umeyama) for the stable points ``dst`` (K, 3) float64."""
        mu_d = self._w @ dst
        cov = (dst - mu_d).T @ self._wxs  # sum_n w_n d_n s_n^T
        u, sig, vt = svd3(cov)
        if _det3(u) * _det3(vt) < 0:  # the reflection fix (Umeyama's S)
            rot = (u * _REFLECT) @ vt
            scale = float(sig @ _REFLECT) / self._var_s
        else:  # u * ones is u, bit for bit
            rot = u @ vt
            scale = float(sig @ _NO_REFLECT) / self._var_s
        return rot, mu_d - scale * (rot @ self._mu_s), scale

    def fit(self, landmarks: Landmarks) -> HeadPose:
        """The HeadPose of one frame, as ``estimate_head_pose(landmarks, neutral, hfov_deg)``.

        Args:
            landmarks: one face (478 points) of the current frame.

        Returns:
            The HeadPose.

        Raises:
            InputError: invalid landmarks or degenerate (zero-size) faces.
        """
        points_m, rot, trans, c = self.fit_arrays(landmarks)
        resid_m = points_m[_STABLE] - self._ref_s
        rms_px = math.sqrt(float(np.einsum("ij,ij->i", resid_m, resid_m).sum()) / len(resid_m)) * c
        return HeadPose(rotation=rot.astype(np.float32), translation=trans.astype(np.float32),
                        points_m=points_m.astype(np.float32), px_per_m=float(c), rms_px=rms_px)

    def fit_arrays(self, landmarks: Landmarks) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """:meth:`fit` in float64 and without the residual: what a caller that needs only the pose
        and the head-frame points pays for (the face_recon engine's alignment,
        :func:`avatar_app.reconstruction.engine.head_frame`).

        Args:
            landmarks: one face (478 points) of the current frame.

        Returns:
            ``(points_m (478, 3), rotation (3, 3), translation (3,), px_per_m)``: float64 arrays
            and a float, the values :meth:`fit` rounds to float32.

        Raises:
            InputError: invalid landmarks or degenerate (zero-size) faces.
        """
        p = landmarks_to_pixel_space(landmarks)
        width = landmarks.image_size[0]
        if self._f_cache[0] != width:
            self._f_cache = (width, focal_length_px(width, self.hfov_deg))
        f = self._f_cache[1]
        _, t, c = self._similarity(p[_STABLE])
        if not c > _MIN_PX_PER_M:
            raise InputError("face landmarks are degenerate (zero size)")
        # _unproject(p, c, t[2], f), its roundings in fewer calls: columns 0, 1 are (p depth) / f
        # (flat, against depth repeated per coordinate: one inner loop instead of one per point)
        depth = f / c - (p[:, 2] - float(t[2])) / c
        cam = p.reshape(-1) * depth[_POINT]
        cam /= f
        cam = cam.reshape(p.shape)
        np.negative(depth, out=cam[:, 2])
        rot, trans, scale = self._similarity(cam[_STABLE])
        c *= scale
        trans = trans / scale
        flat = cam.reshape(-1)  # (cam / scale - trans) @ rot, in place, flat
        flat /= scale
        flat -= trans[_XYZ]
        return cam @ rot, rot, trans, float(c)
