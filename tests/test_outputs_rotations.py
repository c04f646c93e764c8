"""outputs.rotations: Unity's axes and Live Link Face's pitch sign on top of core.rotations."""
from __future__ import annotations

import math

import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.core.rotations import matrix_from_quat, quat_from_matrix, rot_x, rot_y, rot_z, rotation_from_euler
from avatar_app.outputs.rotations import position_to_unity, quat_to_unity, yaw_pitch_roll


def random_rotations(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = rng.normal(size=4)
        yield matrix_from_quat(q / np.linalg.norm(q))


def test_live_link_angles_use_arkit_pitch_sign():
    for r in random_rotations(100, 1):
        y, p, ro = yaw_pitch_roll(r)
        np.testing.assert_allclose(rot_y(y) @ rot_x(p) @ rot_z(ro), r, atol=1e-9)
    # the subject looking up is a negative Live Link pitch (ARKit: pitch > 0 tips the face down)
    y, p, ro = yaw_pitch_roll(rotation_from_euler(0.1, 0.2, -0.05))
    assert (y, p, ro) == pytest.approx((0.1, -0.2, -0.05))
    with pytest.raises(InputError, match="finite"):
        yaw_pitch_roll(np.full((3, 3), np.nan))


def test_unity_quaternion_is_the_mirrored_rotation():
    s = np.diag([-1.0, 1.0, 1.0])
    for r in random_rotations(20, 2):
        np.testing.assert_allclose(matrix_from_quat(quat_to_unity(quat_from_matrix(r))), s @ r @ s, atol=1e-9)
    # the subject turning to their own left is a negative Unity yaw
    q = quat_to_unity(quat_from_matrix(rot_y(math.radians(20))))
    assert q[1] == pytest.approx(-math.sin(math.radians(10)))
    np.testing.assert_allclose(position_to_unity([0.1, 0.2, 0.3]), [-0.1, 0.2, 0.3])
