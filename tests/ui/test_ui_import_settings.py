"""File › Import settings… (issue 21, trial fixes 2 and 3): applied at once, persisted, bad files refused."""
from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QSettings
from ui_helpers import open_file_window

from avatar_app.pipeline.settings import StudioSettings, save_settings_file

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"


@pytest.fixture
def file_window(qtbot, testdata, settings, monkeypatch):
    monkeypatch.setenv("AVATAR_APP_SCREENSHOT", "1")  # no message boxes
    win = open_file_window(qtbot, testdata / VIDEO, settings)
    yield win
    win.close()


@pytest.fixture(scope="module")
def shared_file_window(shared_window, testdata):
    """One file window for the refused-file checks, which leave it as they found it (shared_window; they
    run last, as that window runs until the module ends)."""
    from ui_helpers import file_window

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AVATAR_APP_SCREENSHOT", "1")  # no message boxes
        yield shared_window(lambda settings: file_window(testdata / VIDEO, settings), size=(640, 360))


def _studio_file(tmp_path, **edits):
    s = StudioSettings()
    s.tuning.mirror = False
    s.tuning.smoothing["mouth"] = 0.8
    s.avatar.background = "transparent"
    s.avatar.lighting = "soft"
    s.output.fps_cap = 24.0
    s.output.vmc_port = 40000
    s.expressions.custom = "jawOpen=0.7"
    s.fusion.audio_mix = 0.25
    path = save_settings_file(tmp_path / "in.json", s)
    if edits:
        data = json.loads(path.read_text())
        for area, values in edits.items():
            data[area].update(values)
        path.write_text(json.dumps(data))
    return path


def test_import_applies_at_once_shows_and_persists(qtbot, file_window, tmp_path, settings):
    win = file_window
    assert win.import_action.text() == "&Import settings…"
    assert win._on_import_settings(_studio_file(tmp_path)) == []
    s = win.session
    assert s.chain.tuner.settings.mirror is False and s.chain.tuner.settings.smoothing["mouth"] == pytest.approx(0.8)
    assert s.chain.fusion.settings.audio_mix == pytest.approx(0.25)
    assert s.settings.avatar.background == "transparent" and s.settings.avatar.lighting == "soft"
    assert s.effective_fps_cap() == pytest.approx(24.0)
    assert s.settings.expressions.custom == "jawOpen=0.7"
    # the panels show it
    assert not win.panels["tracking"].mirror.isChecked() and win.panels["avatar"].bg_transparent.isChecked()
    out = win.panels["output"]
    assert out.fps_cap.value() == pytest.approx(24.0) and out.vmc_port.value() == 40000
    assert win.panels["expressions"].custom_edit.text() == "jawOpen=0.7"
    # persisted: a fresh read of the store has it
    settings.sync()
    back = StudioSettings.load(QSettings(settings.fileName(), QSettings.Format.IniFormat))
    assert back.tuning.mirror is False and back.avatar.lighting == "soft" and back.output.fps_cap == 24.0
    assert back.fusion.audio_mix == pytest.approx(0.25)


def test_rejected_values_are_named_and_the_rest_applied(qtbot, file_window, tmp_path):
    win = file_window
    report = win._on_import_settings(_studio_file(tmp_path, fusion={"audio_mix": 5}, avatar={"msaa": 3}))
    assert any(r.startswith("fusion.audio_mix: 5 ") for r in report)
    assert any(r.startswith("avatar.msaa: 3 ") for r in report)
    assert "fusion.audio_mix: 5" in win.notifier.last_error and "avatar.msaa: 3" in win.notifier.last_error
    assert win.session.settings.avatar.lighting == "soft"  # the valid values still applied


@pytest.mark.parametrize("content", ["{ not json", json.dumps({"kind": "something else"}), None])
def test_a_bad_file_is_refused_and_nothing_changes(qtbot, shared_file_window, tmp_path, content):
    win = shared_file_window
    win.notifier.last_error = None  # (the window is shared: this file's refusal must say it anew)
    before = (win.session.settings.avatar.lighting, win.session.chain.tuner.settings.mirror,
              win.session.settings.output.fps_cap)
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    assert win._on_import_settings(path) is None
    assert "Settings not imported" in win.notifier.last_error and "bad.json" in win.notifier.last_error
    assert (win.session.settings.avatar.lighting, win.session.chain.tuner.settings.mirror,
            win.session.settings.output.fps_cap) == before
