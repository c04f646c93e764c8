"""The face model against MediaPipe's canonical face (test data only, never shipped).

../shared/testdata/reference/canonical_face_model.obj holds MediaPipe's
canonical face (468 vertices in landmark order, centimetres). The rig's
neutral must match it up to a similarity transform (Umeyama), its triangles
must be MediaPipe's tessellation, and its mirror map must be the canonical
face's own symmetry.
"""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.authoring import face_model_topology as topo
from avatar_app.avatar.face_model import load_face_model


def read_obj_vertices(path) -> np.ndarray:
    rows = [line.split()[1:4] for line in path.read_text().splitlines() if line.startswith("v ")]
    return np.array(rows, np.float64)


def umeyama(src: np.ndarray, dst: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Similarity (scale, rotation, translation) mapping src onto dst in least squares.

    Umeyama, "Least-squares estimation of transformation parameters between two
    point patterns", IEEE TPAMI 13(4), 1991.
    """
    ms, md = src.mean(0), dst.mean(0)
    a, b = src - ms, dst - md
    u, d, vt = np.linalg.svd(b.T @ a / len(src))
    s = np.ones(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        s[-1] = -1
    r = u @ np.diag(s) @ vt
    c = float((d * s).sum() / a.var(0).sum())
    return c, r, md - c * r @ ms


@pytest.fixture(scope="module")
def canonical(testdata) -> np.ndarray:
    v = read_obj_vertices(testdata / "reference" / "canonical_face_model.obj") / 100.0  # cm -> m
    assert v.shape == (468, 3)
    return v


@pytest.fixture(scope="module")
def model():
    return load_face_model()


def alignment_error(neutral: np.ndarray, canonical: np.ndarray) -> tuple[float, float]:
    """(mean distance after similarity alignment, face width), both in the rig's metres."""
    c, r, t = umeyama(canonical, neutral[:468].astype(np.float64))
    aligned = c * canonical @ r.T + t
    err = np.linalg.norm(aligned - neutral[:468], axis=1).mean()
    width = np.linalg.norm(neutral[234] - neutral[454])
    return float(err), float(width)


def test_neutral_matches_canonical_face_up_to_similarity(model, canonical):
    err, width = alignment_error(model.neutral, canonical)
    # measured when built: 4.2 mm, 3.2 % of the 133 mm face width
    assert err < 0.05 * width, f"mean distance {1000 * err:.1f} mm = {100 * err / width:.1f} % of face width"


def test_alignment_test_can_fail(model, canonical):
    """A scrambled landmark order is far off: the alignment test discriminates."""
    rng = np.random.default_rng(0)
    scrambled = model.neutral.copy()
    scrambled[:468] = scrambled[rng.permutation(468)]
    err, width = alignment_error(scrambled, canonical)
    assert err > 0.2 * width


def test_axes_and_metric_scale(model, canonical):
    """Same axes as the canonical face (x subject's left, y up, z out), metres."""
    n = model.neutral
    c, r, _ = umeyama(canonical, n[:468].astype(np.float64))
    angle = np.degrees(np.arccos(np.clip((np.trace(r) - 1) / 2, -1, 1)))
    assert angle < 5.0 and n[263, 0] > 0 > n[33, 0] and n[10, 1] > n[152, 1] and n[4, 2] > n[234, 2]
    ipd = np.linalg.norm(n[468] - n[473])
    width = np.linalg.norm(n[234] - n[454])
    assert abs(ipd - 0.063) < 1e-4 and 0.125 < width < 0.15


def test_triangles_are_mediapipe_tessellation(model):
    from mediapipe.python.solutions.face_mesh_connections import FACEMESH_TESSELATION

    mp_edges = {tuple(sorted(e)) for e in FACEMESH_TESSELATION}
    ours = {tuple(e) for e in topo.edges(model.triangles)}
    assert model.triangles.shape == (852, 3) and ours == mp_edges


def test_triangles_face_out_of_the_face(model):
    v = model.neutral[:468].astype(np.float64)
    t = model.triangles
    n = np.cross(v[t[:, 1]] - v[t[:, 0]], v[t[:, 2]] - v[t[:, 0]])
    centroid_dir = v[t].mean(1) - np.array([0.0, 0.0, -0.05])  # from a point behind the face
    assert np.mean((n * centroid_dir).sum(1) > 0) > 0.95


def test_mirror_map_is_canonical_symmetry(model, canonical):
    """The map found on the photo equals the canonical face's exact mirror symmetry."""
    flipped = canonical * np.array([-1.0, 1.0, 1.0])
    d = np.linalg.norm(canonical[:, None] - flipped[None, model.mirror[:468]], axis=2)
    assert np.allclose(np.diag(d), 0.0, atol=1e-5)


def test_shipped_model_is_not_the_canonical_mesh(model, canonical):
    """Built from a photo, not copied: after alignment it differs by millimetres everywhere."""
    c, r, t = umeyama(canonical, model.neutral[:468].astype(np.float64))
    aligned = c * canonical @ r.T + t
    d = np.linalg.norm(aligned - model.neutral[:468], axis=1)
    assert np.median(d) > 1e-3
