"""The landmark engines and the ONNX tracker: ROI rules, the converted models against MediaPipe's own
graphs, the tracker contract, agreement with MediaPipe's tracker on every dev clip, --tracker."""
from __future__ import annotations

import os

import cv2
import numpy as np
import pytest

from avatar_app.core.errors import InputError, TrackingError
from avatar_app.tracking import FaceTracker, RunningMode
from avatar_app.tracking import roi as R
from avatar_app.tracking.agreement import compare, track_frames, video_frames
from avatar_app.tracking.onnx_tracker import (
    LandmarkEngines,
    OnnxFaceTracker,
    tiles,
    track_step,
)
from avatar_app.tracking.select import make_tracker, resolve_tracker

W, H = 640, 480

#: Every dev clip (testdata/video) and its bars: mean and p99 landmark distance in % of face width.
DEV_CLIPS = ("grid_s1_bbaf2n.mp4", "grid_s2_swwp2s.mp4", "grid_lbax4n.mp4", "openmpf_video_01.mp4",
             "expressive/lp_d3.mp4", "expressive/lp_d9.mp4", "expressive/lp_d11.mp4", "expressive/lp_d18.mp4")
MEAN_BAR_PCT, P99_BAR_PCT = 0.5, 2.0


@pytest.fixture(scope="module")
def engines():
    e = LandmarkEngines("ort_cpu", "fp32")
    yield e
    e.close()


@pytest.fixture(scope="module")
def portrait(testdata) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(testdata / "images" / "london_005_03_neutral.jpg")), cv2.COLOR_BGR2RGB)


# -- ROI rules ---------------------------------------------------------------------------------

def test_anchors_follow_the_ssd_grid():
    a = R.ssd_anchors()
    assert a.shape == (R.NUM_ANCHORS, 2)
    assert np.allclose(a[0], [0.5 / 16, 0.5 / 16]) and np.allclose(a[1], a[0])  # 2 per cell of 16x16
    assert np.allclose(a[512], [0.5 / 8, 0.5 / 8]) and np.allclose(a[517], a[512])  # 6 per cell of 8x8
    assert np.allclose(a[-1], [7.5 / 8, 7.5 / 8])


def test_weighted_nms_merges_overlaps_by_score():
    boxes = np.array([[0.1, 0.1, 0.3, 0.3], [0.12, 0.1, 0.32, 0.3], [0.6, 0.6, 0.8, 0.8]])
    kps = np.repeat(boxes[:, None, :2], 6, axis=1)
    scores = np.array([0.9, 0.6, 0.8])
    b, k, s = R.weighted_nms(boxes, kps, scores)
    assert len(s) == 2 and np.allclose(s, [0.9, 0.8])  # the best score of each group, best first
    assert np.isclose(b[0, 0], (0.1 * 0.9 + 0.12 * 0.6) / 1.5)  # score-weighted mean
    assert np.allclose(b[1], boxes[2]) and np.allclose(k[1], kps[2])


def test_crop_and_projection_are_inverse():
    rects = np.array([[320.0, 240.0, 200.0, 200.0, 0.4], [100.0, 50.0, 80.0, 80.0, -1.2]])
    m = R.crop_matrices(rects, R.MESH_SIZE)
    unit = np.random.default_rng(0).uniform(0, 1, (2, 10, 3))
    px = unit[..., :2] * R.MESH_SIZE
    image_px = np.einsum("nij,nkj->nki", m[:, :, :2], px) + m[:, None, :, 2]
    back = R.project(unit, rects, np.array([[W, H], [W, H]]))
    assert np.allclose(back[..., 0] * W, image_px[..., 0], atol=1e-3)
    assert np.allclose(back[..., 1] * H, image_px[..., 1], atol=1e-3)
    # the crop's corners are the rect's corners: (0, 0) maps to centre - R (w/2, h/2)
    c, s = np.cos(0.4), np.sin(0.4)
    assert np.allclose(m[0] @ [0, 0, 1], [320 - (c * 100 - s * 100), 240 - (s * 100 + c * 100)])


