"""The AVATAR_APP_SCREENSHOT hook of the packaging test: screenshot after ~30 frames, exit status 0."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.gui, pytest.mark.gl]


def test_screenshot_hook_saves_window_and_exits_0(testdata, tmp_path):
    import cv2

    shot = tmp_path / "shots" / "window.png"
    env = dict(os.environ, AVATAR_APP_SCREENSHOT=str(shot), XDG_CONFIG_HOME=str(tmp_path / "config"),
               AVATAR_APP_DATA_DIR=str(tmp_path / "data"), AVATAR_APP_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "avatar_app.cli", "--source",
                           str(testdata / "video" / "grid_s1_bbaf2n.mp4")],
                          env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    img = cv2.imread(str(shot))
    assert img is not None and img.shape[0] > 400 and img.shape[1] > 600
    # the chroma-green viewport with the avatar in it
    green = np.all(np.abs(img.astype(int) - (64, 177, 0)) < 8, axis=2).mean()
    assert 0.05 < green < 0.6, f"{green:.0%} of the window is chroma green"


def test_long_sessions_survive_pyside_refcount_defect():
    """PySide6 6.12.0 on CPython 3.11 drops a reference to None per void call and to True per emit.

    200 000 of each (minutes of a running window) must not abort the interpreter.
    """
    code = (
        "import sys\n"
        "from avatar_app.ui.app import create_app\n"
        "app = create_app()\n"
        "from PySide6.QtCore import QObject, Signal\n"
        "from PySide6.QtWidgets import QLabel\n"
        "class O(QObject):\n"
        "    s = Signal(object)\n"
        "o, lab = O(), QLabel()\n"
        "for i in range(200000):\n"
        "    o.s.emit(i)\n"
        "    lab.setText('x')\n"
        "import gc; gc.collect()\n"
        "print('ok')\n"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr[-2000:]


def test_message_box_ok_button_has_no_overlapping_icon(qapp, qtbot):
    """Without a desktop theme (Xvfb) Fusion drew the fallback icon over "OK"; the app turns them off."""
    from PySide6.QtWidgets import QMessageBox

    box = QMessageBox(QMessageBox.Icon.Warning, "avatar_app", "Playback of 'x.mp4' failed: not a video.",
                      QMessageBox.StandardButton.Ok)
    qtbot.addWidget(box)
    box.show()
    qtbot.waitExposed(box)
    ok = box.button(QMessageBox.StandardButton.Ok)
    assert ok.icon().isNull(), "the OK button carries an icon, which Fusion draws over its label"
    # the label fits in the button
    assert ok.fontMetrics().horizontalAdvance(ok.text()) < ok.width()
    box.close()


@pytest.mark.parametrize("opened_later", [False, True])
def test_screenshot_hook_quits_with_3_at_once_when_the_source_fails(qtbot, tmp_path, settings, monkeypatch,
                                                                   caplog, opened_later):
    """A text file named .mp4 (new-user trial): status 3 with the window's reason, a screenshot of the
    failure, and no wait for the hook's timeout (an hour here). The failure comes during the window's
    constructor (MediaPipe's tracker) or later, from the opener thread (``opened_later``)."""
    import logging

    from PySide6.QtWidgets import QApplication

    from avatar_app.ui import app as app_module
    from avatar_app.ui.main_window import MainWindow

    bad = tmp_path / "notes.mp4"
    bad.write_text("this is not a video\n" * 50)
    statuses = []
    monkeypatch.setattr(QApplication.instance(), "exit", lambda status=0: statuses.append(status))
    win = MainWindow(source=bad, settings=settings)
    qtbot.addWidget(win)
    shot = tmp_path / "shot.png"
    with caplog.at_level(logging.ERROR, logger=app_module.log.name):
        if opened_later:
            win.live.source_failure = None  # as if the constructor's source were still opening
        app_module.install_screenshot_hook(win, shot, timeout_s=3600)
        if opened_later:
            qtbot.wait(200)
            assert not statuses
            win.session.open_file(bad, wait=False)  # fails on the opener thread
        qtbot.waitUntil(lambda: bool(statuses), timeout=30000)
    assert statuses == [3]
    assert shot.is_file()
    assert "Could not play notes.mp4" in caplog.text and "not a readable video" in caplog.text, caplog.text
    assert "frames were presented" not in caplog.text
