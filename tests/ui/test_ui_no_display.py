"""The studio without a display (new-user trial): one error line and status 2, not Qt's abort (134)
with a message about a missing libxcb-cursor0."""
from __future__ import annotations

import pytest

from avatar_app.core.errors import InputError
from avatar_app.ui.app import check_display
from tests.helpers import run_main


@pytest.mark.parametrize("env", [{"DISPLAY": ":0"}, {"WAYLAND_DISPLAY": "wayland-0"},
                                 {"QT_QPA_PLATFORM": "offscreen"}])
def test_a_display_or_a_chosen_platform_is_enough(env):
    check_display(env, "linux")


def test_windows_and_macos_always_have_one():
    check_display({}, "win32")
    check_display({}, "darwin")


def test_no_display_is_refused_naming_what_to_do():
    with pytest.raises(InputError, match=r"no display .*xvfb-run.*render' needs no display"):
        check_display({"HOME": "/root"}, "linux")


def test_the_window_command_without_a_display_exits_2_with_one_line(monkeypatch, testdata):
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(var, raising=False)
    proc = run_main("--source", str(testdata / "video" / "grid_s1_bbaf2n.mp4"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and proc.stderr.startswith("error: no display")


def test_the_screenshot_tool_without_a_display_exits_2(monkeypatch, testdata, tmp_path, capsys):
    from avatar_app.ui import screenshots

    for var in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(var, raising=False)
    assert screenshots.main([str(tmp_path / "shots"), "--source", str(testdata / "video" / "grid_s1_bbaf2n.mp4")]) == 2
    assert capsys.readouterr().err.startswith("error: no display")
    assert not (tmp_path / "shots").exists()


@pytest.mark.parametrize("text,want", [("1280x720", (1280, 720)), ("960X1000", (960, 1000))])
def test_the_screenshot_tool_takes_a_window_size(text, want):
    from avatar_app.ui import screenshots

    assert screenshots._size(text) == want


@pytest.mark.parametrize("text", ["1280", "axb", "100x720", "1280x99999"])
def test_the_screenshot_tool_refuses_a_bad_size_in_one_line(text, capsys):
    from avatar_app.ui import screenshots

    with pytest.raises(SystemExit) as exc:
        screenshots.main(["out", "--source", "x.mp4", "--size", text])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--size" in err and ("WxH" in err or "320-7680" in err), err
