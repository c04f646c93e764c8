"""FaceTracker: running modes, timestamp contract, bad input, no face, face selection."""
from __future__ import annotations

import av
import cv2
import numpy as np
import pytest

from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.types import Landmarks
from avatar_app.tracking import FaceTracker, RunningMode

W, H = 640, 480


@pytest.fixture(scope="module")
def faces(testdata) -> dict[str, np.ndarray]:
    """Two different people, cropped around the head (BGR)."""
    out = {}
    for key, name in (("a", "london_005_03_neutral.jpg"), ("b", "london_021_03_neutral.jpg")):
        img = cv2.imread(str(testdata / "images" / name))
        assert img is not None, name
        out[key] = img[150:1150, 175:1175]
    return out


def two_faces(faces, left_px: int, right_px: int) -> np.ndarray:
    """A 640x480 frame with person a on the left and person b on the right."""
    c = np.full((H, W, 3), 128, np.uint8)
    c[100 : 100 + left_px, 30 : 30 + left_px] = cv2.resize(faces["a"], (left_px, left_px))
    c[150 : 150 + right_px, 620 - right_px : 620] = cv2.resize(faces["b"], (right_px, right_px))
    return c


def centre_x(lm: Landmarks) -> float:
    return float(lm.points[:, 0].mean() * lm.image_size[0])


def test_image_mode_returns_478_landmarks(testdata):
    img = cv2.imread(str(testdata / "images" / "london_005_03_neutral.jpg"))
    with FaceTracker(RunningMode.IMAGE) as tracker:
        assert tracker.mode is RunningMode.IMAGE
        lm = tracker.process_image(img)
        assert lm is not None
        assert lm.points.shape == (478, 3) and lm.points.dtype == np.float32
        assert lm.image_size == (1350, 1350) and lm.t_ns == 0
        xy = lm.points[:, :2]
        assert np.all((xy > 0.1) & (xy < 0.9))  # a centred portrait
        # Subject's right eye (outer corner 33) is on the image's left.
        assert lm.points[33, 0] < lm.points[263, 0]
        # Irises lie between their eye corners.
        assert lm.points[33, 0] < lm.points[468, 0] < lm.points[133, 0]
        assert lm.points[362, 0] < lm.points[473, 0] < lm.points[263, 0]


def test_mode_misuse_raises():
    img = np.zeros((H, W, 3), np.uint8)
    with FaceTracker(RunningMode.IMAGE) as t:
        with pytest.raises(TrackingError, match="VIDEO mode.*IMAGE mode"):
            t.process_video_frame(img, 0.0)
        with pytest.raises(TrackingError, match="LIVE mode"):
            t.process_live(img, 1)
    with FaceTracker(RunningMode.VIDEO) as t:
        with pytest.raises(TrackingError, match="IMAGE mode"):
            t.process_image(img)
        with pytest.raises(TrackingError, match="LIVE mode"):
            t.process_live(img, 1)
    with FaceTracker(RunningMode.LIVE) as t:
        with pytest.raises(TrackingError, match="VIDEO mode"):
            t.process_video_frame(img, 0.0)


def test_video_timestamps_must_strictly_increase():
    img = np.zeros((H, W, 3), np.uint8)
    with FaceTracker(RunningMode.VIDEO) as t:
        assert t.process_video_frame(img, 40.0) is None
        with pytest.raises(TrackingError, match=r"got 40\.0 ms after 40\.0 ms"):
            t.process_video_frame(img, 40.0)
        with pytest.raises(TrackingError, match=r"got 10\.0 ms after 40\.0 ms"):
            t.process_video_frame(img, 10.0)
        with pytest.raises(InputError, match="finite"):
            t.process_video_frame(img, float("nan"))
        assert t.process_video_frame(img, 80.0) is None  # still usable
        t.reset()
        assert t.process_video_frame(img, 0.0) is None  # reset forgets the last timestamp


def test_live_timestamps_must_strictly_increase_and_be_integers():
    img = np.zeros((H, W, 3), np.uint8)
    with FaceTracker(RunningMode.LIVE) as t:
        t.process_live(img, 1_000_000)
        with pytest.raises(TrackingError, match="got 999999 ns after 1000000 ns"):
            t.process_live(img, 999_999)
        with pytest.raises(TrackingError, match="strictly increase"):
            t.process_live(img, 1_000_000)
        with pytest.raises(InputError, match="integer"):
            t.process_live(img, 2.5e6)
        t.process_live(img, np.int64(2_000_000))


