"""ClipRecorder / AsyncRecorder: fragmented MP4, timestamps, AAC priming, write errors."""
from __future__ import annotations

import inspect
import json
import logging
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import av
import numpy as np
import pytest

from avatar_app.core.errors import InputError, RecordingError
from avatar_app.record import AsyncRecorder, ClipRecorder

W, H, FPS, SR = 320, 240, 25, 16000
ROOT = Path(__file__).resolve().parents[2]


def ffprobe_streams(path: Path) -> dict:
    """{'video'|'audio': (start_time, duration, end_of_last_packet)} via ffprobe."""
    info = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-show_streams", "-show_packets", "-of", "json", str(path)],
        check=True, capture_output=True, text=True).stdout)
    out = {}
    for s in info["streams"]:
        pk = [p for p in info["packets"] if p["stream_index"] == s["index"]]
        end = max(float(p["pts_time"]) + float(p.get("duration_time", 0)) for p in pk)
        out[s["codec_type"]] = (float(s.get("start_time", 0)), float(s.get("duration", 0)), end)
    return out


def top_level_boxes(data: bytes):
    """Yield (type, offset, size) of the top-level ISO-BMFF boxes."""
    pos = 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8:pos + 16])[0]
        if size < 8:
            return
        yield kind.decode("latin-1"), pos, size
        pos += size


def moof_video_times(data: bytes, timescale: int = 90000) -> list[float]:
    """Base media decode time (tfdt) of track 1 (video) in each moof, seconds."""
    times = []
    for kind, off, size in top_level_boxes(data):
        if kind != "moof":
            continue
        box = data[off:off + size]
        i = box.find(b"tfdt")  # first traf is the video track (added first)
        version = box[i + 4]
        val = struct.unpack(">Q" if version else ">I", box[i + 8:i + (16 if version else 12)])[0]
        times.append(val / timescale)
    return times


def synth_clip(path: Path, seconds: float = 3.0, origin: float = 0.0, marker_t: float | None = None,
               audio_first: bool = False, **kw) -> np.ndarray:
    """Write a test clip; returns the audio written. A marker: white frame + tone burst."""
    rng = np.random.default_rng(0)
    n_audio = int(seconds * SR)
    audio = (rng.standard_normal(n_audio) * 0.01).astype(np.float32)
    if marker_t is not None:
        a = int(marker_t * SR)
        audio[a:a + 800] += 0.5 * np.sin(2 * np.pi * 1000 * np.arange(800) / SR).astype(np.float32)
    chunk = SR // FPS
    with ClipRecorder(path, W, H, FPS, audio_sample_rate=SR, **kw) as rec:
        if audio_first:  # the offline pipeline writes the whole track, then the frames
            rec.write_audio(audio, origin)
        for i in range(int(seconds * FPS)):
            img = np.zeros((H, W, 3), np.uint8)
            img[:, (i * 8) % W:(i * 8) % W + 16] = (200, 80, 40)
            if marker_t is not None and i == int(round(marker_t * FPS)):
                img[:] = 255
            rec.write_video(img, origin + i / FPS)
            if not audio_first:
                rec.write_audio(audio[i * chunk:(i + 1) * chunk], origin + i * chunk / SR)
    return audio


def test_h264_aac_durations_and_no_priming_shift(tmp_path):
    path = tmp_path / "clip.mp4"
    synth_clip(path, seconds=3.0, origin=12.5)  # media times start at 12.5 s: file starts at 0
    s = ffprobe_streams(path)
    v_start, v_dur, v_end = s["video"]
    a_start, a_dur, a_end = s["audio"]
    assert v_start == pytest.approx(0.0, abs=1e-3) and v_end == pytest.approx(3.0, abs=1e-3)
    assert a_dur == pytest.approx(3.0, abs=0.05)  # ffprobe's stream duration (incl. edit list)
    assert a_start + a_dur == pytest.approx(3.0, abs=0.005), "audio must end with the input"
    with av.open(str(path)) as c:
        assert c.streams.video[0].codec_context.name == "h264"
        assert c.streams.audio[0].codec_context.name == "aac"
        n = sum(f.samples for f in c.decode(audio=0))
    assert abs(n / 48000 - 3.0) < 0.05, n


@pytest.mark.parametrize("audio_first", [False, True])
def test_audio_and_video_stay_in_sync(tmp_path, audio_first):
    path = tmp_path / "sync.mp4"
    synth_clip(path, seconds=2.0, marker_t=1.2, audio_first=audio_first)
    with av.open(str(path)) as c:
        white = [f.time for f in c.decode(video=0) if f.to_ndarray(format="gray").mean() > 200]
    with av.open(str(path)) as c:
        chunks = [(f.time, f.to_ndarray()[0]) for f in c.decode(audio=0)]
    t = np.concatenate([t0 + np.arange(len(x)) / 48000 for t0, x in chunks])
    x = np.concatenate([x for _, x in chunks])
    onset = t[np.argmax(np.abs(x) > 0.2)]
    assert white == [pytest.approx(1.2, abs=1e-3)]
    assert onset == pytest.approx(1.2, abs=0.005), "AAC priming or resampling shifted the audio"


