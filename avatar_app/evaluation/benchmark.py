"""The whole real-face fidelity benchmark of one or more face paths, as one JSON-ready dict.

``benchmarks/fidelity.py`` runs it over every real video and the London set and
writes ``benchmarks/results/fidelity.json``; a training script can call
:func:`run_benchmark` with its own reconstructor to score a model the same way.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import Blendshape as B
from avatar_app.evaluation import events as E
from avatar_app.evaluation import fidelity as F
from avatar_app.evaluation import geometry as G

_log = logging.getLogger(__name__)

#: Event labels of the expressive clips (in the repository's tests/data).
EVENTS_FILE = Path(__file__).resolve().parents[2] / "tests" / "data" / "expressive_events.json"

#: Bars of issue 17 for the vision path (pooled r of comparison (a) unless named otherwise).
BARS = {"eye_aperture": 0.9, "lip_gap": 0.9, "corner_height": 0.9, "mouth_width": 0.85,
        "brow_height": 0.8, "eye_asymmetry": 0.8}
BAR_MIN_CLIP_MEAN = 0.75
BARS_RETRACK = {"eye_aperture": 0.8, "lip_gap": 0.8, "mouth_width": 0.8}
BAR_JAW_LIFT = 0.1
BAR_LONDON, BAR_LONDON_GROUP = 0.95, 0.90
#: How far the fused lip-gap r may fall below vision's: the voice's pucker and smile change
#: the face model's lip gap by a hair (0.001 measured), the aperture shapes stay vision's.
FUSION_TOLERANCE = 0.005


def real_videos(testdata: Path) -> list[Path]:
    """Every real video of the test data: the GRID talkers, the multi-face clip, the expressive clips."""
    t = Path(testdata) / "video"
    return sorted(t.glob("*.mp4")) + sorted((t / "expressive").glob("*.mp4"))


def _clean(x):
    """JSON-safe copy: floats rounded to 4 places, NaN as None, numpy scalars as Python ones."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else round(float(x), 4)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def _retracked(clips, outs: dict, step: int, say) -> dict:
    """Comparison (b): render the default head with each clip's output, track the render again."""
    from avatar_app.evaluation.retrack import retracked_features

    per, series = {}, []
    for clip in clips:
        say(f"comparison (b): rendering and re-tracking {clip.name}")
        po = outs[clip.name]
        frames = np.flatnonzero(po.found)[::step]
        inp, _ = G.input_features(clip)
        out = retracked_features(po, clip.times, frames)
        mask = np.zeros(len(clip), bool)
        mask[frames] = True
        sc = F.score_clip(inp, out, mask)
        per[clip.name] = {"features": sc.features, "mean_r": sc.mean_r}
        series.append((np.where(mask[:, None], inp, np.nan), out))
    return {"clips": per, "pooled": F.pooled(series), "step": step}