@pytest.mark.parametrize(
    "bad,match",
    [
        (None, "None"),
        (np.zeros((H, W, 3), np.float32), "uint8"),
        (np.zeros((H, W), np.uint8), r"\(H, W, 3\)"),
        (np.zeros((H, W, 4), np.uint8), r"\(H, W, 3\)"),
        ([[0, 0, 0]], "numpy array"),
    ],
)
def test_bad_images_raise_input_error(bad, match):
    with FaceTracker(RunningMode.IMAGE) as t:
        with pytest.raises(InputError, match=match):
            t.process_image(bad)


def test_closed_tracker_raises():
    t = FaceTracker(RunningMode.IMAGE)
    t.close()
    t.close()  # idempotent
    with pytest.raises(TrackingError, match="closed"):
        t.process_image(np.zeros((H, W, 3), np.uint8))


def test_constructor_validates():
    with pytest.raises(InputError, match="max_faces"):
        FaceTracker(RunningMode.VIDEO, max_faces=0)
    with pytest.raises(InputError, match="min_detection_confidence"):
        FaceTracker(RunningMode.VIDEO, min_detection_confidence=1.5)
    with pytest.raises(InputError, match="RunningMode"):
        FaceTracker("video")  # type: ignore[arg-type]


def test_no_face_video_returns_none():
    rng = np.random.default_rng(0)
    with FaceTracker(RunningMode.VIDEO) as t:
        for i in range(10):
            plain = np.full((H, W, 3), (40, 160, 90), np.uint8)
            noise = rng.integers(0, 256, size=(H, W, 3), dtype=np.uint8)
            assert t.process_video_frame(plain, 2 * i * 33.3) is None
            assert t.process_video_frame(noise, (2 * i + 1) * 33.3) is None
            assert t.faces_found == 0


def test_video_frame_timestamp_is_carried(testdata):
    with av.open(str(testdata / "video" / "grid_s1_bbaf2n.mp4")) as c, FaceTracker(
        RunningMode.VIDEO
    ) as t:
        frame = next(c.decode(video=0))
        lm = t.process_video_frame(frame.to_ndarray(format="bgr24"), 1234.5)
        assert lm is not None and lm.t_ns == 1_234_500_000 and lm.image_size == (360, 288)


def test_image_mode_picks_the_largest_face(faces):
    with FaceTracker(RunningMode.IMAGE) as t:
        assert centre_x(t.process_image(two_faces(faces, 260, 170))) < W / 2
        assert centre_x(t.process_image(two_faces(faces, 170, 260))) > W / 2


def test_video_mode_keeps_following_the_first_choice(faces):
    """Largest face first; when the other face becomes larger, the tracker stays."""
    with FaceTracker(RunningMode.VIDEO) as t:
        xs = []
        for i in range(20):
            frame = two_faces(faces, 260, 170) if i < 8 else two_faces(faces, 170, 260)
            lm = t.process_video_frame(frame, i * 33.3)
            assert lm is not None, f"frame {i}"
            xs.append(centre_x(lm))
    assert max(xs) < W / 2, xs


def _track_centres(path, crop_x0: int = 0, max_faces: int = 2):
    centres, sizes = [], []
    with av.open(str(path)) as c, FaceTracker(RunningMode.VIDEO, max_faces=max_faces) as t:
        for frame in c.decode(video=0):
            img = np.ascontiguousarray(frame.to_ndarray(format="bgr24")[:, crop_x0:])
            lm = t.process_video_frame(img, frame.time * 1e3)
            if lm is None:
                centres.append(None)
                continue
            px = lm.pixels()
            centres.append(px[:, :2].mean(axis=0))
            sizes.append(px[:, 0].max() - px[:, 0].min())
    return centres, sizes


@pytest.mark.parametrize("crop_x0", [0, 200], ids=["all_five", "without_the_largest"])
def test_small_faces_in_a_crowd_no_jumps_between_people(testdata, crop_x0):
    """openmpf: handheld, five people, faces of 40-70 px. The chosen face must stay
    the same person: its centre moves less than half a face width per frame (the
    people stand more than a face width apart)."""
    centres, sizes = _track_centres(testdata / "video" / "openmpf_video_01.mp4", crop_x0)
    found = [c for c in centres if c is not None]
    assert len(found) >= 0.8 * len(centres), f"tracked {len(found)}/{len(centres)} frames"
    face_w = float(np.median(sizes))
    assert 25 < face_w < 120
    steps = [
        float(np.linalg.norm(a - b))
        for a, b in zip(centres[:-1], centres[1:])
        if a is not None and b is not None
    ]
    assert max(steps) < 0.5 * face_w, (max(steps), face_w)
    # Over the whole clip the followed face stays near where it started (same person).
    assert np.linalg.norm(found[-1] - found[0]) < 3 * face_w


