"""core.rotations: the yaw/pitch/roll convention, quaternions, gaze, nearest rotation, fits."""
from __future__ import annotations

import math

import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.core.rotations import (
    axis_angle_fraction,
    euler_from_rotation,
    gaze_rotation,
    matrix_from_quat,
    nearest_rotation,
    quat_from_matrix,
    rigid_fit,
    rot_x,
    rot_y,
    rot_z,
    rotation_angle_deg,
    rotation_from_euler,
)

FORWARD = np.array([0.0, 0.0, 1.0])  # the nose of a face looking at the camera


def random_rotations(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = rng.normal(size=4)
        yield matrix_from_quat(q / np.linalg.norm(q))


# ---------------------------------------------------------------------------- Euler angles
@pytest.mark.parametrize("yaw,pitch,roll", [(0.3, 0.0, 0.0), (-0.5, 0.1, -0.2), (0.0, -0.35, 0.25),
                                            (3.0, 1.2, -3.0), (-2.5, -1.5, 1.0)])
def test_euler_round_trip(yaw, pitch, roll):
    r = rotation_from_euler(yaw, pitch, roll)
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(r) == pytest.approx(1.0)
    np.testing.assert_allclose(euler_from_rotation(r), (yaw, pitch, roll), atol=1e-12)


def test_matrix_round_trip_of_random_rotations():
    for r in random_rotations(200, 3):
        np.testing.assert_allclose(rotation_from_euler(*euler_from_rotation(r)), r, atol=1e-12)


@pytest.mark.parametrize("pitch", [math.pi / 2, -math.pi / 2])
@pytest.mark.parametrize("off", [0.0, 1e-13, 1e-9, 1e-6, 1e-3])
def test_round_trip_near_the_gimbal_limit(pitch, off):
    p = pitch - math.copysign(off, pitch)
    r = rotation_from_euler(0.4, p, -0.3)
    yaw, p2, roll = euler_from_rotation(r)
    assert p2 == pytest.approx(p, abs=1e-7)
    # the matrix always comes back; the angles separate only away from the limit
    np.testing.assert_allclose(rotation_from_euler(yaw, p2, roll), r, atol=1e-9)
    if off >= 1e-6:
        np.testing.assert_allclose((yaw, roll), (0.4, -0.3), atol=1e-6)
    if off == 0.0:
        assert roll == 0.0  # at the limit the whole vertical turn is put in yaw


def test_sign_conventions():
    # Positive yaw: the subject turns to their own left = the nose moves toward camera +x.
    assert (rotation_from_euler(0.3, 0, 0) @ FORWARD)[0] > 0.25
    # Positive pitch: looking up (the sign of FaceParams.gaze pitch).
    assert (rotation_from_euler(0, 0.3, 0) @ FORWARD)[1] > 0.25
    # Positive roll: the subject's left side (+x) goes up.
    assert (rotation_from_euler(0, 0, 0.3) @ np.array([1.0, 0, 0]))[1] > 0.25
    # The decomposition reads the same signs back from the elementary rotations.
    assert euler_from_rotation(rot_y(0.2))[0] == pytest.approx(0.2)
    assert euler_from_rotation(rot_x(-0.2))[1] == pytest.approx(0.2)  # right-handed about +x tips down
    assert euler_from_rotation(rot_z(0.2))[2] == pytest.approx(0.2)


def test_gaze_is_the_euler_convention_without_roll():
    for yaw, pitch in [(0.0, 0.0), (0.3, -0.1), (-0.2, 0.25)]:
        g = gaze_rotation(yaw, pitch)
        np.testing.assert_allclose(g, rotation_from_euler(yaw, pitch, 0.0), atol=1e-15)
        expected = [math.sin(yaw) * math.cos(pitch), math.sin(pitch), math.cos(yaw) * math.cos(pitch)]
        np.testing.assert_allclose(g @ FORWARD, expected, atol=1e-12)


def test_bad_matrix_raises():
    with pytest.raises(InputError, match=r"\(3, 3\)"):
        quat_from_matrix(np.eye(4))
    with pytest.raises(InputError, match="finite"):
        euler_from_rotation(np.full((3, 3), np.nan))
    with pytest.raises(InputError, match="finite"):
        nearest_rotation(np.array([[1.0, 0, 0], [0, np.inf, 0], [0, 0, 1]]))


# ---------------------------------------------------------------------------- quaternions
def test_quaternion_round_trip_all_branches():
    mats = list(random_rotations(200)) + [rot_x(math.pi), rot_y(math.pi), rot_z(math.pi), np.eye(3)]
    for r in mats:
        q = quat_from_matrix(r)
        assert q[3] >= 0 and np.linalg.norm(q) == pytest.approx(1.0)
        np.testing.assert_allclose(matrix_from_quat(q), r, atol=1e-9)


def test_known_quaternion():
    q = quat_from_matrix(rot_y(math.radians(20)))
    np.testing.assert_allclose(q, [0, math.sin(math.radians(10)), 0, math.cos(math.radians(10))], atol=1e-12)


# ---------------------------------------------------------------------------- fraction, nearest, angle
def test_axis_angle_fraction_composes_and_scales_the_angle():
    for r in list(random_rotations(50, 2)) + [rot_x(math.pi), rot_z(math.pi - 1e-7)]:
        neck = axis_angle_fraction(r, 0.3)
        head = neck.T @ r
        np.testing.assert_allclose(neck @ head, r, atol=1e-9)
        assert rotation_angle_deg(np.eye(3), neck) == pytest.approx(0.3 * rotation_angle_deg(np.eye(3), r), abs=1e-5)
        # the same axis: neck and rotation commute
        np.testing.assert_allclose(neck @ r, r @ neck, atol=1e-9)
    np.testing.assert_allclose(axis_angle_fraction(rot_y(0.5), 0.0), np.eye(3), atol=1e-12)
    np.testing.assert_allclose(axis_angle_fraction(rot_y(0.5), 1.0), rot_y(0.5), atol=1e-12)
    np.testing.assert_allclose(axis_angle_fraction(np.eye(3), 0.5), np.eye(3))


def test_nearest_rotation_is_proper_and_idempotent():
    rng = np.random.default_rng(4)
    for r in random_rotations(30, 5):
        noisy = r + 0.01 * rng.normal(size=(3, 3))
        q = nearest_rotation(noisy)
        np.testing.assert_allclose(q @ q.T, np.eye(3), atol=1e-12)
        assert np.linalg.det(q) == pytest.approx(1.0)
        assert rotation_angle_deg(q, r) < 2.0
        np.testing.assert_allclose(nearest_rotation(q), q, atol=1e-12)
    # a reflection's nearest proper rotation is not the reflection itself
    assert np.linalg.det(nearest_rotation(np.diag([-1.0, 1.0, 1.0]))) == pytest.approx(1.0)


def test_rotation_angle_is_geodesic():
    assert rotation_angle_deg(rot_x(0.1), rot_x(0.4)) == pytest.approx(math.degrees(0.3))
    batch = np.stack([rot_y(a) for a in (0.0, 0.5, math.pi)])
    np.testing.assert_allclose(rotation_angle_deg(np.eye(3), batch), [0.0, math.degrees(0.5), 180.0], atol=1e-6)


# ---------------------------------------------------------------------------- rigid fit
def test_rigid_fit_recovers_rotation_translation_scale():
    rng = np.random.default_rng(1)
    src = rng.normal(size=(30, 3))
    rot = rotation_from_euler(0.4, -0.3, 0.2)
    dst = 2.5 * src @ rot.T + np.array([1.0, -2.0, 3.0])
    r, t, s = rigid_fit(src, dst, with_scale=True)
    np.testing.assert_allclose(r, rot, atol=1e-9)
    np.testing.assert_allclose(t, [1.0, -2.0, 3.0], atol=1e-9)
    assert s == pytest.approx(2.5)
    r2, t2, s2 = rigid_fit(src, src @ rot.T + 1.0, weights=rng.random(30) + 0.1)
    np.testing.assert_allclose(r2, rot, atol=1e-9)
    np.testing.assert_allclose(t2, [1.0, 1.0, 1.0], atol=1e-9)
    assert s2 == 1.0
    # A mirrored target still yields a proper rotation (Umeyama's correction).
    r3, _, _ = rigid_fit(src, src * np.array([-1.0, 1.0, 1.0]))
    assert np.linalg.det(r3) == pytest.approx(1.0)
    with pytest.raises(InputError, match="N>=3"):
        rigid_fit(src[:2], dst[:2])
    with pytest.raises(InputError, match="weights"):
        rigid_fit(src, dst, weights=np.zeros(30))
    with pytest.raises(InputError, match="identical"):
        rigid_fit(np.ones((5, 3)), dst[:5], with_scale=True)


def test_batched_rigid_fit_matches_single_fits():
    rng = np.random.default_rng(2)
    src = rng.normal(size=(20, 3))
    rots = list(random_rotations(4, 6))
    dst = np.stack([(1.0 + k) * src @ r.T + k for k, r in enumerate(rots)])
    w = rng.random(20) + 0.1
    r_b, t_b, s_b = rigid_fit(src, dst, w, with_scale=True)
    assert r_b.shape == (4, 3, 3) and t_b.shape == (4, 3) and s_b.shape == (4,)
    for k in range(4):
        r, t, s = rigid_fit(src, dst[k], w, with_scale=True)
        np.testing.assert_allclose(r_b[k], r, atol=1e-12)
        np.testing.assert_allclose(t_b[k], t, atol=1e-12)
        assert s_b[k] == pytest.approx(s) == pytest.approx(1.0 + k)
