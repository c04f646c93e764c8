"""The face_recon engine on real recordings: blinks, jaw, smile, metamorphic relations, stability, precisions.

Figures are compared with the frozen geometric solver on the same landmarks.
The measured numbers are printed (``-s``) and listed in models/face_recon.md.
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from avatar_app.core.blendshapes import Blendshape as B, mirror_index
from avatar_app.core.rotations import euler_from_rotation
from avatar_app.inference import EngineCache, EngineManager
from avatar_app.reconstruction.engine import EngineReconstructor, default_model_path
from avatar_app.reconstruction.geometric import GeometricSolver
from avatar_app.tracking import FaceTracker, RunningMode
from training.face_recon import evaluate as E

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def manager(face_recon_engine_cache):
    """In-process builds on the cache this module shares with its face_recon sibling (conftest)."""
    return EngineManager(cache=EngineCache(face_recon_engine_cache), isolate=False)


@pytest.fixture(scope="module")
def engine(manager) -> EngineReconstructor:
    return EngineReconstructor(default_model_path(), manager=manager, backend="ort_cpu", precision="fp32")


@pytest.fixture(scope="module")
def tracked(testdata):
    """name -> (Landmarks of every frame, times s), as ``E.track_video`` makes them (FaceTracker, VIDEO
    mode, media time), read from the evaluation's landmark cache (keyed by the file's hash and
    MediaPipe's version; avatar_app.evaluation.landmarks) instead of tracked again."""
    from avatar_app.evaluation.landmarks import track_video

    out = {}
    for name in E.BLINK_VIDEOS:
        clip = track_video(testdata / "video" / f"{name}.mp4")
        assert clip.found.all(), f"{name}: a frame without a face"  # E.track_video raises there
        out[name] = ([clip.landmarks(i) for i in range(len(clip))], clip.times)
    return out


@pytest.fixture(scope="module")
def weights(tracked, engine):
    """name -> (engine (F, 52), solver (F, 52)), automatic calibration."""
    solver = GeometricSolver()
    return {n: (E.run(engine, *tracked[n]), E.run(solver, *tracked[n])) for n in tracked}


def _blinks(weights, testdata, which: int) -> dict:
    tot = {"tp": 0, "fp": 0, "fn": 0, "min_closed_weight": 1.0, "max_far_weight": 0.0}
    for name in E.BLINK_VIDEOS:
        s = E.blink_scores(weights[name][which], *E.blink_labels(testdata, name))
        for k in ("tp", "fp", "fn"):
            tot[k] += s[k]
        tot["min_closed_weight"] = min(tot["min_closed_weight"], s["min_closed_weight"])
        tot["max_far_weight"] = max(tot["max_far_weight"], s["max_far_weight"])
    tot["precision"] = tot["tp"] / max(tot["tp"] + tot["fp"], 1)
    tot["recall"] = tot["tp"] / max(tot["tp"] + tot["fn"], 1)
    tot["margin"] = min(tot["min_closed_weight"] - 0.5, 0.5 - tot["max_far_weight"])
    return tot


def test_blink_precision_and_recall(weights, testdata):
    """Frame-level precision and recall >= 0.9 against the hand labels (partial frames excluded)."""
    eng = _blinks(weights, testdata, 0)
    print(f"\nblinks engine {eng}")
    assert eng["precision"] >= 0.9 and eng["recall"] >= 0.9


@pytest.mark.xfail(strict=True, reason="not met by the shipped model: precision/recall 0.94/0.94 (one "
                   "closed frame missed at 0.49, one frame beside a blink over 0.5) vs the solver's "
                   "1.0/1.0 (models/face_recon.md)")
def test_blinks_better_than_the_solver(weights, testdata):
    """Better than the solver; where both are at 1.0, a larger margin around the 0.5 threshold."""
    eng, sol = _blinks(weights, testdata, 0), _blinks(weights, testdata, 1)
    print(f"\nblinks engine {eng}\nblinks solver {sol}")
    assert eng["precision"] >= sol["precision"] and eng["recall"] >= sol["recall"]
    if (eng["precision"], eng["recall"]) == (sol["precision"], sol["recall"]):
        assert eng["margin"] > sol["margin"], (eng, sol)


