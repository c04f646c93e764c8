"""Labelled events: winks, blinks and expressions in hand-labelled frame ranges; GRID words.

Event labels live in a small JSON (``tests/data/expressive_events.json``):
``{"events": [{"clip", "kind", "frames": [first, last], "closed": "left"|"right" (winks)}]}``,
sides the subject's own. Blink labels of the GRID clips are ``video/blinks.json`` in the
test data; word timings are GRID's ``.align`` files (units of 1/25000 s).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import Blendshape as B

#: The shape(s) each expression kind should move (mean of the listed weights).
KIND_SHAPES: dict[str, tuple[str, ...]] = {
    "blink": ("eyeBlinkLeft", "eyeBlinkRight"),
    "brow_down": ("browDownLeft", "browDownRight"),
    "brow_raise": ("browInnerUp", "browOuterUpLeft", "browOuterUpRight"),
    "eyes_wide": ("eyeWideLeft", "eyeWideRight"),
    "jaw_drop": ("jawOpen",),
    "pucker": ("mouthPucker", "mouthFunnel"),
    "smile": ("mouthSmileLeft", "mouthSmileRight"),
    "cheek_puff": ("cheekPuff",),
}
#: Minimum |eyeBlinkLeft - eyeBlinkRight| on the closed eye's side in a labelled wink frame.
WINK_MARGIN = 0.5


def load_events(path: Path) -> list[dict]:
    """The events of a label file."""
    return json.loads(Path(path).read_text())["events"]


def frames_of(event: dict) -> np.ndarray:
    """(n,) int frame indices of an event's inclusive range."""
    a, b = event["frames"]
    return np.arange(int(a), int(b) + 1)


def wink_scores(weights: dict[str, np.ndarray], events: list[dict]) -> dict:
    """Per wink event: the signed margin ``closed - open`` eyeBlink in each labelled frame.

    Args:
        weights: clip name -> (F, 52) blendshapes.
        events: labelled events (only ``kind == "wink"`` are used).

    Returns:
        ``{"events": [{"clip", "closed", "frames", "min_margin", "frames_ok"}], "all_ok": bool,
        "frames_ok": fraction}``; a frame is ok when ``eyeBlink[closed] - eyeBlink[open] >=``
        :data:`WINK_MARGIN`.
    """
    rows, ok_all, n_ok, n = [], True, 0, 0
    for e in events:
        if e["kind"] != "wink" or e["clip"] not in weights:
            continue
        w = weights[e["clip"]][frames_of(e)]
        closed, other = ((B.eyeBlinkLeft, B.eyeBlinkRight) if e["closed"] == "left"
                         else (B.eyeBlinkRight, B.eyeBlinkLeft))
        margin = w[:, closed] - w[:, other]
        good = margin >= WINK_MARGIN
        rows.append({"clip": e["clip"], "closed": e["closed"], "frames": e["frames"],
                     "min_margin": float(margin.min()), "frames_ok": float(good.mean()),
                     "open_eye_max": float(w[:, other].max())})
        ok_all &= bool(good.all())
        n_ok += int(good.sum())
        n += len(good)
    return {"events": rows, "all_ok": ok_all, "frames_ok": n_ok / n if n else float("nan")}


def expression_scores(weights: dict[str, np.ndarray], events: list[dict]) -> dict:
    """Mean of each kind's shapes inside its labelled ranges against the rest of the same clip.

    Returns:
        kind -> ``{"inside", "outside", "lift"}`` (lift = inside - outside, over all events of the kind).
    """
    acc: dict[str, list] = {}
    for e in events:
        if e["kind"] not in KIND_SHAPES or e["clip"] not in weights:
            continue
        w = weights[e["clip"]]
        cols = [B[s] for s in KIND_SHAPES[e["kind"]]]
        inside = np.zeros(len(w), bool)
        inside[frames_of(e)[frames_of(e) < len(w)]] = True
        v = w[:, cols].mean(1)
        acc.setdefault(e["kind"], []).append((v[inside].mean(), v[~inside].mean()))
    return {k: {"inside": float(np.mean([a for a, _ in v])), "outside": float(np.mean([b for _, b in v])),
                "lift": float(np.mean([a - b for a, b in v]))} for k, v in acc.items()}


