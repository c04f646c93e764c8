"""Rotations: the project's one yaw/pitch/roll convention, quaternions, gaze, fits.

Frames (DESIGN.md "Contracts")
------------------------------
Rotations are (3, 3) matrices acting on column vectors. Camera space is
right-handed, metres, x to the image's right, y up, the camera looks down -Z.
A head (or avatar) in its rest pose faces the camera, i.e. +Z, so its own left
is +X and its model axes are the camera's (glTF's model convention too: +Y up,
front +Z). A head rotation maps head-frame directions into camera space.

Euler angles
------------
One convention for every head pose and gaze in the project (the tracker's head
pose, ``FaceParams.rotation``/``gaze``, the avatar's neck and eyes, the demo's
scripted face, idle motion)::

    R = Ry(yaw) @ Rx(-pitch) @ Rz(roll)        (intrinsic Y, then X', then Z'')

with ``Rx``, ``Ry``, ``Rz`` the right-handed elementary rotations
(:func:`rot_x`, :func:`rot_y`, :func:`rot_z`), angles in radians:

- yaw > 0: the subject turns to their own left (the nose moves toward +X);
- pitch > 0: the subject looks up (the nose moves toward +Y). This is the sign
  of ``FaceParams.gaze`` pitch (``core/types.py``: "positive pitch = up"), so a
  head pitch and an eye pitch mean the same thing; the right-handed turn about
  +X (the subject's left) tips the face *down*, hence ``Rx(-pitch)``;
- roll > 0: right-handed about +Z, the head tilts toward the subject's right
  shoulder (their left side goes up, counter-clockwise as the camera sees it).

Formats with another sign keep it at their own boundary: Live Link Face's
HeadPitch follows ARKit's right-handed face frame (pitch > 0 tips the face
down), so its writer negates pitch; Unity/VMC use quaternions
(:mod:`avatar_app.outputs.rotations` converts the axes).

The split of a matrix into the three angles follows K. Shoemake, "Euler angle
conversion", Graphics Gems IV, 1994 (pitch from the one matrix entry that holds
its sine alone; at the gimbal limit |pitch| = pi/2 only yaw -/+ roll is
defined, and roll is set to 0).

Quaternions are (x, y, z, w) arrays with w >= 0, the order of glTF and of
Unity/VMC.
"""
from __future__ import annotations

import math

import numpy as np

from avatar_app.core.arrays import all_finite
from avatar_app.core.errors import InputError

_GIMBAL_EPS = 1e-12
"""cos(pitch) below which yaw and roll are no longer separable (Shoemake 1994)."""


try:  # np.linalg.svd's own gufunc and error handling for one 3x3 float64 matrix, without its wrapper
    from numpy.linalg import _umath_linalg
    from numpy.linalg.linalg import _raise_linalgerror_svd_nonconvergence, get_linalg_error_extobj

    _SVD_EXTOBJ = get_linalg_error_extobj(_raise_linalgerror_svd_nonconvergence)

    def svd3(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``np.linalg.svd(a)`` of a (3, 3) float64 matrix: the same LAPACK gufunc call (numpy 1.x),
        bit-identical, without the wrapper's ~4 us of checks and wrapping.

        Args:
            a: (3, 3) float64 (not checked: callers pass finite float64 matrices).

        Returns:
            (u (3, 3), s (3,), vt (3, 3)) float64, as ``np.linalg.svd(a)``.

        Raises:
            numpy.linalg.LinAlgError: the SVD did not converge (as ``np.linalg.svd``).
        """
        return _umath_linalg.svd_n_f(a, signature="d->ddd", extobj=_SVD_EXTOBJ)
except (ImportError, AttributeError):  # numpy 2 moved these: the public call
    def svd3(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``np.linalg.svd(a)`` of a (3, 3) float64 matrix."""
        return np.linalg.svd(a)


def _check_matrix(rot: np.ndarray) -> np.ndarray:
    r = np.asarray(rot, np.float64)
    if r.shape != (3, 3) or not all_finite(r):
        raise InputError(f"a rotation must be a finite (3, 3) matrix; got shape {r.shape}")
    return r


def rot_x(angle_rad: float) -> np.ndarray:
    """Right-handed rotation by ``angle_rad`` radians about +X, (3, 3) float64."""
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]], np.float64)


def rot_y(angle_rad: float) -> np.ndarray:
    """Right-handed rotation by ``angle_rad`` radians about +Y, (3, 3) float64."""
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]], np.float64)


def rot_z(angle_rad: float) -> np.ndarray:
    """Right-handed rotation by ``angle_rad`` radians about +Z, (3, 3) float64."""
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], np.float64)


def rotation_from_euler(yaw_rad: float, pitch_rad: float, roll_rad: float) -> np.ndarray:
    """Rotation ``Ry(yaw) @ Rx(-pitch) @ Rz(roll)`` (the convention of the module docstring).

    Args:
        yaw_rad: positive = the subject turns to their own left (about +Y), radians.
        pitch_rad: positive = the subject looks up, radians.
        roll_rad: positive = the head tilts toward the subject's right shoulder (about +Z), radians.

    Returns:
        (3, 3) float64 rotation matrix, head frame -> camera space.
    """
    return rot_y(yaw_rad) @ rot_x(-pitch_rad) @ rot_z(roll_rad)


