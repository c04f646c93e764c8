"""LiveFileSource: real-time playback of a file as camera + microphone."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from avatar_app.capture.live_file import LiveFileSource
from avatar_app.capture.ring import AudioRing
from avatar_app.capture.video_file import VideoFileSource
from avatar_app.core.errors import CaptureError, InputError

NS = 1_000_000_000


@pytest.fixture(scope="module")
def short_clip(tmp_path_factory) -> Path:
    """0.4 s, 25 fps, 96x64 video with 0.3 s of a 16 kHz 440 Hz tone."""
    out = tmp_path_factory.mktemp("live") / "short.mp4"
    subprocess.run(["ffmpeg", "-v", "error",
                    "-f", "lavfi", "-i", "testsrc=size=96x64:rate=25:d=0.4",
                    "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:d=0.3",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", str(out)],
                   check=True, timeout=120)
    return out


def collect(src: LiveFileSource, limit: int = 1000) -> list:
    frames = []
    while len(frames) < limit:
        f = src.get_latest(timeout_s=5.0)
        if f is None:
            break
        frames.append(f)
    return frames


def test_plays_whole_file_in_real_time(testdata: Path):
    path = testdata / "video" / "grid_s1_bbaf2n.mp4"
    with VideoFileSource(path) as ref:
        ref_audio = ref.read_audio(16000).samples
    with LiveFileSource(path) as src:
        assert src.granted == (360, 288, 25.0)
        frames = collect(src)
        for t in src._threads:
            t.join(10)
        assert src.finished and src.error is None
    t0 = src.t0_ns
    assert len(frames) + src.dropped == 75
    assert [f.index for f in frames] == sorted({f.index for f in frames})
    for f in frames:
        # never delivered before its media time; stamp = delivery time
        assert f.t_capture_ns - t0 >= int(f.media_time_s * NS)
        assert f.capture_stamps()["capture"] == (f.t_capture_ns, f.t_capture_ns)
        assert f.image.shape == (288, 360, 3)
    # generous sanity: the frame sequence took about as long as the file
    assert 2.5 < (frames[-1].t_capture_ns - t0) / NS < 10
    ring = src.ring
    # the length comes from the header (info.audio_duration_s): within a sample
    assert abs(ring.total_written - ref_audio.shape[0]) <= 1
    assert ring.gap_samples == 0
    # audio timestamps are on the frames' time line: media time m <-> t0 + m
    got = ring.read_window(t0 + 2 * NS, 1.0)
    assert np.array_equal(got, ref_audio[16000:32000])
    assert ring.latest_t_ns == t0 + ring.total_written * NS // 16000


def test_loop_continues_index_and_media_time(short_clip: Path):
    ring = AudioRing(capacity_s=5.0, sample_rate=16000)
    src = LiveFileSource(short_clip, loop=True, ring=ring)
    assert src.info.frame_count == 10
    src.start()
    frames = collect(src, limit=25)
    src.stop()
    assert not src.running and not src.finished and src.error is None
    idx = [f.index for f in frames]
    assert idx == sorted(idx) and idx[-1] >= 20
    times = [f.media_time_s for f in frames]
    assert times == sorted(times) and times[-1] >= 0.8  # past two loops of 0.4 s
    # the 0.1 s without audio at the end of each loop was filled with silence
    assert ring.gap_samples > 0
    assert ring.total_written >= 2 * int(0.3 * 16000) - 160


def test_stop_early_ends_threads(testdata: Path):
    src = LiveFileSource(testdata / "video" / "openmpf_video_01.mp4").start()
    assert src.get_latest(timeout_s=5.0) is not None
    src.stop()
    assert not src.running and not src.finished
    with pytest.raises(CaptureError, match="was stopped"):
        src.start()


def test_negative_audio_start_is_kept(testdata: Path):
    """openmpf's audio starts 33 ms before its first frame."""
    src = LiveFileSource(testdata / "video" / "openmpf_video_01.mp4")
    assert src.info.audio_start_s == pytest.approx(-1001 / 30000)
    src.start()
    src.get_latest(timeout_s=5.0)
    for _ in range(500):
        if src.ring.total_written >= 1600:
            break
        src._stop.wait(0.01)
    src.stop()
    first_t = src.ring.latest_t_ns - src.ring.total_written * NS // 16000
    assert first_t - src.t0_ns == pytest.approx(-1001 / 30000 * NS, abs=1e5)


def test_errors(tmp_path: Path):
    with pytest.raises(InputError, match="Video file not found"):
        LiveFileSource(tmp_path / "missing.mp4")
    bad = tmp_path / "bad.mp4"
    bad.write_text("not a video")
    with pytest.raises(InputError, match="not a readable video"):
        LiveFileSource(bad)
