"""The GeometricSolver's per-frame fast paths against the plain formulas they replaced.

Issue 18 made the solver's per-frame work cheaper (precomputed head-pose fit, index
arrays, a folded triangular solve, rest values reused between kept samples, the
single-feature mouth and brow weights skipped where the face-model fit replaces them).
The references below are the formulas as they were written before (kept here, not in the
product); on real tracked recordings (GRID, an expressive LivePortrait clip) the fast
solver must give the same weights, pose and gaze: at most 1e-6 apart (in practice
bit-identical).
"""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.core import landmarks as lmk
from avatar_app.core.blendshapes import NUM_BLENDSHAPES
from avatar_app.core.blendshapes import Blendshape as B
from avatar_app.reconstruction import geometric as G
from avatar_app.reconstruction import shape_fit as SF
from avatar_app.reconstruction.calibration import RunningPercentiles
from avatar_app.reconstruction.geometric import Feature, GeometricSolver, GeometricSolverConfig
from avatar_app.reconstruction.head_pose import (
    HeadPoseFitter,
    estimate_head_pose,
    make_neutral_face,
)
from tests.clip_helpers import CLIPS, cached_track_clips

TOL = 1e-6  # blendshapes, gaze, rotation, translation (m)
@pytest.fixture(scope="module")
def clips(testdata) -> dict[str, tuple[list, np.ndarray]]:
    """Landmarks and frame times of the first frames of each clip (VIDEO mode; read from the
    landmark cache, tests/clip_helpers.py)."""
    return cached_track_clips(testdata)


# -- the references -------------------------------------------------------------------
def reference_features(points_m: np.ndarray) -> np.ndarray:
    """measure_features as written before issue 18 (one gather and reduction per feature)."""
    p = np.asarray(points_m, dtype=np.float64)
    f = np.empty(G.NUM_FEATURES)
    P = lmk.FacePoint
    for side, outer, inner, up, lo, iris in (
        ("R", P.RIGHT_EYE_OUTER, P.RIGHT_EYE_INNER, lmk.RIGHT_EYE_UPPER, lmk.RIGHT_EYE_LOWER, P.RIGHT_IRIS_CENTER),
        ("L", P.LEFT_EYE_OUTER, P.LEFT_EYE_INNER, lmk.LEFT_EYE_UPPER, lmk.LEFT_EYE_LOWER, P.LEFT_IRIS_CENTER),
    ):
        width = np.linalg.norm(p[outer] - p[inner])
        gaps = np.linalg.norm(p[list(up)] - p[list(lo)], axis=1)
        off = p[iris] - 0.5 * (p[outer] + p[inner])
        f[Feature[f"EYE_APERTURE_{side}"]] = gaps.mean() / max(width, 1e-9)
        f[Feature[f"IRIS_X_{side}"]] = off[0]
        f[Feature[f"IRIS_Y_{side}"]] = off[1]
    f[Feature.CHIN] = np.linalg.norm(p[P.CHIN] - p[168])
    f[Feature.LIP_GAP] = np.linalg.norm(p[list(lmk.LIP_GAP_UPPER)] - p[list(lmk.LIP_GAP_LOWER)], axis=1).mean()
    cr, cl = p[P.MOUTH_RIGHT], p[P.MOUTH_LEFT]
    f[Feature.MOUTH_WIDTH] = np.linalg.norm(cl - cr)
    mid_y = 0.5 * (p[P.LIP_UPPER_INNER, 1] + p[P.LIP_LOWER_INNER, 1])
    f[Feature.CORNER_Y_R], f[Feature.CORNER_Y_L] = cr[1] - mid_y, cl[1] - mid_y
    f[Feature.CORNER_X_R], f[Feature.CORNER_X_L] = -cr[0], cl[0]
    f[Feature.BROW_INNER_R] = p[list(lmk.RIGHT_BROW_INNER), 1].mean()
    f[Feature.BROW_INNER_L] = p[list(lmk.LEFT_BROW_INNER), 1].mean()
    f[Feature.BROW_R] = p[list(lmk.RIGHT_BROW_UPPER), 1].mean()
    f[Feature.BROW_L] = p[list(lmk.LEFT_BROW_UPPER), 1].mean()
    f[Feature.BROW_OUTER_R] = p[list(lmk.RIGHT_BROW_UPPER[:2]), 1].mean()
    f[Feature.BROW_OUTER_L] = p[list(lmk.LEFT_BROW_UPPER[:2]), 1].mean()
    return f


