"""Input normalisation of the face_recon engine and the automatic neutral (synthetic geometry, fast)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from avatar_app.avatar.face_model import load_face_model, synthetic_landmarks
from avatar_app.core.blendshapes import Blendshape as B
from avatar_app.core.errors import InputError
from avatar_app.core.rotations import euler_from_rotation, rotation_angle_deg, rotation_from_euler
from avatar_app.reconstruction import normalise as N
from avatar_app.reconstruction.auto_neutral import NeutralEstimator
from avatar_app.reconstruction.head_pose import focal_length_px

SIZE = (640, 480)
F60 = focal_length_px(640, 60.0)


def _observe(weights=None, ident=None, ypr=(0.0, 0.0, 0.0), t=(0.0, 0.0, -0.6), f=F60, size=SIZE):
    m = load_face_model()
    w = np.zeros(52, np.float32) if weights is None else weights
    pts = m.evaluate(w, ident)
    return synthetic_landmarks(pts, rotation_from_euler(*ypr), np.array(t), f, size), pts


def test_align_recovers_pose_and_shape():
    w = np.zeros(52, np.float32)
    w[B.jawOpen] = 0.6
    lm, pts = _observe(w, ypr=(0.7, -0.3, 0.4), t=(0.05, -0.03, -0.9))
    head, rot, trans = N.align(lm, SIZE)
    assert head.shape == (1, 478, 3) and head.dtype == np.float32
    assert rotation_angle_deg(rot[0], rotation_from_euler(0.7, -0.3, 0.4)) < 0.05
    assert np.allclose(trans[0], [0.05, -0.03, -0.9], atol=1e-3)
    assert np.abs(head[0] - pts).max() < 1e-4  # the expression survives, the pose is gone


def test_align_batched_equals_single():
    a, _ = _observe(ypr=(0.2, 0.1, 0.0))
    b, _ = _observe(ypr=(-0.4, 0.0, 0.3), t=(0.0, 0.0, -1.2))
    hb, rb, tb = N.align(np.stack([a, b]), SIZE)
    for i, lm in enumerate((a, b)):
        h, r, t = N.align(lm, SIZE)
        assert np.allclose(h[0], hb[i], atol=1e-6) and np.allclose(r[0], rb[i]) and np.allclose(t[0], tb[i])


def test_image_rescale_changes_only_the_distance():
    lm, _ = _observe(ypr=(0.3, 0.1, 0.0))
    h1, r1, t1 = N.align(lm, (640, 480))
    h2, r2, t2 = N.align(lm, (320, 240))  # the same normalised points in a half-size image
    assert np.abs(h1 - h2).max() < 1e-6
    assert rotation_angle_deg(r1[0], r2[0]) < 1e-4
    assert t2[0, 2] == pytest.approx(t1[0, 2], rel=1e-6)  # focal length and face both halve


def test_in_plane_rotation_changes_roll_only():
    lm, _ = _observe(ypr=(0.2, 0.1, 0.0))
    h1, r1, _ = N.align(lm, (480, 480))
    a = math.radians(15.0)
    c, s = math.cos(a), math.sin(a)
    xy = lm[:, :2] - 0.5
    rot_img = lm.copy()
    rot_img[:, 0] = 0.5 + c * xy[:, 0] - s * xy[:, 1]
    rot_img[:, 1] = 0.5 + s * xy[:, 0] + c * xy[:, 1]
    h2, r2, _ = N.align(rot_img, (480, 480))
    y1, p1, rl1 = euler_from_rotation(r1[0])
    assert np.abs(h1 - h2).max() < 2e-4
    # an image rotated clockwise by 15 degrees (y down) is a camera roll of -15 degrees about -Z
    r_expected = rotation_from_euler(0.0, 0.0, -a) @ r1[0]
    assert rotation_angle_deg(r2[0], r_expected) < 0.05


def test_network_inputs_and_mirror():
    w = np.zeros(52, np.float32)
    w[B.eyeBlinkLeft] = 1.0
    lm, _ = _observe(w)
    ln, _ = _observe()
    head, _, _ = N.align(lm, SIZE)
    nh, _, _ = N.align(ln, SIZE)
    feeds = N.network_inputs(head, nh[0])
    assert set(feeds) == {"landmarks", "neutral"}
    assert feeds["landmarks"].shape == (1, 478, 3) and feeds["landmarks"].dtype == np.float32
    # the rig's own neutral is the template, up to the weak-perspective start of the fit (< 1 mm at 0.6 m)
    assert np.abs(feeds["neutral"]).max() < 1e-3
    moved = np.linalg.norm(feeds["landmarks"][0], axis=1)
    assert moved[386] > 0.004 and moved[159] < 5e-4  # the left upper lid moved, the right did not
    mir = N.mirror_points(feeds["landmarks"][0])
    assert np.linalg.norm(mir[159]) > 0.004 and np.linalg.norm(mir[386]) < 5e-4


def test_subset_is_mediapipes_146_and_mirror_closed():
    assert len(N.SUBSET) == 146 == len(set(N.SUBSET))
    mirror = load_face_model().mirror
    assert {int(mirror[i]) for i in N.SUBSET} == set(N.SUBSET)


def test_rotation_6d_round_trip():
    r = rotation_from_euler(0.5, -0.2, 1.0)
    assert np.allclose(N.rotation_from_6d(N.rotation_to_6d(r)), r)
    noisy = N.rotation_to_6d(r) + 0.01
    q = N.rotation_from_6d(noisy)
    assert np.allclose(q @ q.T, np.eye(3), atol=1e-9) and np.linalg.det(q) == pytest.approx(1.0)


def test_align_rejects_bad_input():
    with pytest.raises(InputError, match="shape"):
        N.align(np.zeros((468, 3)), SIZE)
    lm, _ = _observe()
    lm[0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        N.align(lm, SIZE)
    with pytest.raises(InputError, match="degenerate"):
        N.align(np.full((478, 3), 0.5), SIZE)


def test_auto_neutral_ignores_blinks_and_speech():
    m = load_face_model()
    est = NeutralEstimator(warmup_s=5.0)
    rng = np.random.default_rng(0)
    truth = N.align(synthetic_landmarks(m.neutral, np.eye(3), np.array([0, 0, -0.6]), F60, SIZE), SIZE)[0][0]
    for i in range(100):  # 4 s at 25 fps: blinks every 25 frames, talking half of the time
        w = np.zeros(52, np.float32)
        if i % 25 in (10, 11, 12):
            w[B.eyeBlinkLeft] = w[B.eyeBlinkRight] = 1.0
        if (i // 10) % 2 == 1:
            w[B.jawOpen] = rng.uniform(0.1, 0.5)
        lm = synthetic_landmarks(m.evaluate(w), np.eye(3), np.array([0, 0, -0.6]), F60, SIZE)
        est.update(N.align(lm, SIZE)[0][0], i / 25.0)
    err = np.linalg.norm(est.value - truth, axis=1)
    assert err.max() < 3e-4, (int(err.argmax()), float(err.max()))
    assert est.count == 100


def test_auto_neutral_schedule():
    est = NeutralEstimator(warmup_s=1.0, slow_interval_s=0.5, capacity=8)
    head = N.template().astype(np.float32)
    kept = [est.update(head, t) for t in np.arange(0, 3.0, 0.1)]
    assert all(kept[:10]) and sum(kept[10:]) == 4  # every frame for 1 s, then every 0.5 s
    assert est.count == 8
    with pytest.raises(InputError):
        NeutralEstimator(capacity=1)


def test_batched_projection_of_the_data_generator_matches_the_face_model():
    from training.face_recon.make_data import project_normalised

    m = load_face_model()
    pts = m.evaluate(np.zeros(52, np.float32))
    r = rotation_from_euler(0.4, 0.1, 0.2)
    t = np.array([0.03, 0.01, -0.7])
    a = synthetic_landmarks(pts, r, t, 700.0, (1280, 720))
    b = project_normalised(pts[None], r[None], t[None], np.array([700.0]), np.array([[1280, 720]]))[0]
    assert np.abs(a - b).max() < 1e-6
