"""SyncedRecorder: audio clock as master, constant frame rate, no drift over long clips.

The synthetic source is a camera and a sound card on one process clock: the
camera delivers 30.03 fps (timestamps jittered by 0.5 ms), the sound card
runs at 16 kHz x (1 + ppm) while claiming 16 kHz (chunk timestamps jittered by
2 ms). Once per second a clapper event happens at the capture instant of one
video frame: that frame and the next two are white, and a 1 kHz beep starts on
the first audio sample at or after the same instant. In the output the flash
onset and the beep onset must coincide within one output frame.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import av
import numpy as np
import pytest

from avatar_app.core.errors import InputError, RecordingError
from avatar_app.record import AsyncRecorder, ClipRecorder
from avatar_app.record.synced import AudioClock, SyncedRecorder

W, H, FPS, SR = 160, 120, 30, 16000
CHUNK = 320  # 20 ms at the nominal rate
ROOT = Path(__file__).resolve().parents[2]


def run_source(sink_video, sink_audio, seconds: float, video_fps: float = 30.03,
               audio_ppm: float = 100.0, seed: int = 0, size: tuple[int, int] = (W, H),
               noise: float = 0.002) -> list[float]:
    """Feed the synthetic source in arrival order; returns the true event times (s).

    ``size``: (width, height) of the frames in pixels (flat dark or white pictures: the flash
    onsets read the same at any size). ``noise``: RMS of the sound card's noise floor between the
    beeps, full scale (0: digital silence; the same random draws either way, so the jitters are
    the same)."""
    rng = np.random.default_rng(seed)
    t_v0, t_a0 = 0.005, 0.0137
    n_frames = int((seconds - t_v0) * video_fps)
    t_frames = t_v0 + np.arange(n_frames) / video_fps
    white = np.zeros(n_frames, bool)
    events = []
    for k in range(1, int(seconds)):
        i = int(round((k - t_v0) * video_fps))
        if i + 2 < n_frames:
            white[i:i + 3] = True
            events.append(t_frames[i])
    true_rate = SR * (1 + audio_ppm * 1e-6)
    n_samples = int((seconds - t_a0) * true_rate) // CHUNK * CHUNK
    audio = (noise * rng.standard_normal(n_samples)).astype(np.float32)
    beep = (0.5 * np.sin(2 * np.pi * 1000 * np.arange(int(0.05 * SR)) / SR)).astype(np.float32)
    for te in events:
        j = int(np.ceil((te - t_a0) * true_rate))
        audio[j:j + len(beep)] += beep[: max(0, min(len(beep), n_samples - j))]
    dark = np.full((size[1], size[0], 3), 16, np.uint8)
    bright = np.full((size[1], size[0], 3), 255, np.uint8)
    v_jit = np.clip(rng.normal(0, 0.0005, n_frames), -0.002, 0.002)
    n_chunks = n_samples // CHUNK
    t_chunks = t_a0 + np.arange(n_chunks) * CHUNK / true_rate
    a_jit = np.clip(rng.normal(0, 0.002, n_chunks), -0.008, 0.008)
    arrivals = [(t + 0.02, 0, i) for i, t in enumerate(t_frames)]
    arrivals += [(t + CHUNK / true_rate + 0.005, 1, j) for j, t in enumerate(t_chunks)]
    for _, kind, i in sorted(arrivals):
        if kind == 0:
            sink_video(bright if white[i] else dark, float(t_frames[i] + v_jit[i]))
        else:
            sink_audio(audio[i * CHUNK:(i + 1) * CHUNK], float(t_chunks[i] + a_jit[i]))
    return events


def _luma(frame) -> float:
    """Mean of a decoded frame's Y plane (0..255), read in place: no colour conversion per frame
    (``to_ndarray(format="gray")`` costs more than decoding a 160x120 frame). Dark frames (16)
    read about 30, white ones (255) about 235, either side of the 128 threshold of :func:`onsets`."""
    plane = frame.planes[0]
    rows = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
    return float(rows[:, :plane.width].mean())


def onsets(path: Path) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """(flash onset times, beep onset times, all video frame times) in the file, s."""
    with av.open(str(path)) as c:
        vt, lum = [], []
        for f in c.decode(video=0):
            assert f.format.name == "yuv420p", f.format.name  # _luma reads the Y plane
            vt.append(float(f.time))
            lum.append(_luma(f))
    lum = np.array(lum)
    bright = lum > 128
    flash = np.array(vt)[1:][bright[1:] & ~bright[:-1]]
    with av.open(str(path)) as c:
        chunks = [(float(f.time), f.to_ndarray()[0]) for f in c.decode(audio=0)]
    t0 = chunks[0][0]
    x = np.concatenate([a for _, a in chunks])
    assert all(abs(t - (t0 + sum(len(a) for _, a in chunks[:i]) / 48000)) < 1e-3
               for i, (t, _) in enumerate(chunks[:50]))  # contiguous decode
    loud = np.nonzero(np.abs(x) > 0.25)[0]
    starts = loud[np.r_[True, np.diff(loud) > 0.3 * 48000]]
    return flash, t0 + starts / 48000, vt


def offsets(path: Path | tuple[np.ndarray, np.ndarray, list[float]]) -> np.ndarray:
    """Flash onset minus the nearest beep onset, for every event, seconds (``path``: a file, or
    its :func:`onsets` when the caller needs those too: the file is decoded once)."""
    flash, beeps, _ = onsets(path) if isinstance(path, Path) else path
    assert len(flash) > 0 and len(beeps) > 0
    idx = np.clip(np.searchsorted(beeps, flash), 1, len(beeps) - 1)
    nearest = np.where(np.abs(beeps[idx] - flash) < np.abs(beeps[idx - 1] - flash),
                       beeps[idx], beeps[idx - 1])
    return flash - nearest


def record_synced(path: Path, seconds: float, size: tuple[int, int] = (W, H),
                  **source_kw) -> tuple[SyncedRecorder, list[float]]:
    """:func:`run_source` through ``SyncedRecorder(ClipRecorder(path))`` at ``size`` (width, height) px."""
    rec = SyncedRecorder(ClipRecorder(path, *size, FPS, audio_sample_rate=SR, preset="ultrafast"))
    events = run_source(rec.write_video, rec.write_audio, seconds, size=size, **source_kw)
    rec.close()
    return rec, events


def record_naive(path: Path, seconds: float, **source_kw) -> None:
    """Video by its timestamps, audio samples back to back at the nominal rate (drifts)."""
    rec = ClipRecorder(path, W, H, FPS, audio_sample_rate=SR, preset="ultrafast", time_origin_s=0.0)
    n = [0]

    def audio(x, t):
        rec.write_audio(x, n[0] / SR)
        n[0] += len(x)

    run_source(rec.write_video, audio, seconds, **source_kw)
    rec.close()


def test_drift_is_removed_and_naive_placement_drifts(tmp_path):
    """+2000 ppm over 40 s: 80 ms of drift for naive placement, < 1 frame when synced."""
    kw = {"video_fps": 30.03, "audio_ppm": 2000.0}
    synced, naive = tmp_path / "synced.mp4", tmp_path / "naive.mp4"
    rec, events = record_synced(synced, 40.0, **kw)
    record_naive(naive, 40.0, **kw)
    on_s = onsets(synced)
    off_s, off_n = offsets(on_s), offsets(naive)
    assert len(off_s) == len(events) == 39
    assert np.abs(off_s).max() < 1 / FPS, off_s
    assert abs(off_n[-1] - off_n[0]) > 2 / FPS, off_n  # the test can fail: naive drifts ~76 ms
    assert rec.drift_ppm == pytest.approx(2000, abs=50)
    # constant frame rate: every output frame on the 1/30 s grid, no gaps
    _, _, vt = on_s
    assert np.allclose(np.diff(vt), 1 / FPS, atol=1e-4)
    assert rec.frames_dropped > 0  # 30.03 fps in, 30 out (plus the audio clock's pull)
    assert rec.frames_written == len(vt)


@pytest.mark.slow
def test_ten_minutes_at_30_03_fps_and_100_ppm_stay_in_sync(tmp_path, record_property):
    """The issue's bar: offset within one frame at the start and at the end of 10 minutes.

    At 32x32 pixels: the sync is a matter of timestamps (which frames are written at which slot, where
    the audio goes), not of the picture's size, and 18,000 frames encode and decode in about 2/3 of
    the time at 160x120 (test_drift_is_removed_and_naive_placement_drifts records 160x120). With
    digital silence between the beeps: the onsets read the same (a 0.5 beep against a 0.25
    threshold), and AAC encodes silence in about a third of the time of the 0.002 noise floor
    (test_drift_is_removed_and_naive_placement_drifts keeps the noise)."""
    path = tmp_path / "long.mp4"
    rec, events = record_synced(path, 600.0, size=(32, 32), video_fps=30.03, audio_ppm=100.0, noise=0.0)
    on = onsets(path)
    off = offsets(on)
    assert len(off) == len(events) == 599
    start, end = off[:10], off[-10:]
    record_property("offset_start_ms", [round(float(1e3 * o), 2) for o in start])
    record_property("offset_end_ms", [round(float(1e3 * o), 2) for o in end])
    print(f"start offsets ms {np.round(1e3 * start, 1)}; end offsets ms {np.round(1e3 * end, 1)}; "
          f"max |offset| {1e3 * np.abs(off).max():.1f} ms; clock {rec.drift_ppm:+.1f} ppm")
    assert np.abs(start).max() < 1 / FPS
    assert np.abs(end).max() < 1 / FPS
    assert np.abs(off).max() < 1 / FPS  # and everywhere in between
    assert rec.drift_ppm == pytest.approx(100, abs=20)
    _, _, vt = on
    assert len(vt) == pytest.approx(600 * FPS, abs=3)
    assert np.allclose(np.diff(vt), 1 / FPS, atol=1e-4)


def test_audio_clock_fits_rate_through_jitter_and_outliers():
    rng = np.random.default_rng(1)
    clock = AudioClock(16000, window_s=30.0)
    true_rate = 16000 * (1 - 350e-6)
    for j in range(3000):  # 60 s of 20 ms chunks
        t = 5.0 + j * CHUNK / true_rate + rng.normal(0, 0.003)
        if j % 97 == 0:
            t += 0.08  # a late callback
        clock.add(t, j * CHUNK)
    assert clock.drift_ppm == pytest.approx(-350, abs=15)
    t_check = 5.0 + 2999 * CHUNK / true_rate
    assert clock.position(t_check) == pytest.approx(2999 * CHUNK, abs=0.002 * 16000)


def test_audio_clock_uses_nominal_rate_until_span_and_clamps_wrong_rates(caplog):
    clock = AudioClock(16000, min_span_s=2.0)
    assert clock.position(1.0) is None
    clock.add(10.0, 0)
    clock.add(10.5, 8100)  # 1.25 % fast, but the span is short: nominal slope
    assert clock.rate_hz == 16000
    for j in range(2, 20):
        clock.add(10.0 + 0.5 * j, 8100 * j)  # 16200 Hz: beyond max_rate_error
    assert clock.rate_hz == pytest.approx(16000 * 1.01)
    assert "sample rate" in caplog.text


def test_dropout_is_filled_and_leading_audio_trimmed(tmp_path):
    path = tmp_path / "gap.mp4"
    rec = SyncedRecorder(ClipRecorder(path, W, H, FPS, audio_sample_rate=SR, preset="ultrafast"))
    img = np.zeros((H, W, 3), np.uint8)
    rec.write_video(img, 100.0)  # file time 0
    rec.write_audio(np.full(CHUNK, 0.1, np.float32), 100.0 - 0.005)  # 5 ms before: trimmed
    assert rec.audio_trimmed_samples == 80
    t, n = 100.015, CHUNK - 80
    for j in range(200):
        if j == 100:
            t += 0.5  # the device lost 0.5 s of samples
        rec.write_audio(np.full(CHUNK, 0.1, np.float32), t)
        t += CHUNK / SR
        if j % 3 == 0:
            rec.write_video(img, t)
        n += CHUNK
    rec.close()
    assert rec.audio_gap_samples == pytest.approx(0.5 * SR, abs=0.005 * SR)
    assert rec.recorder.audio_samples_written == n + rec.audio_gap_samples


def test_video_only_is_constant_rate(tmp_path):
    path = tmp_path / "v.mp4"
    rec = SyncedRecorder(ClipRecorder(path, W, H, FPS, preset="ultrafast"))
    rng = np.random.default_rng(0)
    t = 50.0
    for i in range(90):  # irregular camera: 20-60 ms between frames
        rec.write_video(np.full((H, W, 3), i, np.uint8), t)
        last = t
        t += rng.uniform(0.02, 0.06)
    rec.close()
    with av.open(str(path)) as c:
        times = [f.time for f in c.decode(video=0)]
    assert np.allclose(np.diff(times), 1 / FPS, atol=1e-4)
    assert times[0] == 0.0 and abs(times[-1] - (last - 50.0)) <= 0.5 / FPS + 1e-6
    assert rec.frames_in == 90 and rec.frames_written == len(times)


def test_misuse_raises(tmp_path):
    clip = ClipRecorder(tmp_path / "a.mp4", W, H, FPS, preset="ultrafast")
    clip.write_video(np.zeros((H, W, 3), np.uint8), 0.0)
    with pytest.raises(InputError, match="fresh"):
        SyncedRecorder(clip)
    clip.close()
    rec = SyncedRecorder(ClipRecorder(tmp_path / "b.mp4", W, H, FPS, preset="ultrafast"))
    with pytest.raises(InputError, match="uint8"):
        rec.write_video(np.zeros((H, W, 3), np.float32), 0.0)
    with pytest.raises(InputError, match="without an audio track"):
        rec.write_audio(np.zeros(10, np.float32), 0.0)
    with pytest.raises(InputError, match="finite"):
        rec.write_video(np.zeros((H, W, 3), np.uint8), float("nan"))
    assert rec.write_video(np.zeros((H, W, 3), np.uint8), 1.0)
    assert not rec.write_video(np.zeros((H, W, 3), np.uint8), 0.5)  # earlier: dropped
    rec.close()
    rec.close()
    with pytest.raises(RecordingError, match="closed"):
        rec.write_video(np.zeros((H, W, 3), np.uint8), 2.0)


def test_async_synced_stack_writes_in_sync(tmp_path):
    """The live stack AsyncRecorder(SyncedRecorder(ClipRecorder)) keeps the sync."""
    path = tmp_path / "live.mp4"
    rec = AsyncRecorder(SyncedRecorder(ClipRecorder(path, W, H, FPS, audio_sample_rate=SR,
                                                    preset="ultrafast")), max_video_frames=10_000,
                        max_audio_s=100.0)
    run_source(rec.write_video, rec.write_audio, 8.0, audio_ppm=3000.0)
    rec.close()
    off = offsets(path)
    assert len(off) == 7 and np.abs(off).max() < 1 / FPS, off


def test_synced_recording_hits_file_size_limit_and_stays_playable(tmp_path):
    """RLIMIT_FSIZE through the live stack: a RecordingError naming the limit, a playable file."""
    path = tmp_path / "limited.mp4"
    script = textwrap.dedent(f"""
        import resource, numpy as np
        from avatar_app.record import AsyncRecorder, ClipRecorder
        from avatar_app.record.synced import SyncedRecorder
        from avatar_app.core.errors import RecordingError
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, resource.RLIM_INFINITY))
        rng = np.random.default_rng(0)
        rec = AsyncRecorder(SyncedRecorder(ClipRecorder({str(path)!r}, 320, 240, 25,
                                                        audio_sample_rate=16000)),
                            max_video_frames=10_000)
        try:
            for i in range(2000):
                rec.write_video(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8), 7.0 + i / 25)
                rec.write_audio(np.zeros(640, np.float32), 7.0 + i / 25)
            rec.close()
        except RecordingError as e:
            print("RecordingError:", e)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert "RecordingError:" in out.stdout and "size" in out.stdout, out.stdout + out.stderr
    assert path.stat().st_size <= 300_000
    info = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "packet=pts_time,stream_index", "-of", "json",
         str(path)], capture_output=True, text=True, check=True).stdout)
    v = [float(p["pts_time"]) for p in info["packets"] if p["stream_index"] == 0]
    a = [float(p["pts_time"]) for p in info["packets"] if p["stream_index"] == 1]
    assert len(v) >= 8 and max(v) > 0.3 and max(a) > 0.3


