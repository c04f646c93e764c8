"""Issue 18 (pose21): the calibration's sorted columns and the head-pose fit, bit-identical to frozen copies.

SortedColumns moved to a column-major layout (a shift by one row is one copy run per
column instead of xor passes over the whole buffer) and HeadPoseFitter.fit lost small-array
overhead. Frozen copies of both as merged at ceffc40 are kept here; on random data with
ties, signed zeros, NaN and infinities, and through the GeometricSolver on real tracked
recordings, the new code must give the same bytes.
"""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.core.landmarks import DEFAULT_HFOV_DEG, focal_length_px
from avatar_app.core.types import Landmarks
from avatar_app.reconstruction.head_pose import (
    _PIXEL_SHIFT,
    _STABLE,
    _STABLE_WEIGHTS,
    HeadPose,
    NeutralFace,
    _det3,
    check_landmarks,
)
from avatar_app.reconstruction import auto_neutral, calibration
from avatar_app.reconstruction.auto_neutral import NeutralEstimator
from avatar_app.reconstruction.calibration import SortedColumns
from avatar_app.reconstruction.geometric import GeometricSolver
from avatar_app.reconstruction.head_pose import HeadPoseFitter, make_neutral_face
from tests.clip_helpers import cached_track_clips


@pytest.fixture(scope="module")
def clips(testdata):
    """Real landmark clips (tests/clip_helpers.py, read from the landmark cache): GRID and an
    expressive recording."""
    return cached_track_clips(testdata)


