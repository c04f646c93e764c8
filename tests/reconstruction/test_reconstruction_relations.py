"""The default face path (the geometric solver) on real stills: stability under JPEG jitter and the
metamorphic relations (mirror flip, in-plane rotation, rescale), as the engine's tests check them
(tests/reconstruction/test_face_recon_real.py), plus pose/expression separation (issue 17 item 5)."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from avatar_app.core.blendshapes import Blendshape as B
from avatar_app.core.blendshapes import mirror_index
from avatar_app.core.rotations import euler_from_rotation
from avatar_app.reconstruction.geometric import GeometricSolver
from avatar_app.tracking import FaceTracker, RunningMode

_GRID = ("grid_lbax4n_frame10.png", "grid_lbax4n_frame29.png")
_LONDON = ("london_005_03_neutral.jpg", "london_005_08_smiling.jpg")
PAIRS = [pytest.param(_GRID, id="grid"), pytest.param(_LONDON, id="london")]


def _xfail(why: str):
    return pytest.mark.xfail(strict=True, reason=f"not met by the solver: {why} (solver before issue 17 in brackets)")


# MediaPipe's own non-equivariance, not the solver's: on the same landmarks mirrored or rotated
# (test_solver_is_exactly_mirror_and_rotation_equivariant) the solver's output is identical to
# float precision. The flipped image's landmarks, mirrored back, differ from the original's by
# 1.67 mm rms over the fitted points (GRID, 59 px between the irises; the expression itself moves
# them 1.48 mm rms): the upper lip by 1.1-1.6 mm, a third of the face model's 4-5 mm of
# mouthUpperUp. London: 1.09 mm rms (upper lip 0.5-0.8 mm). The rotated GRID image: 1.2 mm rms,
# the brows 1.0-1.3 mm (browOuterUp moves them 2.5-6.5 mm per unit).
_MP = "MediaPipe's landmarks differ"
PAIRS_FLIP = [pytest.param(_GRID, id="grid", marks=_xfail(f"max diff 0.35, mouthUpperUpLeft; {_MP} [0.13, brows]")),
              pytest.param(_LONDON, id="london", marks=_xfail(f"0.18, mouthUpperUpRight; {_MP} [0.08]"))]
PAIRS_ROT = [pytest.param(_GRID, id="grid", marks=_xfail(f"0.18, browOuterUpRight; {_MP} [0.11]")),
             pytest.param(_LONDON, id="london")]
#: The engine tests' tolerances: MediaPipe itself is not exactly flip-, rotation- or scale-equivariant.
TOL_W, TOL_DEG = 0.12, 2.0


@pytest.fixture(scope="module")
def tracker():
    with FaceTracker(RunningMode.IMAGE) as t:
        yield t


def _img(testdata, name):
    img = cv2.imread(str(testdata / "images" / name))
    assert img is not None, name
    return img


def _solve(tracker, neutral_img, img):
    n, f = tracker.process_image(neutral_img), tracker.process_image(img)
    assert n is not None and f is not None
    s = GeometricSolver()
    s.calibrate_neutral(n)
    return s.reconstruct(f, 1.0)


def _ypr(p):
    return np.degrees(euler_from_rotation(p.rotation))


@pytest.mark.parametrize("pair", PAIRS_FLIP)
def test_flip_swaps_left_and_right(tracker, testdata, pair):
    n_img, f_img = _img(testdata, pair[0]), _img(testdata, pair[1])
    a = _solve(tracker, n_img, f_img)
    b = _solve(tracker, n_img[:, ::-1].copy(), f_img[:, ::-1].copy())
    diff = np.abs(a.blendshapes - b.blendshapes[mirror_index()])
    assert diff.max() <= TOL_W, (B(int(diff.argmax())).name, diff.max())
    ya, yb = _ypr(a), _ypr(b)
    assert abs(ya[0] + yb[0]) < TOL_DEG and abs(ya[2] + yb[2]) < TOL_DEG and abs(ya[1] - yb[1]) < TOL_DEG


def _mirror_landmarks(lm):
    from avatar_app.avatar.face_model import load_face_model
    from avatar_app.core.types import Landmarks

    p = lm.points[load_face_model().mirror].copy()
    p[:, 0] = 1.0 - p[:, 0]
    return Landmarks(p, lm.image_size)


def _rotate_landmarks(lm, deg):
    from avatar_app.core.types import Landmarks

    w, h = lm.image_size
    m = cv2.getRotationMatrix2D((w / 2, h / 2), deg, 1.0)
    p = lm.points.copy()
    px = lm.points[:, :2].astype(np.float64) * (w, h)
    p[:, :2] = (px @ m[:, :2].T + m[:, 2]) / (w, h)
    return Landmarks(p.astype(np.float32), lm.image_size)


@pytest.mark.parametrize("pair", PAIRS)
def test_solver_is_exactly_mirror_and_rotation_equivariant(tracker, testdata, pair):
    """The same landmarks mirrored (sides swapped) or turned 12 degrees in the image plane: the
    solver's weights are the mirrored / same ones (no asymmetric weight, per-side threshold or
    image-axis reference), so what the image-level relations miss is MediaPipe's."""
    n = tracker.process_image(_img(testdata, pair[0]))
    f = tracker.process_image(_img(testdata, pair[1]))

    def solve(n, f):
        s = GeometricSolver()
        s.calibrate_neutral(n)
        return s.reconstruct(f, 1.0)

    a = solve(n, f)
    assert a.blendshapes.max() > 0.1  # an expression, not a neutral face
    m = solve(_mirror_landmarks(n), _mirror_landmarks(f))
    np.testing.assert_allclose(m.blendshapes[mirror_index()], a.blendshapes, atol=1e-3)
    r = solve(n, _rotate_landmarks(f, 12.0))
    np.testing.assert_allclose(r.blendshapes, a.blendshapes, atol=1e-3)
    assert abs((_ypr(r)[2] - _ypr(a)[2]) - 12.0) < 0.5


