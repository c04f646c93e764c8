"""The Engines panel's Tracking row (issue 19 item 3): the face tracker chosen in the studio window.

Auto / MediaPipe / ONNX engines with the landmark engines' backend and precision; choosing the
ONNX engines switches the live pipeline's tracker while frames keep flowing; the choice persists
in QSettings and travels through File › Export/Import settings….
"""
from __future__ import annotations

import json

import pytest
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
    qtbot.waitUntil(lambda: box.serving.text().startswith("ONNX engines"), timeout=5000)
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
