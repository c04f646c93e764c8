"""The latency overlay reports a known camera delay correctly (+-2 ms)."""
from __future__ import annotations

import time

import pytest

from avatar_app.core.latency import FPS_MIN_SPAN_S, LatencyStats


def test_stats_percentiles_and_camera_to_screen():
    stats = LatencyStats(window_s=10)
    t = 1_000_000_000
    for i in range(100):
        stats.add_frame({"track": (t, t + 5_000_000 + i * 10_000)},
                        t_capture_ns=t - 20_000_000, t_present_ns=t + 10_000_000)
        t += 33_333_333
    s = stats.summary()
    assert s.camera_to_screen == pytest.approx((30.0, 30.0))
    assert 5.0 < s.stages["track"][0] < 6.0 and s.stages["track"][1] > s.stages["track"][0]
    assert s.fps == pytest.approx(30.0, rel=1e-3)
    assert any("camera-to-screen" in line for line in s.lines())


def test_a_start_up_burst_is_counted_over_at_least_a_second():
    """The first frames of a source often come together (the fps plot's start-up spike, up to 70 fps
    for a 25 fps file): the burst's extra frames count over at least FPS_MIN_SPAN_S (1 s), never over
    the 10 ms they took (200 fps)."""
    stats = LatencyStats(window_s=5.0)
    t = 1_000_000_000
    for _ in range(3):  # a burst: 3 frames 5 ms apart
        stats.add_frame({"a": (t, t + 1)}, t_present_ns=t)
        t += 5_000_000
    assert stats.summary().fps <= 25.0
    seen = []
    for _ in range(50):  # then 25 fps
        t += 40_000_000
        stats.add_frame({"a": (t, t + 1)}, t_present_ns=t)
        seen.append(stats.summary().fps)
    assert max(seen) <= 25.0 + 2 / FPS_MIN_SPAN_S  # the burst's 2 extra frames over at least 1 s
    assert seen[-1] == pytest.approx(25.0, abs=1.0)


def test_window_drops_old_frames():
    stats = LatencyStats(window_s=1.0)
    stats.add_frame({"a": (0, 1_000_000)}, t_present_ns=0)
    stats.add_frame({"a": (0, 9_000_000)}, t_present_ns=2_000_000_000)
    assert stats.summary().stages["a"] == (9.0, 9.0)


@pytest.mark.parametrize("delay_s", [0.030, 0.080])
def test_fake_camera_delay_is_reported(delay_s):
    """A fake camera stamps frames at capture and delivers them delay_s later: the 'capture' stage shows it."""
    from avatar_app.capture.fake import FakeCamera
    from avatar_app.pipeline import LivePipeline

    cam = FakeCamera(size=(320, 240), fps=30.0, delay_s=delay_s)
    pipe = LivePipeline(cam)  # no audio ring: no speech stage
    presented = []
    pipe.on_state = lambda st: presented.append(st)
    pipe.start()
    try:
        deadline = time.monotonic() + 120  # a hang guard, not a timing check
        while len(presented) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        pipe.stop()
    assert len(presented) >= 40
    for st in presented:
        pipe.presented(st, st.stamps["capture"][1])  # presented the moment it was received
    # The capture stage is the camera's delay plus the wait until the processing thread takes the
    # frame (how long depends on the load): never less than the delay, and the delay itself for
    # a frame that found the thread idle.
    delay_ms = delay_s * 1000
    capture_ms = [(e - b) / 1e6 for b, e in (st.stamps["capture"] for st in presented)]
    assert min(capture_ms) >= delay_ms - 1e-3
    assert min(capture_ms) == pytest.approx(delay_ms, abs=2.0)
    s = pipe.stats.summary()
    assert s.stages["capture"][0] >= delay_ms - 1e-3
    assert s.camera_to_screen[0] == pytest.approx(s.stages["capture"][0], abs=1e-3)


def test_drop_counter_counts_frame_index_gaps_once():
    """The window's one drop counter: source frames between two presented ones, plus recording losses."""
    from avatar_app.core.latency import LatencyStats

    s = LatencyStats()
    for i in (0, 1, 2, 5, 6, 10):  # 3, 4 and 7, 8, 9 never reached the screen
        s.add_frame({}, frame_index=i)
    assert s.dropped == 5 and s.presented == 6
    s.add_frame({}, frame_index=10)  # the same frame again (a re-render): nothing lost
    s.add_frame({}, frame_index=0)  # the source restarted: a new run, nothing lost
    s.add_frame({}, frame_index=2)
    assert s.dropped == 6
    s.add_dropped(4)
    s.add_dropped(-1)
    summary = s.summary()
    assert summary.dropped == 10 and "dropped 10" in summary.lines()[0]


def test_live_pipeline_caps_openblas_threads(monkeypatch):
    """OpenBLAS's idle threads busy-wait between the stages' small calls: the live pipeline runs BLAS on one."""
    import numpy as np

    import avatar_app.core.blas as blas

    if not blas.blas_threads():
        pytest.skip("numpy here is not linked against a loaded OpenBLAS")
    monkeypatch.setattr(blas, "_USER_VALUE", None)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    before = blas.blas_threads()
    try:
        assert blas.limit_blas_threads(1) >= 1
        assert blas.blas_threads() and set(blas.blas_threads()) == {1}
        assert (np.ones((64, 64)) @ np.ones((64, 64)))[0, 0] == 64  # BLAS still works
        monkeypatch.setattr(blas, "_USER_VALUE", "4")  # the user's own setting is left alone
        assert blas.limit_blas_threads(1) == 0
    finally:
        for path in blas._loaded_openblas():  # the rest of the suite keeps what it had
            blas._call(blas.ctypes.CDLL(path), "set_num_threads", blas.ctypes.c_int(max(before)))
