"""An interrupted render keeps a clip whose audio is as long as its video.

In-process: ``render_file`` / ``render_demo`` with a ``stop`` event set after N
frames (deterministic). Through the CLI: SIGINT / SIGTERM to a real render of a
long input (the GRID clips joined), exit 130 / 143 and a message that says what
was kept.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import decoded_duration, ffprobe_streams

pytestmark = pytest.mark.gl

GRID = ["grid_s1_bbaf2n.mp4", "grid_s2_swwp2s.mp4", "grid_lbax4n.mp4"]


def _stop_after(n: int):
    """A stop event and a progress callback that sets it once ``n`` frames are done."""
    stop = threading.Event()

    def progress(done: int, _total: int) -> None:
        if done >= n:
            stop.set()

    return stop, progress


def _sidecar_lines(path: Path) -> list[str]:
    text = path.read_text()
    assert text.endswith("\n"), "the sidecar must end on a complete line"
    return text.splitlines()


def test_render_file_stop_cuts_audio_to_video(testdata, tmp_path):
    from avatar_app.pipeline import RenderOptions, render_file
    from avatar_app.record.sidecar import read_sidecar

    src = testdata / "video" / "grid_s1_bbaf2n.mp4"
    out = tmp_path / "stopped.mp4"
    stop, progress = _stop_after(20)
    rep = render_file(src, out, RenderOptions(size=(160, 120)), progress=progress, stop=stop)
    assert rep.interrupted and rep.input_problem is None
    assert rep.frames_in == rep.frames_out == 20
    v, a = decoded_duration(out, "video"), decoded_duration(out, "audio")
    assert abs(v - 20 / 25) < 1e-3, v
    assert abs(a - v) <= 0.05, (v, a)  # the input's audio is 3 s long
    assert abs(rep.audio_duration_s - rep.duration_s) <= 0.05, (rep.duration_s, rep.audio_duration_s)
    assert len(_sidecar_lines(out.with_suffix(".blendshapes.jsonl"))) == 21  # header + 20 frames
    assert len(read_sidecar(out.with_suffix(".blendshapes.jsonl"))) == 20


def test_stopped_render_does_not_replace_a_finished_clip(testdata, tmp_path):
    """A render stopped over an existing output writes NAME.partial.mp4 and keeps NAME.mp4."""
    from avatar_app.pipeline import RenderOptions, render_file

    src = testdata / "video" / "grid_s1_bbaf2n.mp4"
    out = tmp_path / "clip.mp4"
    out.write_bytes(b"a finished clip")  # (any will do: only their existence is looked at)
    out.with_suffix(".blendshapes.jsonl").write_text("{}\n")
    before = out.read_bytes(), out.with_suffix(".blendshapes.jsonl").read_bytes()
    stop, progress = _stop_after(10)
    rep = render_file(src, out, RenderOptions(size=(160, 120)), progress=progress, stop=stop)
    assert rep.interrupted and rep.frames_out == 10
    assert (out.read_bytes(), out.with_suffix(".blendshapes.jsonl").read_bytes()) == before
    partial = tmp_path / "clip.partial.mp4"
    assert rep.output_path == partial and abs(decoded_duration(partial, "video") - 10 / 25) < 1e-3
    assert len(_sidecar_lines(tmp_path / "clip.partial.blendshapes.jsonl")) == 11
    assert any("already existed and was kept" in w for w in rep.warnings)
    # a second stop keeps the first partial clip too
    first = partial.read_bytes()
    stop, progress = _stop_after(5)
    rep = render_file(src, out, RenderOptions(size=(160, 120)), progress=progress, stop=stop)
    assert partial.read_bytes() == first and out.read_bytes() == before[0]
    assert rep.output_path == tmp_path / "clip.partial-2.mp4" and rep.output_path.is_file()
    assert len(_sidecar_lines(tmp_path / "clip.partial-2.blendshapes.jsonl")) == 6


def test_stopped_demo_does_not_replace_a_finished_demo(tmp_path):
    from avatar_app.pipeline import RenderOptions, render_demo

    out = tmp_path / "demo.mp4"
    out.write_bytes(b"a finished demo")  # (only its existence is looked at: writer._beside_existing)
    before = out.read_bytes()
    stop, progress = _stop_after(8)
    rep = render_demo(out, RenderOptions(size=(160, 120)), progress=progress, stop=stop)
    assert rep.interrupted and out.read_bytes() == before
    assert rep.output_path == tmp_path / "demo.partial.mp4" and rep.output_path.is_file()


def test_render_file_complete_keeps_all_audio(testdata, tmp_path):
    """Without a stop the whole voice is written (it is as long as the video), fed frame by frame."""
    from avatar_app.pipeline import RenderOptions, render_file

    src = testdata / "video" / "grid_s1_bbaf2n.mp4"
    out = tmp_path / "whole.mp4"
    rep = render_file(src, out, RenderOptions(size=(160, 120), fps=30.0))
    assert not rep.interrupted
    assert abs(decoded_duration(out, "audio") - decoded_duration(src, "audio")) <= 0.05
    assert abs(decoded_duration(out, "video") - 3.0) <= 1 / 30 + 1e-3


def test_render_file_stop_before_first_frame_writes_nothing(testdata, tmp_path):
    from avatar_app.pipeline import RenderOptions, render_file

    out = tmp_path / "none.mp4"
    stop = threading.Event()
    stop.set()
    rep = render_file(testdata / "video" / "grid_s1_bbaf2n.mp4", out, RenderOptions(size=(160, 120)), stop=stop)
    assert rep.interrupted and rep.frames_out == 0
    assert not out.exists() and not out.with_suffix(".blendshapes.jsonl").exists()


def test_render_demo_stop_cuts_audio_to_video(tmp_path):
    from avatar_app.pipeline import RenderOptions, render_demo

    out = tmp_path / "demo.mp4"
    stop, progress = _stop_after(15)
    rep = render_demo(out, RenderOptions(size=(160, 120)), progress=progress, stop=stop)
    assert rep.interrupted and rep.frames_out == 15
    v, a = decoded_duration(out, "video"), decoded_duration(out, "audio")
    assert abs(v - 0.5) < 1e-3 and abs(a - v) <= 0.05, (v, a)


@pytest.fixture(scope="module")
def long_input(testdata, tmp_path_factory) -> Path:
    """The GRID clips joined twice over (18 s, 25 fps, with audio), in a temporary folder."""
    folder = tmp_path_factory.mktemp("long")
    listing = folder / "list.txt"
    listing.write_text("".join(f"file '{testdata / 'video' / n}'\n" for n in GRID * 2))
    out = folder / "long.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "concat", "-safe", "0", "-i", str(listing), "-c", "copy", str(out)],
                   check=True)
    return out


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_cli_signal_keeps_what_was_rendered(long_input, tmp_path, sig, status):
    from avatar_app.record.sidecar import read_sidecar

    out = tmp_path / "int.mp4"
    sidecar = out.with_suffix(".blendshapes.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "avatar_app", "render", str(long_input), "-o", str(out),
                             "--size", "320x180", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait until about a second of video went through (a bounded wait, not a timing assertion)
        for _ in range(1200):
            # the render writes hidden part files, renamed over the outputs when it ends
            parts = list(tmp_path.glob(".int.part-*.blendshapes.jsonl"))
            if proc.poll() is not None or (parts and parts[0].read_text().count("\n") > 25):
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"render ended before the signal: {proc.communicate()}"
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr, stderr
    m = re.search(r"interrupted: kept (\d+\.\d) s of video and audio in (\S+)", stderr)
    assert m, stderr
    assert Path(m.group(2)) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int.blendshapes.jsonl", "int.mp4"]  # no part left
    v, a = decoded_duration(out, "video"), decoded_duration(out, "audio")
    assert v < 17.0, v  # really cut short
    assert abs(v - float(m.group(1))) <= 0.06, (v, stderr)
    assert abs(a - v) <= 0.05, (v, a)
    fmt = ffprobe_streams(out)
    assert set(fmt) >= {"video", "audio"}
    # the sidecar ends on a complete line, one line per frame in the clip
    lines = _sidecar_lines(sidecar)
    n = len(read_sidecar(sidecar))
    assert len(lines) == n + 1
    assert abs(n / 25 - v) < 1e-3


def test_stop_before_the_first_frame_says_an_existing_clip_was_kept(tmp_path, capsys):
    from types import SimpleNamespace

    from avatar_app.cli import _print_interrupted

    out = tmp_path / "clip.mp4"
    rep = SimpleNamespace(warnings=[], frames_out=0, output_path=out)
    _print_interrupted(rep)
    assert "clip.mp4 was not written" in capsys.readouterr().err
    out.write_bytes(b"finished clip")
    _print_interrupted(rep)
    err = capsys.readouterr().err
    assert "nothing was written" in err and "was kept as it was" in err, err
