"""The mirror convention, end to end: camera image -> tracking -> tuning -> rendered viewport.

Convention (avatar_app.fusion.tuning.MIRROR_CONVENTION): raise the LEFT corner of your
mouth. Mirror ON: the corner on the LEFT of the picture rises (the avatar is your
reflection). Mirror OFF: the avatar's own left corner rises, on the RIGHT of the picture.

The "camera" shows the default head rendered with mouthSmileLeft = 1, as a
non-mirrored webcam would show a person raising their left corner: on the image's right.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from ui_helpers import changed_columns, render_state, wait_frames

from avatar_app.core.blendshapes import Blendshape

pytestmark = [pytest.mark.gui, pytest.mark.gl]


def _face_centre_x(img: np.ndarray) -> float:
    """Mean x of non-background pixels in the upper half (the head), pixels."""
    bg = img[2, 2].astype(np.int16)
    fg = np.abs(img.astype(np.int16) - bg).max(axis=2) > 40
    return float(np.nonzero(fg[: img.shape[0] // 2])[1].mean())


def test_mirror_convention_end_to_end(qtbot, still_window, head_images):
    win = still_window
    src = win.still_source
    # the input really shows the raised corner on the image's right (subject's left)
    cols = changed_columns(head_images["smile_left"], head_images["neutral"])
    assert np.median(cols) > head_images["neutral"].shape[1] / 2

    panel = win.panels["tracking"]
    for region in panel.sliders:  # no smoothing: each step settles in a few frames
        panel.sliders[region].setValue(0)
    wait_frames(qtbot, win, 5)
    assert win.session.calibrate_neutral()  # the user presses Ctrl+N looking neutral
    src.image = head_images["smile_left"]
    results = {}
    for mirror in (False, True):
        panel.mirror.setChecked(mirror)
        assert win.session.chain.tuner.settings.mirror is mirror
        wait_frames(qtbot, win, 8)
        st = win.session.pipeline.latest_state()
        results[mirror] = (float(st.weights[Blendshape.mouthSmileLeft]), float(st.weights[Blendshape.mouthSmileRight]))
        # what the smile shapes change in the viewport: the state against itself without them
        no_smile = st.weights.copy()
        no_smile[[Blendshape.mouthSmileLeft, Blendshape.mouthSmileRight]] = 0.0
        img = render_state(win, st)
        base = render_state(win, replace(st, weights=no_smile))
        cols = changed_columns(img, base)
        assert len(cols) > 30, f"mirror={mirror}: the smile changed nothing in the viewport"
        side = np.median(cols) - _face_centre_x(base)
        if mirror:
            assert side < -10, f"mirror on: the corner on the LEFT of the picture must rise (median dx {side:.0f})"
        else:
            assert side > 10, f"mirror off: the avatar's left corner (picture right) must rise (dx {side:.0f})"
    left_off, right_off = results[False]
    left_on, right_on = results[True]
    assert left_off > right_off + 0.2, results  # avatar uses mouthSmileLeft
    assert right_on > left_on + 0.2, results    # reflection: mouthSmileRight
