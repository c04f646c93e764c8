"""A recording killed with SIGKILL keeps all but its last fragment (fragmented MP4).

A CLI render writes to a hidden part file beside its output (renamed over it when
the clip is kept): killed outright, it leaves that part file, which plays, and the
output it was to replace as it was.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import run_main

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from avatar_app.record import ClipRecorder
    W, H, FPS, SR = 640, 360, 25, 16000
    rec = ClipRecorder(sys.argv[1], W, H, FPS, audio_sample_rate=SR)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for i in range(30 * FPS):  # real time: one frame and 40 ms of audio every 40 ms
        img = np.zeros((H, W, 3), np.uint8)
        img[:, (i * 7) % W:(i * 7) % W + 30] = 255
        rec.write_video(img, i / FPS)
        rec.write_audio((0.1 * rng.standard_normal(SR // FPS)).astype(np.float32), i / FPS)
        print("recording" if i == 0 else i + 1, flush=True)  # frames written so far
        time.sleep(max(0.0, t0 + (i + 1) / FPS - time.perf_counter()))
""")


def packet_end_times(path: Path) -> dict[str, float]:
    info = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-show_streams", "-show_packets", "-of", "json", str(path)],
        capture_output=True, text=True).stdout)
    ends = {}
    for s in info["streams"]:
        pk = [p for p in info["packets"] if p["stream_index"] == s["index"]]
        ends[s["codec_type"]] = max(float(p["pts_time"]) + float(p.get("duration_time", 0))
                                    for p in pk)
    return ends


def test_sigkilled_recording_plays(tmp_path):
    path = tmp_path / "killed.mp4"
    with (tmp_path / "child.err").open("w+") as err, subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
        text=True,
    ) as proc:
        try:
            line = proc.stdout.readline()  # imports and encoder set-up are not recording time
            err.seek(0)
            assert line.strip() == "recording", err.read()
            # killed once 3 s of media are written (counted, not timed: under load the child lags)
            while (line := proc.stdout.readline().strip()) and int(line) < 3 * 25:
                pass
            assert line, "the recording child ended early"
        finally:
            _sigkill(proc)
    assert proc.returncode == -signal.SIGKILL
    ends = packet_end_times(path)
    assert ends["video"] >= 2.5, ends
    assert ends["audio"] >= 2.5, ends
    frames = subprocess.run(
        ["ffprobe", "-v", "quiet", "-select_streams", "v", "-count_frames", "-show_entries",
         "stream=nb_read_frames", "-of", "csv=p=0", str(path)], capture_output=True, text=True)
    assert int(frames.stdout.strip()) >= int(2.5 * 25)


def _sigkill(proc: subprocess.Popen) -> None:
    """Kill ``proc`` outright (SIGKILL, no clean-up in the child) and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


GRID = ["grid_s1_bbaf2n.mp4", "grid_s2_swwp2s.mp4", "grid_lbax4n.mp4"]


@pytest.mark.gl
def test_sigkilled_cli_render_leaves_a_playable_part_and_the_old_output(testdata, tmp_path):
    """``avatar-app render`` killed outright: the old output is untouched, the part file plays,
    and the next render to the same output removes the part and succeeds."""
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"file '{testdata / 'video' / n}'\n" for n in GRID))
    long_input = tmp_path / "long.mp4"  # 9 s, so the render is still running when it is killed
    subprocess.run(["ffmpeg", "-v", "error", "-f", "concat", "-safe", "0", "-i", str(listing), "-c", "copy",
                    str(long_input)], check=True)
    out = tmp_path / "o" / "keep.mp4"
    out.parent.mkdir()
    out.write_bytes(b"the earlier clip")
    cmd = [sys.executable, "-m", "avatar_app", "render", str(long_input), "-o", str(out), "--size", "160x120", "-q"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait (bounded, not a timing assertion) until 2 s of frames are in the part track (at 1.2 s, under load,
        # the audio muxed into the part file was seen at 0.49 s)
        for _ in range(1200):
            tracks = list(out.parent.glob(".keep.part-*.blendshapes.jsonl"))
            if proc.poll() is not None or (tracks and tracks[0].read_text().count("\n") > 50):
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"render ended before the kill: {proc.communicate()}"
    finally:
        _sigkill(proc)
    assert out.read_bytes() == b"the earlier clip"
    part = [p for p in out.parent.glob(".keep.part-*.mp4")]
    assert len(part) == 1, list(out.parent.iterdir())
    ends = packet_end_times(part[0])
    assert ends["video"] >= 0.5 and ends["audio"] >= 0.5, ends
    # the next render, in this process (the kill above is the subprocess this test needs)
    done = run_main(*cmd[3:4], str(testdata / "video" / "grid_s1_bbaf2n.mp4"), *cmd[5:])
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["keep.blendshapes.jsonl", "keep.mp4"]
    assert packet_end_times(out)["video"] == pytest.approx(3.0, abs=1e-3)
