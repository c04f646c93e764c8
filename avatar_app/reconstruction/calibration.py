"""Causal running percentiles of face features: automatic per-user calibration.

A ring buffer of feature vectors is filled on a time schedule: every sample
during a warm-up (the first seconds the face is seen), then one sample per
``slow_interval_s`` (a slow drift follows lighting, posture and the user's
habits). The reference of each feature is a percentile of the buffer, e.g. a
high percentile of the eye aperture for "eyes open" and a low percentile of the
lip gap for "mouth closed". Everything depends only on the samples and their
timestamps, so the same frames give the same references offline and live.
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
        self._buf = np.zeros((int(capacity), q.size), dtype=np.float64)

    def update(self, x: np.ndarray, t_s: float) -> bool:
        """Offer one sample; it is kept if the schedule says so.

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
        if not np.all(np.isfinite(x)):
            return False
        slot = self._schedule.admit(t_s)
        if slot is None:
            return False
        self._buf[slot] = x
        self._value = self._percentiles()
        return True

    def _percentiles(self) -> np.ndarray:
        """Linear-interpolated percentiles (numpy's default method), one per column."""
        n = self._schedule.count
        s = np.sort(self._buf[:n], axis=0)
        pos = self._q * (n - 1)
        lo = np.floor(pos).astype(np.intp)
        hi = np.minimum(lo + 1, n - 1)
        frac = pos - lo
        cols = np.arange(s.shape[1])
        return s[lo, cols] * (1.0 - frac) + s[hi, cols] * frac
