"""Real-speech bars of the speech engine against the loudness solver (issue 6).

jawOpen agreement with vision on the GRID talkers, lip closure on /p b m/ and
rounding on /uw uh w/ on the pocketsphinx alignments (training/speech/
real_alignments.json, made by training/speech/align_real.py), and the other
test recordings running without error.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from avatar_app.core.blendshapes import Blendshape
from avatar_app.inference import EngineManager
from avatar_app.speech import LoudnessSpeechAnimator, animate_offline
from avatar_app.speech.engine_animator import EngineSpeechAnimator, default_model_path

import training.speech.evaluate_real as ev  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def animators():
    eng = EngineSpeechAnimator(default_model_path(), manager=EngineManager(isolate=False))
    yield {"engine": eng, "loudness": LoudnessSpeechAnimator()}
    eng.close()


@pytest.fixture(scope="module")
def figures(animators, testdata):
    out = ev.evaluate(testdata, animators)
    print(json.dumps(out, indent=1))
    return out


@pytest.mark.parametrize("clip", ev.GRID)
def test_jaw_follows_vision_on_grid(figures, clip):
    r = figures["jaw_corr"][clip]
    assert r["engine"] >= 0.6, r
    assert r["engine"] > r["loudness"], r


def _pooled(figures, key, frames_key):
    tot = {"engine": 0.0, "loudness": 0.0}
    n = 0
    for clip, per in figures["lips"].items():
        k = per["engine"][frames_key]
        if k == 0:
            continue
        n += k
        for name in tot:
            tot[name] += per[name][key] * k
    return {k: v / n for k, v in tot.items()}, n


def test_lips_closed_on_bilabials_more_than_loudness(figures):
    r, n = _pooled(figures, "closed_on_pbm", "pbm_frames")
    print(f"/p b m/ frames {n}: closed engine {r['engine']:.2f} loudness {r['loudness']:.2f}")
    assert n > 20
    assert r["engine"] > r["loudness"] + 0.1


def test_lips_rounded_on_u_w_more_than_loudness(figures):
    r, n = _pooled(figures, "rounded_on_uw", "uw_frames")
    print(f"/uw uh w/ frames {n}: rounded engine {r['engine']:.2f} loudness {r['loudness']:.2f}")
    assert n > 20
    assert r["engine"] > r["loudness"] + 0.1


@pytest.mark.parametrize("name", ["jfk.wav", "common_voice_ja_24511055.mp3"])
def test_other_recordings_run(animators, testdata, name):
    x = ev.load_16k(testdata / "audio" / name)
    w = animate_offline(animators["engine"], x, 30.0)
    assert w.shape[0] == int(len(x) / 16000 * 30) + 1
    assert np.isfinite(w).all()
    jaw = w[:, Blendshape.jawOpen]
    assert jaw.max() > 0.15 and np.mean(jaw < 0.05) > 0.05  # speaks, and closes in pauses
