"""Studio-window defects of the new-user trial (issue 21, items 5, 7 and 11), each checked on the window.

5: the clean capture view (Ctrl+H) hides the latency overlay, which comes back with the panels
(as the user had set it). 7: status-bar, camera and engine-build texts are not cut off, and the
CPU budget's frame-rate cap is what the frame-rate field says. 11: microphone input overflows are
shown beside the level meter and logged.
"""
from __future__ import annotations

import pytest
from ui_helpers import save_shot

pytestmark = [pytest.mark.gui, pytest.mark.gl]


@pytest.fixture(scope="module")
def shared(shared_still_window):
    """The still window shared by the checks below that leave it as they found it (one start instead of four)."""
    return shared_still_window


# ------------------------------------------------------------------ 5: clean view hides the overlay
def test_clean_view_hides_the_latency_overlay_and_restores_it(qtbot, still_window):
    win = still_window
    overlay = win.viewport.overlay
    assert win.panels["latency"].overlay_box.isChecked()  # on by default
    qtbot.waitUntil(overlay.isVisible, timeout=30000)
    win.toggle_panels(True)
    assert not overlay.isVisible(), "the clean capture view still shows the latency overlay"
    ticks = win.live.slow_timer.interval()
    qtbot.wait(3 * ticks)  # the status tick must not bring it back
    assert not overlay.isVisible()
    save_shot(win, "clean_view_no_overlay")
    win.toggle_panels(False)
    # the full table, or its compact form where the table would cover the face (test_ui_latency_overlay)
    assert overlay.isVisible() and ("camera-to-screen" in overlay.text() or "latency" in overlay.text())
    assert win.panels["latency"].overlay_box.isChecked()  # the user's setting is untouched

    # a user who had turned the overlay off gets it off again with the panels
    win.panels["latency"].overlay_box.setChecked(False)
    qtbot.waitUntil(lambda: not overlay.isVisible(), timeout=30000)
    win.toggle_panels(True)
    win.toggle_panels(False)
    qtbot.wait(2 * ticks)
    assert not overlay.isVisible()


# ------------------------------------------------------------------ 11: microphone overflows shown and logged
class _OverflowingMic:
    """A MicSource stand-in: writes nothing, counts ``overflows`` as the test sets them."""

    instances: list = []

    def __init__(self, device=None, sample_rate=16000, block_s=0.01, ring=None):
        self.ring, self.overflows, self.error = ring, 0, None
        _OverflowingMic.instances.append(self)

    def start(self):
        return self

    def stop(self):
        pass


@pytest.fixture
def mic_window(qtbot, settings, monkeypatch, head_images):
    import avatar_app.capture.camera as camera_mod
    import avatar_app.capture.mic as mic_mod
    import avatar_app.ui.devices as devices_mod
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow
    from ui_helpers import VIEW_SIZE, StillSource, show_running

    source = StillSource(head_images["neutral"])
    _OverflowingMic.instances = []
    monkeypatch.setattr(mic_mod, "MicSource", _OverflowingMic)
    monkeypatch.setattr(camera_mod, "CameraSource", lambda index, **k: source)
    monkeypatch.setattr(devices_mod, "list_camera_devices",
                        lambda probe=True: ([devices_mod.CameraDevice("test-still", "Still test camera", 0)], "test"))
    win = MainWindow(camera=0, settings=settings, engines=EngineController(models={"face_recon": None,
                                                                                   "speech2face": None}))
    show_running(qtbot, win, VIEW_SIZE, ready=lambda: bool(_OverflowingMic.instances))
    yield win
    win.close()


def test_microphone_overflows_are_shown_beside_the_meter_and_logged(qtbot, mic_window, caplog):
    win = mic_window
    sources = win.panels["sources"]
    win.docks["sources"].raise_()
    mic = win.session.mic
    assert isinstance(mic, _OverflowingMic)
    assert win.session.mic_overflows == 0
    qtbot.wait(2 * win.live.slow_timer.interval())
    assert not sources.overflow_label.isVisible()  # nothing to say while there are none
    with caplog.at_level("WARNING"):
        mic.overflows = 3
        assert win.session.mic_overflows == 3
        qtbot.waitUntil(sources.overflow_label.isVisible, timeout=30000)
    assert "3 overflows" in sources.overflow_label.text()
    # beside the level meter: same row, to its right
    meter = sources.meter
    assert abs(sources.overflow_label.geometry().center().y() - meter.geometry().center().y()) <= 4
    assert sources.overflow_label.geometry().left() >= meter.geometry().right()
    assert any("overflowed 3 times" in r.getMessage() for r in caplog.records), caplog.text
    save_shot(win, "mic_overflows")


# ------------------------------------------------------------------ 7: cut-off text
@pytest.fixture
def no_camera_window(qtbot, settings, monkeypatch):
    """The studio started as on a machine without camera and microphone (the new-user trial's case)."""
    import avatar_app.capture.camera as camera_mod
    import avatar_app.capture.mic as mic_mod
    from avatar_app.core.errors import CaptureError
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    def no_camera(index, **k):
        raise CaptureError(f"Camera {index} could not be opened: /dev/video{index} does not exist")

    def no_mic(*a, **k):
        raise CaptureError("No microphone found (no default input device: Error querying device -1)")

    monkeypatch.setattr(camera_mod, "CameraSource", no_camera)
    monkeypatch.setattr(mic_mod, "MicSource", no_mic)
    win = MainWindow(camera=0, settings=settings, engines=EngineController(models={"face_recon": None,
                                                                                   "speech2face": None}))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: win.panels["sources"].source_label.text().startswith("No source"), timeout=20000)
    yield win
    win.close()