def test_landmark_rects_rotate_with_the_eye_line():
    pts = np.zeros((1, 478, 2))
    pts[0, :, 0], pts[0, :, 1] = np.linspace(100, 200, 478), 150.0
    pts[0, R.LANDMARK_EYES[0]] = (120, 140)
    pts[0, R.LANDMARK_EYES[1]] = (180, 200)  # right eye lower: the face is turned clockwise by 45 degrees
    r = R.landmark_rects(pts)[0]
    assert np.isclose(r[4], np.pi / 4) and np.isclose(r[2], r[3])
    assert np.isclose(r[2], 100 * R.ROI_SCALE)  # the longer side of the landmark box, scaled


def test_tiles_cover_the_frame_with_overlap():
    t = tiles(W, H)
    assert t.shape == (9, 4) and t[:, 0].min() == 0 and t[:, 2].max() >= W and t[:, 3].max() >= H
    side = t[0, 2] - t[0, 0]
    assert np.isclose(t[1, 0] - t[0, 0], (W - side) / 2) and t[1, 0] < t[0, 2]


# -- the converted models against MediaPipe's own graphs ---------------------------------------

def _mediapipe_graph(config: str, output: str, getter: str):
    """A MediaPipe graph of the wheel's calculators, and the dict its one output stream fills (timestamp -> value)."""
    import mediapipe as mp
    from google.protobuf import text_format
    from mediapipe.framework import calculator_pb2
    from mediapipe.python import packet_getter
    from mediapipe.python._framework_bindings import calculator_graph, resource_util

    resource_util.set_resource_dir(os.path.dirname(os.path.dirname(mp.__file__)))
    g = calculator_pb2.CalculatorGraphConfig()
    text_format.Parse(config, g)
    graph = calculator_graph.CalculatorGraph(graph_config=g)
    got: dict[int, object] = {}
    get = getattr(packet_getter, getter)
    graph.observe_output_stream(output, lambda name, p: got.__setitem__(p.timestamp.value, get(p)))
    return graph, got


def test_face_landmark_engine_matches_mediapipe_on_the_same_roi(engines, portrait):
    """MediaPipe's FaceLandmarkCpu (attention model, the wheel's graph) on given ROIs vs crop + engine."""
    from mediapipe.framework.formats import rect_pb2
    from mediapipe.python import packet_creator
    from mediapipe.python._framework_bindings import image_frame

    graph, got = _mediapipe_graph('''
        input_stream: "image" input_stream: "roi" output_stream: "lm" input_side_packet: "att"
        node { calculator: "FaceLandmarkCpu" input_stream: "IMAGE:image" input_stream: "ROI:roi"
               input_side_packet: "WITH_ATTENTION:att" output_stream: "LANDMARKS:lm" }''', "lm", "get_proto")
    h, w = portrait.shape[:2]
    rects = np.array([[675, 640, 800, 800, 0.0], [675, 640, 800, 800, 0.3], [600, 700, 900, 900, -0.5]])
    graph.start_run({"att": packet_creator.create_bool(True)})
    for t, r in enumerate(rects, 1):
        roi = rect_pb2.NormalizedRect(x_center=r[0] / w, y_center=r[1] / h, width=r[2] / w, height=r[3] / h,
                                      rotation=r[4])
        graph.add_packet_to_input_stream("image", packet_creator.create_image_frame(
            image_format=image_frame.ImageFormat.SRGB, data=portrait).at(t))
        graph.add_packet_to_input_stream("roi", packet_creator.create_proto(roi).at(t))
    graph.wait_until_idle()
    graph.close()
    pts, flags = engines.landmarks([portrait] * len(rects), rects)
    assert np.all(flags > 0.9)
    for t in range(1, len(rects) + 1):
        ref = np.array([(p.x, p.y, p.z) for p in got[t].landmark])
        err_px = np.abs((pts[t - 1] - ref)[:, :2] * [w, h])
        # axis-aligned crops are the same pixels: exact; rotated ones differ by OpenCV's warp rounding
        assert err_px.max() < (0.01 if t == 1 else 0.5), (t, err_px.max())


