"""A recording killed with SIGKILL keeps all but its last fragment (fragmented MP4)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

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
        if i == 0:
            print("recording", flush=True)
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
            time.sleep(3.0)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == -signal.SIGKILL
    ends = packet_end_times(path)
    assert ends["video"] >= 2.5, ends
    assert ends["audio"] >= 2.5, ends
    frames = subprocess.run(
        ["ffprobe", "-v", "quiet", "-select_streams", "v", "-count_frames", "-show_entries",
         "stream=nb_read_frames", "-of", "csv=p=0", str(path)], capture_output=True, text=True)
    assert int(frames.stdout.strip()) >= int(2.5 * 25)