def euler_from_rotation(rotation: np.ndarray) -> tuple[float, float, float]:
    """Split a rotation into (yaw, pitch, roll), the inverse of :func:`rotation_from_euler`.

    Args:
        rotation: (3, 3) float rotation matrix, head frame -> camera space (not
            re-orthonormalised: pass :func:`nearest_rotation` of a noisy one).

    Returns:
        ``(yaw_rad, pitch_rad, roll_rad)``: yaw and roll in (-pi, pi], pitch in
        [-pi/2, pi/2]. At the gimbal limit (|pitch| = pi/2) roll is 0 and yaw
        carries the whole turn about the vertical.

    Raises:
        InputError: not a finite (3, 3) matrix.
    """
    return euler_from_rows(_check_matrix(rotation).tolist())


def euler_from_rows(rows: list[list[float]]) -> tuple[float, float, float]:
    """:func:`euler_from_rotation` of a rotation given as its rows of Python floats (``m.tolist()``
    of a finite (3, 3) float32 or float64 matrix: the doubles ``_check_matrix(m).tolist()`` gives,
    float32 widening exactly), without the array check (~3 us) for callers that know the matrix
    is finite and (3, 3).

    Args:
        rows: three rows of three floats.

    Returns:
        ``(yaw_rad, pitch_rad, roll_rad)`` as :func:`euler_from_rotation`.
    """
    (r00, r01, r02), (r10, r11, r12), (_, _, r22) = rows
    # R[1, :] = (cos p' sin r, cos p' cos r, -sin p') with p' = -pitch (see the module docstring)
    cos_p = math.hypot(r10, r11)
    pitch = math.atan2(r12, cos_p)
    if cos_p > _GIMBAL_EPS:
        return math.atan2(r02, r22), pitch, math.atan2(r10, r11)
    # gimbal lock: R[0, 0] = cos(yaw -/+ roll), R[0, 1] = -/+ sin(yaw -/+ roll); take roll = 0
    return math.atan2(-math.copysign(1.0, r12) * r01, r00), pitch, 0.0


def gaze_rotation(yaw_rad: float, pitch_rad: float) -> np.ndarray:
    """Eye rotation, relative to the head, for a gaze as ``FaceParams.gaze`` gives it.

    Args:
        yaw_rad: positive turns the eye toward the subject's left (+X), radians.
        pitch_rad: positive turns it up (+Y), radians.

    Returns:
        (3, 3) float64 ``Ry(yaw) @ Rx(-pitch)`` (:func:`rotation_from_euler` with
        no roll), taking +Z to (sin(yaw) cos(pitch), sin(pitch), cos(yaw) cos(pitch)).
    """
    return rotation_from_euler(yaw_rad, pitch_rad, 0.0)


def nearest_rotation(m: np.ndarray) -> np.ndarray:
    """Nearest proper rotation (det +1, Frobenius norm) to a (3, 3) matrix.

    The orthogonal polar factor from the SVD ``m = U S V^T``: ``U V^T``, with the
    last column of U negated when that would be a reflection (B. K. P. Horn,
    H. M. Hilden, S. Negahdaripour, "Closed-form solution of absolute
    orientation using orthonormal matrices", JOSA A 5(7), 1988).

    Args:
        m: (3, 3) float matrix (a smoothed or slightly drifted rotation).

    Returns:
        (3, 3) float64 proper rotation.

    Raises:
        InputError: not a finite (3, 3) matrix.
    """
    u, _, vt = svd3(_check_matrix(m))  # np.linalg.svd's LAPACK call, without its wrapper
    q = u @ vt
    # det(q) < 0 (q is orthogonal: its determinant is +-1 to rounding, so the sign of the
    # triple product is that of numpy's LU determinant; ~1 us instead of ~6)
    (a, b, c), (d, e, f), (g, h, i) = q.tolist()
    if a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g) < 0:
        u[:, -1] *= -1
        q = u @ vt
    return q