def test_camera_and_microphone_messages_are_shown_whole(qtbot, no_camera_window):
    win = no_camera_window
    sources = win.panels["sources"]
    win.docks["sources"].raise_()
    qtbot.wait(50)
    caption = _shown(sources.source_label)  # word-wrapped onto lines
    assert "could not be opened: /dev/video0 does not exist." in " ".join(caption.split()), caption  # was "/dev/video…"
    assert caption.splitlines()[-1] == "Use File › Open video… to play a file.", caption
    sources.mic_label.setText("Microphone: none. No microphone found (no default input device: Error querying "
                              "device -1). Speech is off; tracking continues.")
    assert " ".join(_shown(sources.mic_label).split()).endswith("Speech is off; tracking continues."), \
        _shown(sources.mic_label)
    save_shot(win, "no_camera_messages")


def _shown(label) -> str:
    """What a label draws (an ElidedLabel's text() is its whole text)."""
    from PySide6.QtWidgets import QLabel

    return QLabel.text(label)


def _message_room(win) -> int:
    """Width QStatusBar has for its message: up to the first visible permanent widget, px."""
    lefts = [w.geometry().left() for w in win.status_labels.values() if w.isVisible()]
    return min(lefts) if lefts else win.status.width()


LONG_ERROR = ("Could not play not_a_video.mp4: The file is not a readable video (corrupt, truncated or not a media "
              "file): Invalid data found when processing input. The current source keeps running.")


def test_status_bar_messages_are_never_clipped(qtbot, shared):
    win = shared
    bar, fm = win.status, win.status.fontMetrics()
    qtbot.waitUntil(lambda: win.status_labels["fps"].text() != "", timeout=30000)
    win.notifier.status("Settings exported", 5000)  # a short one: every label stays
    qtbot.wait(50)
    assert win.status_labels["fps"].isVisible() and bar.currentMessage() == "Settings exported"
    win.notifier.status_error(LONG_ERROR)
    qtbot.wait(50)  # the status bar lays its widgets out again
    shown = bar.currentMessage()
    assert fm.horizontalAdvance(shown) <= _message_room(win), (shown, _message_room(win))
    assert shown.startswith("Could not play not_a_video.mp4") and shown.endswith("keeps running.")
    assert win.notifier.message == LONG_ERROR and bar.toolTip() == LONG_ERROR  # the whole text stays readable
    save_shot(win, "status_long_message")
    # once the message is gone, the labels that made room come back
    win.notifier.status("Recording to /tmp/x.mp4", 200)
    qtbot.waitUntil(lambda: bar.currentMessage() == "", timeout=30000)
    assert win.status_labels["fps"].isVisible() and win.status_labels["engines"].isVisible()
    assert bar.toolTip() == ""


def test_engine_build_progress_fits_its_bar(qtbot, shared, monkeypatch):
    win = shared
    win.docks["engines"].raise_()
    ctl = win.session.engines
    box = win.panels["engines"].boxes["face_recon"]
    entry = ctl.entry("face_recon")
    monkeypatch.setattr(entry, "build_stage", "verifying against the FP32 reference")
    monkeypatch.setattr(entry, "build_fraction", 0.7)
    monkeypatch.setattr(ctl, "pending", lambda name: name == "face_recon")
    box.refresh()
    qtbot.wait(50)
    bar = box.progress
    assert bar.isVisible()
    assert bar.fontMetrics().horizontalAdvance(bar.text()) <= bar.contentsRect().width() - 8, bar.text()
    assert "70%" in bar.text()
    # what is being done is said in full under the bar
    assert box.build_label.isVisible()
    assert "Verifying against the FP32 reference" in box.build_label.text()
    assert "current engine keeps running" in box.build_label.text()
    save_shot(win.docks["engines"], "engine_build_progress")
    monkeypatch.setattr(ctl, "pending", lambda name: False)
    box.refresh()
    assert not bar.isVisible() and not box.build_label.isVisible()


def test_cpu_budget_and_frame_rate_field_agree(qtbot, shared):
    win = shared
    out = win.panels["output"]
    win.docks["output"].raise_()
    assert out.fps_cap.text() == "No cap" and win.session.effective_fps_cap() == 0
    out.cpu_mode.setCurrentIndex(out.cpu_mode.findData("balanced"))
    assert win.session.effective_fps_cap() == 30
    assert out.fps_cap.text() == "30 fps (Balanced)", out.fps_cap.text()  # was "No cap"
    out.cpu_mode.setCurrentIndex(out.cpu_mode.findData("low"))
    assert out.fps_cap.text() == "20 fps (Low CPU)" and win.session.effective_fps_cap() == 20
    # a cap of its own above the budget's: the field keeps it, a note says which one is in force
    out.fps_cap.setValue(60)
    assert win.session.effective_fps_cap() == 20
    assert out.cap_note.isVisible() and "20 fps is in force" in out.cap_note.text()
    out.fps_cap.setValue(15)  # below the budget's: its own cap is in force, nothing to say
    assert win.session.effective_fps_cap() == 15 and not out.cap_note.isVisible()
    save_shot(win.docks["output"], "cpu_budget_cap")
    out.fps_cap.setValue(0)
    out.cpu_mode.setCurrentIndex(out.cpu_mode.findData("full"))
    assert out.fps_cap.text() == "No cap" and win.session.effective_fps_cap() == 0


def test_virtual_camera_probe_reports_back(qtbot, shared):
    """The Output panel's virtual-camera line says what the probe found (it stayed "checking…" when the
    probe, run on the session's worker, failed on a wrong call)."""
    out = shared.panels["output"]
    qtbot.waitUntil(lambda: out.vcam_status.text() != "checking…", timeout=20000)
    assert out.vcam.toolTip() and out.vcam.toolTip() in out.vcam_status.text()