def test_small_faces_path_in_image_mode(testdata):
    """openmpf frame 0: faces of 40-70 px that the mesh's short-range detector misses;
    the full-range detector and an upscaled crop find them, the largest (left) first."""
    with av.open(str(testdata / "video" / "openmpf_video_01.mp4")) as c:
        img = next(c.decode(video=0)).to_ndarray(format="bgr24")
    with FaceTracker(RunningMode.IMAGE, small_faces=False) as t:
        assert t.process_image(img) is None
    with FaceTracker(RunningMode.IMAGE) as t:
        lm = t.process_image(img)
        assert lm is not None and t.faces_found >= 3
        px = lm.pixels()
        assert px[:, 0].mean() < 200  # the woman on the left has the largest face
        assert 40 < px[:, 0].max() - px[:, 0].min() < 120
        assert px[33, 0] < px[263, 0]  # still the subject's right eye on the image's left


# -- when the detector runs (counted through a wrapper; media time only, never wall time) --------


def _count_calls(tracker: FaceTracker, *names: str) -> list:
    """Wrap ``tracker.<name>`` of each name so each call appends its media time (or None) to the
    returned list (one list for all: ``_find_faces`` and ``_start_detection`` are both detector runs)."""
    calls: list = []
    for name in names:
        real = getattr(tracker, name)

        def counted(*args, _real=real, **kwargs):
            calls.append(tracker._last_ts)
            return _real(*args, **kwargs)

        setattr(tracker, name, counted)
    return calls


@pytest.fixture(scope="module")
def grid_frames(testdata) -> list[tuple[np.ndarray, float]]:
    """The 75 frames of grid_s1_bbaf2n (one face, always in view) with their media times, ms."""
    with av.open(str(testdata / "video" / "grid_s1_bbaf2n.mp4")) as c:
        return [(f.to_ndarray(format="bgr24"), f.time * 1e3) for f in c.decode(video=0)]


@pytest.mark.parametrize(("redetect_s", "expected_ms"), [
    ("default", [0.0, 2000.0]),  # 2 s: 2 % of frames at 25 fps, out of the frame time's p95
    (1.0, [0.0, 1000.0, 2000.0]),
    (0.5, [0.0, 520.0, 1040.0, 1560.0, 2080.0, 2600.0]),
    (None, [0.0]),
])
def test_detector_runs_on_the_first_frame_then_every_redetect_s_of_media_time(grid_frames, redetect_s, expected_ms):
    kw = {} if redetect_s == "default" else {"redetect_s": redetect_s}
    with FaceTracker(RunningMode.VIDEO, **kw) as t:
        detector = _count_calls(t, "_find_faces", "_start_detection")
        landmarker = _count_calls(t, "_landmarks")
        for img, ms in grid_frames:
            assert t.process_video_frame(img, ms) is not None
            assert t.faces_found == 1
    # 25 fps: the first frame at or after each interval (0.5 s falls between frames 12 and 13)
    assert detector == pytest.approx(expected_ms)
    assert len(landmarker) == len(grid_frames)  # one landmark run per frame, never more


def test_detector_runs_on_every_frame_while_no_face_is_followed(grid_frames):
    """Start, loss (the same frame), absence: the detector looks on each of those frames."""
    blank = np.full_like(grid_frames[0][0], 90)
    frames = grid_frames[:5] + [(blank, 200.0 + 40 * i) for i in range(5)] + [
        (img, 400.0 + ms) for img, ms in grid_frames[10:15]]
    with FaceTracker(RunningMode.VIDEO, small_faces=False) as t:
        detector = _count_calls(t, "_find_faces")
        found = [t.process_video_frame(img, ms) is not None for img, ms in frames]
    assert found == [True] * 5 + [False] * 5 + [True] * 5
    # frame 0; each blank frame (the first of them is the loss); the face's return; then tracking
    assert detector == pytest.approx([0.0, 200.0, 240.0, 280.0, 320.0, 360.0, 800.0])


