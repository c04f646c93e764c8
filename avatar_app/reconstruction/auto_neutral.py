"""Automatic neutral face for the face_recon engine when the user never calibrated one.

The engine reads expressions as displacements from the user's neutral face
(:mod:`avatar_app.reconstruction.normalise`). Without an explicit
calibration, :class:`NeutralEstimator` builds that neutral from the aligned
(head-frame) faces seen so far, on the same time schedule as the geometric
solver's running calibration (every frame during a warm-up of the first
seconds, then one sample per ``slow_interval_s``, a bounded ring buffer), and
region by region, because no single frame is neutral everywhere:

- each eye (lids, iris and the skin around them): the mean over samples whose
  eye aperture lies between the 40th and 90th percentile of that eye's
  apertures (open eyes: no blink, no squint, no surprise);
- the mouth and jaw (everything below the nose): the mean over samples whose
  inner lips touch (lip gap < ``lips_closed_m``), or when none do, over the
  samples with the smallest fifth of lip gaps;
- everything else (brows, forehead, nose, cheeks): the per-point median.

Deterministic: it depends only on the faces and their timestamps, so offline
and live runs agree.

Incremental: the median is kept by a
:class:`~avatar_app.reconstruction.calibration.SortedColumns` of the points
outside the eyes and mouth (222 of 478; the eye points' median is only needed
when no sample falls in an eye's aperture band, then it is computed from the
buffer), and the regions' samples are stored contiguously, so an admitted sample
costs no re-sort of the whole buffer. The values are bit-identical to the
from-scratch ``np.median`` / ``mean`` over the buffer (signed zeros: see
``SortedColumns``). Measured by
benchmarks/calibration.py with a full buffer of 240 faces (median of 600 admitted
samples, A/B interleaved, 2-core dev VM shared with other work, numpy 1.26):
8.5 ms per admitted sample before (``np.median`` over (240, 478, 3) plus the region
means) vs 1.08 ms after at load average 5.0 (p95 19.5 vs 5.4 ms); 6.9 vs 1.07 ms
at 3.9-4.4.
"""
from __future__ import annotations

import numpy as np

from avatar_app.avatar import face_model_measure as fm
from avatar_app.reconstruction import normalise as N
from avatar_app.reconstruction.calibration import ScheduledEstimate, SortedColumns


def _percentiles_1d(x: np.ndarray, fractions: tuple[float, ...]) -> list[float]:
    """``np.percentile(x, 100 * fractions)`` (the default 'linear' method) of a 1-D float64
    array as Python floats, numpy's arithmetic step by step (virtual index ``(n - 1) * q``,
    its ``_lerp`` with the weight's two branches; NaN when ``x`` holds one), without the
    ~0.1 ms of numpy calls ``np.percentile`` costs on a few hundred values.

    Args:
        x: (n,) float64, n >= 1.
        fractions: quantiles in [0, 1] (percentile / 100, as numpy divides them).

    Returns:
        One float per fraction: the same doubles ``np.percentile`` gives (NaN payloads aside,
        and a zero's sign where the values hold both zeros: ``np.partition`` orders them
        otherwise than ``np.sort``; the estimator only compares against these values).
    """
    s = np.sort(x)
    n = s.size
    last = float(s[n - 1])
    if last != last:  # NaN sorts last: numpy returns it for every quantile
        return [last] * len(fractions)
    out = []
    for q in fractions:
        v = (n - 1) * q
        if v >= n - 1:  # numpy's above-bounds case: both neighbours the last, index -1
            prev = nxt = n - 1
            gamma = v + 1
        else:
            prev = int(v)  # floor, v >= 0
            nxt = prev + 1
            gamma = v - prev
        a, b = float(s[prev]), float(s[nxt])
        d = b - a
        out.append(b - d * (1 - gamma) if gamma >= 0.5 else a + d * gamma)
    return out