def test_blink_onset_lags_the_solver_by_at_most_one_frame(weights, testdata):
    for name in E.BLINK_VIDEOS:
        closed, _ = E.blink_labels(testdata, name)
        starts = [f for f in sorted(closed) if f - 1 not in closed]
        e, s = weights[name]
        for f in starts:
            oe = E.onset_frame(np.minimum(e[:, B.eyeBlinkLeft], e[:, B.eyeBlinkRight]), f)
            os_ = E.onset_frame(np.minimum(s[:, B.eyeBlinkLeft], s[:, B.eyeBlinkRight]), f)
            print(f"{name} blink at {f}: onset engine {oe}, solver {os_}")
            assert oe is not None and os_ is not None and oe <= os_ + 1


def _jaw(weights, tracked, testdata, name):
    times = tracked[name][1]
    words = E.words_indicator(testdata / "video" / f"{name}.align", times)
    out = {}
    for i, who in enumerate(("engine", "solver")):
        jaw = weights[name][i][:, B.jawOpen]
        out[who] = (float(jaw[words].mean()), float(jaw[~words].mean()),
                    float(np.corrcoef(jaw, words.astype(float))[0, 1]))
        print(f"{name} {who}: jawOpen in words {out[who][0]:.3f}, silence {out[who][1]:.3f}, r = {out[who][2]:.2f}")
    return out


_JAW_S2 = pytest.mark.xfail(strict=True, reason="not met by the shipped model on grid_s2_swwp2s: jawOpen 0.066 in "
                            "words vs 0.057 in silence (+0.009, the solver +0.010): the engine follows the face, "
                            "whose lips part ~10 mm in that speaker's leading silence "
                            "(tests/evaluation: test_grid_s2_speaker_opens_the_mouth_in_a_silence)")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_JAW_S2) if n == "grid_s2_swwp2s" else n
                                  for n in E.SPEECH_VIDEOS])
def test_jaw_opens_more_in_words(weights, tracked, testdata, name):
    eng = _jaw(weights, tracked, testdata, name)["engine"]
    assert eng[0] > eng[1] + 0.02 and eng[2] > 0.1


_JAW_S2_R = pytest.mark.xfail(strict=True, reason="not met by the shipped model on grid_s2_swwp2s: r = 0.07 vs "
                              "the solver's 0.08 (its face's own lip gap follows the words at r 0.16); met on "
                              "grid_s1_bbaf2n (models/face_recon.md)")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_JAW_S2_R) if n == "grid_s2_swwp2s" else n
                                  for n in E.SPEECH_VIDEOS])
def test_jaw_open_follows_words_better_than_the_solver(weights, tracked, testdata, name):
    r = _jaw(weights, tracked, testdata, name)
    assert r["engine"][2] > r["solver"][2]


# --------------------------------------------------------------------------- stills
@pytest.fixture(scope="module")
def image_tracker():
    with FaceTracker(RunningMode.IMAGE) as t:
        yield t


def _img(testdata, name):
    img = cv2.imread(str(testdata / "images" / name))
    assert img is not None, name
    return img


def _solve(engine, tracker, neutral_img, img):
    n = tracker.process_image(neutral_img)
    f = tracker.process_image(img)
    assert n is not None and f is not None
    engine.reset()
    engine.calibrate_neutral(n)
    return engine.reconstruct(f, 1.0)


