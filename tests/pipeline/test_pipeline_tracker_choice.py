"""The studio session's tracker choice without Qt (issue 19 item 3): switching the live pipeline's face tracker
between MediaPipe and the ONNX landmark engines while frames flow, failures that leave a tracker running, the
settings that carry the choice, and the studio's offline mode against `render --settings` with the ONNX tracker."""
from __future__ import annotations

import time

import numpy as np
import pytest
from inference_helpers import tiny_landmark_build

from avatar_app.pipeline.settings import MemoryStore, StudioSettings, load_settings_file, save_settings_file

VIDEO = "video/grid_s1_bbaf2n.mp4"
#: Per-frame agreement asked of the studio's offline mode and `render --settings` (as for MediaPipe).
PARITY_TOL = 1e-5


def _session(tmp_path, monkeypatch, store=None):
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.pipeline.session import StudioSession

    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))
    return StudioSession(store if store is not None else MemoryStore(),
                         engines=EngineController(models={"face_recon": None, "speech2face": None}))


def _wait(pred, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.fixture
def playing(tmp_path, monkeypatch, testdata):
    """A session playing the GRID clip live (MediaPipe tracks: the default on this CPU)."""
    session = _session(tmp_path, monkeypatch)
    session.start(source=testdata / VIDEO)
    _wait(lambda: session.pipeline is not None and session.pipeline.frames_processed >= 5)
    yield session
    session.close()


def test_switching_to_onnx_and_back_while_frames_flow(playing):
    from avatar_app.tracking.select import tracker_kind

    s = playing
    pipe = s.pipeline
    first = pipe.processor.tracker
    assert tracker_kind(first) == "mediapipe"
    assert s.trackers.serving() == "MediaPipe (CPU)"
    fut = s.set_tracker_choice("onnx", "ort_cpu", "fp32")
    assert s.trackers.building  # built on the builder thread; the current tracker keeps running
    tracker = fut.result(timeout=120)
    assert tracker_kind(tracker) == "onnx" and not s.trackers.error, s.trackers.error
    _wait(lambda: pipe.processor.tracker is tracker)  # swapped in between two frames
    n = pipe.frames_processed
    _wait(lambda: pipe.frames_processed >= n + 10)  # frames keep flowing on the new tracker
    assert s.pipeline is pipe and pipe.running and pipe.tracker_swaps == 1
    assert pipe.error is None, pipe.error
    assert pipe.latest_state().face_found  # the ONNX tracker finds the face
    assert s.trackers.serving() == "ONNX engines: ONNX Runtime CPU (detector FP32, mesh FP32)"
    assert s.settings.engines.tracker == {"kind": "onnx", "backend": "ort_cpu", "precision": "fp32"}
    assert '"kind": "onnx"' in s.store.value("studio/EngineChoice")  # persisted
    _wait(lambda: first._closed)  # the replaced tracker is closed (on the builder thread)
    back = s.set_tracker_choice("mediapipe").result(timeout=60)
    _wait(lambda: pipe.processor.tracker is back)
    assert tracker_kind(pipe.processor.tracker) == "mediapipe"
    with pytest.raises(Exception, match="openface"):
        s.set_tracker_choice("openface")


def test_an_onnx_tracker_that_does_not_load_leaves_mediapipe_tracking(playing, monkeypatch, tmp_path):
    from avatar_app.tracking import onnx_tracker
    from avatar_app.tracking.select import tracker_kind

    s = playing
    missing = (tmp_path / "nowhere" / "face_detection.onnx", tmp_path / "nowhere" / "face_landmark.onnx")
    monkeypatch.setattr(onnx_tracker, "model_paths", lambda: missing)
    pipe = s.pipeline
    assert s.set_tracker_choice("onnx", "ort_cpu", None).result(timeout=60) is None
    assert "could not be loaded" in s.trackers.error and "landmark model not found" in s.trackers.error
    assert "MediaPipe (CPU) keeps tracking" in s.trackers.error
    assert tracker_kind(pipe.processor.tracker) == "mediapipe" and pipe.tracker_swaps == 0
    n = pipe.frames_processed
    _wait(lambda: pipe.frames_processed >= n + 5)
    assert s.trackers.stage_fields()["tracker"] == "mediapipe"  # a new source starts on MediaPipe
    assert s.trackers.kind_reason("onnx").startswith("landmark models not installed")


def test_a_new_source_with_a_broken_onnx_choice_falls_back_to_mediapipe(tmp_path, monkeypatch, testdata):
    from avatar_app.tracking import onnx_tracker
    from avatar_app.tracking.select import tracker_kind

    store = MemoryStore()
    chosen = StudioSettings()
    chosen.engines.tracker = {"kind": "onnx", "backend": "ort_cpu", "precision": None}
    chosen.save(store)
    monkeypatch.setattr(onnx_tracker, "model_paths", lambda: (tmp_path / "a.onnx", tmp_path / "b.onnx"))
    s = _session(tmp_path, monkeypatch, store)
    try:
        s.start(source=testdata / VIDEO)
        _wait(lambda: s.pipeline is not None and s.pipeline.frames_processed >= 3)
        assert tracker_kind(s.pipeline.processor.tracker) == "mediapipe"
        assert "The ONNX tracker cannot be used" in s.trackers.error and "MediaPipe" in s.trackers.error
    finally:
        s.close()


def test_the_settings_file_carries_the_tracker_and_names_bad_values(tmp_path):
    s = StudioSettings()
    s.engines.tracker = {"kind": "onnx", "backend": "ort_cuda", "precision": "fp16"}
    path = save_settings_file(tmp_path / "studio.json", s)
    assert load_settings_file(path).engines.tracker == s.engines.tracker
    text = path.read_text().replace('"ort_cuda"', '"warp_drive"').replace('"fp16"', '"fp4"')
    path.write_text(text.replace('"kind": "onnx"', '"kind": "openface"'))
    report: list[str] = []
    back = load_settings_file(path, report)
    assert back.engines.tracker == {"kind": "auto", "backend": "auto", "precision": None}
    joined = "\n".join(report)
    for bad in ("engines.tracker.kind: 'openface'", "engines.tracker.backend: 'warp_drive'",
                "engines.tracker.precision: 'fp4'"):
        assert bad in joined, joined
    store = MemoryStore()
    s.save(store)
    assert StudioSettings.load(store).engines.tracker == s.engines.tracker  # the QSettings path too


def test_studio_offline_mode_and_render_settings_agree_with_the_onnx_tracker(tmp_path, testdata, monkeypatch):
    """The parity bar of issue 16 with the Tracking row on ONNX engines: the studio's offline mode and
    `render --settings` of its exported file run the same ONNX tracker and give the same states."""
    from avatar_app import cli
    from avatar_app.record import sidecar as sidecar_mod

    video = testdata / VIDEO
    session = _session(tmp_path, monkeypatch)
    try:
        session.settings.engines.tracker = {"kind": "onnx", "backend": "ort_cpu", "precision": "fp32"}
        settings_file = session.export_settings(tmp_path / "studio.json")
        studio = session.run_offline(video)
    finally:
        session.close()
    rendered = []
    write = sidecar_mod.SidecarWriter.write
    monkeypatch.setattr(sidecar_mod.SidecarWriter, "write",
                        lambda self, state, media_time_s=None: (rendered.append(state), write(self, state,
                                                                                            media_time_s))[1])
    summary = []
    monkeypatch.setattr(cli, "_print_report", lambda rep: summary.append(rep))
    assert cli.main(["render", str(video), "-o", str(tmp_path / "r.mp4"), "--settings", str(settings_file),
                     "--size", "96x64", "-q"]) == 0
    assert summary[0].tracker.startswith("ONNX tracker: face_detection.onnx on ort_cpu (fp32)"), summary[0].tracker
    assert len(rendered) == len(studio) and sum(s.face_found for s in studio) >= 70
    worst = max(float(np.abs(np.asarray(a.weights, np.float64) - b.weights).max()) for a, b in zip(studio, rendered))
    assert worst <= PARITY_TOL, worst


def test_a_precision_that_fails_verification_is_named_with_what_serves(playing, monkeypatch):
    """FP16 asked for, the detector's FP16 engine rejected by verification: FP32 serves and the row says so."""
    from avatar_app.inference.manager import Attempt, OpenResult
    from avatar_app.pipeline import stage_swaps

    real = stage_swaps.build_tracker
    rejected = "fp16 REJECTED: max 2.61e-02 (tol 5e-03)"

    def fp16_rejected(choice):  # the real ONNX tracker on FP32, with the detector's record of a rejected FP16
        assert choice.tracker_precision == "fp16"
        choice.tracker_precision = "fp32"
        tracker = real(choice)
        det = tracker.engines.slots[0]
        det._result = OpenResult(det.active, [Attempt("ort_cpu", "fp16", False, rejected),
                                              Attempt("ort_cpu", "fp32", True)])
        return tracker

    monkeypatch.setattr(stage_swaps, "build_tracker", fp16_rejected)
    said = []
    playing.events.status.connect(lambda text, ms: said.append(text))
    assert playing.set_tracker_choice("onnx", "ort_cpu", "fp16").result(timeout=120) is not None
    notice, detail = playing.trackers.notice, playing.trackers.notice_detail
    assert f"FP16 detector not verified, FP32 serves: {rejected}" in detail, detail
    # one short line (the mesh may fall back too: no face crops here); the reasons are in the tooltip
    assert notice.startswith("FP16 not used for detector") and notice.endswith(": FP32 serves"), notice
    assert "\n" not in notice and rejected not in notice
    assert not playing.trackers.error and not playing.trackers.building
    assert f"Tracking: {notice}" in said, said


class _Tracker:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


class _IdleSource:
    """A source that never delivers a frame."""

    def start(self):
        pass

    def stop(self):
        pass

    def get_latest(self, timeout_s):
        time.sleep(timeout_s)
        return None


def test_trackers_waiting_for_a_frame_are_retired_or_closed_with_the_pipeline():
    from avatar_app.fusion.chain import PostChain
    from avatar_app.pipeline.live import LivePipeline
    from avatar_app.pipeline.stages import Stages
    from avatar_app.reconstruction.geometric import GeometricSolver

    first, a, b = _Tracker(), _Tracker(), _Tracker()
    pipe = LivePipeline(_IdleSource(), Stages(first, GeometricSolver(), None, PostChain()))
    pipe.start()
    try:
        pipe.replace_tracker(a)
        assert pipe.tracker is a and pipe.processor.tracker is first  # swapped only at the next frame
        pipe.replace_tracker(b)  # supersedes a, which is retired unused
        assert a.closed and not b.closed and pipe.tracker is b
    finally:
        pipe.stop()
    assert b.closed and first.closed and pipe.tracker_swaps == 0  # no frame came: the waiting one is closed too


def test_fallback_reason_is_the_serving_backends_not_the_first_uninstalled_one():
    """Trial finding: 'INT8 detector not verified, FP32 serves: tensorrt is not installed' hid the real reason."""
    from types import SimpleNamespace as NS

    from avatar_app.inference.base import Precision
    from avatar_app.inference.manager import Attempt
    from avatar_app.pipeline.stage_swaps import TrackerController

    attempts = [Attempt("tensorrt", "int8", False, "tensorrt is not installed (install TensorRT)"),
                Attempt("ort_cpu", "int8", False, "rejected: max error 0.258 over tolerance 0.05"),
                Attempt("ort_cpu", "fp32", True, "")]
    slot = NS(result=NS(attempts=attempts), active=NS(precision=Precision.FP32, backend="ort_cpu"))
    ok = NS(result=NS(attempts=[Attempt("ort_cpu", "int8", True, "")]),
            active=NS(precision=Precision.INT8, backend="ort_cpu"))
    tracker = NS(engines=NS(slots=(slot, ok)))
    text = TrackerController._fell_back(tracker, {"kind": "onnx", "precision": "int8"})
    assert "rejected: max error 0.258" in text and "not installed" not in text
    assert text.count("\n") == 0 and text.startswith("INT8 ") and "FP32 serves" in text


def test_the_fallback_notice_is_one_short_line_in_user_terms():
    """Trial 20: two long lines, each saying "FP32 serves" twice and naming training/landmarks/make_sets.py
    (absent from a pip install). Now one short line; the per-engine reasons stay in notice_detail."""
    from types import SimpleNamespace as NS

    from avatar_app.inference.base import Precision
    from avatar_app.inference.calibration import real_data_missing
    from avatar_app.inference.manager import Attempt
    from avatar_app.pipeline.stage_swaps import TrackerController

    def card_info(name):
        return NS(name=name, card={"real_data_only": True}, validation_path=NS(name=f"{name}.val.npz",
                                                                               is_file=lambda: False))

    slots = []
    for stem in ("face_detection", "face_landmark"):
        why = real_data_missing(card_info(stem), "int8")
        assert "make_sets" not in why and "training/" not in why and "FP32 serves" not in why, why
        assert f"{stem}.val.npz" in why
        slots.append(NS(result=NS(attempts=[Attempt("ort_cpu", "int8", False, why), Attempt("ort_cpu", "fp32", True)]),
                        active=NS(precision=Precision.FP32, backend="ort_cpu")))
    tracker = NS(engines=NS(slots=tuple(slots)))
    chosen = {"kind": "onnx", "precision": "int8"}
    short = TrackerController.short_notice(TrackerController._fallbacks(tracker, chosen))
    assert short == "INT8 not used for detector and mesh (no face samples installed to check it): FP32 serves"
    detail = TrackerController._fell_back(tracker, chosen)
    assert detail.count("\n") == 1 and all(line.count("FP32 serves") == 1 for line in detail.splitlines()), detail
    assert TrackerController.short_notice([]) == ""


def test_the_tracker_build_reports_progress_over_both_engines(playing, monkeypatch, tiny_models):
    """The Tracking row's progress: the engine layer's reports of the detector then the mesh, as one
    fraction over both (each half), through the session's events; cleared when the build ends."""
    tiny_landmark_build(monkeypatch, tiny_models)
    s = playing
    seen = []
    s.events.engine_changed.connect(
        lambda name: name == "tracker" and s.trackers.building
        and seen.append((s.trackers.build_fraction, s.trackers.build_stage)))
    assert s.set_tracker_choice("onnx", "ort_cpu", "fp16").result(timeout=120) is not None
    _wait(lambda: not s.trackers.building)
    time.sleep(0.2)  # the events dispatched before the end
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions), seen  # only forward
    det = [(f, t) for f, t in seen if t.startswith("detector (1 of 2): ")]
    mesh = [(f, t) for f, t in seen if t.startswith("mesh (2 of 2): ")]
    assert det and mesh, seen
    assert all(0 < f <= 0.5 for f, _ in det) and all(0.5 < f <= 1.0 for f, _ in mesh), seen
    assert any("verifying against the FP32 reference" in t for _, t in mesh), seen
    assert (s.trackers.build_fraction, s.trackers.build_stage) == (0.0, "") and not s.trackers.error