def _distinct_images(path: Path) -> tuple[int, list[float]]:
    """(frames whose picture differs from the previous one, every frame's time) of the file's video track."""
    with av.open(str(path)) as c:
        frames = [(float(f.time), f.to_ndarray(format="gray")) for f in c.decode(video=0)]
    distinct = 1 + sum(int(np.abs(a[1].astype(int) - b[1].astype(int)).max() > 40)
                       for a, b in zip(frames, frames[1:]))
    return distinct, [t for t, _ in frames]


@pytest.mark.parametrize("behind", [False, True])
def test_slow_frames_fill_the_timeline_whether_repeated_or_held(tmp_path, behind):
    """8 fps of distinct frames into a 30 fps clip, audio for 3 s: the video track lasts as long as the
    audio either way; while the encoder is behind the frames are held (fewer encoded, the clip's rate
    adapts), never lost. Counts frames and slots, not time."""
    path = tmp_path / f"slow_{behind}.mp4"
    rec = SyncedRecorder(ClipRecorder(path, W, H, FPS, audio_sample_rate=SR, preset="ultrafast"))
    rec.behind = lambda: behind
    seconds, video_fps = 3.0, 8.0
    n = int(seconds * video_fps)
    for k in range(int(seconds * SR) // CHUNK):
        t = k * CHUNK / SR
        while n and rec.frames_in < n and rec.frames_in / video_fps <= t:
            i = rec.frames_in
            img = np.full((H, W, 3), 30 + (i % 2) * 200, np.uint8)  # alternate: each frame differs
            assert rec.write_video(img, i / video_fps)
        rec.write_audio(np.zeros(CHUNK, np.float32), t)
    rec.close()
    slots = round(rec.duration_s * FPS)
    assert rec.frames_written + rec.slots_held == slots
    assert abs(rec.duration_s - seconds) <= 1 / FPS
    distinct, times = _distinct_images(path)
    assert distinct == rec.frames_in == n and rec.frames_dropped == 0  # every frame given is in the clip
    assert abs(times[-1] + 1 / FPS - seconds) <= 1 / FPS  # the track's timeline ends with the audio
    if behind:  # one encode per frame, plus the clip's last slot
        assert rec.frames_written == n + 1 and rec.frames_duplicated == 1
    else:
        assert rec.frames_written == slots and rec.slots_held == 0
