"""The numpy NNLS of the face-model fit against scipy's (Lawson and Hanson, both)."""
import numpy as np
import pytest

from avatar_app.reconstruction.shape_fit import nnls


@pytest.mark.parametrize("seed", range(40))
def test_nnls_matches_scipy(seed):
    from scipy.optimize import nnls as scipy_nnls

    rng = np.random.default_rng(seed)
    m, n = rng.integers(3, 40), rng.integers(1, 28)
    a = rng.normal(size=(m, n))
    if seed % 3 == 0:  # square upper-triangular, as RegionFit.solve passes (L^T)
        a = np.triu(rng.normal(size=(n, n))) + 3 * np.eye(n)
    b = rng.normal(size=a.shape[0])
    x = nnls(a, b)
    ref, _ = scipy_nnls(a, b)
    assert (x >= 0).all()
    np.testing.assert_allclose(np.linalg.norm(a @ x - b), np.linalg.norm(a @ ref - b), rtol=1e-9, atol=1e-10)
    if np.linalg.matrix_rank(a) == n:  # unique solution
        np.testing.assert_allclose(x, ref, atol=1e-8)


def test_nnls_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="nnls"):
        nnls(np.ones((3, 2)), np.ones(4))


def test_nnls_zero_when_everything_points_away():
    a = np.eye(3)
    assert np.array_equal(nnls(a, -np.ones(3)), np.zeros(3))


def test_region_fit_is_the_same_with_and_without_scipy(monkeypatch):
    """The bundle (no scipy) fits the same weights as a pip install (scipy's NNLS)."""
    import avatar_app.reconstruction.shape_fit as SF
    from avatar_app.avatar.face_model import load_face_model

    fit = SF.make_region_fit(SF.MOUTH_SHAPES, SF.MOUTH_POINTS)
    model = load_face_model()
    rng = np.random.default_rng(3)
    deltas = []
    for _ in range(20):  # a few shapes at random weights, plus MediaPipe-sized noise (1.5 mm)
        w = np.zeros(model.blendshapes.shape[0])
        w[rng.choice(len(w), 3, replace=False)] = rng.random(3)
        deltas.append(np.tensordot(w, model.blendshapes, 1) + rng.normal(0, 0.0015, (478, 3)))
    with_scipy = [fit.solve(d) for d in deltas]
    monkeypatch.setattr(SF, "_NNLS", SF.nnls)
    without = [fit.solve(d) for d in deltas]
    assert any(w.max() > 0.05 for w in with_scipy)  # the fit found something to fit
    np.testing.assert_allclose(np.array(without), np.array(with_scipy), atol=1e-9)