def test_other_builds_do_not_move_the_tracker_progress(playing, monkeypatch, tiny_models):
    """Mid-build (detector done, mesh waiting), reports of another model (an engine row's build on
    the same manager) leave the tracker's progress alone."""
    import threading

    from avatar_app.inference import EngineSlot

    gate = threading.Event()
    tiny_landmark_build(monkeypatch, tiny_models, gate=gate)
    s = playing
    fut = s.set_tracker_choice("onnx", "ort_cpu", "fp16")
    try:
        _wait(lambda: s.trackers.build_fraction == 0.5)
        stage = s.trackers.build_stage
        assert stage.startswith("detector (1 of 2): "), stage
        slot = EngineSlot(s.engines.manager, tiny_models["layernorm"])
        try:
            slot.open("ort_cpu", "fp16")
            assert slot.active.precision.value == "fp16"
        finally:
            slot.close()
        time.sleep(0.3)  # what the other build dispatched
        assert (s.trackers.build_fraction, s.trackers.build_stage) == (0.5, stage) and s.trackers.building
    finally:
        gate.set()
    assert fut.result(timeout=120) is not None
    _wait(lambda: not s.trackers.building)
    assert s.trackers.build_fraction == 0.0


def test_a_source_that_starts_on_the_onnx_tracker_reports_its_build_progress(tmp_path, monkeypatch, testdata,
                                                                            tiny_models):
    """The ONNX tracker chosen at start-up: the first source's build (on the opener thread, not a switch) moves
    the Tracking row's progress over both engines as a switch does, and clears it once the source runs."""
    import threading

    from avatar_app.pipeline import stage_swaps, stages
    from avatar_app.pipeline.settings import EngineChoice, save_area

    gate = threading.Event()
    tiny_landmark_build(monkeypatch, tiny_models, gate=gate)
    monkeypatch.setattr(stages, "build_tracker", stage_swaps.build_tracker)  # the new source's build
    store = MemoryStore()
    save_area(store, EngineChoice(tracker={"kind": "onnx", "backend": "ort_cpu", "precision": "fp16"}))
    s = _session(tmp_path, monkeypatch, store)
    seen = []
    s.events.engine_changed.connect(
        lambda name: name == "tracker" and s.trackers.building
        and seen.append((s.trackers.build_fraction, s.trackers.build_stage, s.trackers.for_source)))
    s.start(source=testdata / VIDEO)  # returns at once: the source opens on the opener thread
    try:
        try:
            _wait(lambda: s.trackers.build_fraction == 0.5)  # the detector built, the mesh waits
            assert s.trackers.building and s.trackers.for_source and s.pipeline is None
            assert s.trackers.build_stage.startswith("detector (1 of 2): "), s.trackers.build_stage
        finally:
            gate.set()
        _wait(lambda: s.pipeline is not None and s.pipeline.frames_processed >= 5)
        _wait(lambda: not s.trackers.building)
        fractions = [f for f, _, _ in seen]
        assert fractions == sorted(fractions) and all(src for _, _, src in seen), seen
        assert any(t.startswith("mesh (2 of 2): ") and 0.5 < f <= 1.0 for f, t, _ in seen), seen
        assert (s.trackers.build_fraction, s.trackers.build_stage, s.trackers.for_source) == (0.0, "", False)
    finally:
        gate.set()
        s.close()