# -- frozen copies (ceffc40) -----------------------------------------------------------
class FrozenSortedColumns:
    """SortedColumns at ceffc40 (row-major, branch-free xor passes over the whole buffer)."""

    _DENSE_RANK_WIDTH = 48  # narrower buffers count (sorted < key) directly: fewer numpy calls

    def __init__(self, capacity: int, width: int, dtype: type | np.dtype = np.float64) -> None:
        dt = np.dtype(dtype)
        if capacity < 1 or width < 1 or dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise InputError("capacity >= 1, width >= 1 and a float32 or float64 dtype are required")
        self.capacity, self.width = int(capacity), int(width)
        ints = np.int32 if dt.itemsize == 4 else np.int64
        # Row r + 1 of _pad holds sorted row r; row 0 and the rows after the n-th are +inf
        # padding, so the binary search never reads out of bounds and never passes the end.
        self._pad = np.empty((2 * self.capacity + 2, self.width), dt)
        self._bits = self._pad.view(ints)
        self._ints = ints
        self._cols = np.arange(self.width, dtype=np.intp)
        self._cols2 = np.concatenate([self._cols, self._cols])
        self._ridx = np.int16 if self.capacity < 2 ** 15 - 2 else np.int32
        self._rows = np.arange(self.capacity + 1, dtype=self._ridx)[:, None]
        self._a = np.empty((self.capacity + 1, self.width), bool)
        self._b = np.empty((self.capacity + 1, self.width), bool)
        self._d = np.empty((self.capacity + 1, self.width), ints)
        self.reset()

    def reset(self) -> None:
        """Forget every sample."""
        self._pad.fill(np.inf)
        self.n = 0

    @property
    def sorted(self) -> np.ndarray:
        """(n, width) the column-sorted samples; a view that the next update overwrites."""
        return self._pad[1:self.n + 1]

    @staticmethod
    def _before(vals: np.ndarray, keys: np.ndarray, plus0: np.ndarray | None) -> np.ndarray:
        """Whether each value sorts before its key: ``vals < keys``, and ``vals <= 0`` for a
        +0.0 key (``plus0``), so -0.0 sorts before +0.0 and each zero keeps its sign."""
        before = vals < keys
        if plus0 is not None:
            before |= (vals == keys) & plus0
        return before

    def _rank(self, keys: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(len(keys),) intp: how many of column ``cols[j]``'s n values sort before ``keys[j]``
        (:meth:`_before`); n for a NaN key."""
        n, w = self.n, self.width
        plus0 = (keys == 0) & ~np.signbit(keys)
        plus0 = plus0 if plus0.any() else None
        if w <= self._DENSE_RANK_WIDTH:
            s = self.sorted
            pos = np.concatenate([
                np.count_nonzero(self._before(s, keys[i:i + w], None if plus0 is None else plus0[i:i + w]), axis=0)
                for i in range(0, keys.size, w)]).astype(np.intp)
        else:
            flat = self._pad.reshape(-1)
            pos = cols.copy()  # flat index of pad row c = sorted row c - 1, from c = 0
            step = 1 << (n.bit_length() - 1) if n else 0
            while step:
                cand = pos + step * w
                pos += self._before(flat.take(cand), keys, plus0) * (step * w)
                step >>= 1
            pos //= w
        pos[np.isnan(keys)] = n
        return pos

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
        p = self._rank(x, self._cols)
        below = np.greater(self._rows[:n + 1], p.astype(self._ridx), out=self._b[:n + 1])
        cur = self._bits[1:n + 2]  # rows past the insertion point move one row down
        d = np.bitwise_xor(self._bits[0:n + 1], cur, out=self._d[:n + 1])
        np.multiply(d, below, out=d)  # prev ^ cur past the insertion point, 0 before it
        cur ^= d
        self._pad[p + 1, self._cols] = x
        self.n = n + 1

    def replace(self, old: np.ndarray, x: np.ndarray) -> None:
        """Swap one stored sample for a new one (the ring overwrote its slot).

        Args:
            old: (width,) the values leaving (each must be in its column).
            x: (width,) the values arriving.
        """
        n, w = self.n, self.width
        q = self._rank(np.concatenate([old, x]), self._cols2)
        # the row holding old: the first equal one (the last for +0.0, which sorts after -0.0;
        # the last row for NaN)
        r = np.minimum(q[:w] - ((old == 0) & ~np.signbit(old)), n - 1)
        plus0 = (x == 0) & ~np.signbit(x)
        p = np.minimum(q[w:] - self._before(old, x, plus0 if plus0.any() else None), n - 1)  # x's row once old is gone
        # Rows r..p-1 take the row below (r < p); rows p+1..r the row above (r > p).
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
        self._pad[p + 1, self._cols] = x


def frozen_pixel_space(landmarks: Landmarks) -> np.ndarray:
    """landmarks_to_pixel_space at ceffc40."""
    out = check_landmarks(landmarks).astype(np.float64)  # a new array, scaled in place
    w, h = landmarks.image_size
    # per column (x - 0.5) w, (0.5 - y) h = (y - 0.5) (-h), -z w = (z - 0) (-w): the same roundings
    out -= _PIXEL_SHIFT
    out *= np.array([w, -h, -w], np.float64)
    return out


def frozen_unproject(p: np.ndarray, px_per_m: float, z_ref_px: float, f_px: float) -> np.ndarray:
    """_unproject at ceffc40."""
    depth = f_px / px_per_m - (p[:, 2] - z_ref_px) / px_per_m
    out = np.empty_like(p)
    out[:, :2] = p[:, :2] * depth[:, None] / f_px  # x depth / f, y depth / f
    out[:, 2] = -depth
    return out


class FrozenHeadPoseFitter:
    """HeadPoseFitter at ceffc40."""

    def __init__(self, neutral: NeutralFace, hfov_deg: float = DEFAULT_HFOV_DEG) -> None:
        self.neutral = neutral
        self.hfov_deg = float(hfov_deg)
        self._ref_s = neutral.points_m[_STABLE].astype(np.float64)
        self._w = _STABLE_WEIGHTS / _STABLE_WEIGHTS.sum()
        self._mu_s = self._w @ self._ref_s
        self._xs = self._ref_s - self._mu_s
        self._var_s = float(self._w @ np.einsum("ni,ni->n", self._xs, self._xs))
        if not self._var_s > 0:
            raise InputError("neutral face landmarks are degenerate (all stable points coincide)")
        self._wxs = self._xs * self._w[:, None]
        self._f_cache: tuple[int, float] = (-1, 0.0)

    def _similarity(self, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """``dst ~ s R ref + t`` (Kabsch-Umeyama) for the stable points ``dst`` (K, 3) float64."""
        mu_d = self._w @ dst
        cov = (dst - mu_d).T @ self._wxs  # sum_n w_n d_n s_n^T
        u, sig, vt = np.linalg.svd(cov)
        d = np.ones(3)
        if _det3(u) * _det3(vt) < 0:  # the reflection fix (Umeyama's S)
            d[2] = -1.0
        rot = (u * d) @ vt
        scale = float(sig @ d) / self._var_s
        return rot, mu_d - scale * (rot @ self._mu_s), scale

    def fit(self, landmarks: Landmarks) -> HeadPose:
        """The HeadPose of one frame, as ``estimate_head_pose(landmarks, neutral, hfov_deg)``.

        Args:
            landmarks: one face (478 points) of the current frame.

        Returns:
            The HeadPose.

        Raises:
            InputError: invalid landmarks or degenerate (zero-size) faces.
        """
        p = frozen_pixel_space(landmarks)
        width = landmarks.image_size[0]
        if self._f_cache[0] != width:
            self._f_cache = (width, focal_length_px(width, self.hfov_deg))
        f = self._f_cache[1]
        rot, t, c = self._similarity(p[_STABLE])
        if not c > 0:
            raise InputError("face landmarks are degenerate (zero size)")
        cam = frozen_unproject(p, c, float(t[2]), f)
        rot, trans, scale = self._similarity(cam[_STABLE])
        c *= scale
        trans = trans / scale
        points_m = (cam / scale - trans) @ rot
        resid_m = points_m[_STABLE] - self._ref_s
        rms_px = float(np.sqrt(np.einsum("ij,ij->i", resid_m, resid_m).sum() / len(resid_m))) * c
        return HeadPose(rotation=rot.astype(np.float32), translation=trans.astype(np.float32),
                        points_m=points_m.astype(np.float32), px_per_m=float(c), rms_px=rms_px)


# -- the tests -------------------------------------------------------------------------
def _pose_bytes(pose: HeadPose) -> bytes:
    return (pose.rotation.tobytes() + pose.translation.tobytes() + pose.points_m.tobytes()
            + np.array([pose.px_per_m, pose.rms_px]).tobytes())


def test_head_pose_fitter_bit_identical_to_the_frozen_fitter_on_real_clips(clips):
    for rel, (lms, _) in clips.items():
        for neutral in (make_neutral_face(lms[0], level_yaw_roll=True), make_neutral_face(lms[-1])):
            fast, frozen = HeadPoseFitter(neutral), FrozenHeadPoseFitter(neutral)
            differ = [k for k, lm in enumerate(lms) if _pose_bytes(fast.fit(lm)) != _pose_bytes(frozen.fit(lm))]
            assert not differ, f"{rel}: frames {differ[:10]} differ"


def test_head_pose_fitter_bit_identical_on_other_image_sizes_and_reflections(clips):
    """Other image sizes (the cached pixel scales), and the reflection branch of the fit."""
    lms, _ = clips["video/expressive/lp_d9.mp4"]
    rng = np.random.default_rng(3)
    neutral = make_neutral_face(lms[0], level_yaw_roll=True)
    mirrored = NeutralFace(points_m=neutral.points_m * np.array([-1, 1, 1], np.float32))  # a reflection away
    for nf in (neutral, mirrored):
        fast, frozen = HeadPoseFitter(nf), FrozenHeadPoseFitter(nf)
        for lm in lms[::7]:
            for size in ((640, 480), (1280, 720), (333, 517)):
                pts = lm.points + rng.normal(0, 1e-3, lm.points.shape).astype(np.float32)
                other = Landmarks(points=pts, image_size=size)
                assert _pose_bytes(fast.fit(other)) == _pose_bytes(frozen.fit(other))


def _random_samples(rng: np.random.Generator, count: int, width: int, dtype, ring: np.ndarray, n: int):
    """Samples with ties, repeats, NaN, infinities and signed zeros (as test_reconstruction_incremental)."""
    for k in range(count):
        kind = k % 4
        if kind == 0:
            x = rng.integers(-2, 3, width).astype(dtype)
        elif kind == 1:
            x = ring[rng.integers(0, max(n, 1))].copy()
        else:
            x = rng.normal(size=width).astype(dtype)
        if rng.random() < 0.1:
            x[rng.random(width) < 0.3] = np.nan
        if rng.random() < 0.1:
            x[rng.random(width) < 0.3] = rng.choice([-np.inf, np.inf])
        if rng.random() < 0.3:
            x[rng.random(width) < 0.5] = rng.choice([-0.0, 0.0])
        yield x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 5, 60, 195])
@pytest.mark.parametrize("dense_cells", [None, 0, 10 ** 9])  # default; binary search / count from 49 columns
def test_sorted_columns_bit_identical_to_the_frozen_layout(dtype, width, dense_cells, monkeypatch):
    if dense_cells is not None:
        monkeypatch.setattr(SortedColumns, "_DENSE_RANK_CELLS", dense_cells)
    rng = np.random.default_rng(width * 11 + np.dtype(dtype).itemsize)
    for capacity in (1, 2, 3, 17, 130):
        fast, frozen = SortedColumns(capacity, width, dtype), FrozenSortedColumns(capacity, width, dtype)
        ring = np.zeros((capacity, width), dtype)
        n = slot = 0
        for k, x in enumerate(_random_samples(rng, 4 * capacity + 30, width, dtype, ring, n)):
            if n < capacity:
                fast.insert(x)
                frozen.insert(x)
                n += 1
            else:
                fast.replace(ring[slot].copy(), x)
                frozen.replace(ring[slot].copy(), x)
            ring[slot] = x
            slot = (slot + 1) % capacity
            assert fast.n == frozen.n == n
            assert np.ascontiguousarray(fast.sorted).tobytes() == frozen.sorted.tobytes(), (capacity, k)
        fast.reset()
        assert fast.sorted.shape == (0, width)


def _solver_bytes(lms, times) -> list[bytes]:
    solver = GeometricSolver()
    out = []
    for lm, t in zip(lms, times):
        p = solver.reconstruct(lm, t)
        out.append(b"".join(a.tobytes() for a in (p.blendshapes, p.rotation, p.translation, p.gaze,
                                                  solver.last_features, solver._region_ref)))
    return out


def test_solver_and_neutral_estimator_bit_identical_with_the_frozen_code_on_real_clips(clips, monkeypatch):
    """The GeometricSolver (its pose, features, running percentiles, weights) and NeutralEstimator
    (sorted columns of 666 float32) on real faces: the bytes of the frozen code, every frame
    (its 19-feature percentiles now incremental where the frozen code sorted afresh)."""
    def neutral_bytes(lms, times) -> list[bytes]:
        est, neutral = NeutralEstimator(warmup_s=1.0, slow_interval_s=0.1, capacity=40), None
        out = []
        for lm, t in zip(lms, times):
            neutral = neutral or make_neutral_face(lm, level_yaw_roll=True)
            if est.update(HeadPoseFitter(neutral).fit(lm).points_m, t):
                out.append(est.value.tobytes())
        return out

    fast = {rel: (_solver_bytes(lms, t), neutral_bytes(lms, t)) for rel, (lms, t) in clips.items()}
    monkeypatch.setattr(calibration, "SortedColumns", FrozenSortedColumns)
    monkeypatch.setattr(calibration.RunningPercentiles, "INCREMENTAL_MIN_CELLS", 32768)  # as at ceffc40
    monkeypatch.setattr(auto_neutral, "SortedColumns", FrozenSortedColumns)
    monkeypatch.setattr(HeadPoseFitter, "fit", FrozenHeadPoseFitter.fit)
    monkeypatch.setattr(HeadPoseFitter, "_similarity", FrozenHeadPoseFitter._similarity)
    for rel, (lms, t) in clips.items():
        frozen = (_solver_bytes(lms, t), neutral_bytes(lms, t))
        for name, a, b in (("solver", fast[rel][0], frozen[0]), ("neutral", fast[rel][1], frozen[1])):
            assert len(a) == len(b) and len(a) > 20
            differ = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
            assert not differ, f"{rel} {name}: frames {differ[:10]} differ"
