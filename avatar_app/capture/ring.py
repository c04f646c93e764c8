"""Hand-off buffers between capture threads and the processing thread.

- :class:`AudioRing`: a timestamped ring of mono float32 samples. Audio is never
  dropped by the ring (only overwritten once older than its capacity).
- :class:`LatestSlot`: a newest-wins slot for video frames (stale frames are
  dropped and counted: latency beats completeness, DESIGN.md "Data flow").
"""
from __future__ import annotations

import logging
import threading
from typing import Generic, TypeVar

import numpy as np

from avatar_app.core.clock import now_ns

logger = logging.getLogger(__name__)

T = TypeVar("T")

_NS_PER_S = 1_000_000_000


class AudioRing:
    """Thread-safe ring buffer of timestamped mono float32 audio.

    Samples form one continuous stream at ``sample_rate``. Every :meth:`write`
    re-anchors the stream's clock on its ``t_first_ns``, so the time of sample
    ``i`` is ``t_anchor + (i - i_anchor) / sample_rate`` with the newest anchor;
    slow clock drift of a sound card is followed without accumulating. When a
    write starts more than ``gap_fill_s`` after the end of the previous one
    (dropouts, a source that paused, the end of a looped file), the gap is
    filled with silence so that later windows stay aligned in time.

    Thread: :meth:`write` may be called from an audio callback (it only takes a
    lock and copies); readers in any thread. One writer at a time.

    Args:
        capacity_s: seconds of audio kept, > 0.
        sample_rate: Hz, > 0.
        gap_fill_s: seconds; a discontinuity larger than this is filled with zeros.

    Raises:
        ValueError: on a non-positive capacity or sample rate.
    """

    def __init__(self, capacity_s: float = 10.0, sample_rate: int = 16000,
                 gap_fill_s: float = 0.02):
        if capacity_s <= 0 or sample_rate <= 0:
            raise ValueError(
                f"capacity_s and sample_rate must be > 0, got {capacity_s}, {sample_rate}")
        self.sample_rate = int(sample_rate)
        self.capacity = max(1, int(round(capacity_s * sample_rate)))
        self.gap_fill_s = float(gap_fill_s)
        self._buf = np.zeros(self.capacity, dtype=np.float32)
        self._cond = threading.Condition(threading.Lock())
        self._n = 0  # samples in the stream, including filled gaps
        self._written = 0  # samples given to write()
        self._gap_samples = 0
        self._anchor_idx = 0
        self._anchor_t = 0
        self._has_data = False

    # -- writer -----------------------------------------------------------------------
    def write(self, samples: np.ndarray, t_first_ns: int) -> None:
        """Append a block of samples.

        Args:
            samples: (N,) or (N, 1) float32 mono in [-1, 1] (other float dtypes are
                converted). The data is copied; the caller may reuse its buffer.
            t_first_ns: process-clock time (``now_ns``) of the first sample.
        """
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        n = x.shape[0]
        if n == 0:
            return
        rate = self.sample_rate
        cap = self.capacity
        with self._cond:
            if self._has_data:
                expected = self._anchor_t + (self._n - self._anchor_idx) * _NS_PER_S // rate
                gap = int(t_first_ns) - expected
                if gap > self.gap_fill_s * _NS_PER_S:
                    fill = int(round(gap * rate / _NS_PER_S))
                    self._zero(self._n, min(fill, cap))
                    self._n += fill
                    self._gap_samples += fill
            self._anchor_idx = self._n
            self._anchor_t = int(t_first_ns)
            self._has_data = True
            if n > cap:  # only the newest `cap` samples can be kept
                x = x[n - cap:]
                start = self._n + n - cap
            else:
                start = self._n
            pos = start % cap
            k = min(x.shape[0], cap - pos)
            self._buf[pos:pos + k] = x[:k]
            if k < x.shape[0]:
                self._buf[:x.shape[0] - k] = x[k:]
            self._n += n
            self._written += n
            self._cond.notify_all()

    def _zero(self, start: int, count: int) -> None:
        pos = start % self.capacity
        k = min(count, self.capacity - pos)
        self._buf[pos:pos + k] = 0.0
        if k < count:
            self._buf[:count - k] = 0.0

    def clear(self) -> None:
        """Forget all samples and timestamps (e.g. when a source restarts)."""
        with self._cond:
            self._n = self._written = self._gap_samples = 0
            self._anchor_idx = self._anchor_t = 0
            self._has_data = False
            self._buf[:] = 0.0

    # -- readers ----------------------------------------------------------------------
    @property
    def total_written(self) -> int:
        """Number of samples passed to :meth:`write` so far (filled gaps excluded)."""
        with self._cond:
            return self._written

    @property
    def gap_samples(self) -> int:
        """Number of zero samples inserted to fill timestamp gaps."""
        with self._cond:
            return self._gap_samples

    @property
    def latest_t_ns(self) -> int | None:
        """Process-clock time just after the newest sample (None before the first write).

        ``read_window(latest_t_ns, d)`` returns the newest ``d`` seconds with no
        trailing zeros.
        """
        with self._cond:
            return self._end_t() if self._has_data else None

    def _end_t(self) -> int:
        return self._anchor_t + (self._n - self._anchor_idx) * _NS_PER_S // self.sample_rate

    def read_window(self, t_end_ns: int, duration_s: float, timeout_s: float = 0.0) -> np.ndarray:
        """The samples of the ``duration_s`` seconds that end at ``t_end_ns``.

        Times with no data (before the first sample, older than the capacity, or
        not written yet) read as zeros, so the result always has the same length.

        Args:
            t_end_ns: process-clock end of the window (exclusive).
            duration_s: window length in seconds, >= 0.
            timeout_s: wait at most this long for samples up to ``t_end_ns`` to be
                written (0: never wait; the lock is only held for a copy).

        Returns:
            (round(duration_s * sample_rate),) float32, a new array.

        Raises:
            ValueError: if ``duration_s`` is negative.
        """
        if duration_s < 0:
            raise ValueError(f"duration_s must be >= 0, got {duration_s}")
        n_out = int(round(duration_s * self.sample_rate))
        out = np.zeros(n_out, dtype=np.float32)
        with self._cond:
            if timeout_s > 0:
                deadline = now_ns() + int(timeout_s * _NS_PER_S)
                while not (self._has_data and self._end_t() >= t_end_ns):
                    left = (deadline - now_ns()) / _NS_PER_S
                    if left <= 0:
                        break
                    self._cond.wait(left)
            if not self._has_data or n_out == 0:
                return out
            rate = self.sample_rate
            dt_ns = int(t_end_ns) - self._anchor_t
            end_idx = self._anchor_idx + int(round(dt_ns * rate / _NS_PER_S))
            start_idx = end_idx - n_out
            lo = max(start_idx, self._n - self.capacity, 0)
            hi = min(end_idx, self._n)
            if hi <= lo:
                return out
            cap = self.capacity
            pos = lo % cap
            count = hi - lo
            k = min(count, cap - pos)
            o = lo - start_idx
            out[o:o + k] = self._buf[pos:pos + k]
            if k < count:
                out[o + k:o + count] = self._buf[:count - k]
        return out


