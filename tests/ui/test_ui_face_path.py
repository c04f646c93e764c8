"""The Engines panel's face row (issue 17): the face path (geometric solver / learned engine) chosen in the
studio window, applied to the running pipeline between two frames (frames keep flowing), persisted in the
app settings (a new window starts on it) and said in the row and the status bar; the row's backend and
precision choosers are offered like the speech engine's."""
from __future__ import annotations

import json

import pytest
from ui_helpers import save_shot, show_running

from avatar_app.pipeline.settings import StudioSettings, save_settings_file
from avatar_app.ui.panels import item_enabled

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"


def _window(qtbot, testdata, settings, tmp_path):
    """The studio playing the GRID clip with the shipped face engine (its slot open) and no speech engine."""
    from avatar_app.inference import EngineCache
    from avatar_app.pipeline.engines import EngineController, default_model_path
    from avatar_app.ui.main_window import MainWindow

    model = default_model_path("face_recon")
    assert model.is_file(), f"the shipped face model is missing: {model}"
    ctl = EngineController(models={"face_recon": model, "speech2face": None}, isolate=True,
                           cache=EngineCache(tmp_path / "cache"), calibration_root=tmp_path / "calib")
    win = MainWindow(source=testdata / VIDEO, settings=settings, engines=ctl)
    return show_running(qtbot, win, ready=lambda: ctl.active("face_recon") is not None
                        and ctl.statuses is not None, timeout_ms=60000)


@pytest.fixture
def dirs(monkeypatch, tmp_path):
    monkeypatch.setenv("AVATAR_APP_SCREENSHOT", "1")  # no message boxes
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))


def _switched(qtbot, win, face: str) -> None:
    """Wait until ``face`` drives the running pipeline and 10 more frames went through it; the pipeline
    is the one that ran before the switch (not restarted), and it kept running."""
    pipe = win.session.pipeline
    qtbot.waitUntil(lambda: win.session.face_serving() == face, timeout=30000)
    n = pipe.frames_processed
    qtbot.waitUntil(lambda: pipe.frames_processed >= n + 10, timeout=30000)
    assert win.session.pipeline is pipe and pipe.running and pipe.error is None
    assert win.session.face_serving() == face  # it stayed


def test_the_face_row_is_offered_and_switching_keeps_frames_flowing(qtbot, testdata, settings, tmp_path, dirs):
    from avatar_app.reconstruction.engine import EngineReconstructor
    from avatar_app.reconstruction.geometric import GeometricSolver

    win = _window(qtbot, testdata, settings, tmp_path)
    try:
        panel = win.panels["engines"]
        face, speech = panel.boxes["face_recon"], panel.boxes["speech2face"]
        qtbot.waitUntil(lambda: win.session.face_serving() == "engine", timeout=60000)  # the default
        assert face.face_path.currentData() == "engine" and face.face_path.isEnabled()
        assert [face.face_path.itemText(i) for i in range(2)] == ["Geometric solver", "Learned engine (default)"]
        assert all(item_enabled(face.face_path, i) for i in range(2))
        # the engine line is offered like the speech row's (which has no model here)
        assert face.choosers.isVisible() and face.backend.isEnabled() and face.precision.isEnabled()
        assert {"fp32", "fp16", "int8"} <= set(face.enabled_options()["precisions"]), face.enabled_options()
        assert speech.face_path is None and not speech.backend.isEnabled()
        assert face.why_label.text() == ""  # the default needs no "why?"

        pipe = win.session.pipeline
        face.select_face_path("solver")
        _switched(qtbot, win, "solver")
        assert isinstance(pipe.processor.reconstructor, GeometricSolver)
        qtbot.waitUntil(lambda: face.serving.text() == "geometric solver", timeout=5000)
        assert "Face: geometric solver" in win.status_labels["engines"].text()
        win.docks["engines"].raise_()
        qtbot.wait(200)
        save_shot(win.docks["engines"], "engines_panel_face_solver")

        face.select_face_path("engine")
        _switched(qtbot, win, "engine")
        assert isinstance(pipe.processor.reconstructor, EngineReconstructor)
        assert pipe.processor.reconstructor.slot is win.session.engines.slot("face_recon")
        assert face.face_path.currentData() == "engine"
        qtbot.waitUntil(lambda: face.serving.text().startswith("ONNX Runtime"), timeout=5000)  # the path says "engine"
        assert face.serving.isVisible() and not face.verification.isVisible()  # FP32: its own reference
        assert "Face: learned engine (" in win.status_labels["engines"].text()
        stored = json.loads(settings.value("studio/EngineChoice", "", type=str))
        assert stored["face"] == "engine"  # persisted at once
        qtbot.wait(200)
        save_shot(win.docks["engines"], "engines_panel_face_engine")

        face.select("ort_cpu", "fp16")  # the precision choice, as on the speech row: built, verified, swapped
        ctl = win.session.engines
        qtbot.waitUntil(lambda: not ctl.pending("face_recon") and ctl.active("face_recon").precision.value == "fp16",
                        timeout=120000)
        _switched(qtbot, win, "engine")
        assert pipe.processor.reconstructor.slot.active.precision.value == "fp16"
        qtbot.waitUntil(lambda: face.verification.isVisible(), timeout=5000)  # FP16: verified against FP32
        qtbot.waitUntil(lambda: "Face: learned engine (ONNX Runtime CPU FP16)" in win.status_labels["engines"].text(),
                        timeout=5000)

        face.select_face_path("solver")
        _switched(qtbot, win, "solver")
        assert isinstance(pipe.processor.reconstructor, GeometricSolver)
        qtbot.waitUntil(lambda: face.serving.text() == "geometric solver", timeout=5000)
        assert not face.verification.isVisible()
        assert json.loads(settings.value("studio/EngineChoice", "", type=str))["face"] == "solver"
        assert pipe.latest_state().face_found

        s = StudioSettings()  # File › Import settings… carries the face path
        s.engines.face = "engine"
        assert win._on_import_settings(save_settings_file(tmp_path / "engine.json", s)) == []
        _switched(qtbot, win, "engine")
        assert face.face_path.currentData() == "engine"
    finally:
        win.close()


def test_the_face_path_persists_across_a_window_restart(qtbot, testdata, settings, tmp_path, dirs):
    from avatar_app.reconstruction.engine import EngineReconstructor

    win = _window(qtbot, testdata, settings, tmp_path)
    try:
        win.panels["engines"].boxes["face_recon"].select_face_path("engine")
        _switched(qtbot, win, "engine")
    finally:
        win.close()

    again = _window(qtbot, testdata, settings, tmp_path)
    try:
        box = again.panels["engines"].boxes["face_recon"]
        assert again.session.settings.engines.face == "engine"
        assert box.face_path.currentData() == "engine"
        _switched(qtbot, again, "engine")  # the engine is attached once its slot is open
        assert isinstance(again.session.pipeline.processor.reconstructor, EngineReconstructor)
        assert "Face: learned engine (" in again.status_labels["engines"].text()
    finally:
        again.close()