def test_face_detection_engine_matches_mediapipe(engines, testdata):
    from mediapipe.python import packet_creator
    from mediapipe.python._framework_bindings import image_frame

    graph, got = _mediapipe_graph('''
        input_stream: "image" output_stream: "det"
        node { calculator: "FaceDetectionShortRangeCpu"
               input_stream: "IMAGE:image" output_stream: "DETECTIONS:det" }''',
                                  "det", "get_proto_list")
    images = [cv2.cvtColor(cv2.imread(str(testdata / "images" / n)), cv2.COLOR_BGR2RGB)
              for n in ("lisa1_webcam.jpg", "grid_lbax4n_frame10.png")]
    graph.start_run()
    for t, img in enumerate(images, 1):
        graph.add_packet_to_input_stream("image", packet_creator.create_image_frame(
            image_format=image_frame.ImageFormat.SRGB, data=img).at(t))
    graph.wait_until_idle()
    graph.close()
    for t, (img, (boxes, kps, scores)) in enumerate(zip(images, engines.detect(images)), 1):
        h, w = img.shape[:2]
        (d,) = got[t]
        b = d.location_data.relative_bounding_box
        ref = np.array([b.xmin * w, b.ymin * h, (b.xmin + b.width) * w, (b.ymin + b.height) * h])
        assert len(scores) == 1 and abs(scores[0] - d.score[0]) < 1e-4
        assert np.abs(boxes[0] - ref).max() < 0.05
        ref_kp = np.array([(q.x * w, q.y * h) for q in d.location_data.relative_keypoints])
        assert np.abs(kps[0] - ref_kp).max() < 0.05


# -- the tracker contract ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def faces(testdata) -> dict[str, np.ndarray]:
    out = {}
    for key, name in (("a", "london_005_03_neutral.jpg"), ("b", "london_021_03_neutral.jpg")):
        out[key] = cv2.imread(str(testdata / "images" / name))[150:1150, 175:1175]
    return out


def _two_faces(faces, left_px: int, right_px: int) -> np.ndarray:
    c = np.full((H, W, 3), 128, np.uint8)
    c[100:100 + left_px, 30:30 + left_px] = cv2.resize(faces["a"], (left_px, left_px))
    c[150:150 + right_px, 620 - right_px:620] = cv2.resize(faces["b"], (right_px, right_px))
    return c


def test_contract_modes_and_timestamps(engines):
    img = np.zeros((H, W, 3), np.uint8)
    with OnnxFaceTracker(RunningMode.IMAGE, engines=engines) as t:
        with pytest.raises(TrackingError, match="VIDEO mode"):
            t.process_video_frame(img, 0.0)
        assert t.process_image(img) is None
        with pytest.raises(InputError):
            t.process_image(img[..., 0])
    with OnnxFaceTracker(RunningMode.VIDEO, engines=engines) as t:
        assert t.process_video_frame(img, 40.0) is None
        with pytest.raises(TrackingError, match=r"got 40\.0 ms after 40\.0 ms"):
            t.process_video_frame(img, 40.0)
    with OnnxFaceTracker(RunningMode.LIVE, engines=engines) as t:
        t.process_live(img, 10)
        with pytest.raises(TrackingError, match="strictly increase"):
            t.process_live(img, 10)
    assert engines.slots, "a tracker given engines must not close them"


def test_a_second_person_cannot_steal_the_tracking(engines, faces):
    """The user (a, small, left) is followed; a larger person b appearing later is ignored (the
    detector runs on every frame here, so it sees b each time)."""
    with OnnxFaceTracker(RunningMode.VIDEO, engines=engines, redetect_s=0.001) as t:
        alone = np.full((H, W, 3), 128, np.uint8)
        alone[100:320, 30:250] = cv2.resize(faces["a"], (220, 220))
        first = t.process_video_frame(alone, 0.0)
        assert first is not None and first.points[:, 0].mean() * W < 320
        for i in range(1, 6):
            lm = t.process_video_frame(_two_faces(faces, 220, 300), i * 40.0)
            assert lm is not None and lm.points[:, 0].mean() * W < 320, i  # still a, on the left
            assert t.faces_found == 2


def test_image_mode_takes_the_largest_face(engines, faces):
    with OnnxFaceTracker(RunningMode.IMAGE, engines=engines) as t:
        lm = t.process_image(_two_faces(faces, 200, 300))
    assert lm is not None and lm.points.shape == (478, 3) and lm.points.dtype == np.float32
    assert lm.points[:, 0].mean() * W > 320  # b, the larger, on the right
    assert lm.points[33, 0] < lm.points[468, 0] < lm.points[133, 0]  # iris between its eye corners