def test_each_progress_report_is_seen_with_its_own_value_when_dispatch_is_queued(tmp_path, monkeypatch):
    """With a queued dispatch (the window's: the GUI thread runs callables later, in order), a burst of
    build reports that arrives before the GUI thread gets to them still gives one ``engine_changed``
    per report, each seeing that report's fraction (issue 20's bar showed only the last one under load)."""
    from types import SimpleNamespace

    from avatar_app.pipeline.session_events import SessionEvents
    from avatar_app.pipeline.stage_swaps import TrackerController
    from avatar_app.tracking import onnx_tracker

    paths = (tmp_path / "face_detection.onnx", tmp_path / "face_landmark.onnx")
    monkeypatch.setattr(onnx_tracker, "model_paths", lambda: paths)
    queue = []
    session = SimpleNamespace(events=SessionEvents(), dispatch=queue.append, engines=SimpleNamespace(progress=None))
    ctl = TrackerController(session)
    try:
        seen = []
        session.events.engine_changed.connect(lambda name: seen.append((name, ctl.build_fraction)))
        ctl._generation = ctl._building_gen = 1
        ctl.building = True
        for path, fraction in ((paths[0], 0.2), (paths[0], 1.0), (paths[1], 0.4)):
            ctl._on_build_progress(path, "stage", fraction)  # the builder thread: nothing runs yet
        assert seen == []
        while queue:  # the GUI thread catches up
            queue.pop(0)()
        assert seen == [("tracker", 0.1), ("tracker", 0.5), ("tracker", 0.7)], seen
    finally:
        ctl.close()
