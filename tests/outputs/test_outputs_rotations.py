"""outputs.rotations: Unity's axes on top of core.rotations."""
from __future__ import annotations

import math

import numpy as np
import pytest

from avatar_app.core.rotations import matrix_from_quat, quat_from_matrix, rot_y
from avatar_app.outputs.rotations import position_to_unity, quat_to_unity


def random_rotations(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = rng.normal(size=4)
        yield matrix_from_quat(q / np.linalg.norm(q))


def test_unity_quaternion_is_the_mirrored_rotation():
    s = np.diag([-1.0, 1.0, 1.0])
    for r in random_rotations(20, 2):
        np.testing.assert_allclose(matrix_from_quat(quat_to_unity(quat_from_matrix(r))), s @ r @ s, atol=1e-9)
    # the subject turning to their own left is a negative Unity yaw
    q = quat_to_unity(quat_from_matrix(rot_y(math.radians(20))))
    assert q[1] == pytest.approx(-math.sin(math.radians(10)))
    np.testing.assert_allclose(position_to_unity([0.1, 0.2, 0.3]), [-0.1, 0.2, 0.3])