class LatestSlot(Generic[T]):
    """Newest-wins single-item hand-off (video frames).

    :meth:`put` replaces the held item; if that item was never taken by
    :meth:`get`, it is dropped and counted in :attr:`dropped`.

    Thread: any number of producers and consumers.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._item: T | None = None
        self._fresh = False
        self._closed = False
        self.dropped = 0
        self.put_count = 0

    def put(self, item: T) -> None:
        """Store ``item`` as the newest one (dropping an unread older item)."""
        with self._cond:
            if self._fresh:
                self.dropped += 1
            self._item = item
            self._fresh = True
            self.put_count += 1
            self._cond.notify_all()

    def get(self, timeout_s: float | None = 1.0) -> T | None:
        """Take the newest item not yet taken.

        Args:
            timeout_s: seconds to wait for a new item (None: wait until one comes
                or the slot is closed; 0: do not wait).

        Returns:
            The item, or None on timeout or when the slot is closed and empty.
        """
        with self._cond:
            if not self._fresh and not self._closed:
                self._cond.wait_for(lambda: self._fresh or self._closed, timeout_s)
            if not self._fresh:
                return None
            self._fresh = False
            return self._item

    def peek(self) -> T | None:
        """The newest item (taken or not) without marking it taken; None if none yet."""
        with self._cond:
            return self._item

    def close(self) -> None:
        """Wake all waiting :meth:`get` calls; later gets return at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed
