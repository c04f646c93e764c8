"""Evaluate the face_recon engine: real recordings, render round trip, gaze source; vs the geometric solver.

Usage (repository root)::

    python -m training.face_recon.evaluate --model models/face_recon.onnx \
        --json models/face_recon.eval.json [--precision fp32]

Figures:

- blinks on the three GRID clips against ``video/blinks.json`` (frame level,
  partial frames excluded; predicted = both eyeBlink > 0.5), with the weakest
  closed-frame value and the highest value far (> 3 frames) from any labelled
  frame, for the engine and the frozen geometric solver;
- jawOpen inside words vs silences of the GRID ``.align`` files, and its
  correlation with the words indicator, both reconstructors;
- mouthSmileLeft/Right on the London neutral vs smiling photo (explicit
  neutral = the neutral photo);
- round trip on the face model: each shape rendered alone at weight 1 (and
  0.5) on held-out subjects, tracked with MediaPipe, reconstructed with the
  subject's neutral render as calibration; per-shape error table;
- gaze: engine eyeLook weights vs iris geometry on held-out render-and-track
  data (median angular error against the rendered gaze).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape as B
from avatar_app.core.rotations import rotation_angle_deg
from avatar_app.core.types import Landmarks

log = logging.getLogger("face_recon.evaluate")
#: "Higher on the smiling photo" means by more than this (5x the stability bar's 0.01 sd).
SMILE_MARGIN = 0.05

BLINK_VIDEOS = ("grid_lbax4n", "grid_s1_bbaf2n", "grid_s2_swwp2s")
SPEECH_VIDEOS = ("grid_s1_bbaf2n", "grid_s2_swwp2s")
ROOT = Path(__file__).resolve().parents[2]
TESTDATA = ROOT.parent / "shared" / "testdata"


def track_video(path: Path) -> tuple[list[Landmarks], np.ndarray]:
    """Landmarks of every frame (VIDEO mode) and frame times in seconds."""
    import av

    from avatar_app.tracking import FaceTracker, RunningMode

    lms, times = [], []
    with av.open(str(path)) as c, FaceTracker(RunningMode.VIDEO) as tracker:
        for frame in c.decode(video=0):
            lm = tracker.process_video_frame(frame.to_ndarray(format="bgr24"), frame.time * 1e3)
            if lm is None:
                raise RuntimeError(f"{path.name}: no face at {frame.time:.2f} s")
            lms.append(lm)
            times.append(frame.time)
    return lms, np.array(times)


def run(rec, lms, times) -> np.ndarray:
    """(F, 52) blendshapes of a reconstructor over a tracked video (automatic calibration)."""
    rec.reset()
    return np.array([rec.reconstruct(lm, float(t)).blendshapes for lm, t in zip(lms, times)])


def blink_labels(testdata: Path, name: str) -> tuple[set[int], set[int]]:
    """(closed frames, partial frames) of one clip from blinks.json."""
    labels = json.loads((testdata / "video" / "blinks.json").read_text())[name]
    return {i for a, b in labels["closed"] for i in range(a, b + 1)}, set(labels["partial"])


def blink_scores(w: np.ndarray, closed: set[int], partial: set[int]) -> dict:
    """Frame-level blink figures of one clip (see the module docstring)."""
    left, right = w[:, B.eyeBlinkLeft], w[:, B.eyeBlinkRight]
    n = len(w)
    pred = (left > 0.5) & (right > 0.5)
    scored = [i for i in range(n) if i not in partial]
    tp = sum(1 for i in scored if pred[i] and i in closed)
    fp = sum(1 for i in scored if pred[i] and i not in closed)
    fn = sum(1 for i in scored if not pred[i] and i in closed)
    labelled = closed | partial
    far = [i for i in range(n) if min(abs(i - j) for j in labelled) > 3]
    return {"tp": tp, "fp": fp, "fn": fn,
            "min_closed_weight": float(np.minimum(left, right)[sorted(closed)].min()),
            "max_far_weight": float(np.maximum(left, right)[far].max())}


def words_indicator(align_path: Path, times: np.ndarray) -> np.ndarray:
    """True for frames inside a word (not 'sil'); .align units are 1/25000 s."""
    inside = np.zeros(len(times), bool)
    for line in align_path.read_text().split("\n"):
        if line.strip():
            a, b, word = line.split()
            if word != "sil":
                inside |= (times >= int(a) / 25000) & (times < int(b) / 25000)
    return inside


def onset_frame(x: np.ndarray, start: int, thr: float = 0.5) -> int | None:
    """First frame at or after ``start - 5`` where ``x`` exceeds ``thr`` (blink onset)."""
    for i in range(max(start - 5, 0), len(x)):
        if x[i] > thr:
            return i
    return None


def real_recordings(engine, testdata: Path = TESTDATA) -> dict:
    """Blink, jaw and smile figures of the engine and the geometric solver."""
    import cv2

    from avatar_app.reconstruction.geometric import GeometricSolver
    from avatar_app.tracking import FaceTracker, RunningMode

    solver = GeometricSolver()
    out: dict = {"blinks": {}, "jaw": {}}
    for who, rec in (("engine", engine), ("solver", solver)):
        tot = {"tp": 0, "fp": 0, "fn": 0}
        per = {}
        for name in BLINK_VIDEOS:
            lms, times = _tracked(testdata, name)
            w = run(rec, lms, times)
            closed, partial = blink_labels(testdata, name)
            s = blink_scores(w, closed, partial)
            first = min(closed)
            s["onset_frame"] = onset_frame(np.minimum(w[:, B.eyeBlinkLeft], w[:, B.eyeBlinkRight]), first)
            per[name] = s
            for k in tot:
                tot[k] += s[k]
            if name in SPEECH_VIDEOS:
                jaw = w[:, B.jawOpen]
                words = words_indicator(testdata / "video" / f"{name}.align", times)
                out["jaw"].setdefault(who, {})[name] = {
                    "mean_in_words": float(jaw[words].mean()), "mean_in_silence": float(jaw[~words].mean()),
                    "corr_with_words": float(np.corrcoef(jaw, words.astype(float))[0, 1])}
        tot["precision"] = tot["tp"] / max(tot["tp"] + tot["fp"], 1)
        tot["recall"] = tot["tp"] / max(tot["tp"] + tot["fn"], 1)
        tot["min_closed_weight"] = min(v["min_closed_weight"] for v in per.values())
        tot["max_far_weight"] = max(v["max_far_weight"] for v in per.values())
        out["blinks"][who] = {"overall": tot, **per}
    lm = {}
    with FaceTracker(RunningMode.IMAGE) as tracker:
        for key in ("london_005_03_neutral", "london_005_08_smiling"):
            lm[key] = tracker.process_image(cv2.imread(str(testdata / "images" / f"{key}.jpg")))
    for who, rec in (("engine", engine), ("solver", solver)):
        rec.reset()
        rec.calibrate_neutral(lm["london_005_03_neutral"])
        a = rec.reconstruct(lm["london_005_03_neutral"], 0.0).blendshapes
        b = rec.reconstruct(lm["london_005_08_smiling"], 1.0).blendshapes
        out.setdefault("smile", {})[who] = {
            "neutral": [float(a[B.mouthSmileLeft]), float(a[B.mouthSmileRight])],
            "smiling": [float(b[B.mouthSmileLeft]), float(b[B.mouthSmileRight])]}
    return out


_TRACK_CACHE: dict = {}


def _tracked(testdata: Path, name: str):
    if name not in _TRACK_CACHE:
        _TRACK_CACHE[name] = track_video(testdata / "video" / f"{name}.mp4")
    return _TRACK_CACHE[name]


def round_trip(engine, subjects: int = 4, seed: int = 77, yaw_deg: float = 20.0) -> dict:
    """Each shape alone at weight 1 and 0.5, rendered, tracked, reconstructed: per-shape figures.

    Returns:
        name -> {"w1": mean output at weight 1, "w05": at 0.5, "others_max": largest
        other output at weight 1 (mean over renders), "n": tracked renders}.
    """
    from avatar_app.avatar.face_model import load_face_model
    from avatar_app.tracking import FaceTracker, RunningMode
    from avatar_app.core.rotations import rotation_from_euler
    from training.face_recon import sampling as S
    from training.face_recon.render import SubjectLook, VariedFaceRenderer

    model = load_face_model()
    renderer = VariedFaceRenderer(model)
    res: dict = {}
    with FaceTracker(RunningMode.IMAGE) as tracker:
        for s in range(subjects):
            rng = np.random.default_rng([seed, s])
            look = SubjectLook(rng)
            look.smooth = True
            ident = S.sample_identity(rng, 1, model.num_identity)[0]
            t = np.array([0.0, 0.0, -0.5])
            yaw = np.radians(yaw_deg) * (1 if s % 2 else -1) * (s >= 2)
            rot = rotation_from_euler(yaw, 0.0, 0.0)

            def track(w, r):
                img = renderer.render(model.evaluate(w, ident), r, t, 560.0, look)
                return tracker.process_image(np.ascontiguousarray(img[:, :, ::-1]))

            neutral = track(np.zeros(52, np.float32), np.eye(3))
            if neutral is None:
                continue
            for i, name in enumerate(BLENDSHAPE_NAMES):
                for value in (1.0, 0.5):
                    w = np.zeros(52, np.float32)
                    w[i] = value
                    if name == "mouthClose":
                        w[B.jawOpen] = value
                    lm = track(w, rot)
                    if lm is None:
                        continue
                    engine.reset()
                    engine.calibrate_neutral(neutral)
                    out = engine.reconstruct(lm, 1.0).blendshapes
                    r = res.setdefault(name, {"w1": [], "w05": [], "others_max": []})
                    if value == 1.0:
                        r["w1"].append(float(out[i]))
                        others = np.delete(out, [i] + ([B.jawOpen] if name == "mouthClose" else []))
                        r["others_max"].append(float(others.max()))
                    else:
                        r["w05"].append(float(out[i]))
    renderer.close()
    return {k: {"w1": float(np.mean(v["w1"])) if v["w1"] else None,
                "w05": float(np.mean(v["w05"])) if v["w05"] else None,
                "others_max": float(np.mean(v["others_max"])) if v["others_max"] else None,
                "n": len(v["w1"])} for k, v in res.items()}


def ict_round_trip(engine, testdata: Path = TESTDATA) -> dict:
    """Each ARKit shape alone at weight 1 and 0.5 on the ICT FaceKit head (a second rig, MIT),
    rendered by the app's headless renderer, tracked, reconstructed with its neutral render as
    calibration; also the geometric solver's output for the same renders.

    Returns:
        name -> {"w1", "w05", "others_max", "solver_w1"} (None where the head has no such shape
        or the render was not tracked).
    """
    from avatar_app.avatar.loader import load_avatar
    from avatar_app.core.types import AvatarState
    from avatar_app.reconstruction.geometric import GeometricSolver
    from avatar_app.render.headless import HeadlessRenderer
    from avatar_app.tracking import FaceTracker, RunningMode

    avatar = load_avatar(testdata / "avatars" / "ict_facekit_arkit51.glb")
    solver = GeometricSolver()
    out: dict = {}

    def state(w):
        return AvatarState(0, 0.0, w, np.eye(3, dtype=np.float32), np.array([0, 0, -0.6], np.float32),
                           np.zeros(2, np.float32))

    with HeadlessRenderer(640, 480, background=(120, 125, 130), avatar=avatar) as r, \
            FaceTracker(RunningMode.IMAGE) as tracker:
        def track(w):
            return tracker.process_image(np.ascontiguousarray(r.render(state(w))[:, :, ::-1]))

        neutral = track(np.zeros(52, np.float32))
        for i, name in enumerate(BLENDSHAPE_NAMES):
            row = {"w1": None, "w05": None, "others_max": None, "solver_w1": None}
            for value in (1.0, 0.5):
                w = np.zeros(52, np.float32)
                w[i] = value
                lm = track(w)
                if lm is None or neutral is None:
                    continue
                res = []
                for rec in (engine, solver):
                    rec.reset()
                    rec.calibrate_neutral(neutral)
                    res.append(rec.reconstruct(lm, 1.0).blendshapes)
                if value == 1.0:
                    row["w1"], row["solver_w1"] = float(res[0][i]), float(res[1][i])
                    row["others_max"] = float(np.delete(res[0], i).max())
                else:
                    row["w05"] = float(res[0][i])
            out[name] = row
    return out


def stability(engine, testdata: Path = TESTDATA, copies: int = 200, seed: int = 0) -> dict:
    """Raw output sd over JPEG re-encodes (quality 85-95) of one still shifted by up to 1 px.

    The still is GRID lbax4n frame 10 (eyes open); the engine is calibrated on the original.

    Returns:
        {"max_sd", "worst_shape", "sd": name -> sd}.
    """
    import cv2

    from avatar_app.tracking import FaceTracker, RunningMode

    img = cv2.imread(str(testdata / "images" / "grid_lbax4n_frame10.png"))
    rng = np.random.default_rng(seed)
    h, w = img.shape[:2]
    outs = []
    with FaceTracker(RunningMode.IMAGE) as tracker:
        engine.reset()
        engine.calibrate_neutral(tracker.process_image(img))
        for i in range(copies):
            dx, dy = rng.uniform(-1, 1, 2)
            shifted = cv2.warpAffine(img, np.float32([[1, 0, dx], [0, 1, dy]]), (w, h),
                                     borderMode=cv2.BORDER_REPLICATE)
            ok, enc = cv2.imencode(".jpg", shifted, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(85, 96))])
            lm = tracker.process_image(cv2.imdecode(enc, cv2.IMREAD_COLOR))
            if lm is not None:
                outs.append(engine.reconstruct(lm, 1.0 + i).blendshapes)
    sd = np.std(np.array(outs), axis=0)
    return {"max_sd": float(sd.max()), "worst_shape": BLENDSHAPE_NAMES[int(sd.argmax())],
            "copies_tracked": len(outs), "sd": {n: float(v) for n, v in zip(BLENDSHAPE_NAMES, sd)}}


def precision_checks(model: Path, manager, reference_weights: dict, testdata: Path = TESTDATA) -> dict:
    """FP16 and INT8 through the engine layer: its verification against FP32 on the validation set,
    and whether the blink events (both eyeBlink > 0.5) on the GRID clips stay the same.

    Args:
        model: the FP32 ONNX.
        manager: an EngineManager (its cache receives the builds).
        reference_weights: clip name -> (F, 52) FP32 engine output (automatic calibration).
    """
    from avatar_app.reconstruction.engine import EngineReconstructor

    out = {}
    for prec in ("fp16", "int8"):
        entry = manager.build(model, "ort_cpu", prec)
        m = entry.manifest
        row = {"status": m.status, "reason": m.reason,
               "max_abs_error": (m.verification or {}).get("max_abs_error"),
               "blendshapes_max_abs": ((m.verification or {}).get("per_output") or {}).get(
                   "blendshapes", {}).get("max_abs")}
        if m.status == "ok":
            rec = EngineReconstructor(model, manager=manager, backend="ort_cpu", precision=prec)
            same = True
            for name in BLINK_VIDEOS:
                w = run(rec, *_tracked(testdata, name))
                ref = reference_weights[name]
                ev = (w[:, B.eyeBlinkLeft] > 0.5) & (w[:, B.eyeBlinkRight] > 0.5)
                ev_ref = (ref[:, B.eyeBlinkLeft] > 0.5) & (ref[:, B.eyeBlinkRight] > 0.5)
                same &= bool(np.array_equal(ev, ev_ref))
            row["same_blink_frames"] = same
        out[prec] = row
    return out


def gaze_sources(engine, rt_heldout: Path, n: int = 600) -> dict:
    """Median gaze error (degrees) of the engine's eyeLook weights and of the iris geometry.

    Uses held-out render-and-track frames whose eyes are open (blink < 0.3).
    """
    from avatar_app.reconstruction import normalise as N
    from avatar_app.reconstruction.engine import gaze_from_irises, gaze_from_weights
    from training.face_recon import data as D

    raw = D.load_raw(rt_heldout)
    ok = np.flatnonzero((raw["weights"][:, B.eyeBlinkLeft] < 0.3) & (raw["weights"][:, B.eyeBlinkRight] < 0.3))[:n]
    feeds = D.full_inputs(raw, ok)
    out = engine.slot.infer({k: v[:16] for k, v in feeds.items()})  # warm
    bs = np.concatenate([engine.slot.infer({k: v[i:i + 16] for k, v in feeds.items()})["blendshapes"]
                         for i in range(0, len(ok), 16)])
    truth = gaze_from_weights(raw["weights"][ok])
    head = feeds["landmarks"] + feeds["neutral"] + N.template().astype(np.float32)
    neutral = feeds["neutral"] + N.template().astype(np.float32)
    g_eng = gaze_from_weights(bs)
    g_iris = gaze_from_irises(head, neutral)
    del out

    def err(g):
        return float(np.degrees(np.median(np.linalg.norm(g - truth, axis=1))))

    return {"engine_median_deg": err(g_eng), "iris_median_deg": err(g_iris), "samples": int(len(ok)),
            "zero_median_deg": err(np.zeros_like(truth))}


def render_track_figures(engine, rt_set: Path, const: np.ndarray) -> dict:
    """Blendshape and head-rotation error of the engine on a render-and-track set.

    Args:
        engine: an EngineReconstructor (its engine slot is run on batches of 16).
        rt_set: a render-and-track .npz (:mod:`training.face_recon.make_data`).
        const: (52,) constant predictor (the training mean of the model card).

    Returns:
        {"mae", "const_mae", "ratio", "rotation_err_deg_median",
        "alignment_only_rotation_err_deg_median", "frames"}; MAE over the estimated
        blendshapes (:func:`training.face_recon.data.metrics`), rotation errors in degrees
        (geodesic angle to the true head rotation, of the engine's pose and of the landmark
        alignment alone).
    """
    from avatar_app.reconstruction import normalise as N
    from training.face_recon import data as D

    raw = D.load_raw(rt_set)
    n = len(raw["subject"])
    feeds = D.full_inputs(raw, np.arange(n))
    outs = [engine.slot.infer({k: v[i:i + 16] for k, v in feeds.items()}) for i in range(0, n, 16)]
    bs = np.concatenate([o["blendshapes"] for o in outs])
    rot6 = np.concatenate([o["rotation_6d"] for o in outs])
    dt = np.concatenate([o["translation"] for o in outs])
    m = D.metrics(bs, raw["weights"], const)
    _, r0, t0 = N.align(raw["landmarks"], raw["image_size"])
    rot, _ = N.compose_pose(r0, t0, rot6, dt)
    return {"mae": m["mae"], "const_mae": m["const_mae"], "ratio": m["ratio"],
            "rotation_err_deg_median": float(np.median(rotation_angle_deg(rot, raw["rotation"]))),
            "alignment_only_rotation_err_deg_median": float(np.median(rotation_angle_deg(r0, raw["rotation"]))),
            "frames": int(n)}


def gaze_observability(rt_heldout: Path, n_synthetic: int = 3000, seed: int = 3) -> dict:
    """How much of the rendered gaze reaches the network's input, synthetic vs render-and-track.

    Correlation, over frames with open eyes (both eyeBlink < 0.3), between the left iris
    centre's aligned displacement (landmark 473, network input, metres) and the gaze label
    (eyeLookUp - eyeLookDown for the vertical axis, eyeLookOut - eyeLookIn horizontally).
    On projected synthetic points it measures the rig; on render-and-track frames it measures
    what MediaPipe's iris landmarks keep of it.

    Returns:
        {"synthetic": {"vertical", "horizontal"}, "render_track": {...}} Pearson r.
    """
    from avatar_app.reconstruction import normalise as N
    from training.face_recon import data as D
    from training.face_recon.make_data import synthetic_set

    il = list(N.SUBSET).index(473)
    out = {}
    for name, prep in (("synthetic", D.prepare(synthetic_set(seed, n_synthetic))),
                       ("render_track", D.prepare(D.load_raw(rt_heldout)))):
        w = prep["weights"]
        m = (w[:, B.eyeBlinkLeft] < 0.3) & (w[:, B.eyeBlinkRight] < 0.3)
        vert = w[m, B.eyeLookUpLeft] - w[m, B.eyeLookDownLeft]
        hori = w[m, B.eyeLookOutLeft] - w[m, B.eyeLookInLeft]
        out[name] = {"vertical": float(np.corrcoef(prep["x"][m, il, 1], vert)[0, 1]),
                     "horizontal": float(np.corrcoef(prep["x"][m, il, 0], hori)[0, 1]),
                     "frames": int(m.sum())}
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("models/face_recon.onnx"), help="the ONNX model to evaluate")
    ap.add_argument("--json", type=Path, help="also write the report to this JSON file")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "int8"),
                    help="precision of the engine evaluated (ONNX Runtime CPU)")
    ap.add_argument("--data", default="~/.cache/avatar_app/face_recon",
                    help="folder with rt_heldout.npz (gaze figures; skipped when missing)")
    ap.add_argument("--skip-round-trip", action="store_true",
                    help="skip the face-model and ICT round trips (render, track, reconstruct)")
    ap.add_argument("--rt-set", action="append", default=[], metavar="LABEL=PATH",
                    help="also report render-and-track figures on this set (repeatable)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from avatar_app.inference import EngineCache, EngineManager
    from avatar_app.reconstruction.engine import EngineReconstructor

    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        mgr = EngineManager(cache=EngineCache(Path(tmp)), isolate=False)
        engine = EngineReconstructor(args.model, manager=mgr, backend="ort_cpu", precision=args.precision)
        report = {"precision": args.precision, "engine": engine.describe()}
        report["real"] = real_recordings(engine)
        report["stability"] = stability(engine)
        ref = {n: run(engine, *_tracked(TESTDATA, n)) for n in BLINK_VIDEOS}
        report["precisions"] = precision_checks(args.model, mgr, ref)
        rt = Path(args.data).expanduser() / "rt_heldout.npz"
        if rt.is_file():
            report["gaze"] = gaze_sources(engine, rt)
            report["gaze_observability"] = gaze_observability(rt)
        card = json.loads(args.model.with_name(args.model.stem + ".card.json").read_text())
        const = np.array([card["constant_predictor"][k] for k in BLENDSHAPE_NAMES])
        for item in args.rt_set:
            label, _, path = item.partition("=")
            p = Path(path).expanduser()
            report.setdefault("render_track_sets", {})[label] = dict(
                render_track_figures(engine, p, const), gaze_observability=gaze_observability(p))
        if not args.skip_round_trip:
            report["round_trip"] = round_trip(engine)
            report["ict_round_trip"] = ict_round_trip(engine)
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
