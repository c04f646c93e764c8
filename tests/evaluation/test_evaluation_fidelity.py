"""Issue 17's real-face bars for the default face path (the geometric solver), measured by
avatar_app.evaluation on every real video of the test data (landmarks cached by file hash).

A bar the solver does not meet yet is a strict xfail carrying its measured value: it turns
into a failure (XPASS) the day it is met. Figures: benchmarks/results/fidelity.json and
models/face_recon.md.
"""
from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from avatar_app.core.blendshapes import Blendshape as B
from avatar_app.evaluation import benchmark as BM
from avatar_app.evaluation import events as E
from avatar_app.evaluation import fidelity as F
from avatar_app.evaluation import geometry as G
from avatar_app.reconstruction.geometric import GeometricSolver


@pytest.fixture(scope="module")
def clips(testdata):
    from avatar_app.evaluation.landmarks import track_video

    return [track_video(v) for v in BM.real_videos(testdata)]


@pytest.fixture(scope="module")
def solver_result(clips):
    """evaluate_path of the default solver over every real clip (comparison (a))."""
    return F.evaluate_path(GeometricSolver(), clips)


@pytest.fixture(scope="module")
def solver_weights(solver_result):
    return {n: o.weights for n, o in solver_result["outputs"].items()}


# ------------------------------------------------------------------ the measurement itself
def test_geometry_follows_the_face_model_shapes():
    """Each feature moves with the shape that should move it, on the subject's own side."""
    from avatar_app.avatar.face_model import load_face_model

    m = load_face_model()
    f0 = G.shape_features(m.neutral)

    def moved(name):
        w = np.zeros(52, np.float32)
        w[B[name]] = 1.0
        return dict(zip(G.SHAPE_FEATURES, G.shape_features(m.evaluate(w)) - f0))

    d = moved("eyeBlinkLeft")
    assert d["eye_aperture_l"] < -0.15 and abs(d["eye_aperture_r"]) < 0.01 and d["eye_asymmetry"] > 0.15
    assert moved("jawOpen")["lip_gap"] > 0.2
    d = moved("mouthSmileLeft")
    assert d["corner_height_l"] > 0.02 and abs(d["corner_height_r"]) < 0.005 and d["mouth_width"] > 0.02
    assert moved("mouthPucker")["mouth_width"] < -0.05
    assert moved("browInnerUp")["brow_height_l"] > 0.02 and moved("browDownRight")["brow_height_r"] < -0.02


def test_scores_are_one_for_an_identical_copy_and_gain_halves(clips):
    inp, _ = G.input_features(clips[0])
    s = F.score_clip(inp, inp)
    assert all(abs(v["r"] - 1.0) < 1e-9 and abs(v["gain"] - 1.0) < 1e-9 for v in s.features.values())
    half = F.score_clip(inp, 0.5 * inp)
    assert all(abs(v["gain"] - 0.5) < 1e-9 for v in half.features.values())
    assert "brow_height" not in F.score_clip(inp * 0 + 1.0, inp).features  # constant input: not scored


def test_landmark_cache_is_keyed_by_content(testdata, tmp_path, monkeypatch):
    from avatar_app.evaluation import landmarks as LM

    monkeypatch.setenv("AVATAR_APP_LANDMARK_CACHE", str(tmp_path / "cache"))
    clip = tmp_path / "c.mp4"
    shutil.copy(testdata / "video" / "grid_s1_bbaf2n.mp4", clip)
    a = LM.track_video(clip)
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
    b = LM.track_video(clip)  # from the cache
    np.testing.assert_array_equal(a.points, b.points)
    assert a.found.all() and len(a) == 75
    shutil.copy(testdata / "video" / "grid_s2_swwp2s.mp4", clip)  # same name, other content
    c = LM.track_video(clip)
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2
    assert not np.allclose(a.points, c.points)


