"""The incremental calibration estimators equal a from-scratch recomputation, bit for bit.

SortedColumns, RunningPercentiles and NeutralEstimator keep sorted columns instead of
re-sorting the ring buffer for each admitted sample; here every admitted sample of long
randomized runs (warm-up with the buffer growing, then the ring wrapping round many times,
ties, reset in the middle) is checked against the formulas the estimators used before,
computed afresh from the samples the schedule kept, with exact equality of the bits.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from avatar_app.avatar import face_model_measure as fm
from avatar_app.core.errors import InputError
from avatar_app.reconstruction import normalise as N
from avatar_app.reconstruction.auto_neutral import NeutralEstimator, _percentiles_1d, _regions
from avatar_app.reconstruction.calibration import RunningPercentiles, SampleSchedule, SortedColumns


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bits; NaN matches any NaN (np.sort's SIMD path rewrites payloads)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    ints = {4: np.int32, 8: np.int64}[a.dtype.itemsize]
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a.view(ints)[~nan], b.view(ints)[~nan])


def _total_order_sort(a: np.ndarray) -> np.ndarray:
    """np.sort along axis 0 with -0.0 before +0.0 (np.sort leaves their order unspecified)."""
    order = np.lexsort((~np.signbit(a), a), axis=0)
    return np.take_along_axis(a, order, axis=0)


def _times(rng: np.random.Generator, count: int, slow_interval_s: float) -> np.ndarray:
    """Non-decreasing frame times: mostly 30 fps, with repeats and gaps."""
    dt = rng.choice([0.0, 1 / 30, 1 / 30, 1 / 30, 0.1, slow_interval_s], size=count)
    return np.cumsum(dt)


def _ring(kept: list[np.ndarray], capacity: int) -> np.ndarray:
    """The samples a ring of ``capacity`` holds after ``kept`` (order irrelevant to sorting)."""
    return np.array(kept[-capacity:])


# -- SortedColumns ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 5, 60])  # both rank searches (dense <= 48 columns, binary above)
@pytest.mark.parametrize("dense_cells", [None, 0])  # the default cell bound, or the binary search from 49 columns
def test_sorted_columns_equal_np_sort_after_every_insert_and_replace(dtype, width, dense_cells, monkeypatch):
    """Each ring fills, then has every slot replaced twice and more (3 * capacity + 40 samples: the
    replace path's checks do not depend on how many times the ring turned over)."""
    if dense_cells is not None:
        monkeypatch.setattr(SortedColumns, "_DENSE_RANK_CELLS", dense_cells)
    rng = np.random.default_rng(width * 7 + np.dtype(dtype).itemsize)
    for capacity in (1, 2, 3, 16, 33, 257):
        sc = SortedColumns(capacity, width, dtype)
        ring = np.zeros((capacity, width), dtype)
        n = slot = 0
        for k in range(3 * capacity + 40):
            kind = k % 4
            if kind == 0:  # many ties
                x = rng.integers(-2, 3, width).astype(dtype)
            elif kind == 1:  # a repeat of a stored sample
                x = ring[rng.integers(0, max(n, 1))].copy()
            else:
                x = rng.normal(size=width).astype(dtype)
            if rng.random() < 0.1:
                x[rng.random(width) < 0.3] = np.nan
            if rng.random() < 0.1:
                x[rng.random(width) < 0.3] = rng.choice([-np.inf, np.inf])
            if rng.random() < 0.3:
                x[rng.random(width) < 0.5] = rng.choice([-0.0, 0.0])
            if n < capacity:
                sc.insert(x)
                n += 1
            else:
                sc.replace(ring[slot].copy(), x)
            ring[slot] = x
            slot = (slot + 1) % capacity
            assert sc.n == n
            assert np.array_equal(sc.sorted, np.sort(ring[:n], axis=0), equal_nan=True), (capacity, k)
            assert _same_bits(sc.sorted, _total_order_sort(ring[:n])), (capacity, k)
        with pytest.raises(InputError, match="full"):
            sc.insert(x)
        sc.reset()
        assert sc.n == 0 and sc.sorted.shape == (0, width)
        sc.insert(ring[0])
        assert _same_bits(sc.sorted, ring[:1])


def test_sorted_columns_reject_bad_parameters():
    with pytest.raises(InputError):
        SortedColumns(0, 3)
    with pytest.raises(InputError):
        SortedColumns(4, 3, np.int64)


# -- RunningPercentiles ---------------------------------------------------------------------
def _reference_percentiles(q: np.ndarray, ring: np.ndarray) -> np.ndarray:
    """The former RunningPercentiles._percentiles: np.sort of the ring + linear interpolation."""
    n = ring.shape[0]
    s = np.sort(ring, axis=0)
    pos = q / 100.0 * (n - 1)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    frac = pos - lo
    cols = np.arange(s.shape[1])
    return s[lo, cols] * (1.0 - frac) + s[hi, cols] * frac


@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize("width", [3, 19, 120])
def test_running_percentiles_equal_a_fresh_sort_at_every_admitted_sample(width, incremental, monkeypatch):
    monkeypatch.setattr(RunningPercentiles, "INCREMENTAL_MIN_CELLS", 1 if incremental else 10 ** 9)
    rng = np.random.default_rng(width)
    q = rng.uniform(0, 100, width)
    q[:2] = (0.0, 100.0)
    capacity, warmup_s, slow_s = 37, 1.0, 0.25
    rp = RunningPercentiles(q, warmup_s=warmup_s, slow_interval_s=slow_s, capacity=capacity)
    assert (rp._sorted is not None) == incremental
    times = _times(rng, 1500, slow_s)
    kept: list[np.ndarray] = []
    held: list[tuple[np.ndarray, np.ndarray]] = []  # (a returned value, a copy of it)
    wraps = 0
    for i, t in enumerate(times):
        if i == 900:  # reset in the middle: a second warm-up from an empty buffer
            rp.reset()
            kept.clear()
            assert rp.value is None and rp.count == 0
        x = rng.integers(-3, 4, width).astype(np.float64) if i % 3 else rng.normal(size=width)
        if i % 97 == 5:
            x[0] = np.nan  # skipped, never stored
        full = rp.count == capacity
        if rp.update(x, float(t)):
            kept.append(x.copy())
            wraps += full
            assert rp.count == min(len(kept), capacity)
            assert _same_bits(rp.value, _reference_percentiles(q, _ring(kept, capacity))), i
            held.append((rp.value, rp.value.copy()))
    assert wraps > 5 * capacity  # the ring went round many times
    for value, copy in held:  # no returned value was a view the later updates overwrote
        assert _same_bits(value, copy)


def test_running_percentiles_schedule_is_the_sample_schedule():
    rng = np.random.default_rng(5)
    rp = RunningPercentiles([50.0], warmup_s=0.5, slow_interval_s=0.2, capacity=8)
    ref = SampleSchedule(0.5, 0.2, 8)
    for t in _times(rng, 300, 0.2):
        assert rp.update(np.array([rng.normal()]), float(t)) == (ref.admit(float(t)) is not None)


# -- NeutralEstimator -------------------------------------------------------------------------
def _reference_neutral(ring: np.ndarray, feat: np.ndarray, lips_closed_m: float) -> np.ndarray:
    """The former NeutralEstimator._estimate, verbatim, on the kept samples in ring order."""
    left, right, mouth = _regions()
    n = ring.shape[0]
    buf = ring
    out = np.median(buf, axis=0) if n > 2 else buf.mean(0)
    for col, mask in ((0, left), (1, right)):
        lo, hi = np.percentile(feat[:, col], [40, 90])
        sel = (feat[:, col] >= lo) & (feat[:, col] <= hi)
        if sel.any():
            out[mask] = buf[sel][:, mask].mean(0)
    gap = feat[:, 2]
    sel = gap < lips_closed_m
    if not sel.any():
        sel = gap <= np.percentile(gap, 20)
    out[mouth] = buf[sel][:, mouth].mean(0)
    return out.astype(np.float32)


def _faces(rng: np.random.Generator, count: int) -> np.ndarray:
    """(count, 478, 3) float32 head-frame faces: template + noise on a coarse grid (ties),
    some blinking, some with the mouth open, some repeated."""
    t = N.template().astype(np.float32)
    left, right, mouth = _regions()
    faces = np.empty((count, 478, 3), np.float32)
    for i in range(count):
        f = t + np.round(rng.normal(scale=4e-4, size=t.shape) / 1e-4) * 1e-4
        if i % 7 == 3:
            f[left | right, 1] = t[left | right, 1] * 0.98  # squeezed eyes
        if i % 5 == 1:
            f[mouth, 1] -= 0.004 * (t[mouth, 1] < t[14, 1])  # the lower lip drops
        if i % 11 == 4 and i:
            f = faces[i - 1]
        faces[i] = f
    return faces


def _ring_of(kept: list[int], slots: list[int], capacity: int, data: np.ndarray) -> np.ndarray:
    """The ring in slot order (the order the means sum in) from the kept indices and their slots."""
    ring: dict[int, int] = {}
    for idx, slot in zip(kept, slots):
        ring[slot] = idx
    return data[[ring[s] for s in range(len(ring))]]


def _offer(est, ref, h, t: float, i: int, kept: list[int], slots: list[int], capacity: int, faces, feats):
    """Offer sample ``i`` to the estimator and to the reference schedule; the former estimate
    recomputed from scratch over the ring when the sample was kept, else None."""
    slot = ref.admit(float(t))
    assert est.update(h, float(t)) == (slot is not None)
    if slot is None:
        return None
    kept.append(i)
    slots.append(slot)
    ring = _ring_of(kept, slots, capacity, faces)
    feat = _ring_of(kept, slots, capacity, feats)
    return _reference_neutral(ring.copy(), feat, est.lips_closed_m)


@pytest.mark.parametrize("capacity", [3, 16, 17])  # even and odd full buffers, and the n <= 2 start
def test_neutral_estimator_equals_the_former_from_scratch_estimate_at_every_admitted_sample(capacity):
    rng = np.random.default_rng(capacity)
    faces = _faces(rng, 600)
    feats = np.array([(fm.eye_aperture(h, "left"), fm.eye_aperture(h, "right"), fm.lip_gap(h)) for h in faces])
    warmup_s, slow_s = 0.4, 0.1
    est = NeutralEstimator(warmup_s=warmup_s, slow_interval_s=slow_s, capacity=capacity)
    ref = SampleSchedule(warmup_s, slow_s, capacity)
    times = _times(rng, len(faces), slow_s)
    kept: list[int] = []
    slots: list[int] = []
    held = []
    for i, (h, t) in enumerate(zip(faces, times)):
        if i == 300:
            est.reset()
            ref.reset()
            kept.clear()
            slots.clear()
        expected = _offer(est, ref, h, t, i, kept, slots, capacity, faces, feats)
        if expected is None:
            continue
        assert est.value.dtype == np.float32 and est.value.shape == (478, 3)
        assert _same_bits(est.value, expected), (capacity, i, len(kept))
        held.append((est.value, est.value.copy()))
    assert len(kept) > 4 * capacity  # wrapped round several times after the reset
    for value, copy in held:
        assert _same_bits(value, copy)


def test_neutral_estimator_with_nan_points_equals_the_former_estimate():
    """NaN points (never from normalise.align, but update takes any array): the median is NaN
    where a column holds one, and an eye whose apertures are NaN falls back to the median."""
    rng = np.random.default_rng(9)
    faces = _faces(rng, 60)
    left, right, mouth = _regions()
    assert not (left | right | mouth)[5]
    faces[10:40:3, 5] = np.nan  # a point outside the eyes and mouth, in some samples
    faces[20:60:2][:, left] = np.nan  # the left eye, so its aperture is NaN
    capacity = 9
    est = NeutralEstimator(warmup_s=0.3, slow_interval_s=0.1, capacity=capacity)
    ref = SampleSchedule(0.3, 0.1, capacity)
    kept: list[int] = []
    slots: list[int] = []
    nan_other = nan_eye = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        feats = np.array([(fm.eye_aperture(h, "left"), fm.eye_aperture(h, "right"), fm.lip_gap(h)) for h in faces])
        for i, (h, t) in enumerate(zip(faces, np.arange(len(faces)) / 30.0)):
            expected = _offer(est, ref, h, t, i, kept, slots, capacity, faces, feats)
            if expected is None:
                continue
            assert _same_bits(est.value, expected), i
            nan_other |= bool(np.isnan(est.value[5]).all())
            nan_eye |= bool(np.isnan(est.value[left]).any())
    assert nan_other and nan_eye  # both NaN paths ran


def test_percentiles_1d_bit_identical_to_np_percentile():
    """The Python-float percentile of NeutralEstimator gives np.percentile's doubles, byte for
    byte (NaN for a column holding one), on the sizes and quantiles the estimator uses, zeros
    of both signs and ties included; a zero result may differ in sign only (np.partition and
    np.sort order -0.0 / +0.0 differently), equal as a value, which is all the estimator's
    comparisons read."""
    rng = np.random.default_rng(7)
    for trial in range(3000):
        n = int(rng.integers(1, 241))
        x = rng.normal(0.0, 1e-3, n)
        if trial % 5 == 0:
            x[: n // 2] = 0.0
        if trial % 11 == 0:
            x[: n // 3] = -0.0
        if trial % 7 == 0:
            x[int(rng.integers(0, n))] = np.nan
        for qs in ((40, 90), (20,)):
            ref = np.percentile(x, list(qs))
            got = _percentiles_1d(x, tuple(q / 100 for q in qs))
            for r, g in zip(ref, got):
                if np.isnan(r):
                    assert np.isnan(g)
                elif r == 0.0:
                    assert g == 0.0, (n, qs, r, g)
                else:
                    assert np.float64(g).tobytes() == np.float64(r).tobytes(), (n, qs, r, g)