def reference_region_solve(fit: SF.RegionFit, d: np.ndarray) -> np.ndarray:
    """RegionFit's bounded fit with the triangular solve done per frame, as before issue 18."""
    ds = (d * fit.axis).reshape(-1)
    g = fit.design.T @ ds - fit.l1
    if fit.rows is not None and len(fit.rows):  # the corner-height rows of the mouth fit
        g = g + fit.row_design.T @ (fit.rows @ ds)
    rhs = np.linalg.solve(fit.chol, g)
    return _excluded(fit, SF.bounded_fit(fit.chol.T, rhs), rhs)


def _excluded(fit: SF.RegionFit, x: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """The antagonist step every solve ends with (shape_fit.RegionFit._exclude_antagonists, issue 17;
    tests/reconstruction/test_reconstruction_geometric.py checks it against a brute-force search)."""
    return fit._exclude_antagonists(x, rhs) if fit.exclusive else x


def reference_mapping(solver: GeometricSolver, f: np.ndarray, ref: np.ndarray):
    """GeometricSolver._solve as before issue 18: every weight from single features."""
    c, clip = solver.config, lambda x: np.clip(x, 0.0, 1.0)
    d = f - ref
    w = np.zeros(NUM_BLENDSHAPES)
    eyes = [Feature.EYE_APERTURE_R, Feature.EYE_APERTURE_L]
    ratio = f[eyes] / np.maximum(ref[eyes], 1e-6)
    blink = clip((c.blink_start_ratio - ratio) / (c.blink_start_ratio - c.blink_full_ratio))
    linked = np.maximum(blink, np.minimum(blink[::-1], solver._blink_link(blink) * blink))
    w[B.eyeBlinkRight], w[B.eyeBlinkLeft] = linked
    x, k = clip((ratio - c.wide_start_ratio) / (c.wide_full_ratio - c.wide_start_ratio)), c.wide_knee
    if k > 0:  # the rounded start (issue 17's stability): quadratic up to the knee, then linear
        x = np.array([(v * v / (2 * k) if v < k else v - k / 2) / (1 - k / 2) for v in x])
    w[B.eyeWideRight], w[B.eyeWideLeft] = x
    iris = [[Feature.IRIS_X_R, Feature.IRIS_X_L], [Feature.IRIS_Y_R, Feature.IRIS_Y_L]]
    meas = np.arcsin(np.clip(d[iris] * (1.0 / G.EYEBALL_RADIUS_M), -1.0, 1.0))
    angles = (1.0 - linked) * meas + linked * solver._eye_angles
    solver._eye_angles = angles
    hy, vp = angles[0] / c.gaze_yaw_full_rad, angles[1] / c.gaze_pitch_full_rad
    w[B.eyeLookOutLeft], w[B.eyeLookInLeft] = clip(hy[1]), clip(-hy[1])
    w[B.eyeLookInRight], w[B.eyeLookOutRight] = clip(hy[0]), clip(-hy[0])
    w[B.eyeLookUpRight], w[B.eyeLookDownRight] = clip(vp[0]), clip(-vp[0])
    w[B.eyeLookUpLeft], w[B.eyeLookDownLeft] = clip(vp[1]), clip(-vp[1])
    jaw = clip(d[Feature.CHIN] / c.jaw_range_m)
    w[B.jawOpen] = jaw
    w[B.mouthClose] = clip(jaw - clip(d[Feature.LIP_GAP] / c.lip_range_m))
    narrow = clip((-d[Feature.MOUTH_WIDTH] / max(ref[Feature.MOUTH_WIDTH], 1e-6) - c.narrow_start) / c.narrow_range)
    rounded = clip(d[Feature.LIP_GAP] / c.funnel_gap_m)
    w[B.mouthFunnel], w[B.mouthPucker] = narrow * rounded, narrow * (1.0 - rounded)
    for side, smile, frown in (("R", B.mouthSmileRight, B.mouthFrownRight), ("L", B.mouthSmileLeft, B.mouthFrownLeft)):
        lift, pull = d[Feature[f"CORNER_Y_{side}"]], d[Feature[f"CORNER_X_{side}"]]
        w[smile], w[frown] = clip((lift + 0.5 * pull) / c.smile_range_m), clip(-lift / c.frown_range_m)
    w[B.browInnerUp] = clip(0.5 * (d[Feature.BROW_INNER_R] + d[Feature.BROW_INNER_L]) / c.brow_up_range_m)
    w[B.browDownRight] = clip(-d[Feature.BROW_R] / c.brow_down_range_m)
    w[B.browDownLeft] = clip(-d[Feature.BROW_L] / c.brow_down_range_m)
    w[B.browOuterUpRight] = clip(d[Feature.BROW_OUTER_R] / c.brow_up_range_m)
    w[B.browOuterUpLeft] = clip(d[Feature.BROW_OUTER_L] / c.brow_up_range_m)
    return w.astype(np.float32), angles.mean(axis=1).astype(np.float32)


def run_solver(lms, times, config=None, explicit=False, bits=False):
    """(frames, 52 + 9 + 3 + 2) weights, rotation, translation and gaze of a solver run; with ``bits``,
    per frame the bytes of those, of the features and of the eye angles."""
    solver = GeometricSolver(config)
    if explicit:
        solver.calibrate_neutral(lms[0])
    rows = []
    for lm, t in zip(lms, times):
        p = solver.reconstruct(lm, t)
        if bits:
            rows.append(b"".join(a.tobytes() for a in (p.blendshapes, p.rotation, p.translation, p.gaze,
                                                       solver.last_features, solver._eye_angles)))
        else:
            rows.append(np.concatenate([p.blendshapes, p.rotation.ravel(), p.translation, p.gaze]))
    return rows if bits else np.array(rows, np.float64)


@pytest.fixture
def reference_solver(monkeypatch):
    """Patch the solver back onto the reference formulas (the fast ones stay untouched elsewhere)."""
    monkeypatch.setattr(HeadPoseFitter, "fit", lambda self, lm: estimate_head_pose(lm, self.neutral, self.hfov_deg))
    monkeypatch.setattr(G, "measure_features", reference_features)
    monkeypatch.setattr(SF.RegionFit, "solve_points", reference_region_solve)
    monkeypatch.setattr(GeometricSolver, "_solve", reference_mapping)
    update = RunningPercentiles.update
    monkeypatch.setattr(RunningPercentiles, "update", lambda self, x, t: update(self, x, t) or True)  # no reuse


# -- the tests ------------------------------------------------------------------------
def test_head_pose_fitter_equals_estimate_head_pose(clips):
    for lms, _ in clips.values():
        neutral = make_neutral_face(lms[0], level_yaw_roll=True)
        fitter = HeadPoseFitter(neutral)
        for lm in lms:
            a, b = estimate_head_pose(lm, neutral), fitter.fit(lm)
            np.testing.assert_allclose(b.points_m, a.points_m, rtol=0, atol=1e-9)
            np.testing.assert_allclose(b.rotation, a.rotation, rtol=0, atol=1e-7)
            np.testing.assert_allclose(b.translation, a.translation, rtol=0, atol=1e-7)
            assert b.px_per_m == pytest.approx(a.px_per_m, rel=1e-12)
            assert b.rms_px == pytest.approx(a.rms_px, rel=1e-9, abs=1e-12)


def test_pixel_space_and_unprojection_are_bit_identical_to_the_column_formulas(clips):
    """landmarks_to_pixel_space and _unproject, rewritten as whole-array operations (issue 18),
    give the bits of the per-column formulas they replaced, on real landmarks."""
    from avatar_app.reconstruction import head_pose as H

    for lms, _ in clips.values():
        for lm in lms[::3]:
            pts = np.asarray(lm.points).astype(np.float64)
            w, h = lm.image_size
            ref = np.empty_like(pts)
            ref[:, 0] = (pts[:, 0] - 0.5) * w
            ref[:, 1] = (0.5 - pts[:, 1]) * h
            ref[:, 2] = -pts[:, 2] * w
            got = H.landmarks_to_pixel_space(lm)
            np.testing.assert_array_equal(got, ref)
            c, z_ref, f = 1234.5, float(ref[1, 2]), H.focal_length_px(w, H.DEFAULT_HFOV_DEG)
            depth = f / c - (ref[:, 2] - z_ref) / c
            cam = np.empty_like(ref)
            cam[:, 0] = ref[:, 0] * depth / f
            cam[:, 1] = ref[:, 1] * depth / f
            cam[:, 2] = -depth
            np.testing.assert_array_equal(H._unproject(ref, c, z_ref, f), cam)


def test_features_equal_the_plain_formulas(clips):
    for lms, _ in clips.values():
        neutral = make_neutral_face(lms[0], level_yaw_roll=True)
        for lm in lms[::5]:
            pts = estimate_head_pose(lm, neutral).points_m
            np.testing.assert_allclose(G.measure_features(pts), reference_features(pts), rtol=1e-14, atol=1e-15)


def test_region_fit_equals_the_per_frame_triangular_solve():
    model_fits = (*SF.default_fits(), *SF.jaw_fixed_fits())
    rng = np.random.default_rng(7)
    for fit in model_fits:
        for scale in (0.0005, 0.002, 0.006):  # jitter, speech, wide expressions (metres)
            for _ in range(20):
                d = rng.normal(0.0, scale, (len(fit.points), 3))
                np.testing.assert_allclose(fit.solve_points(d), reference_region_solve(fit, d), rtol=0, atol=1e-9)
        delta = rng.normal(0.0, 0.002, (478, 3))
        np.testing.assert_array_equal(fit.solve(delta), fit.solve_points(delta[fit.points]))


@pytest.mark.parametrize("fit_shapes", [True, False])
def test_solver_equals_the_reference_solver_on_real_clips(clips, monkeypatch, fit_shapes, request):
    config = GeometricSolverConfig(fit_shapes=fit_shapes)
    fast = {k: run_solver(lms, t, config) for k, (lms, t) in clips.items()}
    fast_explicit = run_solver(*clips[CLIPS[0][0]], config, explicit=True)
    request.getfixturevalue("reference_solver")
    for k, (lms, t) in clips.items():
        ref = run_solver(lms, t, config)
        assert np.abs(ref[:, :NUM_BLENDSHAPES]).max() > 0.3, "the clip moves the face"
        np.testing.assert_allclose(fast[k], ref, rtol=0, atol=TOL, err_msg=k)
    np.testing.assert_allclose(fast_explicit, run_solver(*clips[CLIPS[0][0]], config, explicit=True),
                               rtol=0, atol=TOL)


# -- issue 18, after issue 17's refit around the held jaw: frozen copies of the code as merged ------
# (commit 8eaf959); the faster solver must give the same bits, not merely values within TOL.
def frozen_bounded_fit(a: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """shape_fit.bounded_fit at 8eaf959: every pass through the loop and scipy's public NNLS."""
    held, x, passes = np.zeros(len(rhs), bool), np.zeros(len(rhs)), 0
    while passes < len(rhs):  # (as it was written, in another shape)
        passes += 1
        x[~held] = SF._NNLS(a[:, ~held], rhs - a[:, held].sum(1))
        x[held] = 1.0
        if not (x[~held] > 1.0).any():
            break
        held = held | (x > 1.0)
    return np.minimum(x, 1.0)


def frozen_solve_points(fit: SF.RegionFit, d: np.ndarray) -> np.ndarray:
    """RegionFit.solve_points at 8eaf959 (axis weights applied to d, the bounded fit on chol.T)."""
    rhs = fit.proj @ (d * fit.axis).reshape(-1) - fit.l1_proj
    return _excluded(fit, frozen_bounded_fit(fit.chol.T, rhs), rhs)


def frozen_features(points_m: np.ndarray) -> np.ndarray:
    """measure_features at 8eaf959 (a gather per point set, np.linalg.norm)."""
    ix = G._FEATURE_INDEX
    p = np.asarray(points_m, dtype=np.float64)
    f = np.empty(G.NUM_FEATURES)
    gaps = np.linalg.norm(p[ix.lid_up] - p[ix.lid_lo], axis=1)
    seg = np.linalg.norm(p[ix.seg_a] - p[ix.seg_b], axis=1)
    n = ix.n_lid_r
    f[Feature.EYE_APERTURE_R] = gaps[:n].sum() / n / max(seg[0], 1e-9)
    f[Feature.EYE_APERTURE_L] = gaps[n:].sum() / (len(gaps) - n) / max(seg[1], 1e-9)
    off = p[ix.iris] - 0.5 * (p[ix.seg_a[:2]] + p[ix.seg_b[:2]])
    f[[Feature.IRIS_X_R, Feature.IRIS_Y_R]] = off[0, :2]
    f[[Feature.IRIS_X_L, Feature.IRIS_Y_L]] = off[1, :2]
    f[Feature.CHIN] = seg[2]
    f[Feature.LIP_GAP] = np.linalg.norm(p[ix.gap_up] - p[ix.gap_lo], axis=1).sum() / len(ix.gap_up)
    f[Feature.MOUTH_WIDTH] = seg[3]
    (xr, yr, _), (xl, yl, _) = p[ix.corners]
    mid = 0.5 * (p[ix.inner_mid[0], 1] + p[ix.inner_mid[1], 1])
    f[Feature.CORNER_Y_R:Feature.CORNER_X_L + 1] = [yr - mid, yl - mid, -xr, xl]
    f[Feature.BROW_INNER_R:] = np.add.reduceat(p[ix.brow, 1], ix.brow_cuts[:-1]) / ix.brow_counts
    return f


def frozen_hold_jaw(solver: GeometricSolver, d: np.ndarray, chin_jaw: float, w: np.ndarray) -> None:
    """GeometricSolver._hold_jaw at 8eaf959 (np.tensordot for mouthUpperUp's offsets)."""
    r, jaw, (up, up_off) = G._regions(), G._jaw_offsets(), G._upper_up_offsets()
    drop = min(max(-float(d[r.chin, 1]) / solver.config.jaw_range_m, 0.0), 1.0)
    for fit, jaw_w, chin in zip(SF.jaw_fixed_fits(), (drop, chin_jaw), (False, True)):  # (in another shape)
        if jaw_w > w[B.jawOpen]:
            w[B.jawOpen] = jaw_w
            rest = d - jaw_w * jaw
            if chin:
                rest = rest - np.tensordot(w[up].astype(np.float64), up_off, 1)
            w[fit.shapes] = fit.solve_points(rest)


def frozen_mapping(solver: GeometricSolver, f: np.ndarray, ref: np.ndarray):
    """GeometricSolver._solve at 8eaf959 (np.clip, ndarray.mean), with eyeWide's rounded start."""
    c = solver.config
    d = f - ref
    w = np.zeros(NUM_BLENDSHAPES, dtype=np.float64)
    ratio = f[G._EYES] / np.maximum(ref[G._EYES], 1e-6)
    blink = np.clip((c.blink_start_ratio - ratio) / (c.blink_start_ratio - c.blink_full_ratio), 0.0, 1.0)
    linked = np.maximum(blink, np.minimum(blink[::-1], solver._blink_link(blink) * blink))
    w[G._BLINK_OUT] = linked
    # rel21's rounded start (its array form, array_soft_ramp) in place of 8eaf959's np.clip
    span = c.wide_full_ratio - c.wide_start_ratio
    w[G._WIDE_OUT] = array_soft_ramp((ratio - c.wide_start_ratio) / span, c.wide_knee)
    meas = np.arcsin(np.clip(d[G._IRIS] * (1.0 / G.EYEBALL_RADIUS_M), -1.0, 1.0))
    angles = (1.0 - linked) * meas + linked * solver._eye_angles
    solver._eye_angles = angles
    gaze = angles.mean(axis=1).astype(np.float32)
    hy = angles[0] / c.gaze_yaw_full_rad
    vp = angles[1] / c.gaze_pitch_full_rad
    w[G._LOOK_OUT] = np.clip(np.concatenate([hy, -hy, vp, -vp]), 0.0, 1.0)
    dl = d.tolist()
    jaw = G._clip01(dl[Feature.CHIN] / c.jaw_range_m)
    w[B.jawOpen] = jaw
    if not c.fit_shapes:
        solver._solve_mouth_brows(dl, float(ref[Feature.MOUTH_WIDTH]), jaw, w)
    return w.astype(np.float32), gaze


def recording_region_fits(monkeypatch) -> list[bytes]:
    """Record each RegionFit.solve_points call's displacements and float64 weights (as bytes): the
    float32 outputs alone would hide a last-bit difference of the fits."""
    calls, solve = [], SF.RegionFit.solve_points

    def recorded(fit, d):
        x = solve(fit, d)
        calls.append(np.asarray(d, np.float64).tobytes() + x.tobytes())
        return x

    monkeypatch.setattr(SF.RegionFit, "solve_points", recorded)
    return calls


@pytest.mark.parametrize("fit_shapes", [True, False])
def test_solver_bit_identical_to_the_frozen_solver_on_real_clips(clips, monkeypatch, fit_shapes):
    config = GeometricSolverConfig(fit_shapes=fit_shapes)
    runs = [(k, explicit) for k in clips for explicit in (False, True)]
    with monkeypatch.context() as m:
        fast_fits = recording_region_fits(m)
        fast = {run: run_solver(*clips[run[0]], config, run[1], bits=True) for run in runs}
    monkeypatch.setattr(G, "measure_features", frozen_features)
    monkeypatch.setattr(SF.RegionFit, "solve_points", frozen_solve_points)
    monkeypatch.setattr(GeometricSolver, "_hold_jaw", frozen_hold_jaw)
    monkeypatch.setattr(GeometricSolver, "_solve", frozen_mapping)
    frozen_fits = recording_region_fits(monkeypatch)
    for run in runs:
        frozen = run_solver(*clips[run[0]], config, run[1], bits=True)
        assert len(frozen) == len(fast[run])
        differ = [i for i, (a, b) in enumerate(zip(fast[run], frozen)) if a != b]
        assert not differ, f"{run}: frames {differ[:10]} differ"
    assert len(fast_fits) == len(frozen_fits) and (len(fast_fits) > 1000) == fit_shapes
    differ = [i for i, (a, b) in enumerate(zip(fast_fits, frozen_fits)) if a != b]
    assert not differ, f"region fits {differ[:10]} of {len(fast_fits)} differ"


def test_solver_refits_the_jaw_and_holds_weights_at_one_on_real_clips(clips, monkeypatch):
    """The clips reach the paths the bit test guards: both jaw refits and the bounded loop past its first pass."""
    calls = {"drop": 0, "chin": 0, "over_one": 0}
    fits = SF.jaw_fixed_fits()
    solve = SF.RegionFit.solve_points

    def counting(fit, d):
        if fit is fits[0]:
            calls["drop"] += 1
        elif fit is fits[1]:
            calls["chin"] += 1
        x = solve(fit, d)
        calls["over_one"] += int(frozen_bounded_fit(fit.chol.T, fit.proj @ (d * fit.axis).reshape(-1)
                                                    - fit.l1_proj).max() == 1.0)
        return x

    monkeypatch.setattr(SF.RegionFit, "solve_points", counting)
    for lms, t in clips.values():
        run_solver(lms, t)
    assert min(calls.values()) > 0, calls


@pytest.mark.parametrize("numpy_nnls", [False, True])  # True: the desktop bundle's NNLS (no scipy)
@pytest.mark.parametrize("point_weight", [8.0, 3.0])  # 3: axis weights not powers of two, proj left unfolded
def test_region_fit_bit_identical_to_the_frozen_fit(monkeypatch, point_weight, numpy_nnls):
    monkeypatch.setitem(SF.POINT_WEIGHTS, 61, point_weight)
    if numpy_nnls:
        monkeypatch.setattr(SF, "_NNLS", SF.nnls)
    fits = [SF.make_region_fit(SF.MOUTH_SHAPES, SF.MOUTH_POINTS, height_rows=SF.CORNER_HEIGHT_ROWS),
            SF.make_region_fit(SF.BROW_SHAPES, SF.BROW_POINTS)]
    assert (fits[0]._proj_s is None) == (point_weight == 3.0)
    rng = np.random.default_rng(11)
    over = 0
    for fit in fits + [*SF.default_fits(), *SF.jaw_fixed_fits()]:
        for scale in (0.0005, 0.002, 0.006, 0.012):  # jitter .. wide expressions, weights held at 1 (metres)
            for _ in range(25):
                d = rng.normal(0.0, scale, (len(fit.points), 3))
                got, want = fit.solve_points(d), frozen_solve_points(fit, d)
                assert got.tobytes() == want.tobytes()
                over += int(want.max() == 1.0)
    assert over > 10  # the loop past its first pass was exercised


def test_region_fit_keeps_scipys_errors_and_a_replaced_nnls(monkeypatch):
    mouth = SF.default_fits()[0]
    d = np.zeros((len(mouth.points), 3))
    d[0, 0] = np.nan
    with pytest.raises(ValueError):  # scipy's asarray_chkfinite, as before
        mouth.solve_points(d)
    seen = []
    monkeypatch.setattr(SF, "_NNLS", lambda a, b: seen.append(a.shape) or SF.nnls(a, b))
    mouth.solve_points(np.full((len(mouth.points), 3), 0.001))
    assert seen, "a replaced _NNLS (the bundle's numpy NNLS) is the one used"


def test_bounded_fit_holds_every_weight_at_one():
    """Every weight above 1: all held at 1 (the loop as it was asked scipy for an NNLS on no columns,
    which aborted the process)."""
    brow = SF.default_fits()[1]
    rhs = brow.chol.T @ np.full(len(brow.shapes), 3.0)
    np.testing.assert_array_equal(SF.bounded_fit(brow.chol.T, rhs), np.ones(len(brow.shapes)))


def array_soft_ramp(x: np.ndarray, knee: float) -> np.ndarray:
    """geometric._soft_ramp as array code (rel21's form, np.clip and np.where): the reference."""
    x = np.clip(np.asarray(x, np.float64), 0.0, 1.0)
    if knee <= 0.0:
        return x
    return np.where(x < knee, x * x / (2.0 * knee), x - 0.5 * knee) / (1.0 - 0.5 * knee)


def test_the_soft_ramp_is_its_array_form_bit_for_bit():
    """geometric._soft_ramp (Python floats, the per-frame eye mapping) against array_soft_ramp."""
    rng = np.random.default_rng(7)
    xs = np.concatenate([rng.uniform(-0.5, 1.5, 4000), [0.0, 0.25, 0.5, 1.0, np.nextafter(0.5, 0.0)]])
    for knee in (0.0, 0.25, 0.5, 1.0):
        ref = array_soft_ramp(xs, knee)
        got = np.array([G._soft_ramp(float(x), knee) for x in xs])
        assert got.tobytes() == ref.tobytes(), knee
