"""Each panel's controls change what the pipeline, the renderer or the recorder do; settings survive a restart.

Assertions read the pipeline (its tuner, frame-rate cap, latest state), the renderer
and the recording, not the widgets.
"""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from ui_helpers import open_file_window, wait_frames

from avatar_app.core.blendshapes import Blendshape

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"
OTHER = "video/grid_s2_swwp2s.mp4"


@pytest.fixture
def window(qtbot, testdata, settings):
    win = open_file_window(qtbot, testdata / VIDEO, settings)
    yield win
    win.close()


def test_tracking_panel_changes_the_pipeline(qtbot, window):
    win = window
    p = win.panels["tracking"]
    # sensitivity 0 on jawOpen: the avatar's mouth stays shut while the talker speaks
    p.shape.setCurrentText("jawOpen")
    p.gain.setValue(0.0)
    assert win.session.chain.tuner.settings.sensitivity[Blendshape.jawOpen] == 0.0
    wait_frames(qtbot, win, 15)
    jaws = []
    for _ in range(10):
        wait_frames(qtbot, win, 1)
        st = win.session.pipeline.latest_state()
        jaws.append((st.vision_weights[Blendshape.jawOpen], st.weights[Blendshape.jawOpen]))
    assert max(j[0] for j in jaws) > 0.02 and max(j[1] for j in jaws) < 1e-3
    p.reset_shape()
    # link eyes: both blink weights equal in every published state
    p.link_eyes.setChecked(True)
    wait_frames(qtbot, win, 3)
    for _ in range(5):
        wait_frames(qtbot, win, 1)
        w = win.session.pipeline.latest_state().weights
        assert w[Blendshape.eyeBlinkLeft] == pytest.approx(w[Blendshape.eyeBlinkRight], abs=1e-6)
    # smoothing 0 for the mouth: the tuner's output follows its input exactly
    p.sliders["mouth"].setValue(0)
    wait_frames(qtbot, win, 5)
    hist = win.session.chain.tuner.preview()[-5:]
    assert all(h[1]["mouth"] == pytest.approx(h[2]["mouth"], abs=1e-6) for h in hist)
    p.sliders["mouth"].setValue(100)
    wait_frames(qtbot, win, 20)
    hist = win.session.chain.tuner.preview()[-20:]
    assert max(abs(h[1]["mouth"] - h[2]["mouth"]) for h in hist) > 1e-3


def test_output_avatar_and_sources_panels_change_the_pipeline(qtbot, window, testdata):
    from avatar_app.render.renderer import LIGHTING_PRESETS

    win = window
    o = win.panels["output"]
    o.fps_cap.setValue(12)
    assert win.session.pipeline.max_fps == 12.0
    o.cpu_mode.setCurrentIndex(o.cpu_mode.findData("low"))
    assert win.session.pipeline.max_fps == 12.0  # the lower of the cap and the mode's 20 fps
    o.fps_cap.setValue(0)
    assert win.session.pipeline.max_fps == 20.0
    o.cpu_mode.setCurrentIndex(o.cpu_mode.findData("full"))
    assert win.session.pipeline.max_fps == 0.0

    a = win.panels["avatar"]
    a.lighting.setCurrentIndex(a.lighting.findData("soft"))
    a.set_colour((30, 60, 90))
    win.viewport.grabFramebuffer()  # the render thread applied the commands before this frame
    r = win.viewport.renderer
    assert r.lighting == LIGHTING_PRESETS["soft"] and tuple(r.background) == (30, 60, 90)
    img = win.viewport.grabFramebuffer()
    assert img.pixelColor(3, 3).getRgb()[:3] == (30, 60, 90)
    a.bg_transparent.setChecked(True)
    img = win.viewport.grabFramebuffer()
    assert r.transparent and img.hasAlphaChannel() and img.pixelColor(3, 3).alpha() == 0
    a.msaa.setCurrentIndex(a.msaa.findData(2))
    win.viewport.grabFramebuffer()
    assert r.msaa in (2, int(win.viewport.renderer.ctx.max_samples))

    s = win.panels["sources"]
    qtbot.waitUntil(lambda: s.mic_combo.count() >= 1, timeout=10000)  # devices listed off the GUI thread
    qtbot.waitUntil(lambda: s.meter.value() > -50, timeout=10000)  # the file's voice in the level meter
    s.file_edit.setText(str(testdata / OTHER))
    s.play_button.click()
    def playing() -> bool:
        p = win.session.pipeline
        return (p is not None and str(getattr(p.source, "path", "")).endswith("grid_s2_swwp2s.mp4")
                and p.frames_processed >= 3)

    qtbot.waitUntil(playing, timeout=20000)
    assert win.settings.value("last_file", type=str).endswith("grid_s2_swwp2s.mp4")