@pytest.mark.parametrize("fragment_s", [None, 0.5])
def test_fragments_are_short(tmp_path, fragment_s):
    path = tmp_path / "frag.mp4"
    kw = {} if fragment_s is None else {"fragment_s": fragment_s}
    synth_clip(path, seconds=4.0, **kw)
    limit = fragment_s or inspect.signature(ClipRecorder).parameters["fragment_s"].default
    assert limit <= 0.5
    data = path.read_bytes()
    kinds = [k for k, _, _ in top_level_boxes(data)]
    assert kinds[:2] == ["ftyp", "moov"] and "moof" in kinds
    times = moof_video_times(data)
    assert len(times) >= int(4.0 / limit) - 1
    assert np.diff(times).max() <= limit + 1.0 / FPS + 1e-6


def test_cut_short_file_still_plays(tmp_path):
    path = tmp_path / "cut.mp4"
    synth_clip(path, seconds=4.0)
    cut = tmp_path / "cut_half.mp4"
    cut.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.6)])
    s = ffprobe_streams(cut)
    assert s["video"][2] > 1.4 and s["audio"][2] > 1.4


def test_gap_in_audio_is_filled_and_overlap_trimmed(tmp_path):
    path = tmp_path / "gap.mp4"
    with ClipRecorder(path, W, H, FPS, audio_sample_rate=SR) as rec:
        for i in range(50):
            rec.write_video(np.zeros((H, W, 3), np.uint8), i / FPS)
        rec.write_audio(np.full(SR // 2, 0.1, np.float32), 0.0)      # 0.0-0.5
        rec.write_audio(np.full(SR // 2, 0.1, np.float32), 1.0)      # gap 0.5-1.0
        rec.write_audio(np.full(SR // 2, 0.1, np.float32), 1.25)     # overlaps 0.25 s
        written = rec.audio_samples_written
    assert written == int(1.75 * SR)
    assert ffprobe_streams(path)["audio"][2] == pytest.approx(1.75, abs=0.03)


def test_bad_calls_raise(tmp_path):
    with pytest.raises(InputError, match="even"):
        ClipRecorder(tmp_path / "x.mp4", 321, 240, 25)
    with pytest.raises(RecordingError, match="no_such_dir"):
        ClipRecorder(tmp_path / "no_such_dir" / "x.mp4", 320, 240, 25)
    rec = ClipRecorder(tmp_path / "y.mp4", W, H, FPS)
    with pytest.raises(InputError, match="uint8"):
        rec.write_video(np.zeros((H, W, 3), np.float32), 0.0)
    rec.write_video(np.zeros((H, W, 3), np.uint8), 0.0)
    with pytest.raises(InputError, match="increase"):
        rec.write_video(np.zeros((H, W, 3), np.uint8), 0.0)
    with pytest.raises(InputError, match="without an audio track"):
        rec.write_audio(np.zeros(100, np.float32), 0.0)
    rec.close()
    rec.close()  # idempotent
    with pytest.raises(RecordingError, match="closed"):
        rec.write_video(np.zeros((H, W, 3), np.uint8), 1.0)


def test_missing_codec_falls_back_with_warning(tmp_path, caplog):
    path = tmp_path / "fb.mp4"
    with caplog.at_level(logging.WARNING, logger="avatar_app.record.recorder"):
        rec = ClipRecorder(path, W, H, FPS, video_codec="no_such_encoder")
    assert "no_such_encoder" in caplog.text and rec.video_codec in ("libx264", "mpeg4")
    for i in range(10):
        rec.write_video(np.zeros((H, W, 3), np.uint8), i / FPS)
    rec.close()
    assert ffprobe_streams(path)["video"][2] == pytest.approx(0.4, abs=1e-3)


def test_mpeg4_codec_works(tmp_path):
    path = tmp_path / "m4.mp4"
    rec = ClipRecorder(path, W, H, FPS, video_codec="mpeg4")
    for i in range(10):
        rec.write_video(np.full((H, W, 3), i * 20, np.uint8), i / FPS)
    rec.close()
    with av.open(str(path)) as c:
        assert c.streams.video[0].codec_context.name == "mpeg4"
        assert sum(1 for _ in c.decode(video=0)) == 10


def test_dead_microphone_does_not_hold_back_the_file(tmp_path):
    """Audio declared but never written: fragments still reach the disk while recording."""
    path = tmp_path / "nomic.mp4"
    rec = ClipRecorder(path, W, H, FPS, audio_sample_rate=SR)
    for i in range(3 * FPS):
        rec.write_video(np.full((H, W, 3), i, np.uint8), i / FPS)
    on_disk = path.read_bytes()  # before close: what a crash would leave
    rec.close()
    assert "moof" in [k for k, _, _ in top_level_boxes(on_disk)]
    snapshot = tmp_path / "snapshot.mp4"
    snapshot.write_bytes(on_disk)
    s = ffprobe_streams(snapshot)
    assert s["video"][2] > 1.0 and s["audio"][2] > 0.5
    s = ffprobe_streams(path)
    assert s["video"][2] == pytest.approx(3.0, abs=1e-3)
    assert s["audio"][2] == pytest.approx(3.0 - 1 / FPS - rec.max_audio_lag_s, abs=0.03)


def test_disk_full_raises_recording_error():
    rec = ClipRecorder("/dev/full", W, H, FPS, audio_sample_rate=SR)  # every write: ENOSPC
    rng = np.random.default_rng(0)
    with pytest.raises(RecordingError, match="disk is full"):
        for i in range(200):
            rec.write_video(rng.integers(0, 255, (H, W, 3), dtype=np.uint8), i / FPS)
    with pytest.raises(RecordingError, match="disk is full"):
        rec.write_video(np.zeros((H, W, 3), np.uint8), 100.0)  # stays failed
    with pytest.raises(RecordingError):
        rec.close()


def test_file_size_limit_keeps_a_playable_part(tmp_path):
    """EFBIG under RLIMIT_FSIZE (in a child, so the limit does not touch pytest)."""
    path = tmp_path / "limited.mp4"
    script = textwrap.dedent(f"""
        import resource, numpy as np
        from avatar_app.record import ClipRecorder
        from avatar_app.core.errors import RecordingError
        resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, resource.RLIM_INFINITY))
        rng = np.random.default_rng(0)
        rec = ClipRecorder({str(path)!r}, {W}, {H}, {FPS}, audio_sample_rate={SR})
        try:
            for i in range(1000):
                rec.write_video(rng.integers(0, 255, ({H}, {W}, 3), dtype=np.uint8), i / {FPS})
                rec.write_audio(np.zeros({SR // FPS}, np.float32), i / {FPS})
        except RecordingError as e:
            print("RecordingError:", e)
        try:
            rec.close()
        except RecordingError:
            pass
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert "RecordingError:" in out.stdout and "size" in out.stdout, out.stdout + out.stderr
    assert path.stat().st_size <= 400_000
    s = ffprobe_streams(path)
    assert s["video"][2] > 0.3 and s["audio"][2] > 0.3
    frames = subprocess.run(
        ["ffprobe", "-v", "quiet", "-select_streams", "v", "-count_frames", "-show_entries",
         "stream=nb_read_frames", "-of", "csv=p=0", str(path)],
        capture_output=True, text=True).stdout
    assert int(frames.strip()) >= 8


def test_async_recorder_writes_everything_when_not_overloaded(tmp_path):
    path = tmp_path / "async.mp4"
    rec = AsyncRecorder(ClipRecorder(path, W, H, FPS, audio_sample_rate=SR), max_video_frames=200,
                        max_audio_s=100)  # fed faster than real time: no backlog limit
    buf = np.zeros((H, W, 3), np.uint8)
    for i in range(50):
        buf[:] = i * 5  # the caller reuses its buffer: the queue must hold copies
        assert rec.write_video(buf, i / FPS)
        assert rec.write_audio(np.zeros(SR // FPS, np.float32), i / FPS)
    assert not rec.write_video(buf, 10 / FPS)  # time went back: dropped
    assert not rec.write_video(buf, 49 / FPS + 1e-6)  # too close to the last frame: dropped
    with pytest.raises(InputError, match="uint8"):
        rec.write_video(np.zeros((H, W, 3), np.float32), 3.0)
    rec.close()
    assert rec.dropped_frames == 2 and rec.dropped_audio_chunks == 0
    with av.open(str(path)) as c:
        means = [f.to_ndarray(format="gray").mean() for f in c.decode(video=0)]
    assert len(means) == 50
    assert np.corrcoef(means, np.arange(50) * 5)[0, 1] > 0.99


def test_async_recorder_drops_frames_instead_of_blocking(tmp_path):
    rec = AsyncRecorder(ClipRecorder(tmp_path / "drop.mp4", 1280, 720, 30), max_video_frames=2)
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (720, 1280, 3), dtype=np.uint8)  # slow to encode
    results = [rec.write_video(img, i / 30) for i in range(40)]  # as fast as possible
    rec.close()
    assert rec.dropped_frames == results.count(False) > 0
    assert rec.recorder.frames_written == results.count(True)


def test_async_recorder_reports_writer_errors():
    rec = AsyncRecorder(ClipRecorder("/dev/full", W, H, FPS))
    rng = np.random.default_rng(0)
    with pytest.raises(RecordingError, match="disk is full"):
        for i in range(2000):
            rec.write_video(rng.integers(0, 255, (H, W, 3), dtype=np.uint8), i / FPS)
    assert rec.error is not None
    with pytest.raises(RecordingError, match="disk is full"):
        rec.close()