def test_smile_is_higher_on_the_smiling_photo(engine, image_tracker, testdata):
    neutral = _img(testdata, "london_005_03_neutral.jpg")
    a = _solve(engine, image_tracker, neutral, neutral).blendshapes
    b = _solve(engine, image_tracker, neutral, _img(testdata, "london_005_08_smiling.jpg")).blendshapes
    print(f"smile L/R neutral {a[B.mouthSmileLeft]:.2f}/{a[B.mouthSmileRight]:.2f}, "
          f"smiling {b[B.mouthSmileLeft]:.2f}/{b[B.mouthSmileRight]:.2f}")
    # higher by more than the jitter a still frame shows (5x the stability bar's 0.01 sd)
    assert b[B.mouthSmileLeft] > a[B.mouthSmileLeft] + E.SMILE_MARGIN
    assert b[B.mouthSmileRight] > a[B.mouthSmileRight] + E.SMILE_MARGIN


# Pairs of (neutral, expression) real stills for the metamorphic relations.
_SNEER = pytest.mark.xfail(strict=True, reason="not met by the shipped model on the London smiling photo: max "
                           "difference 0.198 (mouthUpperUpRight; the solver 0.18): MediaPipe's landmarks of the mirror "
                           "image differ at the upper lip by 0.5-0.8 mm (models/face_recon.md)")
_GRID = ("grid_lbax4n_frame10.png", "grid_lbax4n_frame29.png")
_LONDON = ("london_005_03_neutral.jpg", "london_005_08_smiling.jpg")
PAIRS = [pytest.param(_GRID, id="grid"), pytest.param(_LONDON, id="london")]
PAIRS_FLIP = [pytest.param(_GRID, id="grid"), pytest.param(_LONDON, id="london", marks=_SNEER)]
#: Tolerances: MediaPipe itself is not exactly flip-, rotation- or scale-equivariant.
TOL_W, TOL_DEG = 0.12, 2.0


def _ypr(p):
    return np.degrees(euler_from_rotation(p.rotation))


@pytest.mark.parametrize("pair", PAIRS_FLIP)
def test_flip_swaps_left_and_right_and_negates_yaw_and_roll(engine, image_tracker, testdata, pair):
    n_img, f_img = _img(testdata, pair[0]), _img(testdata, pair[1])
    a = _solve(engine, image_tracker, n_img, f_img)
    b = _solve(engine, image_tracker, n_img[:, ::-1].copy(), f_img[:, ::-1].copy())
    diff = np.abs(a.blendshapes - b.blendshapes[mirror_index()])
    print(f"flip {pair[1]}: max weight difference {diff.max():.3f} ({B(int(diff.argmax())).name})")
    assert diff.max() <= TOL_W
    ya, yb = _ypr(a), _ypr(b)
    assert abs(ya[0] + yb[0]) < TOL_DEG and abs(ya[2] + yb[2]) < TOL_DEG and abs(ya[1] - yb[1]) < TOL_DEG


_ROT = pytest.mark.xfail(strict=True, reason="not met by the shipped model: 0.147 (grid, browOuterUpRight) and "
                         "0.184 (london, mouthSmileRight), bar 0.12; the solver: 0.18 / 0.11. MediaPipe's landmarks of "
                         "the turned photo move the brows 1.0-1.3 mm; over 34 held-out London pairs the engine changes "
                         "less than the solver (test_relations_on_held_out_london_pairs_beat_the_solver)")
PAIRS_ROT = [pytest.param(_GRID, id="grid", marks=_ROT), pytest.param(_LONDON, id="london", marks=_ROT)]


@pytest.mark.parametrize("pair", PAIRS_ROT)
def test_in_plane_rotation_changes_roll_only(engine, image_tracker, testdata, pair):
    n_img, f_img = _img(testdata, pair[0]), _img(testdata, pair[1])
    h, w = f_img.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), 12.0, 1.0)  # counter-clockwise on screen
    rot_img = cv2.warpAffine(f_img, m, (w, h), borderMode=cv2.BORDER_REPLICATE)
    a = _solve(engine, image_tracker, n_img, f_img)
    b = _solve(engine, image_tracker, n_img, rot_img)
    diff = np.abs(a.blendshapes - b.blendshapes)
    ya, yb = _ypr(a), _ypr(b)
    print(f"rotate {pair[1]}: max weight difference {diff.max():.3f}, ypr {ya} -> {yb}")
    assert diff.max() <= TOL_W
    assert abs(ya[0] - yb[0]) < TOL_DEG and abs(ya[1] - yb[1]) < TOL_DEG
    assert abs((yb[2] - ya[2]) - 12.0) < TOL_DEG  # image turned counter-clockwise: the head rolls +12


