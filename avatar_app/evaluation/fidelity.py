"""Label-free fidelity: the avatar's geometry against the face's visible geometry, per clip and pooled.

For each face path (a :class:`~avatar_app.reconstruction.base.FaceReconstructor`)
and each real clip:

1. the path reconstructs every tracked frame (automatic calibration, as a user
   who never calibrated sees it);
2. (a) its blendshapes, identity and head rotation are put through the face
   model (MediaPipe's topology) and the geometry of
   :mod:`avatar_app.evaluation.geometry` is measured on the result;
3. the same geometry measured on the input landmarks is the reference;
4. per feature: Pearson r and the gain (least-squares slope of the avatar's
   feature on the face's: 1 = the avatar moves as far as the face, relative to
   each one's own size).

A feature enters a clip's figures only where the face visibly moves it: its
input standard deviation must exceed :data:`NOISE_FLOOR` (a few times
MediaPipe's own jitter on a still face), since a correlation with tracker
noise measures nothing. Pooled figures concatenate the clips' frames after
removing each clip's mean (within-clip correlation, weighted by frames and
movement).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from avatar_app.evaluation import geometry as G

#: Minimum input standard deviation for a feature to be scored in a clip (units of the
#: feature: ratios, degrees): twice the sd of MediaPipe's jitter on a still 100 px face
#: (grid_lbax4n frame 10, 200 JPEG re-encodes shifted by up to 1 px), rounded up; 1 degree
#: for the pose. ``tests/evaluation/test_evaluation_fidelity.py::test_noise_floor_is_twice_the_jitter``
#: measures the jitter again.
NOISE_FLOOR: dict[str, float] = {
    "eye_aperture_l": 0.017, "eye_aperture_r": 0.017, "eye_asymmetry": 0.03,
    "lip_gap": 0.011, "mouth_width": 0.016, "corner_height_l": 0.0065, "corner_height_r": 0.0065,
    "brow_height_l": 0.0065, "brow_height_r": 0.0065, "yaw": 1.0, "pitch": 1.0, "roll": 1.0,
}


@dataclass
class PathOutput:
    """What one face path gave on one clip.

    Attributes:
        weights: (F, 52) float32 blendshapes (zeros where no face).
        rotation: (F, 3, 3) float64 head rotations (identity where no face).
        identity: (F, K) float32 identity coefficients (K = 0 for a path without them).
        found: (F,) bool, the path produced an output for that frame.
        gaze: (F, 2) float32 (yaw, pitch) radians.
    """

    weights: np.ndarray
    rotation: np.ndarray
    identity: np.ndarray
    found: np.ndarray
    gaze: np.ndarray | None = None


def run_path(reconstructor, clip) -> PathOutput:
    """Run a face path over every tracked frame of a clip (reset first: automatic calibration).

    Args:
        reconstructor: a FaceReconstructor.
        clip: a :class:`~avatar_app.evaluation.landmarks.TrackedClip`.

    Returns:
        PathOutput.
    """
    reconstructor.reset()
    n = len(clip)
    w = np.zeros((n, 52), np.float32)
    rot = np.tile(np.eye(3), (n, 1, 1))
    ids: list[np.ndarray] = []
    found = np.zeros(n, bool)
    gaze = np.zeros((n, 2), np.float32)
    for i, t, lm in clip.frames():
        p = reconstructor.reconstruct(lm, t)
        w[i], rot[i], found[i], gaze[i] = p.blendshapes, p.rotation, True, p.gaze
        ids.append((i, np.asarray(p.identity, np.float32)))
    k = max((len(v) for _, v in ids), default=0)
    ident = np.zeros((n, k), np.float32)
    for i, v in ids:
        if len(v) == k:
            ident[i] = v
    return PathOutput(w, rot, ident, found, gaze)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r of two series (NaN when either is constant)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    d = math.sqrt(float(x @ x) * float(y @ y))
    return float(x @ y / d) if d > 0 else float("nan")


def gain(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of ``y`` on ``x`` (NaN when ``x`` is constant)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x = x - x.mean()
    v = float(x @ x)
    return float(x @ (y - y.mean()) / v) if v > 0 else float("nan")


@dataclass
class ClipScores:
    """Per-feature figures of one path on one clip.

    Attributes:
        features: feature group (:data:`geometry.GROUPS`) -> ``{"r", "gain", "sd_in", "frames"}``;
            groups the face does not move in this clip (below :data:`NOISE_FLOOR`) are absent.
        mean_r: mean r over the scored shape features (pose excluded), NaN if none.
    """

    features: dict[str, dict] = field(default_factory=dict)
    mean_r: float = float("nan")


def _scored_columns(inp: np.ndarray, group: str) -> list[int]:
    cols = []
    for name in G.GROUPS[group]:
        j = G.FEATURES.index(name)
        if np.nanstd(inp[:, j]) > NOISE_FLOOR[name]:
            cols.append(j)
    return cols


def score_clip(inp: np.ndarray, out: np.ndarray, mask: np.ndarray | None = None) -> ClipScores:
    """Compare the avatar's geometry with the face's on one clip.

    Args:
        inp: (F, len(FEATURES)) input geometry (NaN rows where no face).
        out: (F, len(FEATURES)) avatar geometry of the same frames.
        mask: (F,) bool frames to use (default: every finite row of both).

    Returns:
        ClipScores. A per-side group (both eyes) pools its sides' demeaned series.
    """
    ok = np.all(np.isfinite(inp), 1) & np.all(np.isfinite(out), 1)
    if mask is not None:
        ok &= mask
    inp, out = inp[ok], out[ok]
    s = ClipScores()
    shape_r = []
    for group in G.GROUPS:
        cols = _scored_columns(inp, group) if len(inp) > 2 else []
        if not cols:
            continue
        x = np.concatenate([inp[:, j] - inp[:, j].mean() for j in cols])
        y = np.concatenate([out[:, j] - out[:, j].mean() for j in cols])
        r = pearson(x, y)
        s.features[group] = {"r": r, "gain": gain(x, y), "sd_in": float(x.std()), "frames": len(x)}
        if group not in G.POSE_FEATURES and math.isfinite(r):
            shape_r.append(r)
    s.mean_r = float(np.mean(shape_r)) if shape_r else float("nan")
    return s


def pooled(per_clip_series: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, dict]:
    """Pooled r and gain per feature group over clips.

    Args:
        per_clip_series: per clip ``(inp, out)`` arrays as :func:`score_clip` takes them
            (already restricted to the frames to use).

    Returns:
        group -> ``{"r", "gain", "clips"}``: each clip contributes the columns it scores,
        demeaned within the clip.
    """
    res = {}
    for group in G.GROUPS:
        xs, ys, n = [], [], 0
        for inp, out in per_clip_series:
            ok = np.all(np.isfinite(inp), 1) & np.all(np.isfinite(out), 1)
            a, b = inp[ok], out[ok]
            cols = _scored_columns(a, group) if len(a) > 2 else []
            n += bool(cols)
            for j in cols:
                xs.append(a[:, j] - a[:, j].mean())
                ys.append(b[:, j] - b[:, j].mean())
        if xs:
            x, y = np.concatenate(xs), np.concatenate(ys)
            res[group] = {"r": pearson(x, y), "gain": gain(x, y), "clips": n}
    return res


def evaluate_path(reconstructor, clips, model=None) -> dict:
    """Label-free figures of one face path over clips, comparison (a) (the face model).

    Args:
        reconstructor: a FaceReconstructor.
        clips: TrackedClips.
        model: FaceModel (default: the shipped one).

    Returns:
        ``{"clips": {name: {"features": ..., "mean_r": ...}}, "pooled": {...},
        "min_clip_mean_r": float}``; also ``"outputs"``: name -> PathOutput (not JSON).
    """
    per, series, outs = {}, [], {}
    for clip in clips:
        inp, _ = G.input_features(clip)
        po = run_path(reconstructor, clip)
        out = np.full_like(inp, np.nan)
        idx = np.flatnonzero(po.found)
        ident = po.identity[idx] if po.identity.shape[1] else None
        out[idx] = G.model_features(po.weights[idx], po.rotation[idx], ident, model)
        sc = score_clip(inp, out)
        per[clip.name] = {"features": sc.features, "mean_r": sc.mean_r}
        series.append((inp, out))
        outs[clip.name] = po
    means = [v["mean_r"] for v in per.values() if math.isfinite(v["mean_r"])]
    return {"clips": per, "pooled": pooled(series), "min_clip_mean_r": min(means) if means else float("nan"),
            "outputs": outs}
