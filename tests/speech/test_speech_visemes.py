"""Visemes: phone mapping, coarticulated targets, and the viseme table fitted on a rig."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape as B
from avatar_app.core.errors import InputError
from avatar_app.speech.visemes import (GEOMETRY_TARGETS_MM, HAND_TABLE, VISEMES, derive_viseme_table,
                                       mouth_geometry)

import training.speech.phonemes as phonemes  # noqa: E402
import training.speech.targets as targets  # noqa: E402


def test_oculus_set_and_hand_table():
    assert VISEMES == ("sil", "PP", "FF", "TH", "DD", "kk", "CH", "SS", "nn", "RR", "aa", "E",
                       "ih", "oh", "ou")
    assert HAND_TABLE.shape == (15, 52) and not HAND_TABLE[0].any()
    jaw = HAND_TABLE[:, B.jawOpen]
    v = VISEMES.index
    assert jaw[v("aa")] > jaw[v("E")] > jaw[v("ih")] > jaw[v("PP")]
    assert HAND_TABLE[v("ou"), B.mouthPucker] > 0.5


@pytest.mark.parametrize("sym,fam,want", [
    ("b", "espeak", ("PP",)), ("m", "espeak", ("PP",)), ("u:", "espeak", ("ou",)),
    ("aU", "espeak", ("aa", "ou")), ("tS", "espeak", ("CH",)), ("T", "espeak", ("TH",)),
    ("_:", "espeak", ("sil",)), ("uw", "flite", ("ou",)), ("UW1", "festival", ("ou",)),
    ("ay", "flite", ("aa", "ih")), ("pau", "festival", ("sil",)), ("f", "flite", ("FF",)),
])
def test_phone_to_viseme(sym, fam, want):
    fn = phonemes.espeak_visemes if fam == "espeak" else phonemes.cmu_visemes
    assert fn(sym) == want


def test_h_takes_the_next_viseme_and_diphthongs_split():
    segs = phonemes.to_viseme_segments([(0.0, 0.1, "hh"), (0.1, 0.3, "uw"), (0.3, 0.5, "ay")], "flite")
    assert [VISEMES[v] for _, _, v in segs] == ["ou", "ou", "aa", "ih"]
    assert segs[2][1] == pytest.approx(0.3 + 0.6 * 0.2)


def test_coarticulated_targets_close_the_lips_on_bilabials():
    v = VISEMES.index
    segs = [(0.0, 0.2, 0), (0.2, 0.32, v("aa")), (0.32, 0.4, v("PP")), (0.4, 0.55, v("aa")),
            (0.55, 0.6, v("DD")), (0.6, 0.8, v("ou")), (0.8, 1.2, 0)]
    t = np.arange(0, 1.2, 0.01)
    y, lab = targets.viseme_targets(segs, t)
    assert y.shape == (len(t), 52) and np.all((y >= 0) & (y <= 1))
    mid_pp = np.argmin(abs(t - 0.36))
    mid_aa = np.argmin(abs(t - 0.47))
    assert y[mid_pp, B.jawOpen] - y[mid_pp, B.mouthClose] < 0.06   # lips meet
    assert y[mid_aa, B.jawOpen] > 0.35                              # vowel opens
    assert y[np.argmin(abs(t - 0.57)), B.mouthPucker] > 0.2         # /d/ anticipates /u/ rounding
    assert y[-1].max() < 1e-3                                       # silence relaxes
    assert lab[mid_pp] == v("PP") and lab[0] == 0


def _toy_rig():
    """A linear toy rig on MediaPipe landmark indices (metres): each shape moves a few points."""
    rng = np.random.default_rng(0)
    neutral = rng.normal(0, 0.03, (478, 3))
    pts = {13: (0, -0.030, 0.05), 14: (0, -0.031, 0.05), 0: (0, -0.022, 0.055), 17: (0, -0.040, 0.05),
           61: (-0.025, -0.030, 0.04), 291: (0.025, -0.030, 0.04), 152: (0, -0.075, 0.03), 1: (0, 0.0, 0.07)}
    for i, p in pts.items():
        neutral[i] = p
    bs = np.zeros((52, 478, 3))

    def move(name, i, d):
        bs[BLENDSHAPE_NAMES.index(name), i] += d

    for i, d in ((14, -0.022), (17, -0.024), (152, -0.02)):
        move("jawOpen", i, (0, d, 0))
    for i in (14, 17):
        move("mouthClose", i, (0, 0.015, 0))
    for name, s in (("mouthPucker", 1.0), ("mouthFunnel", 0.6)):
        move(name, 61, (0.009 * s, 0, 0)), move(name, 291, (-0.009 * s, 0, 0))
        for i in (0, 13, 14, 17):
            move(name, i, (0, 0, 0.008 * s))
    move("mouthFunnel", 13, (0, 0.002, 0)), move("mouthFunnel", 14, (0, -0.003, 0))
    move("mouthStretchLeft", 291, (0.006, 0, 0)), move("mouthStretchRight", 61, (-0.006, 0, 0))
    move("mouthSmileLeft", 291, (0.004, 0.003, 0)), move("mouthSmileRight", 61, (-0.004, 0.003, 0))
    move("mouthPressLeft", 14, (0, 0.001, 0)), move("mouthPressRight", 14, (0, 0.001, 0))
    move("mouthRollLower", 14, (0, 0.003, -0.002))
    move("mouthLowerDownLeft", 14, (0, -0.002, 0)), move("mouthLowerDownRight", 17, (0, -0.002, 0))
    move("mouthUpperUpLeft", 13, (0, 0.002, 0)), move("mouthUpperUpRight", 0, (0, 0.002, 0))
    return neutral, bs


def _geometry_error(table, neutral, bs):
    g0 = mouth_geometry(neutral).vector()[:4]
    err = []
    for v, name in enumerate(VISEMES):
        g = mouth_geometry(neutral + np.tensordot(table[v], bs, axes=1)).vector()[:4] - g0
        err.append(np.abs(g - np.array(GEOMETRY_TARGETS_MM[name]) / 1000).sum())
    return np.array(err)


def test_derived_table_meets_the_geometry_better_than_the_hand_table():
    neutral, bs = _toy_rig()
    table = derive_viseme_table(neutral, bs)
    assert table.shape == (15, 52) and np.all((table >= 0) & (table <= 1))
    assert not table[0].any()
    e_hand, e_fit = _geometry_error(HAND_TABLE, neutral, bs), _geometry_error(table, neutral, bs)
    assert e_fit.sum() < 0.6 * e_hand.sum(), (e_fit.sum(), e_hand.sum())
    v = VISEMES.index
    assert table[v("aa"), B.jawOpen] > table[v("ih"), B.jawOpen]
    assert table[v("ou"), B.mouthPucker] + table[v("ou"), B.mouthFunnel] > 0.5
    assert table[v("ih"), B.mouthSmileLeft] == table[v("ih"), B.mouthSmileRight]  # tied sides
    # the tongue is not in the landmarks: kept from the hand table
    assert table[v("TH"), B.tongueOut] == HAND_TABLE[v("TH"), B.tongueOut]


def test_derive_rejects_a_bad_rig():
    neutral, bs = _toy_rig()
    with pytest.raises(InputError, match="52"):
        derive_viseme_table(neutral, bs[:51])
    with pytest.raises(InputError, match="478"):
        mouth_geometry(neutral[:100])
