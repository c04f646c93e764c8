"""Defects found in a new-user trial of the studio window, each checked on the app's state.

Recording without a source, a failed file switch, a source dying mid-recording,
transparent backgrounds with opaque formats, no face in the video, the clean
capture view's hint, "Show recordings" without a file manager, the file box's
Enter key and error text, files without audio, and the blendshape track beside
window recordings.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from ui_helpers import open_file_window, save_shot, wait_frames

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"
OTHER = "video/grid_s2_swwp2s.mp4"


def _engines():
    from avatar_app.pipeline.engines import EngineController

    return EngineController(models={"face_recon": None, "speech2face": None})


def _recordings(settings) -> list[Path]:
    folder = Path(settings.value("record_folder", type=str))
    return sorted(folder.glob("*")) if folder.is_dir() else []


@pytest.fixture(scope="module")
def shared(shared_still_window):
    """The still window shared by the checks below that leave it as they found it (one start instead of three)."""
    return shared_still_window


@pytest.fixture
def file_window(qtbot, testdata, settings):
    win = open_file_window(qtbot, testdata / VIDEO, settings)
    yield win
    win.close()


def _record(qtbot, win, seconds_ms: int = 1500, min_frames: int = 20) -> Path:
    """Record for at least ``seconds_ms`` and ``min_frames`` presented frames (a loaded machine
    renders fewer per second) with the button; returns the clip once "Saved" was said."""
    win.recording.record_button.click()
    assert win.recording.recorder is not None
    path = win.recording.record_path
    start = win.viewport.frames_presented
    qtbot.wait(seconds_ms)
    qtbot.waitUntil(lambda: win.viewport.frames_presented >= start + min_frames, timeout=30000)
    win.recording.record_button.click()
    qtbot.waitUntil(lambda: win.recording.last_record_message.startswith("Saved"), timeout=20000)
    return path


# ------------------------------------------------------------------ 1 (HIGH): record without a source
def test_record_is_refused_without_a_running_source(qtbot, settings, monkeypatch, tmp_path):
    import avatar_app.capture.camera as camera_mod
    import avatar_app.capture.mic as mic_mod
    from avatar_app.core.errors import CaptureError
    from avatar_app.ui.main_window import MainWindow

    def no_device(*a, **k):
        raise CaptureError("No camera found.")

    monkeypatch.setattr(mic_mod, "MicSource", no_device)
    monkeypatch.setattr(camera_mod, "CameraSource", no_device)
    monkeypatch.setenv("AVATAR_APP_SCREENSHOT", "1")  # no message boxes taking the keyboard from the window
    win = MainWindow(camera=0, settings=settings, engines=_engines())
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    assert win.session.pipeline is None
    assert not win.recording.record_button.isEnabled() and "Nothing to record" in win.recording.record_button.toolTip()
    save_shot(win, "trial_no_source_record_disabled")
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=30000)
    for _ in range(2):  # Ctrl+R, Ctrl+R: refused both times, never "Saved"
        qtbot.keyClick(win, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
        assert win.recording.recorder is None and not win.recording.record_button.isChecked()
        assert "Nothing to record" in (win.notifier.last_error or "")
    qtbot.wait(300)  # a slow tick: the REC timer must not show
    assert "Saved" not in win.statusBar().currentMessage() and win.status_labels["rec"].text() == ""
    assert _recordings(settings) == []
    # a failed source switch leaves it refused as well
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video")
    assert not win.session.open_file(bad)
    assert win.session.pipeline is None and not win.recording.record_button.isEnabled()
    assert win.recording.start_recording() is None and _recordings(settings) == []
    win.close()


# ------------------------------------------------------------------ 2, 3, 8: failed file switch
def test_failed_file_switch_keeps_the_source_and_the_recording(qtbot, file_window, testdata, tmp_path, settings):
    from tests.helpers import ffprobe_streams

    win = file_window
    s = win.panels["sources"]
    good = win.session.pipeline
    play_y = s.play_button.mapTo(s, s.play_button.rect().topLeft()).y()
    win.recording.record_button.click()
    assert win.recording.recorder is not None
    clip = win.recording.record_path
    # a path that does not exist, confirmed with Enter: refused before anything is opened
    typed = str(tmp_path / "typo" / "talk.mp4")
    s.file_edit.setText(typed)
    qtbot.keyClick(s.file_edit, Qt.Key.Key_Return)
    assert s.file_error.isVisibleTo(s) and "No such file" in s.file_error.text()
    assert win.session.pipeline is good and s.file_edit.text() == typed
    # a file that is no video: opened beside the running source, which keeps playing
    bad = tmp_path / "not_a_video.mp4"
    bad.write_bytes(b"garbage " * 100)
    s.file_edit.setText(str(bad))
    s.play_button.click()
    qtbot.waitUntil(lambda: "not_a_video.mp4" in s.file_error.text(), timeout=20000)
    assert win.session.pipeline is good and good.running and good.error is None
    wait_frames(qtbot, win, 5)  # the preview and the avatar go on
    assert s.file_edit.text() == str(bad)
    assert "[Errno" not in s.file_error.text() and "[Errno" not in (win.notifier.last_error or "")
    assert "Details" in s.file_error.toolTip() and "not a readable video" in s.file_error.toolTip()
    assert "keeps playing" in s.file_error.text()
    # the error is two elided lines: the Play button stays where it was
    assert s.play_button.mapTo(s, s.play_button.rect().topLeft()).y() == play_y
    assert s.file_error.height() <= 2 * s.file_error.fontMetrics().lineSpacing() + 4
    save_shot(win, "trial_failed_switch")
    # the recording went on through the failed switch
    assert win.recording.recorder is not None and win.recording.record_button.isChecked()
    qtbot.wait(1200)
    win.recording.record_button.click()
    qtbot.waitUntil(lambda: win.recording.last_record_message.startswith("Saved"), timeout=20000)
    assert float(ffprobe_streams(clip)["video"]["duration"]) > 0.5
    # Enter plays a good file; the file replaced is stopped
    s.file_edit.setText(str(testdata / OTHER))
    qtbot.keyClick(s.file_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: win.session.pipeline is not good and win.session.pipeline is not None
                    and str(win.session.pipeline.source.path).endswith("grid_s2_swwp2s.mp4"), timeout=20000)
    assert not s.file_error.isVisibleTo(s)
    qtbot.waitUntil(lambda: not good.running, timeout=10000)


# ------------------------------------------------------------------ 3: the source dies while recording
def test_source_failure_while_recording_finishes_the_clip(qtbot, still_window):
    from avatar_app.core.errors import CaptureError
    from tests.helpers import ffprobe_streams

    win = still_window
    win.recording.record_button.click()
    assert win.recording.recorder is not None
    clip = win.recording.record_path
    qtbot.waitUntil(lambda: win.recording.recorder is not None and win.recording.recorder.recorder.frames_in >= 15,
                    timeout=20000)
    win.still_source.error = CaptureError("camera unplugged")
    qtbot.waitUntil(lambda: win.recording.recorder is None, timeout=10000)
    assert not win.recording.record_button.isChecked() and win.recording.record_button.text() == "● Record"
    qtbot.waitUntil(lambda: "Recording stopped" in win.recording.last_record_message, timeout=20000)
    msg = win.recording.last_record_message
    assert "camera was lost" in msg and "camera unplugged" in msg and f"Saved {clip}" in msg
    assert win.status_labels["rec"].text() == "" and win.recording.record_time_label.text() == ""
    streams = ffprobe_streams(clip)
    assert "video" in streams and float(streams["video"]["duration"]) > 0.3


# ------------------------------------------------------------------ 4: transparent background
def test_transparent_background_records_with_alpha(qtbot, still_window, settings):
    """An opaque format with a transparent background records an alpha format instead (VP9 .webm, the
    faster alpha encoder, where FFmpeg has libvpx-vp9), said in a note; the clip keeps its alpha:
    the background corner transparent, the face opaque. (This also holds the checks of
    test_ui_recording_drops' former VP9 test, which recorded the same clip.)"""
    import numpy as np

    from avatar_app.record.formats import available_formats
    from tests.helpers import alpha_decoder, decode_rgba, decoded_duration

    win = still_window
    o = win.panels["output"]
    o.format.setCurrentIndex(o.format.findData("h264-mp4"))
    assert not o.format_note.isVisibleTo(o)
    win.panels["avatar"].bg_transparent.setChecked(True)
    fmt, note = win.recording.recording_format()
    assert fmt.alpha and o.format_note.isVisibleTo(o) and "H.264" in o.format_note.text()
    assert fmt.label in o.format_note.text()
    vp9 = "vp9-webm" in {f.key for f in available_formats()}
    if vp9:  # the faster alpha encoder is the default one
        assert fmt.key == "vp9-webm" and "VP9" in note
    win.docks["output"].raise_()
    qtbot.wait(50)
    save_shot(win, "trial_transparent_note")
    clip = _record(qtbot, win)
    assert clip.suffix == fmt.suffix
    import av

    with av.open(str(clip)) as c:
        vs = c.streams.video[0]
        assert vs.codec_context.name.startswith(fmt.video_codec.split("_")[0].replace("libvpx-", ""))
        cc = alpha_decoder(vs)
        first = next(f for pk in c.demux(vs) for f in cc.decode(pk))
        assert "a" in first.format.name.replace("yuv", ""), first.format.name  # yuva…
    assert decoded_duration(clip, "video") > 0.5  # (WebM streams carry no duration of their own)
    assert clip.suffix == ".webm" or not vp9
    frames = decode_rgba(clip)
    assert len(frames) >= 10
    a = frames[-1][..., 3]
    h, w = a.shape
    assert a[: h // 10, : w // 10].max() <= 2  # the background corner stays transparent
    assert np.median(a[h // 3: 2 * h // 3, 2 * w // 5: 3 * w // 5]) >= 250  # the face is opaque
    # back to a colour: the chosen format again, no note
    win.panels["avatar"].bg_green.setChecked(True)
    assert win.recording.recording_format()[0].key == "h264-mp4" and not o.format_note.isVisibleTo(o)


# ------------------------------------------------------------------ 5, 9: no face, no audio track
def test_no_face_is_shown_and_cleared(qtbot, settings, no_face_video, testdata):
    from avatar_app.ui.main_window import MainWindow

    win = MainWindow(source=no_face_video, settings=settings, engines=_engines())
    qtbot.addWidget(win)
    win.viewport.setFixedSize(640, 360)
    win.show()
    qtbot.waitExposed(win)
    assert "no audio track (recording will be silent)" in win.panels["sources"].mic_label.text()
    qtbot.waitUntil(lambda: win.session.pipeline is not None and win.session.pipeline.frames_processed >= 5,
                    timeout=20000)
    qtbot.waitUntil(lambda: win.live.no_face_shown, timeout=10000)
    assert not win.session.pipeline.latest_state().face_found
    assert win.status_labels["face"].text() == "No face found"
    assert win.viewport.notice.isVisible() and "No face found" in win.viewport.notice.text()
    save_shot(win, "trial_no_face")
    win.toggle_panels(True)  # a clean capture shows nothing over the avatar
    assert not win.viewport.notice.isVisible()
    win.toggle_panels(False)
    assert win.viewport.notice.isVisible()
    assert win.session.open_file(testdata / VIDEO)
    qtbot.waitUntil(lambda: not win.live.no_face_shown, timeout=20000)
    assert win.session.pipeline.latest_state().face_found and not win.viewport.notice.isVisible()
    assert win.status_labels["face"].text() == ""
    assert win.panels["sources"].mic_label.text() == "Audio: the file's own track"
    win.close()


# ------------------------------------------------------------------ 10: blendshape track beside the clip
def test_window_recording_writes_the_blendshape_track(qtbot, still_window):
    """The track beside a window recording: every blendshape, 30 fps, times rising within the clip. A short
    clip (0.5 s and 15 frames at least): what is checked does not depend on the clip's length."""
    import numpy as np

    from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
    from avatar_app.pipeline import sidecar_path_for
    from avatar_app.record.sidecar import read_sidecar
    from tests.helpers import ffprobe_streams

    win = still_window
    clip = _record(qtbot, win, seconds_ms=500, min_frames=15)
    track = read_sidecar(sidecar_path_for(clip))
    video_s = float(ffprobe_streams(clip)["video"]["duration"])
    assert track.names == tuple(BLENDSHAPE_NAMES) and track.fps == pytest.approx(30.0)
    assert len(track) >= 10 and np.all(np.diff(track.t) > 0) and np.all(np.diff(track.source_frame) > 0)
    assert track.t[0] < 0.2 and track.t[-1] <= video_s + 0.1
    assert track.face.mean() > 0.8  # the still head is tracked


# ------------------------------------------------------------------ 1, 2, 6, 7 on the shared window (the module's last
# tests, so that window runs only while they do)
def test_finished_recording_without_frames_is_not_called_saved(qtbot, shared, tmp_path):
    win = shared
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    win.recording._on_recording_closed(empty, None, {"frames": 0, "reason": ""})
    assert "Nothing was recorded" in win.recording.last_record_message
    assert "Saved" not in win.statusBar().currentMessage()
    assert not empty.exists()  # an empty file is not left behind as if it were a clip
    win.recording._on_recording_closed(tmp_path / "missing.mp4", None, {"frames": 30, "reason": ""})
    assert "Nothing was recorded" in win.recording.last_record_message


# ------------------------------------------------------------------ 6: clean capture view hint
def test_clean_view_shows_how_to_get_the_panels_back(qtbot, shared, monkeypatch):
    import avatar_app.ui.main_window as mw

    monkeypatch.setattr(mw, "CLEAN_VIEW_HINT_MS", 600)
    win = shared
    win.toggle_panels(True)
    assert not win.menuBar().isVisible()
    assert win.viewport.hint.isVisible() and "Ctrl+H" in win.viewport.hint.text()
    save_shot(win, "trial_clean_view_hint")
    qtbot.waitUntil(lambda: not win.viewport.hint.isVisible(), timeout=30000)  # transient
    win.toggle_panels(True)
    win.toggle_panels(False)
    assert win.panels_visible() and not win.viewport.hint.isVisible()


# ------------------------------------------------------------------ 7: no file manager
def test_show_recordings_without_a_file_manager_says_where(qtbot, shared, monkeypatch):
    import avatar_app.ui.panels.output as output_mod

    opened = []

    class NoFileManager:
        @staticmethod
        def openUrl(url):  # noqa: N802 (Qt's name)
            opened.append(url.toLocalFile())
            return False

    monkeypatch.setattr(output_mod, "QDesktopServices", NoFileManager)
    win = shared
    folder = win.recording.record_folder()
    win.panels["output"].open_folder.click()
    assert opened == [str(folder)] and folder.is_dir()
    assert win.notifier.last_info is not None and str(folder) in win.notifier.last_info
    save_shot(win, "trial_show_recordings")


def test_long_source_error_stays_in_its_lines(qtbot, shared):
    """(On the shared still window: the caption is put back afterwards.)"""
    win = shared
    label = win.panels["sources"].source_label
    h, was = label.height(), label.text()
    label.setText("No source: " + "a very long explanation " * 40 + "\nsecond line\nthird line")
    qtbot.wait(50)
    try:
        assert label.height() == h and label.text().endswith("third line") and "third line" in label.toolTip()
        assert label.geometry().top() >= win.panels["sources"].preview.geometry().bottom()
    finally:
        label.setText(was)