def _regions() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boolean (478,) masks of the left-eye, right-eye and mouth regions on the template."""
    t = N.template()
    eye_l = 0.5 * (t[263] + t[362])
    eye_r = 0.5 * (t[33] + t[133])
    left = np.linalg.norm(t[:, :2] - eye_l[:2], axis=1) < 0.016
    right = np.linalg.norm(t[:, :2] - eye_r[:2], axis=1) < 0.016
    left[468:473] = False
    right[473:478] = False
    left[473:478] = True
    right[468:473] = True
    mouth = t[:, 1] < t[2, 1] - 0.004  # below the subnasale (landmark 2)
    mouth &= ~(left | right)
    return left, right, mouth


class NeutralEstimator(ScheduledEstimate):
    """Running, region-wise estimate of the user's neutral face in the head frame.

    Args:
        warmup_s: seconds from the first face during which every frame is kept.
        slow_interval_s: afterwards, at most one sample per this many seconds.
        capacity: ring-buffer length (samples).
        lips_closed_m: inner-lip gap below which the lips touch, metres
            (the geometric solver's figure).

    Attributes:
        value: (478, 3) float32 current neutral estimate (head frame, metres), or None
            before any sample.

    Raises:
        InputError: parameters out of range.
    """

    def __init__(self, warmup_s: float = 5.0, slow_interval_s: float = 0.25, capacity: int = 240,
                 lips_closed_m: float = 0.0015) -> None:
        super().__init__(warmup_s, slow_interval_s, capacity)
        self.warmup_s = self._schedule.warmup_s
        self.slow_interval_s = self._schedule.slow_interval_s
        self.lips_closed_m = float(lips_closed_m)
        cap = int(capacity)
        self._buf = np.zeros((cap, 478, 3), np.float32)  # the ring, by slot
        self._feat = np.zeros((cap, 3), np.float64)  # aperture L, aperture R, lip gap
        self._left, self._right, self._mouth = _regions()
        self._other = ~(self._left | self._right | self._mouth)  # the points the median gives
        # The same point sets as index arrays: a fancy-index gather / scatter by index is
        # cheaper than by boolean mask (same values, same order).
        self._other_idx = np.flatnonzero(self._other)
        self._region_idx = (("left", np.flatnonzero(self._left)), ("right", np.flatnonzero(self._right)),
                            ("mouth", np.flatnonzero(self._mouth)))
        # Each region's points of the ring, contiguous (cap, points, 3) float32: the means
        # read them without gathering points out of the whole face.
        self._region_buf = {name: np.zeros((cap, int(mask.sum()), 3), np.float32)
                            for name, mask in (("left", self._left), ("right", self._right),
                                               ("mouth", self._mouth))}
        self._sorted = SortedColumns(cap, 3 * int(self._other.sum()), np.float32)

    def in_warmup(self, t_s: float) -> bool:
        """Whether ``t_s`` falls in the warm-up (every frame kept)."""
        return self._schedule.in_warmup(t_s)

    def update(self, head: np.ndarray, t_s: float) -> bool:
        """Offer one aligned face; it is kept if the schedule says so.

        Args:
            head: (478, 3) float head-frame points, metres (:func:`normalise.align`).
            t_s: its time, seconds (non-decreasing).

        Returns:
            True when kept (and the estimate recomputed).
        """
        full = self._schedule.count == self._schedule.capacity
        slot = self._schedule.admit(t_s)
        if slot is None:
            return False
        h = np.asarray(head, np.float32)
        other = h[self._other_idx].reshape(-1)
        if full:
            self._sorted.replace(self._buf[slot][self._other_idx].reshape(-1), other)
        else:
            self._sorted.insert(other)
        self._buf[slot] = h
        for name, idx in self._region_idx:
            self._region_buf[name][slot] = h[idx]
        self._feat[slot] = (fm.eye_aperture(h, "left"), fm.eye_aperture(h, "right"), fm.lip_gap(h))
        self._value = self._estimate()
        return True

    def reset(self) -> None:
        """Forget every sample."""
        super().reset()
        self._sorted.reset()

    def _median_other(self) -> np.ndarray:
        """(points outside eyes and mouth, 3) float32 per-coordinate median of the buffer:
        ``np.median``'s arithmetic (the mean of the middle one or two sorted values, NaN
        where a column holds one) on the kept-sorted columns."""
        n = self._schedule.count
        s = self._sorted.sorted
        h = n // 2
        med = np.mean(s[h:h + 1] if n % 2 else s[h - 1:h + 1], axis=0)
        last = s[n - 1]
        nan = np.isnan(last)
        if nan.any():
            np.copyto(med, last, where=nan)
        return med.reshape(-1, 3)

    def _estimate(self) -> np.ndarray:
        """(478, 3) float32 the region-wise neutral of the buffer (module docstring), a new array."""
        n = self._schedule.count
        buf = self._buf[:n]
        feat = self._feat[:n]
        if n > 2:
            out = np.empty((478, 3), np.float32)
            out[self._other_idx] = self._median_other()
        else:
            out = buf.mean(0)
        for col, name, mask in ((0, "left", self._left), (1, "right", self._right)):
            lo, hi = _percentiles_1d(feat[:, col], (40 / 100, 90 / 100))
            sel = (feat[:, col] >= lo) & (feat[:, col] <= hi)
            if sel.any():
                out[mask] = self._region_buf[name][:n][sel].mean(0)
            elif n > 2:  # no sample in the band (NaN apertures): the median, from the buffer
                out[mask] = np.median(buf[:, mask], axis=0)
        gap = feat[:, 2]
        sel = gap < self.lips_closed_m
        if not sel.any():
            sel = gap <= _percentiles_1d(gap, (20 / 100,))[0]
        out[self._mouth] = self._region_buf["mouth"][:n][sel].mean(0)
        return out.astype(np.float32)
