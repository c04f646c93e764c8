"""Causal running percentiles of face features: automatic per-user calibration.

A ring buffer of feature vectors is filled on a time schedule: every sample
during a warm-up (the first seconds the face is seen), then one sample per
``slow_interval_s`` (a slow drift follows lighting, posture and the user's
habits). The reference of each feature is a percentile of the buffer, e.g. a
high percentile of the eye aperture for "eyes open" and a low percentile of the
lip gap for "mouth closed". Everything depends only on the samples and their
timestamps, so the same frames give the same references offline and live.

The estimates are incremental: :class:`SortedColumns` keeps every column of the
ring buffer sorted and, when a sample is admitted, inserts it (warm-up, buffer
growing) or swaps it for the sample it overwrites, in place and without
re-sorting, so an order statistic is a row look-up. The values are bit-identical
to sorting the buffer from scratch (but for the sign of a zero result where a
column holds both -0.0 and +0.0, whose order ``np.sort`` leaves unspecified; equal
as values always).
"""
from __future__ import annotations

import numpy as np

from avatar_app.core.errors import InputError


class SampleSchedule:
    """When a running estimate keeps a sample, and in which ring-buffer slot.

    Every sample is kept during a warm-up (the first ``warmup_s`` seconds from the first
    sample), then at most one per ``slow_interval_s``; kept samples go round a ring of
    ``capacity`` slots, overwriting the oldest. Used by :class:`RunningPercentiles` and
    :class:`avatar_app.reconstruction.auto_neutral.NeutralEstimator`, which keep their own
    arrays and write row :meth:`admit` returns.

    Args:
        warmup_s: seconds from the first sample during which every sample is kept.
        slow_interval_s: after the warm-up, at most one sample per this many seconds.
        capacity: ring length (samples).

    Raises:
        InputError: parameters out of range.
    """

    def __init__(self, warmup_s: float, slow_interval_s: float, capacity: int) -> None:
        if warmup_s < 0 or slow_interval_s <= 0 or capacity < 2:
            raise InputError("warmup_s >= 0, slow_interval_s > 0 and capacity >= 2 are required")
        self.warmup_s = float(warmup_s)
        self.slow_interval_s = float(slow_interval_s)
        self.capacity = int(capacity)
        self.reset()

    def reset(self) -> None:
        """Forget every sample."""
        self.count = 0
        self._next = 0
        self._t_first: float | None = None
        self._t_last: float | None = None

    def in_warmup(self, t_s: float) -> bool:
        """Whether a sample at ``t_s`` (seconds) falls in the warm-up."""
        return self._t_first is None or t_s - self._t_first < self.warmup_s

    def admit(self, t_s: float) -> int | None:
        """The ring slot for a sample at ``t_s`` (seconds, non-decreasing), or None to skip it."""
        if self._t_first is None:
            self._t_first = t_s
        if not self.in_warmup(t_s) and self._t_last is not None and t_s - self._t_last < self.slow_interval_s:
            return None
        slot = self._next
        self._next = (self._next + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)
        self._t_last = t_s
        return slot


class SortedColumns:
    """The samples of a ring buffer with every column kept sorted, one row at a time.

    Row ``i`` of :attr:`sorted` holds the ``i``-th smallest value of each column: the array
    ``np.sort(ring[:n], axis=0)`` would give, NaNs last as ``np.sort`` puts them (equal
    values are interchangeable, so the rows are bit-identical to a fresh sort; the one
    exception: -0.0 sorts before +0.0 here, an order ``np.sort`` leaves unspecified, so a
    column holding both may show its zeros in another order, equal as values; NaN
    payloads are kept where ``np.sort`` may rewrite them).

    :meth:`insert` adds a sample while the ring grows and :meth:`replace` swaps the
    sample a full ring overwrites for the new one: a vectorised binary search over the
    columns finds both ranks (or a compare-and-count for narrow buffers), then each
    column's values between the two ranks move by one row. float64 buffers are stored
    column by column, so that move is one contiguous run per column (a boolean-mask copy
    of the moved values only); float32 buffers row by row, moved by a few branch-free
    passes over the whole buffer (xor / multiply on the integer view, into preallocated
    scratch arrays), which on 4-byte words beat the per-value copies. Cost is O(n * width)
    memory traffic instead of a sort, plus a fixed ~0.1 ms of numpy calls, so it pays for
    wide rings only. Measured per replace (full ring, median of 400, A/B interleaved in one
    process, thread CPU time, 2-core dev VM shared with other work, load average 6-7,
    numpy 1.26; /tmp bench of the pose21 branch): 480 x 195 float64 0.37 ms row-major vs
    0.29 ms column-major, 480 x 123 0.29 vs 0.22; 240 x 666 float32 0.38 vs 0.43 (kept
    row-major).

    Args:
        capacity: most samples (rows); >= 1.
        width: columns.
        dtype: float32 or float64.

    Raises:
        InputError: parameters out of range or a non-float dtype.
    """

    _DENSE_RANK_WIDTH = 48  # narrower buffers count (sorted < key) directly: fewer numpy calls
    #: ... and so do wider ones while keys x samples is at most this many cells (the compare-and-
    #: sum beats the binary search's ~8 x 5 numpy calls there: the calibration's warm-up). Per
    #: rank, A/B interleaved, median of 2000, 2-core shared VM, keys without zeros: 195 float64
    #: keys at n = 40 / 120 / 200 samples: count 27.7 / 43.9 / 61.1 us vs binary search 36.7 /
    #: 41.9 / 47.5; 123 keys at 40 / 120 / 200: 17.2 / 23.8 / 31.3 vs 23.3 / 26.5 / 29.6.
    _DENSE_RANK_CELLS = 16_000

    def __init__(self, capacity: int, width: int, dtype: type | np.dtype = np.float64) -> None:
        dt = np.dtype(dtype)
        if capacity < 1 or width < 1 or dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise InputError("capacity >= 1, width >= 1 and a float32 or float64 dtype are required")
        self.capacity, self.width = int(capacity), int(width)
        cap, w = self.capacity, self.width
        # Sorted row r of column j is entry r + 1 of that column; entry 0 and those after the
        # n-th are +inf padding (2 capacity + 2 entries a column), so the binary search never
        # reads out of its column and never passes the end. Flat index of entry k of column j:
        # _base[j] + k * _rstep.
        self._by_column = dt.itemsize == 8
        self._cols = np.arange(w, dtype=np.intp)
        self._ridx = np.int16 if cap < 2 ** 15 - 2 else np.int32
        if self._by_column:
            self._store = np.empty((w, 2 * cap + 2), dt)
            self._base, self._rstep = self._cols * (2 * cap + 2), 1
            # _steps seen as the (cap + 1, m) view _ge(m): row k is arange(m) >= k
            self._steps = np.zeros(2 * cap + 2, bool)
            self._steps[cap + 1:] = True
            self._mask = np.empty(w * (cap + 1), bool)  # scratch (width, m) masks
        else:
            self._store = np.empty((2 * cap + 2, w), dt)
            self._base, self._rstep = self._cols, w
            ints = np.int32 if dt.itemsize == 4 else np.int64
            self._bits, self._ints = self._store.view(ints), ints
            self._rows = np.arange(cap + 1, dtype=self._ridx)[:, None]
            self._a = np.empty((cap + 1, w), bool)
            self._b = np.empty((cap + 1, w), bool)
            self._d = np.empty((cap + 1, w), ints)
        self._flat = self._store.reshape(-1)
        self._base2 = np.concatenate([self._base, self._base])
        self.reset()

    def reset(self) -> None:
        """Forget every sample."""
        self._store.fill(np.inf)
        self.n = 0

    @property
    def sorted(self) -> np.ndarray:
        """(n, width) the column-sorted samples (a Fortran-ordered view for float64); a view
        that the next update overwrites."""
        if self._by_column:
            return self._store[:, 1:self.n + 1].T
        return self._store[1:self.n + 1]

    @staticmethod
    def _before(vals: np.ndarray, keys: np.ndarray, plus0: np.ndarray | None) -> np.ndarray:
        """Whether each value sorts before its key: ``vals < keys``, and ``vals <= 0`` for a
        +0.0 key (``plus0``), so -0.0 sorts before +0.0 and each zero keeps its sign."""
        before = vals < keys
        if plus0 is not None:
            before |= (vals == keys) & plus0
        return before

    def _rank(self, keys: np.ndarray, base: np.ndarray) -> np.ndarray:
        """(len(keys),) intp: how many of the n values of the column whose entry 0 is at flat
        index ``base[j]`` sort before ``keys[j]`` (:meth:`_before`); n for a NaN key."""
        n, w = self.n, self.width
        plus0 = (keys == 0) & ~np.signbit(keys)
        plus0 = plus0 if plus0.any() else None
        if w <= self._DENSE_RANK_WIDTH or keys.size * n <= self._DENSE_RANK_CELLS:
            # the counts as a sum of the bools (count_nonzero with an axis copies them to bool first),
            # over each column's run of values: (width, n) column-major, (n, width) row-major
            if self._by_column:
                s, axis, k = self._store[:, 1:n + 1], 1, keys[:, None]
            else:
                s, axis, k = self._store[1:n + 1], 0, keys
            p0 = None if plus0 is None else (plus0[:, None] if self._by_column else plus0)
            pos = np.concatenate([
                self._before(s, k[i:i + w], None if p0 is None else p0[i:i + w]).sum(axis=axis, dtype=np.intp)
                for i in range(0, keys.size, w)])
        else:
            flat, rstep = self._flat, self._rstep
            pos = base.copy()  # flat index of entry c = sorted row c - 1, from c = 0
            step = 1 << (n.bit_length() - 1) if n else 0
            while step:
                pos += self._before(flat.take(pos + step * rstep), keys, plus0) * (step * rstep)
                step >>= 1
            pos -= base
            if rstep > 1:
                pos //= rstep
        pos[np.isnan(keys)] = n
        return pos

    def _ge(self, m: int) -> np.ndarray:
        """(capacity + 1, m) bool read-only view: row k is ``arange(m) >= k`` (by column)."""
        return np.ndarray((self.capacity + 1, m), bool, self._steps, self.capacity + 1, (-1, 1))

    def _band(self, lo: np.ndarray, hi: np.ndarray, m: int) -> np.ndarray:
        """(width, m) bool scratch view: ``lo[j] <= i < hi[j]`` (lo <= hi) for positions i < m."""
        ge = self._ge(m)
        return np.bitwise_xor(ge[lo], ge[hi], out=self._mask[:self.width * m].reshape(self.width, m))

    def insert(self, x: np.ndarray) -> None:
        """Add one sample while the buffer grows.

        Args:
            x: (width,) values of the sample's dtype.

        Raises:
            InputError: the buffer is full (use :meth:`replace`).
        """
        n = self.n
        if n >= self.capacity:
            raise InputError("the sorted buffer is full; replace a sample instead")
        p = self._rank(x, self._base)
        if self._by_column:
            if n:  # rows from the insertion point move one row down (copyto copies the
                # overlapping source first, then writes where the mask is set: the same values
                # as a boolean-mask gather and scatter, without building the gathered copy)
                np.copyto(self._store[:, 2:n + 2], self._store[:, 1:n + 1], where=self._ge(n)[p])
        else:
            below = np.greater(self._rows[:n + 1], p.astype(self._ridx), out=self._b[:n + 1])
            cur = self._bits[1:n + 2]  # rows past the insertion point move one row down
            d = np.bitwise_xor(self._bits[0:n + 1], cur, out=self._d[:n + 1])
            np.multiply(d, below, out=d)  # prev ^ cur past the insertion point, 0 before it
            cur ^= d
        self._flat[self._base + (p + 1) * self._rstep] = x
        self.n = n + 1

    def replace(self, old: np.ndarray, x: np.ndarray) -> None:
        """Swap one stored sample for a new one (the ring overwrote its slot).

        Args:
            old: (width,) the values leaving (each must be in its column).
            x: (width,) the values arriving.
        """
        n, w = self.n, self.width
        q = self._rank(np.concatenate([old, x]), self._base2)
        # the row holding old: the first equal one (the last for +0.0, which sorts after -0.0;
        # the last row for NaN)
        r = np.minimum(q[:w] - ((old == 0) & ~np.signbit(old)), n - 1)
        plus0 = (x == 0) & ~np.signbit(x)
        p = np.minimum(q[w:] - self._before(old, x, plus0 if plus0.any() else None), n - 1)  # x's row once old is gone
        # Rows r..p-1 take the row below (r < p); rows p+1..r the row above (r > p).
        if self._by_column:
            self._shift_by_column(r, p)
        else:
            up = r < p
            rows = self._rows[:n]
            moved = np.greater_equal(rows, np.where(up, r, p + 1).astype(self._ridx), out=self._a[:n])
            moved &= np.less(rows, np.where(up, p, r + 1).astype(self._ridx), out=self._b[:n])
            cur, nxt, prev = self._bits[1:n + 1], self._bits[2:n + 2], self._bits[0:n]
            d = np.bitwise_xor(prev, nxt, out=self._d[:n])
            d &= np.negative(up, dtype=self._ints)  # per column: (prev ^ nxt) where up, else 0
            d ^= prev  # the row below in up columns, the row above in the others
            d ^= cur
            np.multiply(d, moved, out=d)  # ... ^ cur where moved, 0 elsewhere
            cur ^= d
        self._flat[self._base + (p + 1) * self._rstep] = x

    def _shift_by_column(self, r: np.ndarray, p: np.ndarray) -> None:
        """:meth:`replace`'s move, column-major: over the n - 1 pairs of neighbouring rows
        (i, i + 1), pair i moves up where r <= i < p, down where p <= i < r."""
        n = self.n
        if n < 2:
            return
        upper, lower = self._store[:, 1:n], self._store[:, 2:n + 1]
        up, down = r < p, r > p
        if up.any():
            band = self._band(np.where(up, r, 0), np.where(up, p, 0), n - 1)
            upper[band] = lower[band]
        if down.any():
            band = self._band(np.where(down, p, 0), np.where(down, r, 0), n - 1)
            lower[band] = upper[band]