def run_benchmark(reconstructor, testdata: Path, *, retrack_step: int = 2, london: bool = True,
                  fusion: bool = True, progress=None) -> dict:
    """All fidelity figures of one face path.

    Args:
        reconstructor: a FaceReconstructor (reset before each clip and still).
        testdata: the shared test data folder.
        retrack_step: render and re-track every this many frames for comparison (b)
            (0: skip (b)).
        london: include the London pairs.
        fusion: include the vision/voice fusion figures.
        progress: optional ``progress(message)``.

    Returns:
        A JSON-ready dict: ``label_free`` (per clip and pooled, (a)), ``retracked`` ((b)),
        ``winks``, ``expressions``, ``blinks``, ``jaw_in_words``, ``fusion``, ``london``, ``bars``.
    """
    from avatar_app.evaluation.landmarks import track_video

    say = progress or (lambda m: _log.info("%s", m))
    videos = real_videos(testdata)
    clips = []
    for v in videos:
        say(f"tracking {v.name}")
        clips.append(track_video(v))
    say("comparison (a): the face model")
    a = F.evaluate_path(reconstructor, clips)
    outs = a.pop("outputs")
    weights = {n: o.weights for n, o in outs.items()}
    res: dict = {"label_free": a}
    if retrack_step:
        res["retracked"] = _retracked(clips, outs, retrack_step, say)
    ev = E.load_events(EVENTS_FILE)
    res["winks"] = E.wink_scores(weights, ev)
    res["expressions"] = E.expression_scores(weights, ev)
    blinks = {}
    for name in ("grid_lbax4n", "grid_s1_bbaf2n", "grid_s2_swwp2s"):
        if name in weights:
            blinks[name] = E.blink_scores(weights[name], *E.blink_labels(testdata / "video" / "blinks.json", name))
    res["blinks"] = blinks
    jaw = {}
    for clip in clips:
        al = testdata / "video" / f"{clip.name}.align"
        if al.is_file():
            words = E.words_indicator(al, clip.times)
            jaw[clip.name] = E.jaw_in_words(weights[clip.name][:, B.jawOpen], words)
            inp, _ = G.input_features(clip)
            jaw[clip.name]["face_lip_gap"] = E.visible_gap_in_words(inp[:, G.FEATURES.index("lip_gap")], words)
    res["jaw_in_words"] = jaw
    if fusion:
        from avatar_app.evaluation.mouth import fusion_scores, speech_weights

        fu = {}
        for clip, v in zip(clips, videos):
            say(f"fusion: {clip.name}")
            aw = speech_weights(v, clip.times)
            if aw is None:
                continue
            inp, _ = G.input_features(clip)
            fu[clip.name] = fusion_scores(inp, weights[clip.name], aw, outs[clip.name].found)
        res["fusion"] = fu
    if london:
        from avatar_app.evaluation import london as L

        say("London pairs")
        lo = L.evaluate(reconstructor, testdata / "images" / "london")
        res["london"] = {"overall": lo["overall"], "groups": lo["groups"],
                         "failures": [r for r in lo["people"] if not r["both_ok"]]}
    res["bars"] = check_bars(res)
    return _clean(res)


def check_bars(res: dict) -> dict:
    """Which of issue 17's vision bars a result meets: name -> ``{"value", "bar", "met"}``."""
    out = {}
    pooled = res["label_free"]["pooled"]
    for k, bar in BARS.items():
        v = pooled.get(k, {}).get("r", float("nan"))
        out[f"pooled_r.{k}"] = {"value": v, "bar": bar, "met": bool(v >= bar)}
    v = res["label_free"]["min_clip_mean_r"]
    out["min_clip_mean_r"] = {"value": v, "bar": BAR_MIN_CLIP_MEAN, "met": bool(v >= BAR_MIN_CLIP_MEAN)}
    if "retracked" in res:
        for k, bar in BARS_RETRACK.items():
            v = res["retracked"]["pooled"].get(k, {}).get("r", float("nan"))
            out[f"retracked_r.{k}"] = {"value": v, "bar": bar, "met": bool(v >= bar)}
    w = res["winks"]
    out["winks"] = {"value": w["frames_ok"], "bar": 1.0, "met": bool(w["all_ok"])}
    bl = res["blinks"]
    out["blinks"] = {"value": sum(len(b["missed"]) + len(b["false"]) for b in bl.values()), "bar": 0,
                     "met": all(not b["missed"] and not b["false"] for b in bl.values())}
    lifts = [j["lift"] for j in res["jaw_in_words"].values()]
    if lifts:
        out["jaw_in_words"] = {"value": min(lifts), "bar": BAR_JAW_LIFT, "met": bool(min(lifts) >= BAR_JAW_LIFT)}
    if res.get("fusion"):
        worst = min(f["fused_r"] - f["vision_r"] for f in res["fusion"].values())
        out["fusion_not_below_vision"] = {"value": worst, "bar": -FUSION_TOLERANCE,
                                          "met": bool(worst >= -FUSION_TOLERANCE)}
    if "london" in res:
        lo = res["london"]
        v = lo["overall"]["both_ok"]
        out["london"] = {"value": v, "bar": BAR_LONDON, "met": bool(v >= BAR_LONDON)}
        g = min(x["both_ok"] for x in lo["groups"].values())
        out["london_worst_group"] = {"value": g, "bar": BAR_LONDON_GROUP, "met": bool(g >= BAR_LONDON_GROUP)}
    return out
