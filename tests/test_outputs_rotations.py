"""Rotation helpers: quaternions, Y-X-Z Euler angles, the neck share and the renderer's gaze."""
from __future__ import annotations

import math

import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.outputs.rotations import (
    axis_angle_fraction,
    gaze_rotation,
    matrix_from_quat,
    quat_from_matrix,
    rot_x,
    rot_y,
    rot_z,
    yaw_pitch_roll,
)


def random_rotations(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = rng.normal(size=4)
        yield matrix_from_quat(q / np.linalg.norm(q))


def test_quaternion_round_trip_all_branches():
    mats = list(random_rotations(200)) + [rot_x(math.pi), rot_y(math.pi), rot_z(math.pi), np.eye(3)]
    for r in mats:
        q = quat_from_matrix(r)
        assert q[3] >= 0 and np.linalg.norm(q) == pytest.approx(1.0)
        np.testing.assert_allclose(matrix_from_quat(q), r, atol=1e-9)


def test_known_quaternion():
    q = quat_from_matrix(rot_y(math.radians(20)))
    np.testing.assert_allclose(q, [0, math.sin(math.radians(10)), 0, math.cos(math.radians(10))],
                               atol=1e-12)


def test_yaw_pitch_roll_round_trip_and_signs():
    for r in random_rotations(100, 1):
        y, p, ro = yaw_pitch_roll(r)
        np.testing.assert_allclose(rot_y(y) @ rot_x(p) @ rot_z(ro), r, atol=1e-9)
    # yaw > 0: the face (+Z) turns toward the avatar's left (+X)
    fwd = rot_y(yaw_pitch_roll(rot_y(0.3))[0]) @ [0, 0, 1]
    assert fwd[0] > 0
    assert yaw_pitch_roll(rot_x(0.2))[1] == pytest.approx(0.2)
    assert (rot_x(0.2) @ [0, 0, 1])[1] < 0  # pitch > 0 looks down


def test_neck_share_composes_to_the_rotation():
    for r in random_rotations(50, 2):
        neck = axis_angle_fraction(r, 0.3)
        head = neck.T @ r
        np.testing.assert_allclose(neck @ head, r, atol=1e-9)
        a_r = 2 * math.acos(min(1.0, quat_from_matrix(r)[3]))
        a_n = 2 * math.acos(min(1.0, quat_from_matrix(neck)[3]))
        assert a_n == pytest.approx(0.3 * a_r, abs=1e-7)


def test_gaze_matches_the_renderer():
    from avatar_app.render.renderer import gaze_rotation as render_gaze

    for yaw, pitch in [(0.0, 0.0), (0.3, -0.1), (-0.2, 0.25)]:
        np.testing.assert_allclose(gaze_rotation(yaw, pitch), render_gaze(yaw, pitch), atol=1e-12)


def test_bad_matrix_raises():
    with pytest.raises(InputError, match=r"\(3, 3\)"):
        quat_from_matrix(np.eye(4))
    with pytest.raises(InputError, match="finite"):
        yaw_pitch_roll(np.full((3, 3), np.nan))