def test_track_step_batches_streams_and_keeps_their_state(engines, faces):
    frames = [cv2.cvtColor(_two_faces(faces, 200, 260), cv2.COLOR_BGR2RGB),
              np.full((H, W, 3), 128, np.uint8)]
    from avatar_app.tracking.onnx_tracker import StreamState

    states = [StreamState(), StreamState()]
    first = track_step(engines, frames, states, max_faces=2)
    assert [len(f) for f in first] == [2, 0] and len(states[0].rects) == 2 and len(states[1].rects) == 0
    second = track_step(engines, frames, states, max_faces=2)  # both tracked: the detector skips stream 0
    assert len(second[0]) == 2
    for a in first[0]:
        assert min(np.abs(a - b)[:, :2].max() for b in second[0]) < 0.01


# -- agreement with MediaPipe's tracker (the bar) --------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("clip", DEV_CLIPS)
def test_onnx_landmarks_agree_with_mediapipe_on_dev_clip(clip, testdata, engines):
    """MediaPipe's track of the clip is the evaluation's cached one (avatar_app.evaluation.landmarks:
    FaceTracker in VIDEO mode at the same media times, keyed by the file's hash and MediaPipe's
    version), the pixels :func:`track_frames` gives: these clips repeat no timestamp, so both see the
    same frames at the same times (equal to the last bit when checked)."""
    from avatar_app.evaluation.landmarks import track_video

    frames = list(video_frames(testdata / "video" / clip))
    tracked = track_video(testdata / "video" / clip)
    assert len(tracked) == len(frames) and np.allclose(tracked.times * 1e3, [t for t, _ in frames]), \
        "a repeated or shifted timestamp"
    ref = [None if lm is None else lm.pixels() for lm in map(tracked.landmarks, range(len(tracked)))]
    with OnnxFaceTracker(RunningMode.VIDEO, engines=engines) as t:
        cand = track_frames(t, frames)
    a = compare(ref, cand)
    assert a.both >= 0.95 * sum(r is not None for r in ref), a
    assert a.other_face == 0, a
    assert a.mean_pct <= MEAN_BAR_PCT and a.p99_pct <= P99_BAR_PCT, a


def test_onnx_landmarks_agree_with_mediapipe_on_the_webcam_still(testdata, engines):
    img = cv2.imread(str(testdata / "images" / "lisa1_webcam.jpg"))
    with FaceTracker(RunningMode.IMAGE) as t:
        ref = t.process_image(img).pixels()
    with OnnxFaceTracker(RunningMode.IMAGE, engines=engines) as t:
        cand = t.process_image(img).pixels()
    a = compare([ref], [cand])
    assert a.both == 1 and a.mean_pct <= MEAN_BAR_PCT and a.p99_pct <= P99_BAR_PCT, a


# -- choosing the tracker ----------------------------------------------------------------------

def test_auto_picks_onnx_only_with_a_gpu_backend(monkeypatch):
    import avatar_app.tracking.select as S

    monkeypatch.setattr(S, "gpu_backend", lambda: None)
    assert resolve_tracker("auto") == "mediapipe"
    monkeypatch.setattr(S, "gpu_backend", lambda: "ort_cuda")
    assert resolve_tracker("auto") == "onnx" and resolve_tracker("mediapipe") == "mediapipe"
    with pytest.raises(InputError, match="unknown tracker"):
        resolve_tracker("dlib")
    with make_tracker("mediapipe", RunningMode.IMAGE, backend="ort_cpu") as t:
        assert type(t) is FaceTracker


