"""How a processed frame reaches the screen (issue 18, camera-to-screen): no timer on the way, the
newest result shown, the GUI thread's other work kept off the frame's path.

No timing is asserted: what is checked is which frames are shown, in what order, and that
GUI-thread work (progress bars, latency plots) does not paint synchronously or more than needed.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QObject, QSettings

from avatar_app.core.types import AvatarState

pytestmark = [pytest.mark.gui]


def _state(i: int) -> AvatarState:
    return replace(AvatarState.neutral(t_capture_ns=i), frame_index=i, stamps={"fuse": (i, i + 1)})


def _shown_viewport(qtbot):
    """A small AvatarViewportWidget, shown and exposed (the caller shuts it down)."""
    from avatar_app.ui.viewport import AvatarViewportWidget

    vp = AvatarViewportWidget()
    qtbot.addWidget(vp)
    vp.resize(160, 120)
    vp.show()
    qtbot.waitExposed(vp)
    return vp


@pytest.mark.gl
def test_a_state_offered_from_another_thread_is_shown_without_any_timer(qtbot):
    """The pipeline thread's hand-over renders at once; the GUI thread paints it when the render is
    done (queued signal, repaint), with no display timer on the way."""
    vp = _shown_viewport(qtbot)
    shown = []
    vp.frame_presented.connect(lambda st, t: shown.append((st, t, vp.present_ns)))
    t = threading.Thread(target=lambda: vp.offer_state(_state(7)))
    t.start()
    t.join(10)
    qtbot.waitUntil(lambda: any(st.frame_index == 7 for st, _, _ in shown), timeout=10000)
    st, t_present, (handed, reached_gui, painted) = next(x for x in shown if x[0].frame_index == 7)
    r0, r1 = st.stamps["render"]
    # render, hand-off, GUI thread, paint: in that order, on the one process clock
    assert st.stamps["fuse"] == (7, 8) and r0 <= r1 <= handed <= reached_gui <= painted == t_present
    vp.shutdown()


@pytest.mark.gl
def test_the_view_shows_the_newest_state_when_states_arrive_faster_than_it_renders(qtbot):
    """States offered while a render runs: the ones in between are replaced, the newest is shown last."""
    vp = _shown_viewport(qtbot)
    shown = []
    vp.frame_presented.connect(lambda st, _t: shown.append(st.frame_index))
    gate = threading.Event()
    real = vp._thread.on_frame

    def held(frame):  # the render thread waits here after its first render
        gate.wait(10)
        real(frame)

    vp._thread.on_frame = held
    for i in range(1, 9):
        vp.offer_state(_state(i))
    gate.set()
    qtbot.waitUntil(lambda: 8 in shown, timeout=10000)
    vp._thread.on_frame = real
    assert shown[-1] == 8 and len(shown) <= 3, shown  # the first render in flight, then the newest
    assert shown == sorted(shown)
    vp.shutdown()


@pytest.mark.gl
@pytest.mark.slow
def test_the_studio_keeps_showing_new_frames_with_its_display_timer_stopped(qtbot, testdata, settings):
    """The window: each processed frame goes to the render thread from the pipeline thread; the
    display timer only freezes the garbage collector, it hands nothing over."""
    from ui_helpers import open_file_window

    win = open_file_window(qtbot, testdata / "video" / "grid_s1_bbaf2n.mp4", settings)
    win.live.display_timer.stop()
    shown = []
    win.viewport.frame_presented.connect(lambda st, _t: shown.append(st.frame_index))
    qtbot.waitUntil(lambda: len(set(shown)) >= 10, timeout=30000)
    assert shown == sorted(shown)  # newest first, never an older frame after a newer one
    win.close()


class _PaintCounter(QObject):
    def __init__(self):
        super().__init__()
        self.paints = 0

    def eventFilter(self, obj, event):  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


def test_progress_bars_paint_a_new_value_with_the_window_not_at_once(qtbot):
    """QProgressBar.setValue repaints synchronously; the panels' bars (level meter, build and
    calibration progress) paint at the next turn of the event loop."""
    from avatar_app.ui.panels import ProgressBar

    bar = ProgressBar()
    bar.setRange(-60, 0)
    bar.setFormat("%v dBFS")
    qtbot.addWidget(bar)
    bar.show()
    qtbot.waitExposed(bar)
    qtbot.wait(50)
    counter = _PaintCounter()
    bar.installEventFilter(counter)
    bar.setValue(-50)
    assert counter.paints == 1  # what the plain call does: the reason for show_value
    bar.show_value(-20)
    assert bar.value() == -20 and counter.paints == 1  # nothing painted inside the call
    qtbot.waitUntil(lambda: counter.paints == 2, timeout=30000)
    bar.show_value(-20)  # unchanged: no paint scheduled
    qtbot.wait(50)
    assert counter.paints == 2


def test_y_axis_tops_move_in_steps():
    from avatar_app.ui.panels.latency import Y_STEPS, y_top

    assert y_top([]) == 10 and y_top([np.nan]) == 10
    assert y_top([3.0, 9.0]) == 10 and y_top([9.6]) == 20 and y_top([37.0, np.nan]) == 50
    assert y_top([1e9]) == Y_STEPS[-1]


def test_latency_plots_keep_their_axes_cached_and_reset_the_range_only_on_a_new_step(qtbot, tmp_path):
    """Every axis redraw re-plays its text on the GUI thread: the axes are cached pixmaps, there
    is no grid across the plot, and the y range changes only when the data crosses a step."""
    from PySide6.QtWidgets import QGraphicsItem

    from avatar_app.pipeline import settings as store
    from avatar_app.ui.panels.latency import UPDATE_MS, LatencyPanel

    mode = next(k for k, v in store.CPU_MODES.items() if v[3])  # a CPU mode that draws the plots
    session = SimpleNamespace(store=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                              settings=SimpleNamespace(output=SimpleNamespace(cpu_mode=mode)))
    live = SimpleNamespace(latency_history=deque(), fps_history=deque())
    panel = LatencyPanel(session, history=lambda: live)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.timer.interval() == UPDATE_MS >= 500
    for p in (panel.ms_plot, panel.fps_plot):
        for side in ("left", "bottom"):
            axis = p.getAxis(side)
            assert axis.cacheMode() == QGraphicsItem.CacheMode.DeviceCoordinateCache
            assert axis.grid is False
    ranges = []
    real = panel.ms_plot.setYRange
    panel.ms_plot.setYRange = lambda *a, **k: (ranges.append(a[:2]), real(*a, **k))
    for i in range(60):
        live.latency_history.append((i / 30, {"track": 5.0 + i % 7}, 30.0 + i % 5))
        live.fps_history.append((i / 30, 30.0, 0))
    panel.update_plots()
    panel.update_plots()  # same data: the range stays
    assert ranges == [(0, 50.0)]
    live.latency_history.append((2.1, {"track": 6.0}, 140.0))
    panel.update_plots()
    assert ranges == [(0, 50.0), (0, 200.0)]
    assert panel.ms_plot.getViewBox().viewRange()[1] == pytest.approx([0, 200.0])
