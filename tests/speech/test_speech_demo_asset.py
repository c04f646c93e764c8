"""The shipped demo speech (assets/demo/speech.ogg) is small and makes the mouth move."""
from __future__ import annotations

import av
import numpy as np

from avatar_app.core.blendshapes import Blendshape
from avatar_app.resources import resource_path
from avatar_app.speech import LoudnessSpeechAnimator, animate_offline


def test_demo_speech_is_small_and_opens_the_jaw():
    path = resource_path("assets/demo/speech.ogg")
    assert path.is_file(), f"missing {path}: run training/make_demo_assets.py"
    assert path.stat().st_size < 200_000
    with av.open(str(path)) as c:
        assert c.streams.audio[0].codec_context.name == "opus"
        rs = av.AudioResampler(format="flt", layout="mono", rate=16000)
        chunks = [g.to_ndarray().reshape(-1) for f in c.decode(audio=0) for g in rs.resample(f)]
    x = np.concatenate(chunks)
    assert 6.0 <= len(x) / 16000 <= 10.0
    jaw = animate_offline(LoudnessSpeechAnimator(), x, 30.0)[:, Blendshape.jawOpen]
    assert jaw[: int(0.35 * 30)].max() < 0.05  # leading silence: closed
    assert jaw.max() > 0.4 and (jaw > 0.05).mean() > 0.4