@pytest.mark.parametrize("pair", PAIRS)
def test_rescaling_the_frame_changes_nothing(engine, image_tracker, testdata, pair):
    n_img, f_img = _img(testdata, pair[0]), _img(testdata, pair[1])
    small = cv2.resize(f_img, None, fx=0.7, fy=0.7, interpolation=cv2.INTER_AREA)
    a = _solve(engine, image_tracker, n_img, f_img)
    b = _solve(engine, image_tracker, n_img, small)
    diff = np.abs(a.blendshapes - b.blendshapes)
    ya, yb = _ypr(a), _ypr(b)
    print(f"rescale {pair[1]}: max weight difference {diff.max():.3f}, ypr {ya} -> {yb}")
    assert diff.max() <= TOL_W
    assert np.all(np.abs(ya - yb) < TOL_DEG)


@pytest.mark.xfail(strict=True, reason="not met by the shipped model: sd 0.032 (mouthSmileLeft), the solver 0.028 "
                   "(mouthStretchLeft; its own strict xfail): MediaPipe's points jitter 0.42 mm on this 59-px face and "
                   "the smile moves them 4-7 mm per unit; the shipped model before it read 0.008 by reading a still's "
                   "smile at a tenth of the solver's gain (London 005: 0.08 vs 0.13)")
def test_raw_output_is_stable_under_jpeg_and_subpixel_shifts(engine, image_tracker, testdata):
    """200 JPEG re-encodes (quality 85-95) shifted by up to 1 px: raw output sd <= 0.01."""
    from avatar_app.evaluation.stability import still_jitter_sd

    sd = still_jitter_sd(engine, _img(testdata, "grid_lbax4n_frame10.png"), image_tracker)
    print(f"stability: max sd {sd.max():.4f} ({B(int(sd.argmax())).name})")
    assert sd.max() <= 0.01


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_reduced_precision_gives_the_same_blink_events(manager, tracked, weights, precision):
    rec = EngineReconstructor(default_model_path(), manager=manager, backend="ort_cpu", precision=precision)
    assert rec.slot.active.precision.value == precision
    for name in E.BLINK_VIDEOS:
        w = E.run(rec, *tracked[name])
        ref = weights[name][0]
        ev = (w[:, B.eyeBlinkLeft] > 0.5) & (w[:, B.eyeBlinkRight] > 0.5)
        ev_ref = (ref[:, B.eyeBlinkLeft] > 0.5) & (ref[:, B.eyeBlinkRight] > 0.5)
        print(f"{precision} {name}: max |w - fp32| {np.abs(w - ref).max():.4f}")
        assert np.array_equal(_events(ev), _events(ev_ref)), (precision, name)


