"""Why a still smile reads low, measured on the London pairs (issue 17): the figures of docs/identity_neutral.md.

Usage::

    python benchmarks/identity_neutral.py [--out figures.json]

1. **The neutral, not the mapping.** The solver reads each smiling photo alone (as the London
   bar does), then calibrated on the same person's neutral photo (an oracle neutral).
2. **An identity neutral.** The neutral mouth corners (template-aligned head frame,
   :func:`avatar_app.reconstruction.normalise.align`) predicted by ridge regression from
   landmarks that expressions should not move (eye corners, nose, nose wings, face outline),
   fitted on the odd ids' neutral photos, scored on the even ids: the residual sd against
   the population's, and how much of the smile the prediction absorbs on smiling photos.
3. **The ceiling of one still.** A linear discriminant (neutral covariance) of a still's visible
   geometry (:mod:`avatar_app.evaluation.geometry`) trained on one half, threshold chosen there,
   scored on the other: the share of people whose neutral photo falls below it and smiling photo
   above it.

Quality figures, not timings; landmarks come from the evaluation cache.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TESTDATA = Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared" / "testdata"))

#: Landmark sets the identity regression reads (MediaPipe indices).
IDENTITY_SETS = {
    "eyes": (33, 133, 362, 263),
    "eyes+nose": (33, 133, 362, 263, 1, 4, 2, 168, 6, 10),
    "eyes+nose+wings": (33, 133, 362, 263, 1, 4, 2, 168, 6, 10, 98, 327),
    "eyes+nose+outline": (33, 133, 362, 263, 1, 4, 2, 168, 6, 10, 234, 454),
}
RIDGE_MM2 = 30.0  # ridge weight, mm^2 (features and targets in mm)


def _smile(w) -> float:
    from avatar_app.core.blendshapes import Blendshape as B

    return float(0.5 * (w[B.mouthSmileLeft] + w[B.mouthSmileRight]))


def oracle_figures(pairs) -> dict:
    """Mean smile of the smiling photos read alone and against the person's own neutral photo."""
    from avatar_app.evaluation import london as L
    from avatar_app.reconstruction.geometric import GeometricSolver

    s = GeometricSolver()
    alone, oracle = [], []
    for n, sm in pairs:
        alone.append(_smile(L.read_still(s, sm)))
        s.reset()
        s.calibrate_neutral(n)
        oracle.append(_smile(s.reconstruct(sm, 0.0).blendshapes))
    a, o = np.array(alone), np.array(oracle)
    return {"alone_mean": a.mean(), "alone_ge_0.3": (a >= 0.3).mean(),
            "own_neutral_mean": o.mean(), "own_neutral_ge_0.3": (o >= 0.3).mean()}


def _corners_mm(h: np.ndarray) -> np.ndarray:
    """(N, 4): right/left corner outward x, right/left corner height above the inner lips' midpoint, mm."""
    mid = 0.5 * (h[:, 13, 1] + h[:, 14, 1])
    return 1000 * np.stack([-h[:, 61, 0], h[:, 291, 0], h[:, 61, 1] - mid, h[:, 291, 1] - mid], 1)


def identity_figures(hn: np.ndarray, hs: np.ndarray, odd: np.ndarray) -> dict:
    """Held-out residual sd of the ridge-predicted neutral corners, and the smile left after it."""
    from avatar_app.reconstruction import normalise as N

    t = N.template()
    yn, ys = _corners_mm(hn), _corners_mm(hs)
    out = {"population_sd_mm": yn[~odd].std(0), "smile_shift_mm": (ys - yn).mean(0)}
    for name, pts in IDENTITY_SETS.items():
        idx = list(pts)
        xn = 1000 * (hn[:, idx, :2] - t[idx, :2]).reshape(len(hn), -1)
        xs = 1000 * (hs[:, idx, :2] - t[idx, :2]).reshape(len(hs), -1)
        xm, ym = xn[odd].mean(0), yn[odd].mean(0)
        a = xn[odd] - xm
        w = np.linalg.solve(a.T @ a + RIDGE_MM2 * np.eye(a.shape[1]), a.T @ (yn[odd] - ym))
        out[name] = {"heldout_residual_sd_mm": (yn[~odd] - ym - (xn[~odd] - xm) @ w).std(0),
                     "smile_left_mm": (ys[~odd] - ym - (xs[~odd] - xm) @ w).mean(0)}
    return out


def ceiling_figures(fn: np.ndarray, fs: np.ndarray, odd: np.ndarray) -> dict:
    """Held-out share separated by a linear discriminant of one still's geometry, per feature set."""
    from avatar_app.evaluation.geometry import SHAPE_FEATURES

    sets = {"width+corners": ("mouth_width", "corner_height_l", "corner_height_r"),
            "eyes+width+corners": ("eye_aperture_l", "eye_aperture_r", "mouth_width", "corner_height_l",
                                   "corner_height_r")}
    out = {}
    for name, cols in sets.items():
        c = [SHAPE_FEATURES.index(k) for k in cols]
        res = []
        for train in (odd, ~odd):
            x, y = fn[:, c], fs[:, c]
            mn, ms = x[train].mean(0), y[train].mean(0)
            d = np.linalg.solve(np.cov(x[train].T), ms - mn)
            a, b = (x - mn) @ d, (y - mn) @ d
            ts = np.linspace(a.min(), b.max(), 500)
            t = ts[int(np.argmax([((a[train] < v) & (b[train] >= v)).mean() for v in ts]))]
            res.append(((a[~train] < t) & (b[~train] >= t)).mean())
        out[name] = {"heldout_even": res[0], "heldout_odd": res[1]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--testdata", type=Path, default=TESTDATA, help="test data folder (default %(default)s)")
    ap.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    args = ap.parse_args(argv)
    from avatar_app.evaluation import london as L
    from avatar_app.evaluation.geometry import shape_features
    from avatar_app.evaluation.landmarks import new_tracker, track_image
    from avatar_app.reconstruction import normalise as N
    from avatar_app.tracking.face_mesh import RunningMode

    ps = L.people(args.testdata / "images" / "london")
    with new_tracker(RunningMode.IMAGE) as tr:
        pairs = [(track_image(p["neutral"], tracker=tr), track_image(p["smiling"], tracker=tr)) for p in ps]
    odd = np.array([int(p["id"]) % 2 == 1 for p in ps])
    head = [[N.align(lm.points, lm.image_size)[0][0].astype(np.float64) for lm in pr] for pr in pairs]
    hn, hs = np.array([h[0] for h in head]), np.array([h[1] for h in head])
    figs = {"n": len(ps), "oracle": oracle_figures(pairs), "identity": identity_figures(hn, hs, odd),
            "ceiling": ceiling_figures(shape_features(hn), shape_features(hs), odd)}
    text = json.dumps(figs, indent=1, default=lambda v: np.round(np.asarray(v, float), 3).tolist())
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