def test_another_face_in_view_is_never_tracked(faces):
    """Two faces in view, the periodic detector on every frame: one landmark run per frame (the
    followed face's), it keeps its place although the other face is larger, and both are counted."""
    with FaceTracker(RunningMode.VIDEO, redetect_s=0.001) as t:
        assert centre_x(t.process_video_frame(two_faces(faces, 260, 170), 0.0)) < W / 2
        landmarker = _count_calls(t, "_landmarks")
        xs = []
        for i in range(1, 13):
            lm = t.process_video_frame(two_faces(faces, 250, 280), i * 33.3)
            assert lm is not None and t.faces_found == 2, f"frame {i}"
            xs.append(centre_x(lm))
    assert len(landmarker) == 12
    assert max(xs) < W / 2, xs


def test_the_periodic_detection_beside_the_landmark_model_equals_the_one_before_it(faces, grid_frames):
    """The periodic detector graph computes beside the landmark graph (``_start_detection``): the
    landmarks, the faces counted and the detector's media times equal those of the detector run
    before the landmark model (the fallback of trackers on other engines), bit for bit; a second
    person stepping into view is counted at the next periodic run, and never tracked."""
    clip = [img for img, _ in grid_frames[:20]] + [two_faces(faces, 250, 280)] * 6 + [
        two_faces(faces, 240, 300)] * 6

    def run(beside: bool):
        with FaceTracker(RunningMode.VIDEO, redetect_s=0.1) as t:
            if not beside:  # the detection on the calling thread, before the landmark model
                t._start_detection = lambda frame, w, h, t_s: (
                    lambda found=t._find_faces(frame, w, h, t_s, near=True, far=False): found)
            first = t.process_video_frame(two_faces(faces, 260, 170), 0.0)
            out, detector = [(first.points.copy(), t.faces_found)], set()
            for i, img in enumerate(clip):
                lm = t.process_video_frame(cv2.resize(img, (W, H)), 40.0 * (i + 1))
                out.append((None if lm is None else lm.points.copy(), t.faces_found))
                detector.add(t._detected_at_s)  # media time (s) of the last detector run
            return out, sorted(detector)

    beside, det_beside = run(True)
    before, det_before = run(False)
    assert det_beside == det_before and len(det_beside) >= 10  # every 0.1 s: every 3rd frame at 25 fps
    for (p1, n1), (p2, n2) in zip(beside, before):
        assert n1 == n2 and (p1 is None) == (p2 is None)
        if p1 is not None:
            assert p1.tobytes() == p2.tobytes()
    counts = [n for _, n in beside]
    # one face while the GRID speaker is alone; the second person counted within 0.12 s of entering
    assert counts[1:21] == [1] * 20 and all(n == 2 for n in counts[24:])
    assert all(p is not None and p[:, 0].mean() * W < W / 2 for p, _ in beside[21:])  # still person a


def test_a_second_person_is_taken_only_after_reacquire_after_s(faces):
    """Person a is followed, leaves; person b alone in view is ignored until a has been gone
    for reacquire_after_s of media time, then followed."""
    only_a, only_b = np.full((H, W, 3), 128, np.uint8), np.full((H, W, 3), 128, np.uint8)
    only_a[100:360, 30:290] = cv2.resize(faces["a"], (260, 260))
    only_b[150:410, 360:620] = cv2.resize(faces["b"], (260, 260))
    with FaceTracker(RunningMode.VIDEO, reacquire_after_s=0.5) as t:
        assert centre_x(t.process_video_frame(only_a, 0.0)) < W / 2
        seen = {ms: t.process_video_frame(only_b, ms) for ms in (100.0, 300.0, 550.0, 599.0, 600.0, 700.0)}
    assert [seen[ms] is None for ms in (100.0, 300.0, 550.0, 599.0)] == [True] * 4
    assert centre_x(seen[600.0]) > W / 2 and centre_x(seen[700.0]) > W / 2


def test_landmarks_equal_mediapipe_face_mesh(grid_frames):
    """The tracker's graphs are MediaPipe's own subgraphs: same points as FaceMesh (one face, refined)."""
    import mediapipe as mp

    with FaceTracker(RunningMode.VIDEO) as t, mp.solutions.face_mesh.FaceMesh(
            max_num_faces=1, refine_landmarks=True) as mesh:
        for img, ms in grid_frames[:8]:
            ours = t.process_video_frame(img, ms).points
            res = mesh.process(cv2.cvtColor(img, cv2.COLOR_BGR2RGB)).multi_face_landmarks[0]
            theirs = np.array([(p.x, p.y, p.z) for p in res.landmark], np.float32)
            np.testing.assert_array_equal(ours, theirs)
