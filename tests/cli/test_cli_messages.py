"""What the CLI tells a new user: the no-audio warning, --size help, engines list wording."""
from __future__ import annotations

import subprocess

import pytest

from tests.helpers import ffprobe_streams, run_cli, run_main


@pytest.mark.gl
def test_video_without_audio_track_warns_that_output_is_silent(short_grid_clip, tmp_path):
    mute = tmp_path / "mute.mp4"  # (the warning and the silent output hold on any length: the 0.4 s clip)
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(short_grid_clip), "-an",
                    "-c:v", "copy", str(mute)], check=True)
    out = tmp_path / "o.mp4"
    proc = run_main("render", str(mute), "-o", str(out), "--size", "160x120", "-q")
    # a silent clip is a legitimate request: exit 0, with a clear warning
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert any("mute.mp4 has no audio track" in ln and "output will be silent" in ln for ln in warning), proc.stderr
    assert "audio" not in ffprobe_streams(out)


def test_size_help_names_even_numbers_and_range():
    proc = run_main("render", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())  # argparse wraps help lines
    assert "even numbers" in text and "16..7680" in text, proc.stdout


@pytest.mark.parametrize("n, word", [(0, "(0 entries)"), (1, "(1 entry)"), (2, "(2 entries)")])
def test_engines_list_counts_entries_in_words(tmp_path, monkeypatch, n, word):
    engines = tmp_path / "cache" / "engines"
    for i in range(n):
        (engines / f"broken-{i}").mkdir(parents=True)  # unusable entries still count
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    proc = run_main("engines", "list")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("Engine cache:"))
    assert line.endswith(word), line
    models = next(ln for ln in proc.stdout.splitlines() if ln.startswith("Models: "))
    assert "face_recon" in models and "speech2face" in models, models  # where the shipped models are read


@pytest.mark.parametrize("args", [("render", "in.mp4", "-o", "o.mp4", "--size", "0x0"), ("render",),
                                  ("engines", "build", "--precision", "fp99"), ("bogus",)])
def test_option_errors_are_one_line_with_status_2(args):
    """Usage errors follow the README's rule for errors you can fix: one line on stderr."""
    proc = run_main(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "--help` lists the options" in lines[0], proc.stderr


def test_an_unknown_option_points_to_its_sub_command_help():
    proc = run_cli("engines", "list", "--bogus")
    assert proc.returncode == 2
    assert "`avatar-app engines list --help` lists the options" in proc.stderr, proc.stderr