@pytest.mark.slow
def test_noise_floor_is_twice_the_jitter(testdata):
    """NOISE_FLOOR holds at least twice MediaPipe's own jitter of each feature on a still face."""
    import cv2

    from avatar_app.reconstruction import normalise as N
    from avatar_app.tracking import FaceTracker, RunningMode

    img = cv2.imread(str(testdata / "images" / "grid_lbax4n_frame10.png"))
    rng = np.random.default_rng(0)
    h, w = img.shape[:2]
    pts = []
    with FaceTracker(RunningMode.IMAGE) as tracker:
        for _ in range(200):
            dx, dy = rng.uniform(-1, 1, 2)
            shifted = cv2.warpAffine(img, np.float32([[1, 0, dx], [0, 1, dy]]), (w, h),
                                     borderMode=cv2.BORDER_REPLICATE)
            _, enc = cv2.imencode(".jpg", shifted, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(85, 96))])
            pts.append(tracker.process_image(cv2.imdecode(enc, cv2.IMREAD_COLOR)).points)
    head, rot, _ = N.align(np.array(pts), (w, h))
    sd = G.face_features(head, rot).std(0)
    for name, v in zip(G.FEATURES, sd):
        assert F.NOISE_FLOOR[name] >= 2.0 * v, (name, v)


def test_event_labels_are_well_formed():
    ev = E.load_events(BM.EVENTS_FILE)
    kinds = {e["kind"] for e in ev}
    assert {"wink", "pucker", "jaw_drop", "brow_raise", "cheek_puff"} <= kinds
    for e in ev:
        a, b = e["frames"]
        assert 0 <= a <= b
        if e["kind"] == "wink":
            assert e["closed"] in ("left", "right")
    # both sides are labelled, and the side checks against the landmarks: the closed eye is the narrower
    assert {e["closed"] for e in ev if e["kind"] == "wink"} == {"left", "right"}


def test_labelled_winks_close_the_named_eye_in_the_landmarks(clips):
    """Second check of subject-left against image-left: the labelled eye is the one MediaPipe sees shut."""
    by = {c.name: c for c in clips}
    for e in E.load_events(BM.EVENTS_FILE):
        if e["kind"] != "wink":
            continue
        inp, _ = G.input_features(by[e["clip"]])
        fr = E.frames_of(e)
        closed = inp[fr, G.FEATURES.index(f"eye_aperture_{e['closed'][0]}")]
        other = inp[fr, G.FEATURES.index(f"eye_aperture_{'r' if e['closed'] == 'left' else 'l'}")]
        assert np.all(closed < other), e
        # subject's left eye (263) lies on the image's right in these unmirrored clips
        assert np.all(by[e["clip"]].points[fr, 263, 0] > by[e["clip"]].points[fr, 33, 0])


# ------------------------------------------------------------------ label-free bars, comparison (a)
_MEASURED: dict[str, float] = {}  # pooled r of the solver where a bar is not met yet (none since corner height 0.9005)


@pytest.mark.parametrize("feature", [
    pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=f"not met: pooled r {_MEASURED[k]} < {v}"))
    if k in _MEASURED else k for k, v in BM.BARS.items()])
def test_pooled_r_meets_the_bar(solver_result, feature):
    r = solver_result["pooled"][feature]["r"]
    assert r >= BM.BARS[feature], (feature, r)


def test_corner_height_keeps_its_gain(solver_result):
    """Corner height 0.762 before the closed rest mouth, the corner-height rows of the mouth fit,
    the closed-mouth schedule and the corner prior's lower bound (models/face_recon.md), 0.879
    after; 0.9005 with the mouth refitted around the chin's jaw, the corner-height weight 9 and
    the neutral-only closed rest (the bar, 0.9, by a hair: in the solver's head frame the face's
    own corner height follows the benchmark's at r 0.80 on lp_d9, a ceiling of 0.921 pooled)."""
    assert solver_result["pooled"]["corner_height"]["r"] >= 0.9


def test_no_clip_mean_below_the_bar(solver_result):
    """Met since the shared open-eye reference and the typical neutral mouth at its mean: lowest
    0.81 (openmpf_video_01, its brows 0.41; 0.74 before)."""
    worst = solver_result["min_clip_mean_r"]
    assert worst >= BM.BAR_MIN_CLIP_MEAN, {n: v["mean_r"] for n, v in solver_result["clips"].items()}


def test_solver_beats_its_baseline_on_lip_gap_and_mouth_width(clips, solver_result):
    """The face-model fit (shape_fit) against the feature-mapped mouth it replaced (0.92 / 0.87)."""
    from avatar_app.reconstruction.geometric import GeometricSolverConfig

    old = F.evaluate_path(GeometricSolver(GeometricSolverConfig(fit_shapes=False)), clips)
    for k in ("lip_gap", "mouth_width", "corner_height"):
        assert solver_result["pooled"][k]["r"] > old["pooled"][k]["r"] + 0.03, k