def test_vmc_output_sends_the_pipeline_states(qtbot, window):
    import socket

    win = window
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5.0)
    try:
        o = win.panels["output"]
        o.vmc_port.setValue(rx.getsockname()[1])
        o.vmc_port.editingFinished.emit()
        o.vmc.setChecked(True)
        assert win.session.outputs.vmc is not None and "Sending to 127.0.0.1" in o.vmc_status.text()
        data, _ = rx.recvfrom(65536)
        assert b"/VMC/Ext/Blend/Val" in data and b"JawOpen" in data and b"/VMC/Ext/Bone/Pos" in data
        o.vmc.setChecked(False)
        assert win.session.outputs.vmc is None
    finally:
        rx.close()


def test_hide_panels_and_record_shortcut(qtbot, window, settings):
    from tests.helpers import ffprobe_streams

    win = window
    win.panels["output"].overlay.setChecked(True)
    win.panels["output"].format.setCurrentIndex(win.panels["output"].format.findData("h264-mp4"))
    ctrl = Qt.KeyboardModifier.ControlModifier

    def press(key):
        # shortcuts go to the active window; with two test workers on one Xvfb display the other
        # worker's window can take activation in between, as another app would on a desktop
        win.activateWindow()
        qtbot.waitUntil(win.isActiveWindow, timeout=30000)
        qtbot.keyClick(win, key, ctrl)

    press(Qt.Key.Key_H)
    assert not win.panels_visible() and not win.menuBar().isVisible()
    press(Qt.Key.Key_N)  # neutral face, panels hidden
    assert win.session.neutral_landmarks is not None and win.session.pipeline.processor.reconstructor.is_calibrated
    press(Qt.Key.Key_R)  # works with the menu hidden
    assert win.recording.recorder is not None and win.recording.record_button.isChecked()
    qtbot.wait(2000)
    press(Qt.Key.Key_R)
    assert win.recording.recorder is None
    press(Qt.Key.Key_H)
    assert win.panels_visible() and win.menuBar().isVisible()
    streams = ffprobe_streams(win.recording.record_path)
    assert "video" in streams and "audio" in streams and float(streams["video"]["duration"]) > 1.0


