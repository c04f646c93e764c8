"""Rotation helpers shared by the exporters: quaternions, Euler angles, gaze, axis conventions.

Our convention (DESIGN.md "Contracts"): rotations are 3x3 matrices acting on
column vectors in camera space (right-handed; x right, y up, the camera looks
down -Z). The avatar faces the camera, i.e. +Z, so its own left is +X and
the avatar's model space has the same axes as camera space (glTF's model
convention too: +Y up, front +Z).

Quaternions are (x, y, z, w) arrays, the order of glTF and of Unity/VMC.
"""
from __future__ import annotations

import math

import numpy as np

from avatar_app.core.errors import InputError


def _as_rotation(rot: np.ndarray) -> np.ndarray:
    r = np.asarray(rot, np.float64)
    if r.shape != (3, 3) or not np.all(np.isfinite(r)):
        raise InputError(f"a rotation must be a finite (3, 3) matrix; got shape {r.shape}")
    u, _, vt = np.linalg.svd(r)  # nearest proper rotation (tracker output may be slightly off)
    q = u @ vt
    if np.linalg.det(q) < 0:
        u[:, -1] *= -1
        q = u @ vt
    return q


def quat_from_matrix(rot: np.ndarray) -> np.ndarray:
    """Unit quaternion of a rotation matrix (Shepperd's method).

    Args:
        rot: (3, 3) rotation matrix (re-orthonormalised first).

    Returns:
        (4,) float64 (x, y, z, w) with w >= 0.

    Raises:
        InputError: not a finite (3, 3) matrix.

    Source: S. W. Shepperd, "Quaternion from rotation matrix", J. Guidance and
    Control 1(3), 1978 (largest-diagonal branch for numerical stability).
    """
    m = _as_rotation(rot)
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
    """(3, 3) float64 rotation matrix of a quaternion (x, y, z, w) (normalised first)."""
    x, y, z, w = np.asarray(q, np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def rot_x(a: float) -> np.ndarray:
    """Right-handed rotation by ``a`` radians about +X, (3, 3) float64."""
    c, s = math.cos(a), math.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]], np.float64)


def rot_y(a: float) -> np.ndarray:
    """Right-handed rotation by ``a`` radians about +Y, (3, 3) float64."""
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]], np.float64)


def rot_z(a: float) -> np.ndarray:
    """Right-handed rotation by ``a`` radians about +Z, (3, 3) float64."""
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], np.float64)


def yaw_pitch_roll(rot: np.ndarray) -> tuple[float, float, float]:
    """Decompose ``rot = Ry(yaw) @ Rx(pitch) @ Rz(roll)`` (intrinsic Y-X-Z), radians.

    With the avatar facing +Z: yaw > 0 turns the face toward its own left (+X);
    pitch > 0 tips the face down (the right-handed turn about the subject's
    left-pointing +X axis); roll > 0 tilts the head toward its own right
    shoulder (counter-clockwise as the camera sees it).

    Args:
        rot: (3, 3) rotation matrix.

    Returns:
        (yaw, pitch, roll) in radians; pitch in [-pi/2, pi/2].

    Raises:
        InputError: not a finite (3, 3) matrix.
    """
    m = _as_rotation(rot)
    pitch = math.asin(max(-1.0, min(1.0, -m[1, 2])))
    yaw = math.atan2(m[0, 2], m[2, 2])
    roll = math.atan2(m[1, 0], m[1, 1])
    return yaw, pitch, roll


def gaze_rotation(yaw_rad: float, pitch_rad: float) -> np.ndarray:
    """Eye rotation for a gaze (yaw, pitch) as ``FaceParams.gaze`` gives it.

    Same formula as :func:`avatar_app.render.renderer.gaze_rotation` (kept here so
    exporters do not import OpenGL): ``Ry(yaw) @ Rx(-pitch)``; yaw > 0 looks
    toward the avatar's left, pitch > 0 looks up.

    Returns:
        (3, 3) float64.
    """
    return rot_y(yaw_rad) @ rot_x(-pitch_rad)


def axis_angle_fraction(rot: np.ndarray, fraction: float) -> np.ndarray:
    """Rotation by ``fraction`` of the angle of ``rot`` about the same axis.

    The renderer gives the neck this share of the head rotation
    (``AvatarMesh.neck_share``) and the head the rest (``neck.T @ rot``).

    Returns:
        (3, 3) float64.
    """
    q = quat_from_matrix(rot)
    angle = 2.0 * math.atan2(np.linalg.norm(q[:3]), q[3])
    if angle < 1e-9:
        return np.eye(3)
    axis = q[:3] / np.linalg.norm(q[:3])
    half = 0.5 * angle * fraction
    return matrix_from_quat(np.r_[axis * math.sin(half), math.cos(half)])


# ---------------------------------------------------------------------------- Unity / VMC
#: Mirror between our avatar axes and Unity's: our +X (the avatar's own left) is
#: Unity's -X (a Unity humanoid faces +Z with its right hand toward +X); Y and Z agree.
UNITY_MIRROR = np.diag([-1.0, 1.0, 1.0])


def position_to_unity(p: np.ndarray) -> np.ndarray:
    """(3,) position in our right-handed avatar axes -> Unity's left-handed axes: (-x, y, z)."""
    p = np.asarray(p, np.float64).reshape(3)
    return UNITY_MIRROR @ p


def rotation_to_unity(rot: np.ndarray) -> np.ndarray:
    """Rotation matrix in our axes -> the same physical rotation in Unity's axes: ``S R S``.

    ``S = diag(-1, 1, 1)`` maps our coordinates to Unity's; a rotation ``R`` of
    ours acts on Unity coordinates as ``S R S^-1 = S R S``.
    """
    s = UNITY_MIRROR
    return s @ _as_rotation(rot) @ s


def quat_to_unity(q: np.ndarray) -> np.ndarray:
    """Quaternion (x, y, z, w) in our axes -> Unity's: (x, -y, -z, w).

    Derivation: conjugating by the reflection ``S = diag(-1, 1, 1)`` turns the
    rotation by angle t about axis a into the rotation by -t about ``S a``
    (a reflection reverses the sense of rotation), so the quaternion
    (a sin(t/2), cos(t/2)) becomes (-(S a) sin(t/2), cos(t/2)) =
    (a_x sin, -a_y sin, -a_z sin, cos).
    """
    x, y, z, w = np.asarray(q, np.float64).reshape(4)
    return np.array([x, -y, -z, w])