# ------------------------------------------------------------------ winks (issue 17, issue 21 item 10)
def test_every_labelled_wink_frame_reads_on_the_right_side(solver_weights):
    w = E.wink_scores(solver_weights, E.load_events(BM.EVENTS_FILE))
    assert w["all_ok"], w["events"]


def test_a_wink_does_not_pull_the_open_eye_shut(solver_weights):
    """Issue 21 item 10: lp_d3 frames 6-20, the subject's left eye shut; the open right eye read
    0.64-0.87 with blink_link 2.0."""
    w = solver_weights["lp_d3"][6:21]
    assert w[:, B.eyeBlinkRight].max() < 0.5, w[:, B.eyeBlinkRight]
    assert (w[1:, B.eyeBlinkLeft] > 0.5).all()


# ------------------------------------------------------------------ GRID
_JAW = pytest.mark.xfail(strict=True, reason="not met: jawOpen in words minus silence 0.063 (s1) and 0.010 (s2) "
                         "< 0.1; the faces' own lip gaps lift only 0.075 and 0.045 in jawOpen units between words and "
                         "silence, and grid_s2 holds its mouth open (~10 mm lip gap, 5 mm chin drop) in the leading "
                         "'silence' of its alignment (models/face_recon.md)")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_JAW) for n in ("grid_s1_bbaf2n", "grid_s2_swwp2s")])
def test_jaw_opens_inside_words(testdata, clips, solver_weights, name):
    clip = next(c for c in clips if c.name == name)
    j = E.jaw_in_words(solver_weights[name][:, B.jawOpen], E.words_indicator(testdata / "video" / f"{name}.align",
                                                                                 clip.times))
    assert j["lift"] >= BM.BAR_JAW_LIFT, j


def test_visible_gap_in_words_reads_the_face_and_refuses_bad_input():
    gap = np.array([0.2, 0.1, np.nan, 0.3, 0.5, 0.0])
    words = np.array([False, False, False, True, True, False])
    j = E.visible_gap_in_words(gap, words)
    assert j["in_words"] == pytest.approx(0.4) and j["in_silence"] == pytest.approx(0.1)
    assert j["lift"] == pytest.approx(0.3) and j["silence_max"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="shape"):
        E.visible_gap_in_words(gap[:-1], words)
    with pytest.raises(ValueError, match="silence"):
        E.visible_gap_in_words(np.where(words, gap, np.nan), words)


def test_grid_s2_speaker_opens_the_mouth_in_a_silence(testdata, clips):
    """Why the jaw bar is not met on grid_s2: the face's own lip gap in the aligned 'silence'
    reaches twice its mean inside words (an in-breath before the first word), so jawOpen that
    follows the face cannot lift 0.1 there."""
    clip = next(c for c in clips if c.name == "grid_s2_swwp2s")
    inp, _ = G.input_features(clip)
    words = E.words_indicator(testdata / "video" / "grid_s2_swwp2s.align", clip.times)
    face = E.visible_gap_in_words(inp[:, G.FEATURES.index("lip_gap")], words)
    assert face["silence_max"] > 1.5 * face["in_words"], face


def test_grid_blinks_hold(testdata, solver_weights):
    for name in ("grid_lbax4n", "grid_s1_bbaf2n", "grid_s2_swwp2s"):
        b = E.blink_scores(solver_weights[name], *E.blink_labels(testdata / "video" / "blinks.json", name))
        assert not b["missed"] and not b["false"], (name, b)


# ------------------------------------------------------------------ fusion (issue 17 item 4)
@pytest.mark.slow
def test_fusion_never_falls_below_vision_on_the_lip_gap(testdata, clips, solver_result):
    from avatar_app.evaluation.mouth import fusion_scores, speech_weights

    checked = 0
    for clip, video in zip(clips, BM.real_videos(testdata)):
        aw = speech_weights(video, clip.times)
        if aw is None:
            continue
        inp, _ = G.input_features(clip)
        po = solver_result["outputs"][clip.name]
        s = fusion_scores(inp, po.weights, aw, po.found)
        assert s["fused_r"] >= s["vision_r"] - BM.FUSION_TOLERANCE, (clip.name, s)
        checked += 1
    assert checked >= 5


