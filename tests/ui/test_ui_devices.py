"""Camera names and stable ids (ui.devices) from a fake V4L2 sysfs tree, and camera reconnection."""
from __future__ import annotations

import os

import pytest
from ui_helpers import StillSource

from avatar_app.ui import devices


def _fake_v4l2(tmp_path):
    sysfs, by_id, dev = tmp_path / "sys", tmp_path / "by-id", tmp_path / "dev"
    for n, name, index in ((0, "HD Pro Webcam C920", 0), (1, "HD Pro Webcam C920", 1), (2, "Integrated Camera", 0)):
        d = sysfs / f"video{n}"
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "index").write_text(f"{index}\n")
    dev.mkdir()
    by_id.mkdir()
    for n in (0, 2):
        (dev / f"video{n}").write_text("")
    os.symlink(dev / "video0", by_id / "usb-Logitech_HD_Pro_Webcam_C920_ABC123-video-index0")
    os.symlink(dev / "video2", by_id / "usb-Chicony_Integrated_Camera-video-index0")
    return sysfs, by_id, dev


def test_v4l2_names_and_stable_ids(tmp_path):
    sysfs, by_id, dev = _fake_v4l2(tmp_path)
    cams = devices._v4l2(sysfs, by_id)
    assert [(c.index, c.name) for c in cams] == [(0, "HD Pro Webcam C920 (/dev/video0)"),
                                                 (2, "Integrated Camera (/dev/video2)")]  # metadata node skipped
    assert cams[0].id == "usb-Logitech_HD_Pro_Webcam_C920_ABC123-video-index0"
    # the webcam comes back on another node: its id still finds it
    os.remove(by_id / cams[0].id)
    (dev / "video4").write_text("")
    (sysfs / "video4").mkdir()
    (sysfs / "video4" / "name").write_text("HD Pro Webcam C920\n")
    os.symlink(dev / "video4", by_id / cams[0].id)
    again = devices._v4l2(sysfs, by_id)
    assert devices.resolve_camera_id(cams[0].id, again) == 4
    assert devices.resolve_camera_id("usb-unplugged-video-index0", again) is None
    assert devices.resolve_camera_id("index:3", again) == 3


@pytest.mark.gui
@pytest.mark.gl
def test_camera_unplugged_and_back_is_reopened_by_id(qtbot, settings, monkeypatch, head_images):
    """The lost camera is looked for by its id until it is back, then reopened. The retry interval is
    shortened to 0.25 s here (the app's is 2 s): what is checked counts attempts, not seconds."""
    import avatar_app.capture.camera as camera_mod
    import avatar_app.capture.mic as mic_mod
    import avatar_app.pipeline.session as session_mod
    from avatar_app.core.errors import CaptureError
    from avatar_app.ui.main_window import MainWindow

    plugged = {"on": True}
    opened = []
    looked_for_while_away = []  # one entry per reconnect attempt while the camera is unplugged

    def camera(index, **k):
        if not plugged["on"]:
            raise CaptureError(f"Camera {index} could not be opened")
        opened.append(StillSource(head_images["neutral"]))
        return opened[-1]

    def no_mic(*a, **k):
        raise CaptureError("No microphone in this test.")

    monkeypatch.setattr(camera_mod, "CameraSource", camera)
    monkeypatch.setattr(mic_mod, "MicSource", no_mic)
    monkeypatch.setattr(devices, "list_camera_devices", lambda probe=True: ([], "test"))
    monkeypatch.setattr(devices, "resolve_camera_id", lambda cid, devs=None: 0 if plugged["on"]
                        else looked_for_while_away.append(cid))
    monkeypatch.setattr(session_mod, "RECONNECT_INTERVAL_S", 0.25)
    win = MainWindow(camera=0, settings=settings)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.session.pipeline is not None and win.session.pipeline.frames_processed >= 3,
                    timeout=20000)
    first = win.session.pipeline
    plugged["on"] = False
    opened[0].error = CaptureError("Camera 0 stopped delivering frames (unplugged?)")
    qtbot.waitUntil(lambda: win.session.reconnecting, timeout=30000)
    assert "waiting for it to return" in win.statusBar().currentMessage()
    qtbot.waitUntil(lambda: len(looked_for_while_away) >= 3, timeout=30000)  # attempts while it is away fail quietly
    assert win.session.pipeline is first and len(opened) == 1
    plugged["on"] = True
    qtbot.waitUntil(lambda: win.session.pipeline is not first and win.session.pipeline is not None
                    and win.session.pipeline.frames_processed >= 3, timeout=15000)
    assert len(opened) == 2 and win.session.pipeline.source is opened[1]
    assert "reconnected" in win.panels["sources"].source_label.text() and not win.session.reconnecting
    win.close()
