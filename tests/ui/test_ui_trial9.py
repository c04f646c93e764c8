"""Fixes from the ninth session's new-user trial (studio)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.gl]


def test_a_good_avatar_replaces_the_error_of_a_bad_one_in_the_status_bar(qtbot, still_window, testdata, tmp_path):
    win = still_window
    bad = tmp_path / "notavatar.glb"
    bad.write_text("not a model")
    a = win.panels["avatar"]
    assert a.load(bad)
    qtbot.waitUntil(lambda: win.notifier.last_error is not None and "notavatar.glb" in win.notifier.last_error,
                    timeout=20000)
    assert "notavatar.glb" in win.notifier.message
    assert a.load(testdata / "avatars" / "vrm1_debug_robot.vrm")
    qtbot.waitUntil(lambda: win.notifier.message.startswith("Avatar: vrm1_debug_robot.vrm"), timeout=30000)
    # its load report's warning (none of its shapes moves the face) is in the status bar, not only the log
    assert "ARKit" in win.notifier.message, win.notifier.message
    a.use_default()
    qtbot.waitUntil(lambda: win.notifier.message == "Avatar: the default head", timeout=20000)


def test_a_25_fps_source_sets_the_recording_rate_without_blaming_the_machine(qtbot, still_window, monkeypatch):
    win = still_window
    rec = win.recording
    monkeypatch.setattr(rec, "_rec_fps", 30.0)
    monkeypatch.setattr(rec, "record_rate_warning", "")
    monkeypatch.setattr(rec, "_rec_rate_warned", -1e9)
    monkeypatch.setattr(type(win.session), "source_fps", property(lambda self: 25.0))
    # the clip gets the 25 new frames a second the file delivers: its rate, no advice
    assert rec._warn_recording_rate(25.0) == " · 25 fps (the source's rate)"
    assert rec.record_rate_warning == ""
    # fewer than the source delivers: the window says so, as before
    assert rec._warn_recording_rate(18.0) == " · 18 fps"
    assert rec.record_rate_warning.startswith("Recording at 18 fps instead of 30")


def test_the_source_rate_note_does_not_turn_the_rec_label_red(qtbot, still_window, monkeypatch):
    win = still_window
    rec = win.recording
    rec.toggle_recording()
    try:
        qtbot.waitUntil(lambda: win.session.recording is not None, timeout=20000)
        clip = win.session.recording
        monkeypatch.setattr(rec, "_rec_fps", 30.0)
        monkeypatch.setattr(type(win.session), "source_fps", property(lambda self: 25.0))
        monkeypatch.setattr(rec, "recording_dropped", lambda: 0)
        monkeypatch.setattr(clip, "recent_fps", lambda *a, **k: 25.0)
        rec.update_status()
        assert "(the source's rate)" in rec.record_time_label.text()
        assert "c0392b" not in rec.record_time_label.styleSheet()
        monkeypatch.setattr(clip, "recent_fps", lambda *a, **k: 12.0)  # slower than the source: a warning
        rec.update_status()
        assert "c0392b" in rec.record_time_label.styleSheet()
    finally:
        rec.toggle_recording()
        qtbot.waitUntil(lambda: bool(rec.last_record_message), timeout=20000)


@pytest.mark.parametrize(("text", "want"), [
    ("video path 'csdir' is not a file", "It is not a file"),
    ("video file not found: 'csdir'", "Video file not found"),
    ("[Errno 1094995529] Invalid data found when processing input: 'csdir'",
     "The file could not be read: Invalid data found when processing input"),
])
def test_plain_error_reads_as_a_sentence_about_the_file(text, want):
    from avatar_app.ui.panels import plain_error

    assert plain_error(text, "csdir") == want


def test_sentence_ends_with_one_full_stop():
    from avatar_app.ui.panels import sentence

    assert sentence("It is not a file") == "It is not a file."
    assert sentence("Done.") == "Done." and sentence("Why?") == "Why?" and sentence("") == ""


def test_a_failed_recording_is_reported_once_in_one_sentence_each(qtbot, still_window, monkeypatch, tmp_path):
    from avatar_app.core.errors import RecordingError

    win = still_window
    rec = win.recording
    rec.toggle_recording()
    qtbot.waitUntil(lambda: win.session.recording is not None, timeout=20000)
    clip = win.session.recording
    boxes: list[str] = []
    monkeypatch.setattr(win.notifier, "_show", lambda icon, message, selectable=False: boxes.append(message))

    def full(*a, **k):
        raise RecordingError("recording to x.mp4 failed: the disk is full. The part written so far is kept and plays.")

    monkeypatch.setattr(clip, "feed_audio", full)
    rec._on_audio_tick()  # the audio feed meets the full disk: the recording stops, no box yet
    qtbot.waitUntil(lambda: bool(rec.last_record_message), timeout=20000)
    assert win.session.recording is None and len(boxes) <= 1, boxes
    # the close's one report, as the recorder words it (here the clip closed without the injected error)
    path = tmp_path / "x.mp4"
    path.write_bytes(b"\0" * 100)
    boxes.clear()
    rec._on_recording_closed(path, RecordingError(
        "recording to x.mp4 failed: the disk is full. The part written so far is kept and plays."),
        {"frames": 10, "fps": 30.0})
    msg = rec.last_record_message
    assert msg.count("kept") == 1 and ".." not in msg, msg
    assert msg.startswith("The recording stopped with an error: ") and len(boxes) == 1
    rec._on_recording_closed(path, RecordingError("the encoder failed"), {"frames": 10, "fps": 30.0})
    assert rec.last_record_message.endswith(f"the encoder failed. What was written is kept: {path}.")
