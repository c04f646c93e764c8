"""The Engines panel's Tracking row (issue 19 item 3): the face tracker chosen in the studio window.

Auto / MediaPipe / ONNX engines with the landmark engines' backend and precision; choosing the
ONNX engines switches the live pipeline's tracker while frames keep flowing; the choice persists
in QSettings and travels through File › Export/Import settings….
"""
from __future__ import annotations

import json
import threading

import pytest
from inference_helpers import tiny_landmark_build
from ui_helpers import open_file_window, save_shot, show_running

from avatar_app.pipeline.settings import StudioSettings, save_settings_file
from avatar_app.ui.panels import item_enabled

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"


@pytest.fixture
def file_window(qtbot, testdata, settings, monkeypatch, tmp_path):
    monkeypatch.setenv("AVATAR_APP_SCREENSHOT", "1")  # no message boxes
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    win = open_file_window(qtbot, testdata / VIDEO, settings)
    qtbot.waitUntil(lambda: win.session.engines.statuses is not None, timeout=30000)  # the backend probe
    yield win
    win.close()


def _kind(win) -> str:
    from avatar_app.tracking.select import tracker_kind

    return tracker_kind(win.session.pipeline.processor.tracker)


def _building_shot(qtbot, win, box, name: str, then: str) -> None:
    """The row mid-build (the detector done, the mesh waiting): the bar at 50 %, the label saying what is
    done and ``then``; a screenshot of the Engines dock with the bar in view."""
    assert box.progress.text() == "building 50%"
    text = box.build_label.text()
    assert box.build_label.isVisible() and "detector (1 of 2): done" in text, text
    assert text.endswith(then), text
    win.docks["engines"].raise_()
    win.docks["engines"].widget().ensureWidgetVisible(box.progress, 0, 0)
    qtbot.wait(100)
    save_shot(win.docks["engines"], name)


def _switched(qtbot, win, kind: str) -> None:
    qtbot.waitUntil(lambda: _kind(win) == kind and not win.session.trackers.building, timeout=120000)


def test_the_row_switches_the_live_tracker_and_the_choice_persists(qtbot, file_window, testdata, settings):
    win = file_window
    box = win.panels["engines"].tracker_box
    assert box.title() == "Tracking"
    kinds = [box.tracker.itemData(i) for i in range(box.tracker.count())]
    assert kinds == ["auto", "mediapipe", "onnx"]
    assert box.tracker.itemText(0) == "Auto (MediaPipe on this CPU)"  # no NVIDIA GPU backend runs here
    assert [box.tracker.itemText(i) for i in (1, 2)] == ["MediaPipe", "ONNX engines"]
    assert box.tracker.currentData() == "auto" and _kind(win) == "mediapipe"
    assert not box.backend.isEnabled() and not box.precision.isEnabled()  # only for the ONNX engines
    assert box.serving.text() == "MediaPipe (CPU)"
    statuses = win.session.engines.statuses
    cannot = [b for b in ("ort_cuda", "tensorrt") if b in statuses and not statuses[b].can_run]
    for b in cannot:  # greyed out, with the reason as the tooltip
        i = box.backend.findData(b)
        assert not item_enabled(box.backend, i) and box.backend.model().item(i).toolTip()
    assert item_enabled(box.backend, box.backend.findData("ort_cpu"))

    n = win.session.pipeline.frames_processed
    box.select("onnx", "ort_cpu", "fp32")
    pipe = win.session.pipeline
    _switched(qtbot, win, "onnx")
    assert win.session.pipeline is pipe and pipe.tracker_swaps == 1  # the same source, only the tracker swapped
    qtbot.waitUntil(lambda: pipe.frames_processed >= n + 20, timeout=20000)  # frames keep flowing
    qtbot.waitUntil(lambda: box.serving.text().startswith("ONNX engines"), timeout=30000)
    assert box.serving.text() == "ONNX engines: ONNX Runtime CPU (detector FP32, mesh FP32)"
    assert box.backend.isEnabled() and box.precision.isEnabled() and not box.message.text()
    assert "Tracking: ONNX FP32" in win.status_labels["engines"].text()
    assert pipe.error is None and pipe.latest_state().face_found
    win.docks["engines"].raise_()
    win.docks["engines"].widget().ensureWidgetVisible(box, 0, 0)
    qtbot.wait(200)
    save_shot(win.docks["engines"], "engines_panel_tracking_onnx")
    win.close()

    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    again = MainWindow(source=testdata / VIDEO, settings=settings,
                       engines=EngineController(models={"face_recon": None, "speech2face": None}))
    try:
        show_running(qtbot, again, timeout_ms=60000)
        box2 = again.panels["engines"].tracker_box
        assert box2.tracker.currentData() == "onnx" and box2.backend.currentData() == "ort_cpu"
        assert box2.precision.currentData() == "fp32"
        assert _kind(again) == "onnx"  # the new window's pipeline starts on the chosen tracker
    finally:
        again.close()