# ------------------------------------------------------------------ re-tracked avatar (b)
@pytest.mark.slow
@pytest.mark.gl
def test_retracked_default_head_follows_the_face(clips, solver_result):
    """(b) on every 8th frame (217 frames of the 8 clips), one renderer for all clips: the default head
    rendered with the output, tracked by MediaPipe. The pooled r is a correlation over the sampled
    frames, not a sum: every 8th frame reads 0.900 / 0.961 / 0.881 (eye aperture, lip gap, mouth
    width) against 0.908 / 0.957 / 0.884 on every 4th, all above the 0.8 bars (the benchmark
    renders every 2nd frame for the figure)."""
    from avatar_app.evaluation.retrack import RENDER_SIZE, retracked_features
    from avatar_app.render.headless import HeadlessRenderer

    series = []
    renderer = HeadlessRenderer(RENDER_SIZE, RENDER_SIZE)
    try:
        for clip in clips:
            po = solver_result["outputs"][clip.name]
            frames = np.flatnonzero(po.found)[::8]
            inp, _ = G.input_features(clip)
            mask = np.zeros(len(clip), bool)
            mask[frames] = True
            out = retracked_features(po, clip.times, frames, renderer=renderer)
            series.append((np.where(mask[:, None], inp, np.nan), out))
    finally:
        renderer.close()
    pooled = F.pooled(series)
    for k, bar in BM.BARS_RETRACK.items():
        assert pooled[k]["r"] >= bar, (k, pooled[k])


# ------------------------------------------------------------------ London stills
@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="not met: 28 of 71 people (39 %) read right on both criteria (smile 52 %, "
                   "neutral 77 %; black group 20 %, its neutral mouths are wider than the typical one); a still "
                   "has only a typical neutral mouth to compare a smile with, and no linear read of one still's "
                   "landmarks separates the London smiles from the neutrals better than ~65 % on held-out people "
                   "(docs/identity_neutral.md)")
def test_london_smiles_and_neutrals(london_result):
    assert london_result["overall"]["both_ok"] >= BM.BAR_LONDON
    assert min(g["both_ok"] for g in london_result["groups"].values()) >= BM.BAR_LONDON_GROUP


@pytest.fixture(scope="module")
def london_result(testdata):
    from avatar_app.evaluation import london as L

    return L.evaluate(GeometricSolver(), testdata / "images" / "london")


@pytest.mark.slow
def test_london_both_halves_hold_their_figures(london_result):
    """The typical neutral mouth was chosen on the odd ids; the even ids are held out. Both halves
    keep what was measured (35 % / 41 % on both criteria, 25 % on all 71 before), and the neutral
    photos mostly stay neutral (77 %; 96 % before, when the prior sat a standard deviation wider)."""
    rows = london_result["people"]
    for odd in (True, False):
        half = [r for r in rows if (int(r["id"]) % 2 == 1) == odd]
        assert np.mean([r["both_ok"] for r in half]) >= 0.35, ("odd" if odd else "even", len(half))
    assert london_result["overall"]["neutral_ok"] >= 0.75
    assert london_result["overall"]["smile_ok"] >= 0.45


@pytest.mark.parametrize("face_id", ["002", "004"])  # held-out (even) ids
def test_a_still_smile_reads_as_a_smile_without_calibration(testdata, face_id):
    """A fresh solver, no calibration, one photo: the smiling still reads as a smile and the same
    person's neutral still as neutral (issue 17's per-person criteria)."""
    from avatar_app.evaluation import london as L
    from avatar_app.evaluation.landmarks import track_image
    from avatar_app.tracking import FaceTracker, RunningMode

    folder = testdata / "images" / "london"
    solver = GeometricSolver()
    with FaceTracker(RunningMode.IMAGE) as tracker:
        wn = L.read_still(solver, track_image(folder / f"london_{face_id}_03.jpg", tracker=tracker))
        ws = L.read_still(solver, track_image(folder / f"london_{face_id}_08.jpg", tracker=tracker))
    assert not solver.is_calibrated
    smile = lambda w: 0.5 * (w[B.mouthSmileLeft] + w[B.mouthSmileRight])  # noqa: E731
    assert smile(ws) >= L.SMILE_MIN and smile(ws) - smile(wn) >= L.SMILE_GAIN_MIN, (smile(ws), smile(wn))
    assert wn.max() <= L.NEUTRAL_MAX and smile(wn) <= L.NEUTRAL_SMILE_MAX, (B(int(wn.argmax())).name, wn.max())


def test_reported_figures_are_finite(solver_result):
    for name, v in solver_result["clips"].items():
        assert math.isfinite(v["mean_r"]), name