@pytest.mark.slow
def test_render_with_the_onnx_tracker(testdata, tmp_path):
    from tests.helpers import run_cli

    out = tmp_path / "onnx.mp4"
    p = run_cli("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(out), "--tracker", "onnx",
                "--size", "320x240", "-q")
    assert p.returncode == 0, p.stderr
    assert "face in 75/75 frames" in p.stdout + p.stderr
    bad = run_cli("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(out), "--tracker", "x")
    assert bad.returncode == 2 and "--tracker" in bad.stderr


# -- the engines on the engine layer ------------------------------------------------------------

def test_data_sets_made_on_this_machine_are_found(tmp_path, monkeypatch):
    from avatar_app.inference.modelinfo import (
        ModelInfo,
        data_set_path,
        local_data_sets_dir,
    )
    from avatar_app.tracking.onnx_tracker import model_paths

    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))
    det = model_paths()[0]
    assert data_set_path(det, "val") == det.with_name("face_detection.val.npz")  # nothing made yet
    local_data_sets_dir().mkdir(parents=True)
    np.savez(local_data_sets_dir() / "face_detection.val.npz", image=np.zeros((2, 3, 128, 128), np.uint8))
    info = ModelInfo.from_onnx(det)
    assert info.validation_path == local_data_sets_dir() / "face_detection.val.npz"
    assert not info.calibration_path.is_file()  # each set on its own
    beside = tmp_path / "m" / "face_recon.onnx"
    beside.parent.mkdir()
    (beside.parent / "face_recon.val.npz").write_bytes(b"x")
    (local_data_sets_dir() / "face_recon.val.npz").write_bytes(b"y")
    assert data_set_path(beside, "val") == beside.parent / "face_recon.val.npz"  # beside the model wins


@pytest.mark.slow
def test_fp16_engines_pass_verification_on_real_crops(testdata, tmp_path, monkeypatch):
    """make_sets' real crops (a few per recording) verify FP16 engines of both models within the cards'
    tolerances; the cards' tolerances are stricter than the defaults."""
    from avatar_app.inference import EngineCache, EngineManager, Precision
    from avatar_app.inference.modelinfo import local_data_sets_dir
    from avatar_app.tracking.onnx_tracker import model_paths
    from training.landmarks.make_sets import collect

    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))
    sets = collect(testdata, "val", 6, max_frames=20)
    local_data_sets_dir().mkdir(parents=True)
    for name, arr in sets.items():
        assert arr.dtype == np.uint8 and len(arr) >= 4
        np.savez(local_data_sets_dir() / f"{name}.val.npz", image=arr)
    manager = EngineManager(EngineCache(tmp_path / "cache"), isolate=False)
    for path in model_paths():
        info = manager.model_info(path)
        assert info.tolerances[Precision.FP16] == 5e-3
        entry = manager.build(path, "ort_cpu", "fp16")
        v = entry.manifest.verification_result
        assert entry.manifest.status == "ok" and v.data_source == "file" and v.samples == len(sets[info.name])
        assert v.max_abs_error <= 5e-3, v.summary()


@pytest.mark.slow
@pytest.mark.build
def test_int8_mesh_passes_verification_on_real_crops(testdata, tmp_path, monkeypatch):
    """The mesh's INT8 engine: the card's recipe (sensitivity search at ``int8_margin`` 0.25, calibration
    crops only) makes a mixed-precision file that verifies on validation crops of other recordings within
    the card's INT8 tolerance, and the search stays within 1 + N + log2 N + 1 quantisations."""
    import json

    import onnx

    from avatar_app.inference import EngineCache, EngineManager, Precision
    from avatar_app.inference.modelinfo import local_data_sets_dir
    from avatar_app.inference.precision import META_INT8, int8_summary
    from avatar_app.tracking.onnx_tracker import model_paths
    from training.landmarks.make_sets import collect

    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))
    local_data_sets_dir().mkdir(parents=True)
    for kind, count in (("val", 12), ("calib", 24)):
        crops = collect(testdata, kind, count, max_frames=40)["face_landmark"]
        np.savez(local_data_sets_dir() / f"face_landmark.{kind}.npz", image=crops)
    mesh = model_paths()[1]
    manager = EngineManager(EngineCache(tmp_path / "cache"), isolate=False)
    info = manager.model_info(mesh)
    assert info.tolerances[Precision.INT8] == 2e-2 and info.card["int8_margin"] == 0.25
    entry = manager.build(mesh, "ort_cpu", "int8")
    v = entry.manifest.verification_result
    assert entry.manifest.status == "ok", entry.manifest.reason
    assert v.data_source == "file" and v.max_abs_error <= 2e-2, v.summary()
    s = int8_summary(entry.artifact_path)
    assert s["quantized_layers"] > 0 and s["float_layers"] > 0  # mixed: neither all INT8 nor all float
    meta = json.loads({p.key: p.value for p in onnx.load(str(entry.artifact_path)).metadata_props}[META_INT8])
    n = len(meta["sensitivity"])
    assert meta["searched"] and n > 100 and meta["quantizations"] <= 1 + n + int(np.log2(n)) + 1
