"""Axis conversions for the exporters: our right-handed axes to Unity's (VMC).

The rotation maths itself (Euler angles, quaternions, gaze, nearest rotation)
is :mod:`avatar_app.core.rotations`; this module only holds what is specific
to Unity's left-handed frame.
"""
from __future__ import annotations

import numpy as np

#: Mirror between our avatar axes and Unity's: our +X (the avatar's own left) is
#: Unity's -X (a Unity humanoid faces +Z with its right hand toward +X); Y and Z agree.
UNITY_MIRROR = np.diag([-1.0, 1.0, 1.0])


def position_to_unity(p: np.ndarray) -> np.ndarray:
    """(3,) position in our right-handed avatar axes -> Unity's left-handed axes: (-x, y, z)."""
    p = np.asarray(p, np.float64).reshape(3)
    return UNITY_MIRROR @ p


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


__all__ = ["UNITY_MIRROR", "position_to_unity", "quat_to_unity"]
