"""The speech stage's per-frame savings (issue 18) keep its outputs: on real GRID audio.

- the engine runs over the newest hop's receptive field only (T = R): the newest output of a
  causal network is the same over any longer window;
- the log-mel rows and the gate features of a call come from one stacked rfft call: bit-identical;
- the gate's band features sum bin slices (views of a column-major power spectrum, summed in the
  order numpy sums the column-major mask copies) instead of mask copies: bit-identical; the
  animator's ``level_and_flatness`` (no tilt) too.
"""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.inference import EngineManager
from avatar_app.speech import SPEECH_MASK
from avatar_app.speech import features as F
from avatar_app.speech.engine_animator import EngineSpeechAnimator, default_model_path, infer_features
from avatar_app.speech.mel import log_mel
from tests.helpers import load_mono16k

SR = 16000


@pytest.fixture(scope="module")
def animator() -> EngineSpeechAnimator:
    a = EngineSpeechAnimator(default_model_path(), manager=EngineManager(isolate=False))
    yield a
    a.close()


@pytest.fixture(scope="module")
def speech(testdata) -> np.ndarray:
    return np.concatenate([load_mono16k(testdata / "audio" / n) for n in ("grid_s1_bbaf2n.wav", "grid_s2_swwp2s.wav")])


def reference_analyse(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """analyse_frames as written before issue 18 (boolean band masks, ndarray.mean)."""
    spec = np.fft.rfft(frames * F._WINDOW, F.N_FFT, axis=-1)
    power = spec.real**2 + spec.imag**2 + F._EPS
    level = np.maximum(10.0 * np.log10(power[:, F._BAND].sum(axis=1) * F._POWER_SCALE + F._EPS), F.MIN_LEVEL_DB)
    flat = power[:, F._FLAT_BAND]
    flatness = np.exp(np.log(flat).mean(axis=1)) / flat.mean(axis=1)
    tilt = 10.0 * np.log10(power[:, F._MID].sum(axis=1) / power[:, F._LOW].sum(axis=1))
    return level, flatness, tilt


def test_gate_features_are_bit_identical(speech):
    n = (len(speech) - F.FRAME_LEN) // F.HOP_LEN
    frames = speech[np.arange(n)[:, None] * F.HOP_LEN + np.arange(F.FRAME_LEN)]
    frames = np.concatenate([frames, np.zeros((3, F.FRAME_LEN), np.float32)])  # digital silence too
    got = F.analyse_frames(frames)
    ref = reference_analyse(frames)
    for a, b in zip((got.level_db, got.flatness, got.tilt_db), ref):
        np.testing.assert_array_equal(a, b)
    for k in (1, 2, 4, 7):  # the animator's batches: the new hops of one video frame
        batch = frames[100:100 + k]
        level, flatness = F.level_and_flatness(batch)
        ref_level, ref_flatness, _ = reference_analyse(batch)  # (a batch's sums depend on its size)
        np.testing.assert_array_equal(level, ref_level)
        np.testing.assert_array_equal(flatness, ref_flatness)


def test_newest_output_needs_only_the_receptive_field(animator, speech):
    feats = log_mel(speech)
    r = animator.receptive_field
    for end in range(r + 10, len(feats), 37):
        short = animator.slot.infer({"features": feats[None, end - r:end]})["blendshapes"][0, -1]
        for extra in (3, 9):  # what a call over R + n_new - 1 frames saw (n_new = 4 at 25 fps, 10 at most)
            long_ = animator.slot.infer({"features": feats[None, end - r - extra:end]})["blendshapes"][0, -1]
            np.testing.assert_allclose(short, long_, rtol=0, atol=1e-6)


def test_video_rate_calls_equal_the_whole_track(animator, speech):
    """At 25 fps (4 new hops per call) the newest raw output is the whole track's."""
    y = infer_features(animator.slot, log_mel(speech), animator.receptive_field)
    animator.reset()
    n = int(animator.context_s * SR)
    for k in range(2, len(speech) // 640):
        end = k * 640  # 40 ms frames
        window = np.zeros(n, np.float32)
        seg = speech[max(0, end - n):end]
        window[n - len(seg):] = seg
        animator.process(window, end / SR)
        want = np.where(SPEECH_MASK, np.clip(y[end // 160 - 1], 0.0, 1.0), 0.0)
        np.testing.assert_allclose(animator.last_raw, want, rtol=0, atol=1e-5)


def test_one_fft_for_mel_and_gate_is_bit_identical(speech):
    """The animator's log-mel and gate features from one stacked rfft call equal the two separate calls."""
    from avatar_app.speech.mel import frames_to_log_mel, log_mel_and_gate

    for k, n_gate in ((1, 1), (4, 4), (7, 7), (10, 10), (65, 4), (69, 10)):  # streaming calls, restarts
        for s in range(0, len(speech) - F.FRAME_LEN - k * F.HOP_LEN, 4001):
            frames = speech[s + np.arange(k)[:, None] * F.HOP_LEN + np.arange(F.FRAME_LEN)]
            mel, level, flatness = log_mel_and_gate(frames, n_gate)
            ref_level, ref_flatness = F.level_and_flatness(frames[k - n_gate:])
            np.testing.assert_array_equal(mel, frames_to_log_mel(frames))
            np.testing.assert_array_equal(level, ref_level)
            np.testing.assert_array_equal(flatness, ref_flatness)