def _events(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) frames of each run of True."""
    out, start = [], None
    for i, m in enumerate(list(mask) + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i - 1))
            start = None
    return out


@pytest.mark.parametrize("name", E.BLINK_VIDEOS)
def test_head_depth_is_steady_on_a_still_talker(engine, tracked, name):
    """The GRID talkers sit still: the head's depth may not jitter by centimetres.

    The engine's per-frame translation correction has a depth sd of 2-4 cm on these clips; the
    runtime applies it as a per-user scale estimated like the identity (``engine.depth_scale``),
    so the depth follows the alignment (the solver's own sd is 0.2-0.3 cm).
    """
    lms, times = tracked[name]
    engine.reset()
    z = np.array([engine.reconstruct(lm, t).translation[2] for lm, t in zip(lms, times) if lm is not None])
    solver = GeometricSolver()
    zs = np.array([solver.reconstruct(lm, t).translation[2] for lm, t in zip(lms, times) if lm is not None])
    late = z[len(z) // 3:]  # after the first second of the warm-up's running mean
    print(f"{name}: depth sd {z.std() * 100:.2f} cm (last two thirds {late.std() * 100:.2f}), "
          f"solver {zs.std() * 100:.2f} cm")
    assert late.std() <= 0.01  # metres
    assert abs(np.median(z) - np.median(zs)) < 0.15  # same distance as the solver, within head-size scale


def _relation_changes(recon, tracker, folder, ids) -> dict[str, float]:
    """Mean over London pairs of the largest weight change under the flip, a 12-degree in-plane turn and
    a 0.7 rescale of the smiling photo (read against the pair's neutral photo, as the tests above)."""
    out = {"flip": [], "rotate": [], "rescale": []}
    for i in ids:
        n_img, f_img = (cv2.imread(str(folder / f"london_{i}_{k}.jpg")) for k in ("03", "08"))
        h, w = f_img.shape[:2]
        turned = cv2.warpAffine(f_img, cv2.getRotationMatrix2D((w / 2, h / 2), 12.0, 1.0), (w, h),
                                borderMode=cv2.BORDER_REPLICATE)
        small = cv2.resize(f_img, None, fx=0.7, fy=0.7, interpolation=cv2.INTER_AREA)
        a = _solve(recon, tracker, n_img, f_img).blendshapes
        b = _solve(recon, tracker, n_img[:, ::-1].copy(), f_img[:, ::-1].copy()).blendshapes
        out["flip"].append(np.abs(a - b[mirror_index()]).max())
        out["rotate"].append(np.abs(a - _solve(recon, tracker, n_img, turned).blendshapes).max())
        out["rescale"].append(np.abs(a - _solve(recon, tracker, n_img, small).blendshapes).max())
    return {k: float(np.mean(v)) for k, v in out.items()}


def test_relations_on_held_out_london_pairs_beat_the_solver(engine, image_tracker, testdata):
    """The even London ids (34 pairs, never trained on: training/face_recon/real_data.py takes the odd
    ones): the shipped model's mean largest change under each relation is below the solver's
    (measured: flip 0.142 vs 0.216, rotation 0.106 vs 0.200, rescale 0.051 vs 0.112)."""
    folder = testdata / "images" / "london"
    ids = sorted({f.name[7:10] for f in folder.glob("london_*_03.jpg") if int(f.name[7:10]) % 2 == 0})
    assert len(ids) >= 30
    eng = _relation_changes(engine, image_tracker, folder, ids)
    sol = _relation_changes(GeometricSolver(), image_tracker, folder, ids)
    print(f"held-out London relations: engine {eng}, solver {sol}")
    for k in eng:
        assert eng[k] < sol[k], (k, eng, sol)


def test_without_calibration_the_head_pitch_is_read_from_the_first_frame_as_the_solver_does(engine, testdata):
    """New-user trial: the engine's pitch, relative to the rig template, sat a fixed amount off the
    solver's for the whole clip (lp_d18 +12.4 degrees, openmpf -15.8, grid_s1 +7.8), so the avatar
    looked down at the camera. Both now take the first frame, levelled in yaw and roll, as upright."""
    from avatar_app.evaluation.landmarks import track_video

    for name in ("expressive/lp_d18", "grid_s1_bbaf2n"):
        clip = track_video(testdata / "video" / f"{name}.mp4")
        solver = GeometricSolver()
        engine.reset()
        diffs = []
        for i in range(len(clip)):
            lm, t = clip.landmarks(i), float(clip.times[i])
            pe = np.degrees(euler_from_rotation(engine.reconstruct(lm, t).rotation))[1]
            ps = np.degrees(euler_from_rotation(solver.reconstruct(lm, t).rotation))[1]
            diffs.append(pe - ps)
        assert abs(float(np.mean(diffs))) < 2.0, (name, float(np.mean(diffs)))
