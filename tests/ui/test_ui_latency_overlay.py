"""The viewport's latency overlay keeps clear of the avatar's face at the window's minimum and default sizes."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QRect
from ui_helpers import save_shot

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"
#: Model-space height of the default head's chin, metres (its skin's lowest point under the mouth, measured:
#: the mouth's lowest vertex is at -0.078 m).
CHIN_Y = -0.115


def _head_rect(win) -> QRect:
    """The avatar's head in the viewport (logical pixels): every vertex of the default head's mesh at rest
    from the chin up (not the neck, collar or torso), projected by the viewport's renderer."""
    vp = win.viewport
    renderer = vp._thread.renderer
    pts = np.concatenate([p.positions for p in renderer._avatar.primitives if p.name not in ("torso", "collar")])
    pts = pts[pts[:, 1] >= CHIN_Y]
    px = renderer.project(pts, vp.width(), vp.height())
    x0, y0 = np.floor(px.min(axis=0)).astype(int)
    x1, y1 = np.ceil(px.max(axis=0)).astype(int)
    return QRect(x0, y0, x1 - x0, y1 - y0)


@pytest.mark.parametrize("size", ["minimum", "default", "smallest_view"])
def test_the_latency_overlay_does_not_cover_the_face(qtbot, testdata, settings, size):
    """At the window's minimum size (its layout's minimumSizeHint), its default size (1440x900) and with the
    viewport at its own minimum (320x240): the overlay's rectangle stays off the head's projected bounding box."""
    from tests.ui_helpers import shown_file_window

    win = shown_file_window(qtbot, testdata / VIDEO, settings)
    try:
        if size == "minimum":
            win.resize(win.minimumSizeHint())
        elif size == "smallest_view":
            win.viewport.setFixedSize(win.viewport.minimumSize())
        qtbot.waitUntil(lambda: win.session.pipeline is not None and win.session.pipeline.frames_processed >= 5,
                        timeout=20000)
        qtbot.waitUntil(lambda: win.viewport.overlay.isVisible() and win.viewport._thread.renderer is not None,
                        timeout=10000)
        qtbot.wait(500)
        vp = win.viewport
        head = _head_rect(win)
        overlay = vp.overlay.geometry()
        save_shot(win, f"latency_overlay_{size}_window")
        save_shot(vp, f"latency_overlay_{size}_viewport")
        assert not head.isEmpty() and vp.rect().contains(head.center())
        if size == "smallest_view":
            assert vp.size().toTuple() == (320, 240)
        assert not overlay.intersects(head), (win.size().toTuple(), vp.size().toTuple(), overlay, head)
    finally:
        win.close()
