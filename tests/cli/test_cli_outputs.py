"""What a render leaves at its output paths: failures keep old files, the audio ends with the video.

Outputs are written to hidden part files and renamed over the targets only when
the clip is kept (avatar_app.record.parts); a failed render (no face, full disk)
leaves existing files byte for byte as they were and no part file behind.
"""
from __future__ import annotations

import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import decoded_duration, run_cli, run_main

OLD_CLIP, OLD_TRACK = b"an earlier clip\n" * 100, b"an earlier track\n" * 50


def _old_outputs(folder: Path) -> tuple[Path, Path]:
    """An existing clip and sidecar (stand-ins with known bytes) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    clip, track = folder / "keep.mp4", folder / "keep.blendshapes.jsonl"
    clip.write_bytes(OLD_CLIP)
    track.write_bytes(OLD_TRACK)
    return clip, track


def _assert_untouched(clip: Path, track: Path) -> None:
    assert clip.read_bytes() == OLD_CLIP
    assert track.read_bytes() == OLD_TRACK
    leftovers = sorted(p.name for p in clip.parent.iterdir() if p.name.startswith("."))
    assert leftovers == [], leftovers


def _noface(tmp_path: Path) -> Path:
    path = tmp_path / "noface.mp4"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25:duration=1",
         "-f", "lavfi", "-i", "sine=duration=1", "-shortest", "-c:v", "libx264", "-c:a", "aac", str(path)],
        check=True)
    return path


def _tone(path: Path, seconds: float) -> Path:
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", f"sine=frequency=220:duration={seconds}",
                    str(path)], check=True)
    return path


@pytest.mark.gl
def test_render_without_a_face_leaves_existing_outputs(tmp_path):
    clip, track = _old_outputs(tmp_path / "o")
    proc = run_cli("render", str(_noface(tmp_path)), "-o", str(clip), "--size", "160x120", "-q")
    assert proc.returncode == 3, proc.stderr
    assert "no face" in proc.stderr.lower()
    _assert_untouched(clip, track)


def _limit_file_size(limit: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


@pytest.mark.gl
def test_full_disk_prints_one_line_and_leaves_existing_outputs(testdata, tmp_path):
    """A write that fails (file size limit: EFBIG, reported like a full disk) ends in one line, exit 4."""
    clip, track = _old_outputs(tmp_path / "o")
    proc = subprocess.run(
        [sys.executable, "-m", "avatar_app", "render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"),
         "-o", str(clip), "--size", "640x360", "-q"],
        capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size(30_000))
    assert proc.returncode == 4, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr  # no ERROR log lines, no traceback
    assert lines[0].startswith(f"error: writing {clip} failed: the file is larger than the system allows"), lines
    assert "left as it was" in lines[0] and ".part-" not in lines[0], lines
    _assert_untouched(clip, track)


@pytest.mark.gl
def test_stop_before_the_first_frame_leaves_existing_outputs(testdata, tmp_path):
    from avatar_app.pipeline import RenderOptions, render_file

    clip, track = _old_outputs(tmp_path / "o")
    stop = threading.Event()
    stop.set()
    rep = render_file(testdata / "video" / "grid_s1_bbaf2n.mp4", clip, RenderOptions(size=(160, 120)), stop=stop)
    assert rep.interrupted and rep.frames_out == 0
    _assert_untouched(clip, track)


@pytest.mark.gl
def test_a_complete_render_replaces_existing_outputs(testdata, tmp_path):
    from avatar_app.pipeline import RenderOptions, render_file
    from avatar_app.record.sidecar import read_sidecar

    clip, track = _old_outputs(tmp_path / "o")
    rep = render_file(testdata / "video" / "grid_s1_bbaf2n.mp4", clip, RenderOptions(size=(160, 120)))
    assert rep.output_path == clip and rep.frames_out == 75
    assert abs(decoded_duration(clip, "video") - 3.0) < 1e-3
    assert len(read_sidecar(track)) == 75
    assert sorted(p.name for p in clip.parent.iterdir()) == ["keep.blendshapes.jsonl", "keep.mp4"]


@pytest.mark.gl
def test_longer_audio_is_cut_to_the_video(testdata, tmp_path):
    from avatar_app.pipeline import RenderOptions, render_file

    voice = _tone(tmp_path / "long.wav", 11)
    out = tmp_path / "cut.mp4"
    rep = render_file(testdata / "video" / "grid_s1_bbaf2n.mp4", out, RenderOptions(size=(160, 120), audio_path=voice))
    v, a = decoded_duration(out, "video"), decoded_duration(out, "audio")
    assert abs(v - 3.0) < 1e-3 and abs(a - v) <= 0.05, (v, a)
    assert abs(rep.audio_duration_s - rep.duration_s) <= 0.01, (rep.duration_s, rep.audio_duration_s)
    assert "audio (11.0 s) is longer than the video (3.0 s): cut to the video" in rep.warnings, rep.warnings


@pytest.mark.gl
def test_shorter_audio_is_padded_to_the_video_and_reported(testdata, tmp_path):
    from avatar_app.pipeline import RenderOptions, render_file

    two = tmp_path / "two.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-t", "2",
                    "-an", "-c:v", "libx264", str(two)], check=True)
    voice = _tone(tmp_path / "short.wav", 1.36)
    out = tmp_path / "padded.mp4"
    rep = render_file(two, out, RenderOptions(size=(160, 120), audio_path=voice))
    v, a = decoded_duration(out, "video"), decoded_duration(out, "audio")
    assert abs(v - 2.0) < 1e-3 and abs(a - v) <= 0.05, (v, a)
    # the summary reports the audio in the clip (voice + silence), not the voice alone
    assert abs(rep.audio_duration_s - 2.0) <= 0.01, rep.audio_duration_s
    assert any(w.startswith("audio (1.4 s) is shorter than the video (2.0 s)") for w in rep.warnings), rep.warnings


@pytest.mark.gl
def test_demo_audio_ends_with_the_video(tmp_path):
    from avatar_app.pipeline import RenderOptions, render_demo

    out = tmp_path / "demo.mp4"
    rep = render_demo(out, RenderOptions(size=(96, 64)))
    v, a = decoded_duration(out, "video"), decoded_duration(out, "audio")
    assert v > 5.0 and abs(a - v) <= 0.05, (v, a)
    assert abs(rep.audio_duration_s - rep.duration_s) <= 0.01, (rep.duration_s, rep.audio_duration_s)


def test_size_with_a_leading_minus_gets_the_range_message(testdata, tmp_path):
    for value in ("-2x4", "-1280x720"):
        proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(tmp_path / "o.mp4"),
                        "--size", value)
        assert proc.returncode == 2
        assert f"size {value} out of range" in proc.stderr, proc.stderr
        assert "expected one argument" not in proc.stderr
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(tmp_path / "o.mp4"),
                    "--fps", "-.5")
    assert proc.returncode == 2 and "out of range 1..240" in proc.stderr, proc.stderr


def test_corrupt_file_message_is_a_plain_sentence(tmp_path):
    bad = tmp_path / "notes.mp4"
    bad.write_text("this is not a video\n" * 50)
    proc = run_main("render", str(bad), "-o", str(tmp_path / "o.mp4"))
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert line.startswith(f"error: '{bad}' is not a readable video (corrupt"), line
    assert "[Errno" not in line and "Invalid data found when processing input" in line, line