def test_settings_survive_a_restart(qtbot, testdata, settings, tmp_path, monkeypatch):
    from avatar_app.render.renderer import LIGHTING_PRESETS
    from avatar_app.ui.main_window import MainWindow

    # the engine switch below builds an engine: into this test's folders, not the user's cache
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))

    win = MainWindow(source=testdata / VIDEO, settings=settings)
    qtbot.addWidget(win)
    win.show()
    t = win.panels["tracking"]
    t.mirror.setChecked(False)
    t.link_eyes.setChecked(True)
    t.idle.setChecked(False)
    t.sliders["head"].setValue(90)
    t.shape.setCurrentText("mouthSmileLeft")
    t.gain.setValue(1.7)
    t.hi.setValue(0.8)
    win.panels["avatar"].lighting.setCurrentIndex(win.panels["avatar"].lighting.findData("flat"))
    win.panels["avatar"].set_colour((12, 34, 56))
    win.panels["output"].fps_cap.setValue(24)
    win.panels["output"].cpu_mode.setCurrentIndex(win.panels["output"].cpu_mode.findData("balanced"))
    win.panels["output"].overlay.setChecked(True)
    e = win.panels["expressions"]
    e.mode_combos["sad"].setCurrentIndex(e.mode_combos["sad"].findData("hold"))
    e.custom_edit.setText("tongueOut=0.5")
    e.custom_edit.editingFinished.emit()
    win.panels["latency"].overlay_box.setChecked(False)
    win.session.set_engine_choice("speech2face", "ort_cpu", "fp16")
    win.docks["latency"].hide()
    before = win.session.chain.tuner.settings
    installed = win.session.engines.entry("speech2face").installed
    win.close()  # waits for the engine build
    if installed:
        built = [p.name for p in (tmp_path / "cache" / "engines").iterdir()]
        assert any(n.startswith("speech2face-fp16-ort_cpu") for n in built), built

    win2 = MainWindow(source=testdata / VIDEO, settings=settings)
    qtbot.addWidget(win2)
    win2.show()
    qtbot.waitUntil(lambda: win2.session.pipeline is not None and win2.session.pipeline.frames_processed >= 3,
                    timeout=20000)
    s = win2.session.chain.tuner.settings
    assert (s.mirror, s.link_eyes, s.idle_motion) == (False, True, False)
    assert s.smoothing == before.smoothing and s.smoothing["head"] == 0.9
    assert s.sensitivity[Blendshape.mouthSmileLeft] == pytest.approx(1.7)
    assert s.remap_max[Blendshape.mouthSmileLeft] == pytest.approx(0.8)
    assert win2.session.pipeline.max_fps == 24.0  # min(24, balanced 30)
    win2.viewport.grabFramebuffer()
    r = win2.viewport.renderer
    assert r.lighting == LIGHTING_PRESETS["flat"] and tuple(r.background) == (12, 34, 56)
    assert win2.session.settings.output.overlay_in_recording
    assert win2.session.settings.expressions.modes["sad"] == "hold"
    assert win2.session.chain.tuner.expressions.mixes()["custom"] == {"tongueOut": 0.5}
    assert not win2.panels["latency"].overlay_box.isChecked()
    assert win2.session.engines.entry("speech2face").choice == ("ort_cpu", "fp16")
    assert not win2.docks["latency"].isVisible() and win2.docks["tracking"].isVisible()
    # and the panels show them
    assert not win2.panels["tracking"].mirror.isChecked() and win2.panels["tracking"].sliders["head"].value() == 90
    assert win2.panels["output"].fps_cap.value() == 24
    win2.close()
    assert np.isfinite(s.sensitivity).all()


def test_failed_source_shows_what_failed_not_a_remembered_file(qtbot, testdata, settings, tmp_path):
    """A failed --source: the file box shows nothing (not the remembered file) and says what failed."""
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    settings.setValue("last_file", str(testdata / OTHER))  # remembered from an earlier session
    bad = tmp_path / "not_a_video.mp4"
    bad.write_bytes(b"this is not a video")
    win = MainWindow(source=bad, settings=settings, engines=EngineController(models={"face_recon": None,
                                                                                      "speech2face": None}))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    s = win.panels["sources"]
    assert win.session.pipeline is None
    assert s.file_edit.text() == ""
    assert s.file_error.isVisibleTo(s) and "not_a_video.mp4" in s.file_error.text()
    assert "No source" in win.panels["sources"].source_label.text()
    # playing a good file: the box shows it and the error goes
    s.file_edit.setText(str(testdata / OTHER))
    s.play_button.click()
    qtbot.waitUntil(lambda: win.session.pipeline is not None, timeout=20000)
    assert s.file_edit.text() == str(testdata / OTHER) and not s.file_error.isVisibleTo(s)
    # a failed switch: the good file keeps playing, the typed path stays to be corrected, the error names it
    good = win.session.pipeline
    s.file_edit.setText(str(bad))
    s.play_button.click()
    qtbot.waitUntil(lambda: s.file_error.isVisibleTo(s), timeout=20000)
    assert win.session.pipeline is good and good.running
    assert s.file_edit.text() == str(bad) and bad.name in s.file_error.text()
    win.close()
