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
