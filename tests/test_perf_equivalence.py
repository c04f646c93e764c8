"""Performance edits keep outputs: each faster path against the computation it replaced."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.inference import EngineManager
from avatar_app.speech import SPEECH_MASK
from avatar_app.speech.engine_animator import EngineSpeechAnimator, default_model_path
from avatar_app.speech.mel import log_mel
from tests.test_speech_loudness import load_mono16k

SR = 16000


@pytest.fixture(scope="module")
def animator() -> EngineSpeechAnimator:
    a = EngineSpeechAnimator(default_model_path(), manager=EngineManager(isolate=False))
    yield a
    a.close()


@pytest.mark.parametrize("fps", [25.0, 30.0])
def test_speech_engine_call_over_its_receptive_field_only(animator, testdata, fps):
    """Each video frame's raw output equals the newest hop's output of the call the animator
    made before (the receptive field plus every new hop: T = R + n_new - 1), within 1e-6."""
    x = load_mono16k(testdata / "audio" / "grid_s1_bbaf2n.wav")
    feats = log_mel(x)
    r = animator.receptive_field
    ctx = int(round(animator.context_s * SR))
    animator.reset()
    last_hop = None
    checked = 0
    for i in range(1, int(len(x) / SR * fps)):
        t = i / fps
        end = int(round(t * SR))
        animator.process(x[max(0, end - ctx):end], t)
        hop = end // 160
        n_new = 1 if last_hop is None else hop - last_hop
        last_hop = hop
        t_old = max(r + n_new - 1, 10)
        if hop < t_old:  # the old window reached before the track: its zero padding is not log_mel's
            continue
        window = feats[hop - t_old: hop][None]
        old = animator.slot.infer({"features": window})["blendshapes"][0, -1]
        old = np.where(SPEECH_MASK, np.clip(old, 0.0, 1.0), 0.0)
        np.testing.assert_allclose(animator.last_raw, old, atol=1e-6, rtol=0)
        checked += 1
    assert checked >= int(len(x) / SR * fps) - int(0.7 * fps) - 1  # all but the first 0.7 s