def blink_labels(path: Path, name: str) -> tuple[set[int], set[int]]:
    """(closed frames, partial frames) of one clip from ``blinks.json``."""
    labels = json.loads(Path(path).read_text())[name]
    return {i for a, b in labels["closed"] for i in range(a, b + 1)}, set(labels["partial"])


def blink_scores(w: np.ndarray, closed: set[int], partial: set[int]) -> dict:
    """Frame-level blink figures: predicted = both eyeBlink > 0.5; partial frames not scored.

    Returns:
        ``{"tp", "fp", "fn", "missed": [frames], "false": [frames more than 3 frames from any
        labelled frame with either eye > 0.5]}``.
    """
    left, right = w[:, B.eyeBlinkLeft], w[:, B.eyeBlinkRight]
    pred = (left > 0.5) & (right > 0.5)
    n = len(w)
    scored = [i for i in range(n) if i not in partial]
    labelled = closed | partial
    far = [i for i in range(n) if min(abs(i - j) for j in labelled) > 3]
    return {"tp": sum(1 for i in scored if pred[i] and i in closed),
            "fp": sum(1 for i in scored if pred[i] and i not in closed),
            "fn": sum(1 for i in scored if not pred[i] and i in closed),
            "missed": [i for i in sorted(closed) if not pred[i]],
            "false": [i for i in far if left[i] > 0.5 or right[i] > 0.5]}


def words_indicator(align_path: Path, times: np.ndarray) -> np.ndarray:
    """(F,) bool: frames whose time falls inside a spoken word (not 'sil') of a GRID .align file."""
    inside = np.zeros(len(times), bool)
    for line in Path(align_path).read_text().split("\n"):
        if line.strip():
            a, b, word = line.split()
            if word != "sil":
                inside |= (times >= int(a) / 25000) & (times < int(b) / 25000)
    return inside


def jaw_in_words(jaw: np.ndarray, words: np.ndarray) -> dict:
    """jawOpen inside words against silence: ``{"in_words", "in_silence", "lift"}``."""
    a, b = float(jaw[words].mean()), float(jaw[~words].mean())
    return {"in_words": a, "in_silence": b, "lift": a - b}


def visible_gap_in_words(lip_gap: np.ndarray, words: np.ndarray) -> dict:
    """The face's own inner-lip gap inside words against silence, the reference for jawOpen's lift.

    The jaw bar of issue 17 asks jawOpen to rise >= 0.1 in words over silence; this is what the
    face itself does in the same frames, so a clip whose speaker opens the mouth in a silence
    (an in-breath before the first word) shows it here.

    Args:
        lip_gap: (F,) float, the inner-lip gap normalised by face size
            (:data:`avatar_app.evaluation.geometry.FEATURES` ``lip_gap``), NaN where no face.
        words: (F,) bool, from :func:`words_indicator`.

    Returns:
        ``{"in_words", "in_silence", "lift", "silence_max"}`` (face-size units; NaN rows left out).

    Raises:
        ValueError: if the shapes differ or either side has no frame with a face.
    """
    g = np.asarray(lip_gap, float)
    w = np.asarray(words, bool)
    if g.shape != w.shape:
        raise ValueError(f"lip gap {g.shape} and words {w.shape} differ in shape")
    ok = ~np.isnan(g)
    if not (ok & w).any() or not (ok & ~w).any():
        raise ValueError("the face is not seen both inside words and in silence")
    a, b = float(g[ok & w].mean()), float(g[ok & ~w].mean())
    return {"in_words": a, "in_silence": b, "lift": a - b, "silence_max": float(g[ok & ~w].max())}
