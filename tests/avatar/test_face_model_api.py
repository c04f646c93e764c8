"""FaceModel API: loading, evaluate, projection conventions, bad input."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.face_model import (
    FaceModel, LANDMARK_GROUPS, face_model_from_arrays, load_face_model, project,
    save_face_model, synthetic_landmarks,
)
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.core.errors import AvatarError, InputError, ModelLoadError
from avatar_app.core.types import FaceParams

W, H, F = 640, 480, 600.0


@pytest.fixture(scope="module")
def model() -> FaceModel:
    return load_face_model()


def test_shapes_dtypes_and_cache(model):
    assert model.neutral.shape == (478, 3) and model.neutral.dtype == np.float32
    assert model.blendshapes.shape == (52, 478, 3) and model.blendshapes.dtype == np.float32
    assert model.identity.shape == (model.num_identity, 478, 3) and model.num_identity >= 12
    assert model.triangles.dtype == np.int32 and model.triangles.max() < 468
    assert model.blendshape_names == BLENDSHAPE_NAMES
    assert load_face_model() is model
    with pytest.raises(ValueError):
        model.neutral[0, 0] = 1.0  # read-only


def test_evaluate_is_linear_and_batched(model):
    rng = np.random.default_rng(1)
    w = rng.uniform(0, 1, (4, 52)).astype(np.float32)
    a = rng.uniform(-1, 1, (4, model.num_identity)).astype(np.float32)
    out = model.evaluate(w, a)
    assert out.shape == (4, 478, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out[2], model.evaluate(w[2], a[2]), atol=1e-6)
    expect = (model.neutral + np.einsum("k,kvc->vc", w[0], model.blendshapes)
              + np.einsum("k,kvc->vc", a[0], model.identity))
    np.testing.assert_allclose(out[0], expect, atol=1e-6)
    np.testing.assert_array_equal(model.evaluate(np.zeros(52)), model.neutral)
    # a single identity vector broadcasts over a weight batch
    np.testing.assert_allclose(model.evaluate(w, a[1])[3], model.evaluate(w[3], a[1]), atol=1e-6)


@pytest.mark.parametrize("weights, identity, match", [
    (np.zeros(51), None, "weights must have shape"),
    (np.zeros((2, 3, 52)), None, "weights must have shape"),
    (np.zeros(52), np.zeros(3), "identity coefficients"),
    (np.zeros((2, 52)), np.zeros((3, 15)), "batch sizes differ"),
    (np.full(52, np.nan), None, "finite"),
])
def test_evaluate_rejects_bad_input(model, weights, identity, match):
    if identity is not None and identity.shape[-1] == 15:
        identity = np.zeros(identity.shape[:-1] + (model.num_identity,))
    with pytest.raises(InputError, match=match):
        model.evaluate(weights, identity)


def test_project_frontal_face_matches_mediapipe_image_convention(model):
    """Identity rotation, head 0.6 m in front: subject's left eye on the image's right, forehead up."""
    params = FaceParams(blendshapes=np.zeros(52, np.float32))
    px = project(model.neutral, params.rotation, params.translation, F, (W, H))
    assert px.shape == (478, 2) and px.dtype == np.float32
    assert px[263, 0] > W / 2 > px[33, 0]          # 263 = subject's left eye outer corner
    assert px[10, 1] < px[4, 1] < px[152, 1]        # forehead above nose above chin (y down)
    ipd_px = np.linalg.norm(px[468] - px[473])
    assert abs(ipd_px - F * 0.063 / (0.6 - model.neutral[468, 2])) < 0.1


def test_project_pinhole_formula_and_batch():
    pts = np.array([[0.1, 0.05, 0.0], [0.0, 0.0, -0.2]])
    rot = np.eye(3)
    t = np.array([0.0, 0.0, -1.0])
    px = project(pts, rot, t, 500.0, (640, 480))
    np.testing.assert_allclose(px[0], [320 + 50.0, 240 - 25.0], atol=1e-4)
    np.testing.assert_allclose(px[1], [320, 240], atol=1e-4)
    yaw = np.array([[0.0, 0, 1], [0, 1, 0], [-1, 0, 0]])  # +90 deg about y
    batch = project(np.stack([pts, pts]), np.stack([rot, yaw]), np.stack([t, t]), 500.0, (640, 480))
    assert batch.shape == (2, 2, 2)
    np.testing.assert_allclose(batch[0], px, atol=1e-4)
    # rotated: x=0.1 went to z=-0.1 (away from the camera), so the point lands on the centre column
    np.testing.assert_allclose(batch[1, 0, 0], 320.0, atol=1e-3)


def test_project_rejects_points_behind_camera_and_bad_args():
    pts = np.zeros((3, 3))
    with pytest.raises(InputError, match="behind the camera"):
        project(pts, np.eye(3), np.array([0, 0, 0.5]), 500.0, (640, 480))
    with pytest.raises(InputError, match="positive"):
        project(pts, np.eye(3), np.array([0, 0, -0.5]), 0.0, (640, 480))
    with pytest.raises(InputError, match="rotation"):
        project(pts, np.eye(4), np.array([0, 0, -0.5]), 500.0, (640, 480))
    with pytest.raises(InputError, match="batch sizes"):
        project(np.zeros((2, 3, 3)), np.zeros((3, 3, 3)), np.array([0, 0, -0.5]), 500.0, (640, 480))


def test_synthetic_landmarks_normalised_and_depth_sign(model):
    lm = synthetic_landmarks(model.neutral, np.eye(3), np.array([0, 0, -0.6]), F, (W, H))
    px = project(model.neutral, np.eye(3), np.array([0, 0, -0.6]), F, (W, H))
    np.testing.assert_allclose(lm[:, :2] * [W, H], px, atol=1e-3)
    assert lm[4, 2] < lm[234, 2]  # the nose tip is closer to the camera: smaller z, as MediaPipe


def test_landmark_groups_are_valid_indices(model):
    assert {"left_eye_upper_lid", "lip_inner_upper", "left_iris", "stable"} <= set(model.landmark_groups)
    for name, idx in LANDMARK_GROUPS.items():
        assert all(0 <= i < 478 for i in idx), name
    # the left eyelids lie on the subject's left (+x)
    assert (model.neutral[list(LANDMARK_GROUPS["left_eye_upper_lid"]), 0] > 0).all()


def test_mirror_shape_involution(model):
    np.testing.assert_array_equal(model.mirror[model.mirror], np.arange(478))
    p = model.evaluate(np.eye(52, dtype=np.float32)[0])
    np.testing.assert_allclose(model.mirror_shape(model.mirror_shape(p)), p)


def test_load_errors(tmp_path, model):
    with pytest.raises(ModelLoadError, match="build_face_model"):
        load_face_model(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ModelLoadError, match="cannot be read"):
        load_face_model(bad)
    arrays = {k: getattr(model, k) for k in ("neutral", "triangles", "blendshapes", "identity", "mirror")}
    arrays.update(version=np.array(1), identity_names=np.array(model.identity_names),
                  blendshape_names=np.array(BLENDSHAPE_NAMES[::-1]))
    with pytest.raises(ModelLoadError, match="order"):
        face_model_from_arrays(arrays)
    arrays["blendshape_names"] = np.array(BLENDSHAPE_NAMES)
    out = tmp_path / "copy.npz"
    save_face_model(out, arrays)
    copy = load_face_model(out)
    np.testing.assert_array_equal(copy.blendshapes, model.blendshapes)
    del arrays["mirror"]
    with pytest.raises(AvatarError, match="mirror"):
        face_model_from_arrays(arrays)
