"""The mouth corners' height in the face-model fit (shape_fit height rows) and the solver's closed rest mouth."""
import numpy as np
import pytest

from avatar_app.avatar.face_model import load_face_model
from avatar_app.core.blendshapes import Blendshape as B
from avatar_app.reconstruction import geometric as GM
from avatar_app.reconstruction import shape_fit as SF


def _corner_heights(points: np.ndarray, index: list[int]) -> np.ndarray:
    """(2,) heights of 61 and 291 above the midpoint of 13 and 14 of region points (P, 3)."""
    p = {i: points[k] for k, i in enumerate(index)}
    mid = 0.5 * (p[13][1] + p[14][1])
    return np.array([p[61][1] - mid, p[291][1] - mid])


@pytest.fixture(scope="module")
def model():
    return load_face_model()


def _fit_error(model, rows) -> float:
    """Mean corner-height error (metres) of the mouth fit on noisy faces made of the fitted shapes.

    60 faces: a random third of the mouth shapes at weights up to 0.5, plus 0.5 mm of
    independent noise on every point (MediaPipe's jitter on a small face is about that),
    which the point-by-point fit spreads over the corners' height.
    """
    from avatar_app.core.blendshapes import BLENDSHAPE_NAMES

    fit = SF.make_region_fit(SF.MOUTH_SHAPES, SF.MOUTH_POINTS, model=model, height_rows=rows)
    pts = list(SF.MOUTH_POINTS)
    bs = np.asarray(model.blendshapes, np.float64)[:, pts]
    sel = [BLENDSHAPE_NAMES.index(n) for n in SF.MOUTH_SHAPES]
    rng = np.random.default_rng(0)
    errs = []
    for _ in range(60):
        w = np.zeros(len(bs))
        w[sel] = rng.uniform(0.0, 0.5, len(sel)) * (rng.uniform(size=len(sel)) < 0.3)
        d = np.einsum("b,bpi->pi", w, bs) + rng.normal(0.0, 0.0005, (len(pts), 3))
        got = np.zeros(len(bs))
        got[fit.shapes] = fit.solve_points(d)
        errs.append(np.abs(_corner_heights(np.einsum("b,bpi->pi", got, bs), pts) - _corner_heights(d, pts)).mean())
    return float(np.mean(errs))


def test_height_rows_hold_the_corner_height(model):
    """With the rows the fit reproduces the corners' height above the inner lips better."""
    without = _fit_error(model, ())
    with_rows = _fit_error(model, SF.CORNER_HEIGHT_ROWS)
    assert with_rows < 0.6 * without, (with_rows, without)


def test_zero_weight_rows_change_nothing(model):
    rows0 = tuple((c, 0.0) for c, _ in SF.CORNER_HEIGHT_ROWS)
    a = SF.make_region_fit(SF.MOUTH_SHAPES, SF.MOUTH_POINTS, model=model)
    b = SF.make_region_fit(SF.MOUTH_SHAPES, SF.MOUTH_POINTS, model=model, height_rows=rows0)
    np.testing.assert_allclose(a.proj, b.proj, atol=1e-12)
    np.testing.assert_allclose(a.chol, b.chol, atol=1e-12)


def test_height_row_outside_the_region_is_refused(model):
    with pytest.raises(ValueError, match="not a point of the region"):
        SF.make_region_fit(SF.BROW_SHAPES, SF.BROW_POINTS, model=model, height_rows=(({61: 1.0}, 1.0),))


def test_open_rest_mouth_is_closed_along_the_jaw(model):
    """A rest mouth taken over open-jawed frames gets the closed face's corner heights back."""
    r = GM._regions()
    neutral = np.asarray(model.neutral, np.float64)[r.points]
    jaw = np.asarray(model.blendshapes[B.jawOpen], np.float64)[r.points]
    open_ref = neutral + 0.35 * jaw  # about a 10 mm lip gap
    ref = open_ref.copy()
    GM._close_rest_mouth(ref)
    index = [int(i) for i in r.points[:r.n_mouth]]
    want = _corner_heights(neutral[:r.n_mouth], index)
    got = _corner_heights(ref[:r.n_mouth], index)
    before = _corner_heights(open_ref[:r.n_mouth], index)
    lifted = open_ref.copy()
    lifted[r.lip_lo, 1] = lifted[r.lip_up, 1]  # the old rest: only the lower inner lip raised
    old = _corner_heights(lifted[:r.n_mouth], index)
    np.testing.assert_allclose(got, want, atol=0.0007)
    assert np.abs(old - want).max() > 0.003, (old, want, before)
    np.testing.assert_array_equal(ref[r.lip_lo, 1], ref[r.lip_up, 1])  # the lips touch
    np.testing.assert_array_equal(ref[r.chin], open_ref[r.chin])  # the chin keeps its median
    np.testing.assert_array_equal(ref[r.n_mouth:], open_ref[r.n_mouth:])  # brows untouched


@pytest.mark.parametrize("below_mm, raised", [(9.0, True), (4.0, False)])
def test_rest_corners_far_below_a_typical_neutral_are_raised(model, below_mm, raised):
    """Before closed-mouth frames, rest corners more than 2 sd below the typical neutral's (a frown
    held with parted lips) are raised to that bound; a low mouth within it is left as it is."""
    r = GM._regions()
    solver = GM.GeometricSolver()
    c = solver.config
    ref = np.asarray(model.neutral, np.float64)[r.points].copy()
    mid = 0.5 * (ref[r.inner_up, 1] + ref[r.inner_lo, 1])
    ref[[r.corner_r, r.corner_l], 1] = mid - below_mm / 1000.0
    before = ref.copy()
    solver._corner_prior(ref, 0)
    h = ref[[r.corner_r, r.corner_l], 1] - mid
    if raised:  # no closed-mouth frames yet: the prior has its full weight
        np.testing.assert_allclose(h, c.corner_prior_low_m, atol=1e-9)
    else:
        np.testing.assert_array_equal(ref[[r.corner_r, r.corner_l], 1], before[[r.corner_r, r.corner_l], 1])
