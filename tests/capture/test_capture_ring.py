"""AudioRing and LatestSlot: correctness, wrap-around, gaps, threading."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from avatar_app.capture.ring import AudioRing, LatestSlot

SR = 16000
NS_PER_SAMPLE = 1_000_000_000 // SR  # 62500 ns, exact at 16 kHz
T0 = 10_000_000_000


def ramp(start: int, n: int) -> np.ndarray:
    """Samples whose value is their stream index (exact in float32 below 2**24)."""
    return np.arange(start, start + n, dtype=np.float32)


def t_of(i: int) -> int:
    return T0 + i * NS_PER_SAMPLE


def test_empty_ring_reads_zeros():
    ring = AudioRing(capacity_s=1.0, sample_rate=SR)
    assert ring.latest_t_ns is None
    assert ring.total_written == 0
    w = ring.read_window(T0, 0.1)
    assert w.shape == (1600,) and w.dtype == np.float32 and not w.any()


def test_window_is_exact_and_zero_padded_before_start():
    ring = AudioRing(capacity_s=1.0, sample_rate=SR)
    ring.write(ramp(0, 800), t_of(0))
    assert ring.latest_t_ns == t_of(800)
    w = ring.read_window(t_of(800), 0.1)  # 1600 samples, only the last 800 exist
    assert np.array_equal(w[:800], np.zeros(800, np.float32))
    assert np.array_equal(w[800:], ramp(0, 800))
    w = ring.read_window(t_of(500), 100 / SR)
    assert np.array_equal(w, ramp(400, 100))


def test_window_after_newest_sample_is_zero_padded_at_the_end():
    ring = AudioRing(capacity_s=1.0, sample_rate=SR)
    ring.write(ramp(0, 100), t_of(0))
    w = ring.read_window(t_of(150), 100 / SR)
    assert np.array_equal(w[:50], ramp(50, 50))
    assert not w[50:].any()


def test_wrap_around_keeps_the_newest_capacity():
    ring = AudioRing(capacity_s=0.05, sample_rate=SR)  # 800 samples
    assert ring.capacity == 800
    for k in range(7):  # 7 blocks of 300: wraps several times, blocks straddle the end
        ring.write(ramp(300 * k, 300), t_of(300 * k))
    assert ring.total_written == 2100
    w = ring.read_window(t_of(2100), 0.05)
    assert np.array_equal(w, ramp(1300, 800))
    # older than the capacity reads as zeros
    w = ring.read_window(t_of(1400), 200 / SR)
    assert not w[:100].any()
    assert np.array_equal(w[100:], ramp(1300, 100))


def test_single_write_larger_than_capacity():
    ring = AudioRing(capacity_s=0.01, sample_rate=SR)  # 160 samples
    ring.write(ramp(0, 1000), t_of(0))
    assert ring.total_written == 1000
    assert ring.latest_t_ns == t_of(1000)
    assert np.array_equal(ring.read_window(t_of(1000), 0.01), ramp(840, 160))


def test_gap_is_filled_with_silence_and_small_jitter_is_not():
    ring = AudioRing(capacity_s=1.0, sample_rate=SR, gap_fill_s=0.02)
    ring.write(ramp(1, 160), t_of(0))
    ring.write(ramp(161, 160), t_of(160) + 100_000)  # 0.1 ms late: jitter, no fill
    assert ring.gap_samples == 0
    ring.write(ramp(1000, 160), t_of(320) + 50_000_000 + 100_000)  # 50 ms gap
    assert ring.gap_samples == 800
    w = ring.read_window(ring.latest_t_ns, (320 + 800 + 160) / SR)
    assert np.array_equal(w[:320], ramp(1, 320))
    assert not w[320:1120].any()
    assert np.array_equal(w[1120:], ramp(1000, 160))


def test_reanchors_on_every_write():
    # a clock that runs 1 % slow: the newest block's stamp decides the mapping
    ring = AudioRing(capacity_s=1.0, sample_rate=SR)
    ring.write(ramp(0, 1000), T0)
    t2 = T0 + 1000 * NS_PER_SAMPLE * 99 // 100
    ring.write(ramp(1000, 1000), t2)
    w = ring.read_window(t2 + 500 * NS_PER_SAMPLE, 10 / SR)
    assert np.array_equal(w, ramp(1490, 10))


def test_clear_and_bad_arguments():
    ring = AudioRing(capacity_s=0.1, sample_rate=SR)
    ring.write(np.ones(100, np.float32), T0)
    ring.clear()
    assert ring.latest_t_ns is None and ring.total_written == 0
    with pytest.raises(ValueError, match="duration_s must be >= 0"):
        ring.read_window(T0, -1.0)
    with pytest.raises(ValueError, match="must be > 0"):
        AudioRing(capacity_s=0, sample_rate=SR)


def test_read_window_waits_for_data_up_to_timeout():
    ring = AudioRing(capacity_s=1.0, sample_rate=SR)
    ring.write(ramp(0, 160), t_of(0))
    timer = threading.Timer(0.05, lambda: ring.write(ramp(160, 160), t_of(160)))
    timer.start()
    w = ring.read_window(t_of(320), 320 / SR, timeout_s=5.0)
    timer.join()
    assert np.array_equal(w, ramp(0, 320))
    # nothing comes: returns (zero-padded) after the timeout
    w = ring.read_window(t_of(400), 80 / SR, timeout_s=0.01)
    assert not w.any()


def test_concurrent_writer_and_readers_see_consistent_windows():
    ring = AudioRing(capacity_s=0.2, sample_rate=SR)  # 3200 samples: wraps often
    block, n_blocks = 160, 400
    errors: list[str] = []
    done = threading.Event()

    def writer() -> None:
        for k in range(n_blocks):
            ring.write(ramp(1 + k * block, block), t_of(k * block))
        done.set()

    def reader() -> None:
        while not done.is_set():
            end = ring.latest_t_ns
            if end is None:
                continue
            w = ring.read_window(end, 0.05)
            nz = w[w != 0]
            # every non-zero sample is the right index for its time: consecutive,
            # ending no later than the newest sample at the time of the read
            if nz.size and not np.array_equal(np.diff(nz), np.ones(nz.size - 1, np.float32)):
                errors.append(f"non-consecutive window {nz[:3]}...")
                return
            if nz.size and nz[-1] != (end - T0) // NS_PER_SAMPLE:
                errors.append(f"window ends at {nz[-1]}, expected {(end - T0) // NS_PER_SAMPLE}")
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    writer()
    for t in threads:
        t.join(10)
    assert not errors, errors
    assert ring.total_written == block * n_blocks


def test_latest_slot_newest_wins_and_counts_drops():
    slot: LatestSlot[int] = LatestSlot()
    assert slot.get(timeout_s=0) is None
    slot.put(1)
    slot.put(2)  # 1 was never taken
    slot.put(3)
    assert slot.dropped == 2
    assert slot.get(0) == 3
    assert slot.get(0) is None  # taken already
    slot.put(4)
    assert slot.get(0) == 4
    assert slot.dropped == 2
    assert slot.peek() == 4 and slot.put_count == 4


def test_latest_slot_get_times_out_and_close_wakes_waiters():
    slot: LatestSlot[int] = LatestSlot()
    assert slot.get(timeout_s=0.01) is None
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(slot.get(timeout_s=None)))
    t.start()
    slot.close()
    t.join(60)  # generous: only a hung thread waits it out
    assert not t.is_alive() and got == [None] and slot.closed


def test_latest_slot_threaded_producer_consumer():
    slot: LatestSlot[int] = LatestSlot()
    n = 2000
    taken: list[int] = []

    def consumer() -> None:
        while True:
            item = slot.get(timeout_s=5)
            if item is None or item == n - 1:
                if item is not None:
                    taken.append(item)
                return
            taken.append(item)

    t = threading.Thread(target=consumer)
    t.start()
    for i in range(n):
        slot.put(i)
    t.join(10)
    assert taken == sorted(taken) and len(set(taken)) == len(taken)
    assert taken[-1] == n - 1
    assert slot.dropped + len(taken) == n