def test_export_and_import_carry_the_tracker_and_a_bad_value_is_named(qtbot, file_window, tmp_path):
    win = file_window
    box = win.panels["engines"].tracker_box
    box.select("onnx", "ort_cpu", "fp32")
    _switched(qtbot, win, "onnx")
    exported = win._on_export_settings(tmp_path / "out.json")
    data = json.loads(exported.read_text())
    assert data["engines"]["tracker"] == {"kind": "onnx", "backend": "ort_cpu", "precision": "fp32"}

    s = StudioSettings()
    s.engines.tracker = {"kind": "mediapipe", "backend": "auto", "precision": None}
    assert win._on_import_settings(save_settings_file(tmp_path / "mp.json", s)) == []
    _switched(qtbot, win, "mediapipe")
    assert box.tracker.currentData() == "mediapipe" and not box.backend.isEnabled()
    assert win.session.settings.engines.tracker["kind"] == "mediapipe"

    data["engines"]["tracker"]["kind"] = "openface"  # not a tracker: named, its default (Auto) used
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    report = win._on_import_settings(bad)
    assert any("engines.tracker.kind: 'openface'" in line for line in report), report
    assert box.tracker.currentData() == "auto"
    assert win.session.settings.engines.tracker == {"kind": "auto", "backend": "ort_cpu", "precision": "fp32"}


def test_an_onnx_tracker_that_cannot_load_is_greyed_out_and_said(qtbot, file_window, monkeypatch, tmp_path):
    from avatar_app.tracking import onnx_tracker

    monkeypatch.setattr(onnx_tracker, "model_paths", lambda: (tmp_path / "face_detection.onnx",
                                                              tmp_path / "face_landmark.onnx"))
    win = file_window
    box = win.panels["engines"].tracker_box
    box.refresh()
    i = box.tracker.findData("onnx")
    assert not item_enabled(box.tracker, i)
    assert box.tracker.model().item(i).toolTip().startswith("landmark models not installed (face_detection.onnx")
    n = win.session.pipeline.frames_processed
    box.select("onnx", "ort_cpu", None)  # chosen all the same (an old settings file): it fails, MediaPipe stays
    qtbot.waitUntil(lambda: bool(box.message.text()), timeout=30000)
    assert "The ONNX tracker could not be loaded" in box.message.text(), box.message.text()
    assert "MediaPipe (CPU) keeps tracking" in box.message.text() and box.message.isVisible()
    assert "color: #c0392b" in box.message.styleSheet()
    assert _kind(win) == "mediapipe" and box.serving.text() == "MediaPipe (CPU)"
    win.docks["engines"].raise_()
    win.docks["engines"].widget().ensureWidgetVisible(box.message, 0, 0)
    qtbot.wait(200)
    save_shot(win.docks["engines"], "engines_panel_tracking_failed")
    qtbot.waitUntil(lambda: win.session.pipeline.frames_processed >= n + 10, timeout=20000)


def test_the_row_shows_the_build_progress_and_hides_it_when_done(qtbot, file_window, monkeypatch, tiny_models):
    """Issue 20 item 1: the tracker's engines build (real builds of two tiny stand-in models) with the
    engine rows' "building NN%" bar, over both engines; the current tracker keeps tracking; the bar hides."""
    gate = threading.Event()
    tiny_landmark_build(monkeypatch, tiny_models, gate=gate)
    win = file_window
    box = win.panels["engines"].tracker_box
    assert not box.progress.isVisible() and not box.build_label.isVisible()
    shown = []  # the bar's value after each of the row's updates (the panel refreshes first)
    win.bridge.engine_changed.connect(lambda name: name == "tracker" and box.progress.isVisible()
                                      and shown.append(box.progress.value()))
    try:
        box.select("onnx", "ort_cpu", "fp16")
        qtbot.waitUntil(lambda: box.progress.isVisible() and box.progress.value() == 50, timeout=60000)
        n = win.session.pipeline.frames_processed
        qtbot.waitUntil(lambda: win.session.pipeline.frames_processed >= n + 10, timeout=20000)  # meanwhile
        assert _kind(win) == "mediapipe"
        _building_shot(qtbot, win, box, "engines_panel_tracking_building", "the current one keeps running.")
    finally:
        gate.set()
    qtbot.waitUntil(lambda: not win.session.trackers.building, timeout=60000)
    qtbot.wait(100)
    assert not box.progress.isVisible() and not box.build_label.isVisible() and not box.message.text()
    assert shown == sorted(shown) and any(0 < v < 50 for v in shown) and any(50 < v <= 100 for v in shown), shown


