"""A window recording never loses audio when the encoder falls behind (issue 21, item 8).

The live stack ``AsyncRecorder(SyncedRecorder(ClipRecorder))`` is fed the way the studio
feeds it while the pipeline is starved: rendered frames at 1.5 fps (capture times), audio in
0.1 s blocks, paced by the wall clock at four times real time. Each encoded video frame
is slowed by an injected sleep, so the encoder cannot keep up whatever the machine does
(no dependence on load). Every audio sample must reach the file, in place; what gives
is video frames, and the recorder says how many.
"""
from __future__ import annotations

import time

import av
import numpy as np
import pytest

from avatar_app.record import AsyncRecorder, ClipRecorder
from avatar_app.record.synced import SyncedRecorder

W, H, FPS, SR = 320, 240, 30, 16000
SPEED = 4.0          # media seconds per wall second
MEDIA_S = 12.0
VIDEO_FPS = 1.5      # what a starved pipeline delivers
ENCODE_DELAY_S = 0.03  # per encoded frame (wall): ~33 frames/s wall = ~8 per media second, of 30 slots


def _slow(recorder: ClipRecorder) -> ClipRecorder:
    write = recorder.write_video

    def slowed(rgb, t):
        time.sleep(ENCODE_DELAY_S)
        write(rgb, t)

    recorder.write_video = slowed
    return recorder


def _envelope_signal(n: int) -> np.ndarray:
    """A 440 Hz tone whose loudness steps every 0.25 s (a pattern any lost or moved block breaks)."""
    t = np.arange(n) / SR
    level = np.where((t // 0.25).astype(int) % 2 == 0, 0.5, 0.1)
    return (level * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def _feed(rec, signal: np.ndarray) -> None:
    block = SR // 10
    n_blocks = len(signal) // block
    events = [(i * block / SR, "a", i) for i in range(n_blocks)]
    events += [(k / VIDEO_FPS, "v", k) for k in range(int(MEDIA_S * VIDEO_FPS))]
    events.sort(key=lambda e: (e[0], e[1]))
    t0 = time.perf_counter()
    img = np.zeros((H, W, 3), np.uint8)
    for t, kind, i in events:
        delay = t0 + t / SPEED - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if kind == "a":
            rec.write_audio(signal[i * block:(i + 1) * block], i * block / SR)
        else:
            img[:] = (i * 37) % 256
            rec.write_video(img, t)


def _decoded_audio(path) -> np.ndarray:
    with av.open(str(path)) as c:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SR)
        blocks = [f.to_ndarray().reshape(-1) for fr in c.decode(audio=0) for f in resampler.resample(fr)]
    return np.concatenate(blocks)


def _rms_per_window(x: np.ndarray, win: int) -> np.ndarray:
    n = len(x) // win
    return np.sqrt((x[: n * win].reshape(n, win) ** 2).mean(axis=1))


@pytest.mark.slow
def test_slow_encoder_loses_no_audio_and_counts_the_video_it_drops(tmp_path):
    path = tmp_path / "starved.mp4"
    rec = AsyncRecorder(SyncedRecorder(_slow(ClipRecorder(path, W, H, FPS, audio_sample_rate=SR,
                                                          preset="ultrafast"))))
    signal = _envelope_signal(int(MEDIA_S * SR))
    _feed(rec, signal)
    rec.close(timeout_s=120)

    assert rec.dropped_audio_chunks == 0, rec.dropped_audio_chunks
    assert rec.audio_lost_s == 0.0
    out = _decoded_audio(path)
    assert abs(len(out) - len(signal)) < 0.03 * SR, (len(out) / SR, len(signal) / SR)
    # every 0.125 s window has the loudness it was given: nothing lost, moved or replaced by silence
    got = _rms_per_window(out[: len(signal)], SR // 8)
    want = _rms_per_window(signal, SR // 8)
    assert np.all(np.abs(got - want) < 0.05), np.round(np.c_[want, got], 2).tolist()
    # what gave is video, and the recorder says how much
    summary = rec.loss_summary()
    assert "no audio lost" in summary, summary
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        frames = [f.time for f in c.decode(v)]
    assert frames and frames[-1] > MEDIA_S - 0.5, frames[-3:]  # the video still spans the clip
    delivered = int(MEDIA_S * VIDEO_FPS)
    shown = len({round(t * VIDEO_FPS) for t in frames})
    dropped = rec.dropped_queue_full
    assert shown + dropped >= delivered - 1, (shown, dropped)
    assert (f"{dropped} video frame" in summary) if dropped else ("no video frame" in summary), summary


def test_audio_is_queued_whatever_the_backlog(tmp_path):
    """Audio waits for a stuck encoder instead of being dropped (the old limit was 5 s of audio)."""
    rec = AsyncRecorder(ClipRecorder(tmp_path / "stuck.mp4", W, H, FPS, audio_sample_rate=SR), max_audio_s=0.5)
    gate = __import__("threading").Event()
    write_audio = rec.recorder.write_audio
    rec.recorder.write_audio = lambda x, t: (gate.wait(30), write_audio(x, t))
    try:
        assert all(rec.write_audio(np.zeros(SR // 10, np.float32), i / 10) for i in range(100))  # 10 s
        assert rec.dropped_audio_chunks == 0
        assert not rec.write_video(np.zeros((H, W, 3), np.uint8), 0.0)  # video gives instead
        assert rec.dropped_queue_full == 1
    finally:
        gate.set()
        rec.close()
    assert rec.recorder.audio_samples_written == 100 * (SR // 10)
