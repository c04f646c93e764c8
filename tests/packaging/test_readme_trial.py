"""README says what a new user tripped over (issue 21, trial fixes 6): still images are no input of
`render` (and render says so), and the `[serve]` extra installs into Set-up's .venv."""
from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_says_still_images_are_not_an_input_and_render_refuses_them(testdata, tmp_path):
    assert re.search(r"still image \([^)]*\) is not an input of `render`", README.replace("\n", " "))
    still = testdata / "images" / "grid_lbax4n_frame29.png"
    r = run_cli("render", str(still), "-o", str(tmp_path / "o.mp4"), "-q")
    assert r.returncode == 2 and "still image" in r.stderr and "give a video file" in r.stderr, r.stderr


def test_the_serve_extra_installs_into_setups_venv_with_a_warning():
    serving = README.split("## Serving", 1)[1].split("\n## ", 1)[0]
    assert "    .venv/bin/pip install -e '.[serve]'\n" in serving
    assert ".venv/bin/pip install" in README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert "while no render" in serving and "break" in serving
    assert "pip install '.[serve]'" not in README  # the old, venv-less spelling
    assert "pip install '.[serve]'" not in (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
