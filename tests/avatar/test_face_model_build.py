"""Rebuilding the face model reproduces the shipped assets/face_model.npz."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.authoring import face_model_topology as topo
from avatar_app.avatar.face_model import load_face_model
from avatar_app.avatar.authoring.face_model_fields import MeshFields, smoothstep
from avatar_app.resources import resource_path


@pytest.fixture(scope="module")
def rebuilt():
    from training.build_face_model import build_arrays

    return build_arrays()


def test_rebuild_matches_shipped_asset(rebuilt):
    shipped = np.load(resource_path("assets/face_model.npz"), allow_pickle=False)
    assert sorted(shipped.files) == sorted(rebuilt)
    for key in ("triangles", "mirror", "blendshape_names", "identity_names", "version"):
        np.testing.assert_array_equal(shipped[key], rebuilt[key], err_msg=key)
    # float arrays: MediaPipe's CPU inference may differ in the last bits between machines
    for key in ("neutral", "blendshapes", "identity"):
        np.testing.assert_allclose(shipped[key], rebuilt[key], atol=2e-4, err_msg=key)


def test_asset_is_small():
    assert resource_path("assets/face_model.npz").stat().st_size < 2_000_000


def test_neutral_lips_closed_and_mouth_relaxed():
    """The photo smiles; the shipped neutral does not (closed lips, corners at the lip line)."""
    n = load_face_model().neutral.astype(np.float64)
    stomion = 0.5 * (n[13, 1] + n[14, 1])
    assert np.linalg.norm(n[13] - n[14]) < 1e-3
    assert -3e-3 < n[291, 1] - stomion < 0.5e-3 and 0.045 < n[291, 0] - n[61, 0] < 0.056


def test_interpolation_holds_handles_and_decays():
    tris = topo.tessellation_triangles()
    n = load_face_model().neutral[:468].astype(np.float64)
    f = MeshFields(n, topo.edges(tris), tris)
    out = f.interpolate({291: np.array([0.0, 0.005, 0.0])}, radius=0.03)
    d = f.geodesic([291])
    assert out[291, 1] == 0.005 and (out[d > 0.03] == 0).all()
    near = (d > 0) & (d < 0.01)
    assert (out[near, 1] > 0.001).all()
    np.testing.assert_allclose(smoothstep(np.array([-1.0, 0.5, 2.0]), 0.0, 1.0), [0.0, 0.5, 1.0])