def quat_from_matrix(rot: np.ndarray) -> np.ndarray:
    """Unit quaternion of a rotation matrix (Shepperd's method).

    Args:
        rot: (3, 3) rotation matrix (re-orthonormalised first, :func:`nearest_rotation`).

    Returns:
        (4,) float64 (x, y, z, w) with w >= 0.

    Raises:
        InputError: not a finite (3, 3) matrix.

    Source: S. W. Shepperd, "Quaternion from rotation matrix", J. Guidance and
    Control 1(3), 1978 (largest-diagonal branch for numerical stability).
    """
    m = nearest_rotation(rot)
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = [0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s]
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = [(m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s]
    else:
        s = 2.0 * math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = [(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s]
    q = np.asarray(q)
    q /= np.linalg.norm(q)
    return -q if q[3] < 0 else q


def matrix_from_quat(q: np.ndarray) -> np.ndarray:
    """Rotation matrix of a quaternion.

    Args:
        q: (4,) float (x, y, z, w), normalised first (must not be zero).

    Returns:
        (3, 3) float64 rotation matrix.
    """
    x, y, z, w = np.asarray(q, np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def axis_angle_fraction(rot: np.ndarray, fraction: float) -> np.ndarray:
    """Rotation by ``fraction`` of the angle of ``rot`` about the same axis.

    The slerp from the identity to ``rot`` at ``fraction``. The renderer and the
    glTF export give the neck this share of the head rotation
    (``AvatarMesh.neck_share``) and the head the rest (``neck.T @ rot``); the
    no-face hold eases toward the identity with it.

    Args:
        rot: (3, 3) rotation matrix (re-orthonormalised first).
        fraction: share of the angle, usually in [0, 1] (0 gives the identity, 1 ``rot``).

    Returns:
        (3, 3) float64 rotation matrix.

    Raises:
        InputError: not a finite (3, 3) matrix.
    """
    q = quat_from_matrix(rot)
    sin_half = float(np.linalg.norm(q[:3]))
    angle = 2.0 * math.atan2(sin_half, q[3])
    if angle < 1e-9:
        return np.eye(3)
    half = 0.5 * angle * fraction
    return matrix_from_quat(np.r_[q[:3] / sin_half * math.sin(half), math.cos(half)])


def rotation_angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Geodesic angle between rotations: ``acos((tr(a^T b) - 1) / 2)``.

    Args:
        a: (..., 3, 3) float rotations.
        b: (..., 3, 3) float rotations, broadcast against ``a``.

    Returns:
        (...) float64 angles in degrees, in [0, 180].
    """
    tr = np.einsum("...ij,...ij->...", np.asarray(a, np.float64), np.asarray(b, np.float64))
    return np.degrees(np.arccos(np.clip((tr - 1.0) / 2.0, -1.0, 1.0)))


def rigid_fit(
    src: np.ndarray,
    dst: np.ndarray,
    weights: np.ndarray | None = None,
    with_scale: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | float]:
    """Weighted least-squares similarity transform ``dst ~ s * R @ src + t``, batched.

    W. Kabsch, "A solution for the best rotation to relate two sets of
    vectors", Acta Cryst. A32:922-923, 1976; with the scale and the reflection
    fix of S. Umeyama, "Least-squares estimation of transformation parameters
    between two point patterns", IEEE TPAMI 13(4):376-380, 1991.

    Args:
        src: (N, 3) or (B, N, 3) float source points.
        dst: (N, 3) or (B, N, 3) float destination points, same order; the two
            broadcast over the batch B.
        weights: (N,) non-negative weights, or None for equal weights.
        with_scale: estimate the scale ``s`` (Umeyama); otherwise ``s = 1`` (Kabsch).

    Returns:
        ``(R, t, s)``: float64 proper rotations (3, 3), translations (3,) and
        the scale as a float for unbatched inputs; (B, 3, 3), (B, 3) and (B,)
        arrays for batched ones.

    Raises:
        InputError: mismatched shapes, fewer than 3 points, weights that do not
            sum to a positive number, or source points that are all identical.
    """
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    batched = src.ndim == 3 or dst.ndim == 3
    if (src.ndim not in (2, 3) or dst.ndim not in (2, 3) or src.shape[-2:] != dst.shape[-2:]
            or src.shape[-1] != 3 or src.shape[-2] < 3
            or (src.ndim == dst.ndim == 3 and len(src) != len(dst))):
        raise InputError(f"rigid_fit needs two (N>=3, 3) point sets, got {src.shape} and {dst.shape}")
    n = src.shape[-2]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not w.sum() > 0:
        raise InputError(f"rigid_fit weights must be ({n},) with a positive sum, got shape {w.shape}")
    w = w / w.sum()
    src3, dst3 = np.broadcast_arrays(src if src.ndim == 3 else src[None], dst if dst.ndim == 3 else dst[None])
    mu_s = np.einsum("n,bni->bi", w, src3)
    mu_d = np.einsum("n,bni->bi", w, dst3)
    xs = src3 - mu_s[:, None]
    xd = dst3 - mu_d[:, None]
    cov = np.einsum("bni,bnj->bij", xd * w[None, :, None], xs)  # sum_n w_n d_n s_n^T
    u, sig, vt = np.linalg.svd(cov)
    d = np.ones((len(cov), 3))
    d[:, 2] = np.where(np.linalg.det(u) * np.linalg.det(vt) < 0, -1.0, 1.0)
    rot = np.einsum("bij,bj,bjk->bik", u, d, vt)
    if with_scale:
        var_s = np.einsum("n,bni,bni->b", w, xs, xs)
        if not np.all(var_s > 0):
            raise InputError("rigid_fit source points are all identical")
        scale = (sig * d).sum(1) / var_s
    else:
        scale = np.ones(len(cov))
    t = mu_d - scale[:, None] * np.einsum("bij,bj->bi", rot, mu_s)
    if batched:
        return rot, t, scale
    return rot[0], t[0], float(scale[0])
