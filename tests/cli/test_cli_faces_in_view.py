"""render's summary says which face was tracked when several are in view (trial 20 finding 5): the
largest one when tracking starts, then followed (tracking/face_mesh.py); with one face it says nothing."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from avatar_app import cli
from avatar_app.pipeline import RenderReport
from tests.helpers import run_main


@pytest.mark.parametrize("n", [0, 1, 3])
def test_the_summary_names_the_followed_face_only_when_several_were_in_view(capsys, n):
    rep = RenderReport(output_path=Path("o.mp4"), sidecar_path=Path("o.blendshapes.jsonl"), frames_in=2,
                       faces_found=2, tracker="MediaPipe face mesh", faces_in_view=n)
    cli._print_report(rep)
    out = capsys.readouterr().out
    assert ("the largest of 3 faces in view, then followed" in out) == (n == 3), out
    assert "tracked by MediaPipe face mesh" in out


def test_a_render_of_a_group_names_the_largest_face(testdata, tmp_path):
    clip = testdata / "video" / "openmpf_video_01.mp4"
    assert clip.exists(), f"{clip} is missing"
    r = run_main("render", str(clip), "-o", str(tmp_path / "g.mp4"), "--size", "96x64", "-q", "--tracker", "mediapipe")
    assert r.returncode == 0, r.stderr
    m = re.search(r"the largest of (\d+) faces in view, then followed", r.stdout)
    assert m and int(m.group(1)) >= 2, r.stdout


def test_a_render_of_one_face_says_nothing_about_choosing(short_grid_clip, tmp_path):
    r = run_main("render", str(short_grid_clip), "-o", str(tmp_path / "o.mp4"), "--size", "96x64", "-q")
    assert r.returncode == 0, r.stderr
    assert "faces in view" not in r.stdout, r.stdout
