"""Head pose: rigid fit, metric conversion, angle conventions, real frames."""
from __future__ import annotations

import math

import av
import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.core.rotations import euler_from_rotation, rotation_from_euler
from avatar_app.core.types import Landmarks
from avatar_app.tracking import FaceTracker, RunningMode
from avatar_app.reconstruction.head_pose import (
    MEAN_IPD_M,
    NeutralFace,
    estimate_head_pose,
    focal_length_px,
    make_neutral_face,
)

W, H = 640, 480


def load_obj_vertices(path) -> np.ndarray:
    """(N, 3) vertices of a Wavefront OBJ."""
    rows = [line.split()[1:4] for line in path.read_text().splitlines() if line.startswith("v ")]
    return np.array(rows, dtype=np.float64)


@pytest.fixture(scope="module")
def canonical_m(testdata) -> np.ndarray:
    """MediaPipe's canonical face with irises (478 points), metres, head frame.

    +x is the subject's left, +y up, +z toward the camera."""
    v = load_obj_vertices(testdata / "reference" / "face_model_with_iris.obj") / 100.0
    assert v.shape == (478, 3)
    return v


def project(points_m: np.ndarray, rot: np.ndarray, trans: np.ndarray, hfov_deg: float = 60.0):
    """Perspective projection of head-frame points to MediaPipe-style landmarks."""
    cam = points_m @ rot.T + trans
    depth = -cam[:, 2]
    f = focal_length_px(W, hfov_deg)
    u = W / 2 + f * cam[:, 0] / depth
    v = H / 2 - f * cam[:, 1] / depth
    d0 = -trans[2]
    z = (depth - d0) * (f / d0) / W  # relative depth in x's scale, negative = nearer
    pts = np.stack([u / W, v / H, z], axis=1).astype(np.float32)
    return Landmarks(points=pts, image_size=(W, H))


def expected_translation(canonical_m, neutral, rot, trans):
    """Where the head-frame origin (the stable-landmark centroid) is, in the inferred scale.

    The neutral is scaled to the assumed IPD (63 mm, the model's is 63.6 mm), so the
    whole scene, depth included, is inferred at the ratio k of the two.
    """
    k = MEAN_IPD_M / np.linalg.norm(canonical_m[473] - canonical_m[468])
    centroid = (canonical_m - neutral.points_m / k).mean(axis=0)
    return k * (trans + rot @ centroid)


def test_neutral_scale_uses_interpupillary_distance(canonical_m):
    lm = project(canonical_m, np.eye(3), np.array([0.0, 0.0, -0.6]))
    n = make_neutral_face(lm)
    ipd = np.linalg.norm(n.points_m[473] - n.points_m[468])
    assert ipd == pytest.approx(MEAN_IPD_M, rel=1e-3)
    pose = estimate_head_pose(lm, n)
    np.testing.assert_allclose(pose.rotation, np.eye(3), atol=1e-3)
    expected = expected_translation(canonical_m, n, np.eye(3), np.array([0.0, 0.0, -0.6]))
    # Weak perspective: the nearer irises look a little apart, so within 2 %.
    np.testing.assert_allclose(pose.translation, expected, rtol=0.02, atol=1e-3)
    assert -0.6 < pose.translation[2] < -0.5  # the centroid is ~4 cm in front of the model origin


@pytest.mark.parametrize(
    "yaw_deg,pitch_deg,roll_deg",
    [(30, 0, 0), (-30, 0, 0), (0, 20, 0), (0, -20, 0), (0, 0, 15), (25, -15, 10), (-40, 10, -5)],
)
def test_synthetic_rotations_are_recovered(canonical_m, yaw_deg, pitch_deg, roll_deg):
    trans = np.array([0.05, -0.03, -0.55])
    neutral = make_neutral_face(project(canonical_m, np.eye(3), trans))
    rot = rotation_from_euler(*np.radians([yaw_deg, pitch_deg, roll_deg]))
    lm = project(canonical_m, rot, trans)
    pose = estimate_head_pose(lm, neutral)
    got = np.degrees(euler_from_rotation(pose.rotation))
    # Perspective against a weak-perspective fit: within 2 degrees.
    np.testing.assert_allclose(got, [yaw_deg, pitch_deg, roll_deg], atol=2.0)
    assert pose.translation[2] < 0  # in front of the camera
    np.testing.assert_allclose(
        pose.translation, expected_translation(canonical_m, neutral, rot, trans), atol=0.015
    )
    # The frame's landmarks in the head frame match the neutral (pose removed), up
    # to perspective distortion (a few mm at 0.55 m).
    err = np.linalg.norm(pose.points_m - neutral.points_m, axis=1)
    assert np.median(err) < 0.004


def test_level_yaw_roll_removes_the_neutrals_own_turn(canonical_m):
    rot = rotation_from_euler(math.radians(25), math.radians(10), math.radians(-8))
    lm = project(canonical_m, rot, np.array([0.0, 0.0, -0.6]))
    levelled = make_neutral_face(lm, level_yaw_roll=True)
    frontal = make_neutral_face(project(canonical_m, np.eye(3), np.array([0.0, 0.0, -0.6])))
    pose = estimate_head_pose(project(canonical_m, np.eye(3), np.array([0.0, 0, -0.6])), levelled)
    yaw, pitch, roll = np.degrees(euler_from_rotation(pose.rotation))
    assert abs(yaw) < 2 and abs(roll) < 2  # yaw and roll removed
    assert abs(pitch + 10) < 3  # pitch kept: the levelled neutral still looks 10 deg up
    assert isinstance(frontal, NeutralFace)


def test_invalid_landmarks_raise():
    with pytest.raises(InputError, match="478"):
        make_neutral_face(Landmarks(points=np.zeros((468, 3), np.float32), image_size=(W, H)))
    bad = np.zeros((478, 3), np.float32)
    bad[5, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        make_neutral_face(Landmarks(points=bad, image_size=(W, H)))
    with pytest.raises(InputError, match="field of view"):
        focal_length_px(640, 180.0)


def test_real_frames_give_plausible_pose(testdata, canonical_m):
    """Frontal GRID speakers, measured against the frontal canonical face."""
    neutral = make_neutral_face(project(canonical_m, np.eye(3), np.array([0.0, 0.0, -0.5])))
    for name in ("grid_s1_bbaf2n", "grid_lbax4n"):
        with av.open(str(testdata / "video" / f"{name}.mp4")) as c, FaceTracker(
            RunningMode.VIDEO
        ) as tracker:
            angles, depths = [], []
            for i, frame in enumerate(c.decode(video=0)):
                if i >= 25:
                    break
                lm = tracker.process_video_frame(frame.to_ndarray(format="bgr24"), frame.time * 1e3)
                assert lm is not None
                pose = estimate_head_pose(lm, neutral)
                angles.append(np.degrees(euler_from_rotation(pose.rotation)))
                depths.append(-pose.translation[2])
        angles = np.array(angles)
        assert np.all(np.abs(angles[:, 0]) < 15), angles[:, 0]  # yaw
        assert np.all(np.abs(angles[:, 1]) < 25), angles[:, 1]  # pitch
        assert np.all(np.abs(angles[:, 2]) < 10), angles[:, 2]  # roll
        # A 360x288 studio frame with a 45-px face: ~0.4 m under the 60-degree assumption.
        assert 0.2 < np.median(depths) < 1.0
        # A talking head barely moves: no jumps between frames.
        assert np.abs(np.diff(angles, axis=0)).max() < 5.0