@pytest.mark.parametrize("pair", PAIRS_ROT)
def test_in_plane_rotation_changes_roll_only(tracker, testdata, pair):
    n_img, f_img = _img(testdata, pair[0]), _img(testdata, pair[1])
    h, w = f_img.shape[:2]
    rot_img = cv2.warpAffine(f_img, cv2.getRotationMatrix2D((w / 2, h / 2), 12.0, 1.0), (w, h),
                             borderMode=cv2.BORDER_REPLICATE)
    a, b = _solve(tracker, n_img, f_img), _solve(tracker, n_img, rot_img)
    diff = np.abs(a.blendshapes - b.blendshapes)
    assert diff.max() <= TOL_W, (B(int(diff.argmax())).name, diff.max())
    ya, yb = _ypr(a), _ypr(b)
    assert abs(ya[0] - yb[0]) < TOL_DEG and abs(ya[1] - yb[1]) < TOL_DEG
    assert abs((yb[2] - ya[2]) - 12.0) < TOL_DEG


@pytest.mark.parametrize("pair", PAIRS)
def test_rescaling_the_frame_changes_nothing(tracker, testdata, pair):
    n_img, f_img = _img(testdata, pair[0]), _img(testdata, pair[1])
    small = cv2.resize(f_img, None, fx=0.7, fy=0.7, interpolation=cv2.INTER_AREA)
    a, b = _solve(tracker, n_img, f_img), _solve(tracker, n_img, small)
    diff = np.abs(a.blendshapes - b.blendshapes)
    assert diff.max() <= TOL_W, (B(int(diff.argmax())).name, diff.max())
    assert np.all(np.abs(_ypr(a) - _ypr(b)) < TOL_DEG)


@pytest.mark.slow
@_xfail("sd 0.029 of mouthStretchLeft, mouthLowerDownRight 0.024, browDownLeft 0.020 (eyeWideLeft 0.061 -> "
        "0.027 with the eye mapping's rounded start). The face is 59 px between the irises: MediaPipe's "
        "head-frame points jitter 0.42 mm (sd) on the mouth and brows, and the shapes move them 4-7 mm "
        "per unit [mouthLowerDownRight 0.031]")
def test_raw_output_is_stable_under_jpeg_and_subpixel_shifts(tracker, testdata):
    """200 JPEG re-encodes (quality 85-95) shifted by up to 1 px: raw solver output sd <= 0.01."""
    from avatar_app.evaluation.stability import still_jitter_sd

    sd = still_jitter_sd(GeometricSolver(), _img(testdata, "grid_lbax4n_frame10.png"), tracker)
    assert sd.max() <= 0.01, (B(int(sd.argmax())).name, sd.max())


def test_expressions_do_not_move_the_head_pose(tracker, testdata):
    """The face model's own shapes on a real face, projected frontally: the head pose stays put."""
    from avatar_app.avatar.face_model import load_face_model
    from avatar_app.reconstruction.head_pose import make_neutral_face
    from tests.helpers import project

    lm = tracker.process_image(_img(testdata, "london_005_03_neutral.jpg"))
    head = make_neutral_face(lm).points_m.astype(np.float64)
    model = load_face_model()
    s = GeometricSolver()
    s.calibrate_neutral(project(head))
    for t, shapes in enumerate((("jawOpen",), ("mouthSmileLeft", "mouthSmileRight"), ("browInnerUp",),
                                ("eyeBlinkLeft",), ("mouthPucker",)), start=1):
        w = np.zeros(52, np.float32)
        w[[B[n] for n in shapes]] = 0.8
        p = s.reconstruct(project(head + model.evaluate(w) - model.neutral), float(t))
        assert np.all(np.abs(_ypr(p)) < 1.5), (shapes, _ypr(p))
