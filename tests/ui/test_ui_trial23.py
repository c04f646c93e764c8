"""trial23: quitting from the clean capture view (Ctrl+H) keeps the panels for the next start."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"


def test_quit_from_clean_view_restarts_with_the_panels_and_toolbar(qtbot, testdata, settings):
    from tests.ui_helpers import shown_file_window

    win = shown_file_window(qtbot, testdata / VIDEO, settings)
    qtbot.waitUntil(lambda: win.panels_visible(), timeout=20000)
    shown = sorted(k for k, d in win.docks.items() if d.isVisible())
    assert shown and win.toolbar.isVisible()
    win.toggle_panels(True)  # Ctrl+H
    assert not win.panels_visible()
    win.close()  # File › Quit closes the window (then the app)
    settings.sync()

    again = shown_file_window(qtbot, testdata / VIDEO, settings)
    qtbot.waitUntil(lambda: again.panels_visible(), timeout=20000)
    assert sorted(k for k, d in again.docks.items() if d.isVisible()) == shown
    assert again.toolbar.isVisible() and again.menuBar().isVisible() and again.statusBar().isVisible()
    again.close()


def test_dropped_per_second_never_exceeds_the_source_rate_for_bursty_drops(qtbot, tmp_path):
    """25 fps source, 150 drops in 17 s in bursts of 20 at one 200 ms sample: the trial's plot showed 100/s."""
    from collections import deque
    from types import SimpleNamespace

    import numpy as np
    from PySide6.QtCore import QSettings

    from avatar_app.pipeline import settings as store
    from avatar_app.ui.panels.latency import LatencyPanel, drop_rate

    mode = next(k for k, v in store.CPU_MODES.items() if v[3])  # a CPU mode that draws the plots
    session = SimpleNamespace(store=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                              settings=SimpleNamespace(output=SimpleNamespace(cpu_mode=mode)))
    live = SimpleNamespace(latency_history=deque(), fps_history=deque())
    dropped = 0
    for i in range(85):  # every 200 ms for 17 s
        if i % 11 == 5 and dropped < 150:
            dropped += 20
        live.fps_history.append((i * 0.2, 17.6, dropped))
    panel = LatencyPanel(session, history=lambda: live)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    panel.update_plots()
    _, per_s = panel.dropped_curve.getData()
    assert per_s is not None and len(per_s) == 85
    assert 0 < per_s.max() <= 25, per_s.max()
    assert np.all(drop_rate([0.0, 0.2], [5, 3]) >= 0)  # a reset counter never gives a negative rate
    # after a reset (a new source) its new drops count at once, not only once they pass the old count
    assert drop_rate([0.0, 0.2, 0.4], [5, 0, 2], window_s=1.0)[-1] == 2.0


def test_latency_panel_shows_the_status_bars_drop_count(qtbot, testdata, settings):
    from tests.ui_helpers import shown_file_window

    win = shown_file_window(qtbot, testdata / VIDEO, settings)
    qtbot.waitUntil(lambda: win.session.pipeline is not None and win.session.pipeline.frames_processed >= 3,
                    timeout=20000)
    win.live._on_slow_tick()
    win.session.pipeline.stats.add_dropped(7)  # frames lost after the panel's last redraw
    win.live._on_slow_tick()  # what the status bar shows now, the panel shows too
    status = win.status_labels["dropped"].text()
    assert status.startswith("dropped ") and int(status.split()[1]) >= 7, status
    assert win.panels["latency"].summary.text().endswith(status), (win.panels["latency"].summary.text(), status)
    win.close()


def _state_at(t_capture_ns: int, jaw: float):
    from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
    from avatar_app.core.types import AvatarState

    st = AvatarState.neutral(t_capture_ns)
    w = st.weights.copy()
    w[BLENDSHAPE_NAMES.index("jawOpen")] = jaw
    return AvatarState(t_capture_ns, 0.0, w, st.rotation, st.translation, st.gaze)


def test_studio_recording_of_a_slow_pipeline_repeats_no_frame_and_says_why(qtbot, still_window):
    """The trial's Ctrl+R on a loaded machine (~8 new avatar frames a second): the clip repeated most frames
    and the status bar blamed the encoder. Here the window presents states 125 ms apart in capture time, one
    by one (frames, not time): each is in the clip once, with a sidecar row, and the note says why."""
    import re

    import av
    import numpy as np

    from avatar_app.core.clock import now_ns

    win = still_window
    win.recording.toggle_recording()  # Ctrl+R
    rec = win.recording.recorder
    synced = rec.recorder
    qtbot.waitUntil(lambda: synced.frames_in >= 1, timeout=20000)
    win.live.push_states = False
    win.live.stop()  # no timers: the slow pipeline is this loop
    qtbot.wait(200)
    vp, t0, n = win.viewport, now_ns(), 24
    for k in range(n):
        t_k = t0 + k * 125_000_000 + 1_000_000
        # jaw open first: a state of the still camera still on its way (jaw closed) shows before this test's
        # first frame, never after it (an earlier capture time is not placed after a later one)
        vp.show_state(_state_at(t_k, jaw=float(1 - k % 2)))
        qtbot.waitUntil(lambda t=t_k: getattr(vp.captured_state, "t_capture_ns", None) == t
                        and rec.queued_frames == 0, timeout=20000)  # this state was captured and queued
        win.recording.update_status()
    assert re.match(r"Recording at \d+ fps instead of 30: the avatar shows only about \d+ new frames",
                    win.recording.record_rate_warning), win.recording.record_rate_warning
    assert "no frame is repeated" not in win.recording.record_rate_warning
    clip, sidecar = win.recording.record_path, win.recording.sidecar_path
    win.recording.toggle_recording()
    qtbot.waitUntil(lambda: win.recording.last_record_message.startswith("Saved"), timeout=20000)
    with av.open(str(clip)) as c:
        frames = [f.to_ndarray(format="gray")[::4, ::4].astype(np.int16) for f in c.decode(video=0)]
    rows = sidecar.read_text().splitlines()[1:]
    assert len(rows) == len(frames), (len(rows), len(frames))  # a row per video frame
    tail = frames[-n:]  # this test's frames, jaw open / closed in turn
    diffs = [int(np.abs(a - b).max()) for a, b in zip(tail, tail[1:])]
    assert min(diffs) > 40, (diffs, len(frames))


def test_rate_note_blames_the_encoder_only_when_its_queue_refused_frames(qtbot, still_window, monkeypatch):
    win = still_window
    win.recording.toggle_recording()
    clip = win.session.recording
    synced = clip.recorder.recorder
    qtbot.waitUntil(lambda: synced.frames_in >= 1, timeout=20000)
    win.live.push_states = False
    win.live.stop()
    monkeypatch.setattr(synced, "frames_in", 40)
    monkeypatch.setattr(clip, "queue_drops", lambda: 1)  # one refusal among 41 frames: the pipeline is slow
    win.recording._rec_rate_warned = -1e9  # a note now, whatever an earlier tick noted
    win.recording._warn_recording_rate(8.0)
    assert "the avatar shows only about 8 new frames" in win.recording.record_rate_warning
    win.recording._rec_rate_warned = -1e9  # the next note now, not in 5 s
    monkeypatch.setattr(synced, "frames_in", 60)
    monkeypatch.setattr(clip, "queue_drops", lambda: 31)  # 30 refused of the 50 offered since
    win.recording._warn_recording_rate(8.0)
    assert "this machine cannot encode 30 fps now" in win.recording.record_rate_warning
    win.recording.toggle_recording()
    qtbot.waitUntil(lambda: bool(win.recording.last_record_message), timeout=20000)
