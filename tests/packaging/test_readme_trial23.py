"""README says how to screenshot the studio and how the tests find their data (trial23 #6)."""
from __future__ import annotations

from pathlib import Path

import pytest

from avatar_app.ui import app, screenshots

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_names_both_screenshot_hooks_as_they_are(capsys):
    studio = README.split("## The studio window", 1)[1].split("\n## ", 1)[0]
    flat = " ".join(studio.split())
    assert "AVATAR_APP_SCREENSHOT=shot.png avatar-app --source clip.mp4" in flat
    assert f"once {app.SCREENSHOT_FRAMES} frames" in flat and f"within {app.SCREENSHOT_TIMEOUT_S:.0f} s" in flat
    assert "python -m avatar_app.ui.screenshots OUT_DIR --source clip.mp4" in flat
    with pytest.raises(SystemExit) as exc:  # the options the README shows are the tool's
        screenshots.main(["--help"])
    assert exc.value.code == 0
    usage = capsys.readouterr().out
    assert "--source" in usage and "--panels" in usage and "engines" in usage, usage


def test_readme_names_the_test_data_variable():
    setup = " ".join(README.split("## Set-up", 1)[1].split("\n## ", 1)[0].split())
    assert "AVATAR_TESTDATA=/path/to/testdata" in setup