def test_a_failed_build_is_said_in_the_row_with_its_reason(qtbot, file_window, monkeypatch, tiny_models):
    why = "face_landmark.onnx: no FP16 engine passed verification (max 3.1e-02, tol 5e-03)"
    tiny_landmark_build(monkeypatch, tiny_models, fail=why)
    win = file_window
    box = win.panels["engines"].tracker_box
    box.select("onnx", "ort_cpu", "fp16")
    qtbot.waitUntil(lambda: bool(box.message.text()), timeout=60000)
    text = box.message.text()
    assert text.startswith("The ONNX tracker could not be loaded") and why in text, text
    assert "MediaPipe (CPU) keeps tracking" in text and box.message.isVisible()
    assert "color: #c0392b" in box.message.styleSheet()
    assert not box.progress.isVisible() and not box.build_label.isVisible()
    assert _kind(win) == "mediapipe"


def _inside(widget, area) -> bool:
    """Whether ``widget`` lies wholly inside the scroll ``area``'s viewport as it is scrolled now."""
    from PySide6.QtCore import QRect

    vp = area.viewport()
    rect = QRect(widget.mapTo(vp, widget.rect().topLeft()), widget.size())
    return vp.rect().contains(rect)


def test_all_three_rows_fit_the_dock_at_the_default_window_size(qtbot, settings, testdata, monkeypatch,
                                                                   tmp_path, tiny_models):
    """Issue 20 item 2: face reconstruction, speech and tracking in view without scrolling at 1440x900
    (the default engines: the learned engine drives the face, no "why?" beside it; the face row offers
    its face path and engine), also while the tracker builds."""
    from avatar_app.ui.main_window import MainWindow

    monkeypatch.setenv("AVATAR_APP_SCREENSHOT", "1")
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    win = MainWindow(source=testdata / VIDEO, settings=settings)  # the app's own engines and size
    qtbot.addWidget(win)
    try:
        win.show()
        qtbot.waitExposed(win)
        assert (win.width(), win.height()) == (1440, 900)
        ctl = win.session.engines
        qtbot.waitUntil(lambda: ctl.statuses is not None and all(
            ctl.describe(n) != "opening…" for n in ctl.entries), timeout=60000)
        win.docks["engines"].raise_()
        qtbot.wait(300)
        panel, area = win.panels["engines"], win.docks["engines"].widget()
        rows = [*panel.boxes.values(), panel.tracker_box]
        assert [r.title() for r in rows] == ["Face reconstruction", "Speech", "Tracking"]
        assert area.verticalScrollBar().value() == 0
        assert all(r.isVisible() and _inside(r, area) for r in rows), [(r.title(), r.geometry()) for r in rows]

        face = panel.boxes["face_recon"]  # the engine is the default face path: nothing to explain
        assert face.face_path.currentData() == "engine", face.face_path.currentData()
        assert "(default)" in face.face_path.currentText()
        assert face.choosers.isVisible() and face.backend.isEnabled()
        assert not face.model_label.isVisible() and not face.why_label.isVisible()
        save_shot(win.docks["engines"], "engines_panel_default_why")
        assert all(_inside(r, area) for r in rows), (area.viewport().height(), [r.geometry() for r in rows])
        win.docks["sources"].raise_()  # a refresh while the dock is behind another keeps it unfolded
        panel.refresh()
        win.docks["engines"].raise_()
        qtbot.wait(100)
        assert not face.why_label.isVisible() and not face.model_label.isVisible()

        gate = threading.Event()
        tiny_landmark_build(monkeypatch, tiny_models, gate=gate)
        try:
            panel.tracker_box.select("onnx", "ort_cpu", "fp16")
            qtbot.waitUntil(lambda: panel.tracker_box.progress.isVisible(), timeout=60000)
            qtbot.wait(200)
            save_shot(win.docks["engines"], "engines_panel_default_building")  # first: a failure can be looked at
            assert all(_inside(r, area) for r in rows) and _inside(panel.tracker_box.progress, area), \
                (area.viewport().height(), [r.geometry() for r in rows])
        finally:
            gate.set()
        qtbot.waitUntil(lambda: not win.session.trackers.building, timeout=60000)
    finally:
        win.close()