class ScheduledEstimate:
    """Base of running estimates fed by a :class:`SampleSchedule`: the schedule, the
    current value and the accessors both estimators share. Subclasses write kept samples
    into their own arrays at the slot ``self._schedule.admit(t_s)`` returns and set
    ``self._value``.

    Args:
        warmup_s, slow_interval_s, capacity: see :class:`SampleSchedule`.

    Raises:
        InputError: parameters out of range.
    """

    def __init__(self, warmup_s: float, slow_interval_s: float, capacity: int) -> None:
        self._schedule = SampleSchedule(warmup_s, slow_interval_s, capacity)
        self._value: np.ndarray | None = None

    def reset(self) -> None:
        """Forget every sample."""
        self._schedule.reset()
        self._value = None

    @property
    def count(self) -> int:
        """Samples in the buffer."""
        return self._schedule.count

    @property
    def value(self) -> np.ndarray | None:
        """The current estimate, or None before the first sample (shape: see the subclass)."""
        return self._value


class RunningPercentiles(ScheduledEstimate):
    """Per-feature running percentiles over a time-scheduled ring buffer.

    Args:
        percentiles: (K,) percentiles in [0, 100], one per feature.
        warmup_s: seconds from the first sample during which every sample is kept.
        slow_interval_s: after the warm-up, at most one sample per this many seconds.
        capacity: ring-buffer length (samples); the oldest are overwritten.

    Attributes:
        value: (K,) float64 current percentiles, or None before the first sample.

    Raises:
        InputError: parameters out of range.
    """

    #: Rings of at least this many cells (capacity x K) keep :class:`SortedColumns`; smaller
    #: ones sort the ring afresh per kept sample, which is cheaper there (same bits either way).
    #: Measured per admitted sample, p50, both paths forced (benchmarks/calibration.py, 2-core
    #: dev VM, load average 11, row-major SortedColumns): 480 x 5: sort 0.027 ms vs incremental
    #: 0.10 ms; 480 x 19: 0.064 vs 0.14; 480 x 123: 0.28 vs 0.23; 480 x 195: 0.50 vs 0.38.
    #: With the column-major float64 SortedColumns (A/B interleaved in one process, thread CPU
    #: time, load average 6-7), at n = 20 / 150 / 470 samples: 480 x 19: sort 0.052 / 0.147 /
    #: 0.415 ms vs incremental 0.066 / 0.075 / 0.190; 480 x 5: 0.035 / 0.055 / 0.118 vs 0.066 /
    #: 0.062 / 0.123; 480 x 60: 0.107 / 0.431 / 1.27 vs 0.078 / 0.102 / 0.207.
    INCREMENTAL_MIN_CELLS = 4096

    def __init__(
        self,
        percentiles: np.ndarray | list[float],
        warmup_s: float = 5.0,
        slow_interval_s: float = 0.25,
        capacity: int = 480,
    ) -> None:
        q = np.asarray(percentiles, dtype=np.float64)
        if q.ndim != 1 or q.size == 0 or np.any((q < 0) | (q > 100)):
            raise InputError("percentiles must be a non-empty 1-D list of values in [0, 100]")
        super().__init__(warmup_s, slow_interval_s, capacity)
        self._q = q / 100.0
        self._buf = np.zeros((int(capacity), q.size), dtype=np.float64)  # the ring, by slot
        self._sorted = (SortedColumns(int(capacity), q.size, np.float64)
                        if int(capacity) * q.size >= self.INCREMENTAL_MIN_CELLS else None)
        self._cols = np.arange(q.size)
        self._weights: tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def reset(self) -> None:
        """Forget every sample."""
        super().reset()
        if self._sorted is not None:
            self._sorted.reset()

    def update(self, x: np.ndarray, t_s: float) -> bool:
        """Offer one sample; it is kept if the schedule says so.

        Cost per kept sample: for rings of :attr:`INCREMENTAL_MIN_CELLS` or more, one
        :class:`SortedColumns` insert or replace plus a look-up (O(capacity * K) memory
        passes, no sort); for smaller ones an ``np.sort`` of the ring.

        Args:
            x: (K,) feature vector (finite).
            t_s: its time in seconds (non-decreasing across calls).

        Returns:
            True when the sample was kept (and the percentiles recomputed).

        Raises:
            InputError: wrong shape.
        """
        x = np.asarray(x, dtype=np.float64)
        if x.shape != self._q.shape:
            raise InputError(f"expected a feature vector of shape {self._q.shape}, got {x.shape}")
        if not np.isfinite(x).all():
            return False
        full = self._schedule.count == self._schedule.capacity
        slot = self._schedule.admit(t_s)
        if slot is None:
            return False
        if self._sorted is not None and full:
            self._sorted.replace(self._buf[slot].copy(), x)
        elif self._sorted is not None:
            self._sorted.insert(x)
        self._buf[slot] = x
        self._value = self._percentiles()
        return True

    def _percentiles(self) -> np.ndarray:
        """(K,) float64 linear-interpolated percentiles (numpy's default method), one per
        column, from the kept-sorted columns (bit-identical to sorting the ring afresh, see
        :class:`SortedColumns` for signed zeros) or,
        for a small ring, from a fresh sort."""
        n = self._schedule.count
        s = self._sorted.sorted if self._sorted is not None else np.sort(self._buf[:n], axis=0)
        w = self._weights
        if w is None or w[0] != n:  # rows and weights depend on n only: kept while the ring is full
            pos = self._q * (n - 1)
            lo = np.floor(pos).astype(np.intp)
            hi = np.minimum(lo + 1, n - 1)
            frac = pos - lo
            w = self._weights = (n, lo, hi, 1.0 - frac, frac)
        _, lo, hi, keep, frac = w
        cols = self._cols
        return s[lo, cols] * keep + s[hi, cols] * frac
