"""Viseme segments -> per-frame ARKit targets with coarticulation.

Coarticulation follows the dominance model of Cohen and Massaro ("Modeling
coarticulation in synthetic visual speech", Models and Techniques in Computer
Animation, 1993): every segment i has a target T_i and a dominance function
D_i(t) = a_i exp(-theta_i |t - c_i|) around its centre c_i; the trajectory is
sum_i D_i(t) T_i / sum_i D_i(t). Separate dominances for the lips (all mouth,
cheek, tongue shapes) and the jaw let alveolars and velars (lip-neutral) take
their lip shape from the neighbouring vowels while bilabials, labiodentals and
rounded vowels impose theirs. Inside its own segment a phone's dominance is
its peak (a flat top), so long phones hold their target. Bilabial closure
(PP) also sets mouthClose to its share of the lip dominance times jawOpen, so
the lips meet even where neighbouring vowels keep the jaw part-open (ARKit's
mouthClose closes the lips against jawOpen).
"""
from __future__ import annotations

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.speech.visemes import HAND_TABLE, NUM_VISEMES, VISEMES

_JAW = BLENDSHAPE_NAMES.index("jawOpen")
_CLOSE = BLENDSHAPE_NAMES.index("mouthClose")
_PP = VISEMES.index("PP")

# (lip dominance, jaw dominance) per viseme; larger = imposes its shape on neighbours.
_DOM = {
    "sil": (1.0, 1.0), "PP": (6.0, 4.0), "FF": (4.0, 2.0), "TH": (1.5, 1.0), "DD": (0.4, 0.8),
    "kk": (0.3, 0.6), "CH": (3.0, 1.0), "SS": (1.5, 1.5), "nn": (0.4, 0.8), "RR": (2.0, 1.0),
    "aa": (1.0, 2.0), "E": (1.0, 1.6), "ih": (1.0, 1.2), "oh": (1.5, 1.6), "ou": (2.5, 1.0),
}
DOM_LIPS = np.array([_DOM[v][0] for v in VISEMES])
DOM_JAW = np.array([_DOM[v][1] for v in VISEMES])
#: Decay time of the dominance functions outside the segment, s (a 30-60 ms spread of
#: anticipation/carry-over; lip anticipation of rounding can reach further, e.g. /u/).
DECAY_S = 0.035


def frame_times(n_frames: int, lookahead_s: float) -> np.ndarray:
    """Times (s) the model's output frames stand for: frame k ends at (k+1)*10 ms, minus look-ahead."""
    return (np.arange(n_frames) + 1) * 0.01 - lookahead_s


def viseme_targets(segments: list[tuple[float, float, int]], times_s: np.ndarray,
                   table: np.ndarray = HAND_TABLE) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame targets and viseme labels.

    Args:
        segments: (start_s, end_s, viseme id) in time order.
        times_s: (T,) float times to evaluate, s.
        table: (15, 52) viseme -> ARKit weights.

    Returns:
        targets (T, 52) float32 in [0, 1]; labels (T,) int64 viseme id of the
        segment containing each time (0 = sil outside all segments).
    """
    t = np.asarray(times_s, np.float64)
    num_l = np.zeros((len(t), table.shape[1]))
    num_j = np.zeros(len(t))
    den_l = np.full(len(t), 1e-6)
    den_j = np.full(len(t), 1e-6)
    labels = np.zeros(len(t), np.int64)
    num_pp = np.zeros(len(t))
    sil_target = table[0].astype(np.float64)
    num_l += 1e-6 * sil_target
    for t0, t1, v in segments:
        # distance outside the segment (0 inside: flat top)
        d = np.maximum(0.0, np.maximum(t0 - t, t - t1))
        near = d < 8 * DECAY_S
        if not near.any():
            continue
        e = np.exp(-d[near] / DECAY_S)
        dl, dj = DOM_LIPS[v] * e, DOM_JAW[v] * e
        num_l[near] += dl[:, None] * table[v][None, :]
        den_l[near] += dl
        num_j[near] += dj * table[v, _JAW]
        den_j[near] += dj
        if v == _PP:
            num_pp[near] += dl
        labels[(t >= t0) & (t < t1)] = v
    out = num_l / den_l[:, None]
    out[:, _JAW] = num_j / den_j
    # bilabial closure: lips meet although the jaw is part-open from the neighbours;
    # in ARKit, mouthClose equal to jawOpen brings the lips together
    closure = num_pp / den_l
    out[:, _CLOSE] = np.maximum(out[:, _CLOSE], closure * out[:, _JAW])
    return np.clip(out, 0.0, 1.0).astype(np.float32), labels


def viseme_names(labels: np.ndarray) -> list[str]:
    """Viseme names of label ids."""
    return [VISEMES[int(i)] for i in labels]


assert len(DOM_LIPS) == NUM_VISEMES
