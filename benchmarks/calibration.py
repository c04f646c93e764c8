"""Automatic-calibration estimators: cost per admitted sample, from-scratch vs incremental.

Run by hand (never as a test):

    .venv/bin/python benchmarks/calibration.py [--reps 300] [--out benchmarks/results/calibration.json]

Fills each estimator's ring to capacity (the state after warm-up), then times
``update`` calls that are all admitted (one slow-interval apart), alternating
between the former from-scratch recomputation (np.sort of the ring per sample for
RunningPercentiles; np.median over the faces plus the region means for
NeutralEstimator, re-implemented here as subclasses) and the incremental classes,
so both see the same machine load. Shapes are the geometric solver's four
RunningPercentiles (480 samples of 19, 5, 195 and 123 columns) and the learned
engine's NeutralEstimator (240 faces of 478 x 3). Reports the median and the 95th
percentile in ms with the load average, and checks both give the same bits.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from avatar_app.avatar import face_model_measure as fm  # noqa: E402
from avatar_app.reconstruction import normalise as N  # noqa: E402
from avatar_app.reconstruction.auto_neutral import NeutralEstimator  # noqa: E402
from avatar_app.reconstruction.calibration import RunningPercentiles  # noqa: E402


class FromScratchPercentiles(RunningPercentiles):
    """The former update: write the ring slot, np.sort the ring, interpolate."""

    def update(self, x: np.ndarray, t_s: float) -> bool:
        x = np.asarray(x, dtype=np.float64)
        slot = self._schedule.admit(t_s)
        if slot is None:
            return False
        self._buf[slot] = x
        n = self._schedule.count
        s = np.sort(self._buf[:n], axis=0)
        pos = self._q * (n - 1)
        lo = np.floor(pos).astype(np.intp)
        hi = np.minimum(lo + 1, n - 1)
        frac = pos - lo
        cols = np.arange(s.shape[1])
        self._value = s[lo, cols] * (1.0 - frac) + s[hi, cols] * frac
        return True


class FromScratchNeutral(NeutralEstimator):
    """The former update: write the ring slot, np.median of the faces, region means."""

    def update(self, head: np.ndarray, t_s: float) -> bool:
        slot = self._schedule.admit(t_s)
        if slot is None:
            return False
        h = np.asarray(head, np.float32)
        self._buf[slot] = h
        self._feat[slot] = (fm.eye_aperture(h, "left"), fm.eye_aperture(h, "right"), fm.lip_gap(h))
        n = self._schedule.count
        buf, feat = self._buf[:n], self._feat[:n]
        out = np.median(buf, axis=0) if n > 2 else buf.mean(0)
        for col, mask in ((0, self._left), (1, self._right)):
            lo, hi = np.percentile(feat[:, col], [40, 90])
            sel = (feat[:, col] >= lo) & (feat[:, col] <= hi)
            if sel.any():
                out[mask] = buf[sel][:, mask].mean(0)
        gap = feat[:, 2]
        sel = gap < self.lips_closed_m
        if not sel.any():
            sel = gap <= np.percentile(gap, 20)
        out[self._mouth] = buf[sel][:, self._mouth].mean(0)
        self._value = out.astype(np.float32)
        return True


def _time_pair(make_a, make_b, samples: np.ndarray, fill: int, reps: int) -> dict:
    """Fill both to capacity, then alternate admitted updates; ms per update for each."""
    a, b = make_a(), make_b()
    t = 0.0
    for x in samples[:fill]:
        a.update(x, t)
        b.update(x, t)
        t += 1.0  # past any warm-up and slow interval: every sample admitted
    ta, tb, same = [], [], True
    for k in range(reps):
        x = samples[(fill + k) % len(samples)]
        for est, out in ((a, ta), (b, tb)) if k % 2 else ((b, tb), (a, ta)):
            t0 = time.perf_counter()
            kept = est.update(x, t)
            out.append(time.perf_counter() - t0)
            assert kept
        t += 1.0
        va, vb = a.value, b.value
        ints = {4: np.int32, 8: np.int64}[va.dtype.itemsize]
        same &= va.dtype == vb.dtype and bool(np.array_equal(va.view(ints), vb.view(ints)))

    def ms(v: list[float]) -> dict:
        return {"p50_ms": round(float(np.median(v)) * 1e3, 4), "p95_ms": round(float(np.percentile(v, 95)) * 1e3, 4)}
    return {"before": ms(ta), "after": ms(tb), "bit_identical": bool(same)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300, help="admitted samples timed per estimator (each side)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    load0 = os.getloadavg()
    res: dict = {"machine": platform.processor() or platform.machine(), "numpy": np.__version__,
                 "cpus": os.cpu_count(), "estimators": {}}
    for width in (19, 5, 195, 123):
        # some ties, as measured features have; + 0.0 turns -0.0 into +0.0 (whose order np.sort
        # leaves unspecified), so the bit comparison is meaningful
        samples = np.round(rng.normal(size=(2000, width)), 3) + 0.0
        res["estimators"][f"RunningPercentiles(480 x {width})"] = _time_pair(
            lambda: FromScratchPercentiles(np.full(width, 50.0), warmup_s=0.0, capacity=480),
            lambda: RunningPercentiles(np.full(width, 50.0), warmup_s=0.0, capacity=480),
            samples, 480, args.reps)
    t = N.template().astype(np.float32)
    faces = (t + rng.normal(scale=5e-4, size=(600, 478, 3))).astype(np.float32)
    res["estimators"]["NeutralEstimator(240 x 478 x 3)"] = _time_pair(
        lambda: FromScratchNeutral(warmup_s=0.0), lambda: NeutralEstimator(warmup_s=0.0),
        faces, 240, args.reps)
    res["load_average_1m"] = [round(load0[0], 2), round(os.getloadavg()[0], 2)]
    for name, r in res["estimators"].items():
        print(f"{name:36s} before p50 {r['before']['p50_ms']:7.3f} p95 {r['before']['p95_ms']:7.3f}  "
              f"after p50 {r['after']['p50_ms']:7.3f} p95 {r['after']['p95_ms']:7.3f} ms  "
              f"bit-identical {r['bit_identical']}")
    print(f"load average (1 min) at start / end: {res['load_average_1m']}")
    if args.out:
        args.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0 if all(r["bit_identical"] for r in res["estimators"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
