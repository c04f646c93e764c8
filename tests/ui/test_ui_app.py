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
