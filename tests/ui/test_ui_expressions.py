"""Expression hotkeys layered over tracking: the pipeline's state and the rendered mouth region change."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from PySide6.QtCore import Qt
from ui_helpers import render_state, wait_frames

from avatar_app.core.blendshapes import Blendshape

pytestmark = [pytest.mark.gui, pytest.mark.gl]


def _mouth_box(win, st):
    """(y0, y1, x0, x1) of the pixels jawOpen moves, at the pose of ``st``."""
    neutral = replace(st, weights=np.zeros_like(st.weights))
    w = np.zeros_like(st.weights)
    w[Blendshape.jawOpen] = 1.0
    a = render_state(win, neutral)
    b = render_state(win, replace(st, weights=w))
    ys, xs = np.nonzero(np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=2) > 30)
    return ys.min(), ys.max(), xs.min(), xs.max()


def test_expression_hotkey_changes_the_rendered_mouth(qtbot, still_window):
    win = still_window
    for sld in win.panels["tracking"].sliders.values():
        sld.setValue(0)
    wait_frames(qtbot, win, 5)
    # the still is our own render of the default head, whose rest mouth corners MediaPipe reads high
    # (uncalibrated mouthSmileLeft 0.40): the user takes it as the neutral face (Ctrl+N) first
    assert win.session.calibrate_neutral()
    wait_frames(qtbot, win, 5)
    st0 = win.session.pipeline.latest_state()
    assert st0.face_found and st0.weights[Blendshape.mouthSmileLeft] < 0.3
    img0 = render_state(win, st0)

    qtbot.keyClick(win, Qt.Key.Key_F5)  # happy, toggle mode
    assert win.session.expressions.is_active("happy")
    # the ramp follows the frames' times: wait for it to end, not a fixed time (a loaded machine lags)
    qtbot.waitUntil(lambda: win.session.pipeline.latest_state().weights[Blendshape.mouthSmileRight] > 0.8,
                    timeout=30000)
    st1 = win.session.pipeline.latest_state()
    assert st1.weights[Blendshape.mouthSmileLeft] > 0.8 and st1.weights[Blendshape.mouthSmileRight] > 0.8
    # rendered with the first frame's head pose and gaze: only the weights differ, so tracking
    # jitter of the still source cannot move the hair
    st1 = replace(st1, rotation=st0.rotation, translation=st0.translation, gaze=st0.gaze)
    img1 = render_state(win, st1)
    y0, y1, x0, x1 = _mouth_box(win, st1)
    d = np.abs(img1.astype(np.int16) - img0.astype(np.int16)).max(axis=2) > 30
    inside = d[y0:y1 + 1, x0:x1 + 1]
    assert inside.sum() > 100 and inside.mean() > 0.05, "the happy hotkey did not change the mouth region"
    assert d[: d.shape[0] // 5].mean() < 0.002  # the top of the head (hair) does not move

    qtbot.keyClick(win, Qt.Key.Key_F5)  # toggles off, fades out
    assert not win.session.expressions.is_active("happy")
    # the fade takes frames: wait for its end, not a fixed time (a loaded machine makes fewer frames)
    qtbot.waitUntil(lambda: win.session.pipeline.latest_state().weights[Blendshape.mouthSmileLeft] < 0.3,
                    timeout=30000)


def test_hold_mode_and_custom_mix(qtbot, still_window):
    win = still_window
    panel = win.panels["expressions"]
    panel.mode_combos["angry"].setCurrentIndex(panel.mode_combos["angry"].findData("hold"))
    assert win.session.settings.expressions.modes["angry"] == "hold"
    qtbot.keyPress(win, Qt.Key.Key_F6)
    qtbot.waitUntil(lambda: win.session.pipeline.latest_state().weights[Blendshape.browDownLeft] > 0.8,
                    timeout=30000)  # the ramp's end, however long the frames take
    assert win.session.expressions.is_active("angry")
    assert win.session.pipeline.latest_state().weights[Blendshape.browDownLeft] > 0.8
    qtbot.keyRelease(win, Qt.Key.Key_F6)
    assert not win.session.expressions.is_active("angry")

    panel.custom_edit.setText("jawOpen=1, tongueOut=1")
    panel.custom_edit.editingFinished.emit()
    assert win.session.expressions.mixes()["custom"] == {"jawOpen": 1.0, "tongueOut": 1.0}
    qtbot.keyClick(win, Qt.Key.Key_F9)
    qtbot.waitUntil(lambda: win.session.pipeline.latest_state().weights[Blendshape.tongueOut] > 0.9,
                    timeout=30000)  # the ramp's end, however long the frames take
    st = win.session.pipeline.latest_state()
    assert st.weights[Blendshape.jawOpen] > 0.9 and st.weights[Blendshape.tongueOut] > 0.9
    panel.custom_edit.setText("jawOpen=7")
    panel.custom_edit.editingFinished.emit()
    assert "between 0 and 1" in panel.custom_error.text()