def test_a_new_choice_clears_the_old_choices_tracker_message(qtbot, file_window, monkeypatch, tmp_path):
    """Trial 20: after switching back to MediaPipe the status bar still said the ONNX choice's notice."""
    from avatar_app.tracking import onnx_tracker

    monkeypatch.setattr(onnx_tracker, "model_paths", lambda: (tmp_path / "face_detection.onnx",
                                                              tmp_path / "face_landmark.onnx"))
    win = file_window
    box = win.panels["engines"].tracker_box
    box.select("onnx", "ort_cpu", None)  # fails: the status bar says so for 10 s
    qtbot.waitUntil(lambda: win.notifier.message.startswith("The ONNX tracker could not be loaded"), timeout=30000)
    assert win.status.currentMessage()
    win.notifier.status("Neutral face calibrated", 5000)  # another message is not the tracker's: kept
    box.select("mediapipe")
    qtbot.wait(100)
    assert win.status.currentMessage() == "Neutral face calibrated"
    box.select("onnx", "ort_cpu", None)
    qtbot.waitUntil(lambda: win.notifier.message.startswith("The ONNX tracker could not be loaded"), timeout=30000)
    box.select("mediapipe")
    qtbot.waitUntil(lambda: win.status.currentMessage() == "" and win.notifier.message == "", timeout=30000)
    _switched(qtbot, win, "mediapipe")
    assert not box.message.text()


def test_the_fallback_notice_is_one_line_with_the_reasons_as_tooltip(qtbot, file_window):
    """Trial 20: the row showed two long lines naming training/landmarks/make_sets.py."""
    win = file_window
    box = win.panels["engines"].tracker_box
    ctl = win.session.trackers
    ctl.notice = "INT8 not used for detector and mesh (no face samples installed to check it): FP32 serves"
    ctl.notice_detail = "INT8 detector not verified, FP32 serves: why 1\nINT8 mesh not verified, FP32 serves: why 2"
    box.refresh()
    assert box.message.text() == ctl.notice and "\n" not in box.message.text()
    assert box.message.toolTip() == ctl.notice_detail


def test_a_window_that_starts_on_the_onnx_tracker_shows_its_build_progress(qtbot, testdata, settings, monkeypatch,
                                                                          tmp_path, tiny_models):
    """The ONNX engines chosen at start-up: the first source's tracker build (not a switch) shows the same
    "building NN%" bar in the Tracking row, and it hides once the source runs."""
    from avatar_app.pipeline import stage_swaps, stages
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.pipeline.settings import EngineChoice, save_area
    from avatar_app.ui.main_window import MainWindow

    monkeypatch.setenv("AVATAR_APP_SCREENSHOT", "1")
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    gate = threading.Event()
    tiny_landmark_build(monkeypatch, tiny_models, gate=gate)
    monkeypatch.setattr(stages, "build_tracker", stage_swaps.build_tracker)  # the new source's build
    save_area(settings, EngineChoice(tracker={"kind": "onnx", "backend": "ort_cpu", "precision": "fp16"}))
    win = MainWindow(source=testdata / VIDEO, settings=settings,
                     engines=EngineController(models={"face_recon": None, "speech2face": None}))
    try:
        qtbot.addWidget(win)
        win.viewport.setFixedSize(640, 360)
        win.show()
        qtbot.waitExposed(win)
        box = win.panels["engines"].tracker_box
        try:
            qtbot.waitUntil(lambda: box.progress.isVisible() and box.progress.value() == 50, timeout=60000)
            assert win.session.pipeline is None  # the window shows while the source opens
            _building_shot(qtbot, win, box, "engines_panel_tracking_building_at_start",
                           "the source starts once it is ready.")
        finally:
            gate.set()
        qtbot.waitUntil(lambda: win.session.pipeline is not None and win.session.pipeline.frames_processed >= 5,
                        timeout=60000)
        qtbot.waitUntil(lambda: not win.session.trackers.building, timeout=60000)
        qtbot.wait(100)
        assert not box.progress.isVisible() and not box.build_label.isVisible()
    finally:
        gate.set()
        win.close()
