"""Log-mel features: one definition for training and runtime, equal in batch and streaming use."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.speech.engine_animator import EngineSpeechAnimator
from avatar_app.speech.mel import (N_MELS, SILENCE_VALUE, StreamingLogMel, log_mel,
                                   mel_filterbank)

SR = 16000


def _speechlike(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SR
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    x = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / SR) / k for k in range(1, 20))
    return (0.1 * x * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)) + 0.003 * rng.standard_normal(n)).astype(np.float32)


def test_shape_framing_and_silence():
    x = np.zeros(16000, np.float32)
    f = log_mel(x)
    assert f.shape == (100, N_MELS) and f.dtype == np.float32
    assert np.allclose(f, SILENCE_VALUE)
    assert log_mel(np.zeros(159, np.float32)).shape == (0, N_MELS)
    assert log_mel(np.zeros(160, np.float32)).shape == (1, N_MELS)


def test_frame_k_ends_at_k_plus_1_hops():
    # an impulse at sample s shows in frames whose 400-sample window [160(k+1)-400, 160(k+1)) holds s
    x = np.zeros(8000, np.float32)
    s = 3000
    x[s] = 1.0
    f = log_mel(x)
    hit = np.where(f.max(axis=1) > SILENCE_VALUE + 1)[0]
    expect = [k for k in range(len(f)) if 160 * (k + 1) - 400 <= s < 160 * (k + 1)]
    assert hit.tolist() == expect


def test_tone_lands_in_its_band():
    t = np.arange(SR) / SR
    fb = mel_filterbank()
    for hz in (300.0, 1000.0, 4000.0):
        f = log_mel((0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32))
        band = int(np.argmax(f[50]))
        peak_bin = int(round(hz / (SR / 512)))
        assert fb[peak_bin, band] > 0.3, (hz, band)  # the band covers the tone's bin


def test_streaming_equals_batch_for_any_chunking():
    x = _speechlike(3 * SR + 77)
    ref = log_mel(x)
    rng = np.random.default_rng(1)
    for _ in range(3):
        s = StreamingLogMel()
        cuts = np.sort(rng.integers(0, len(x), 40))
        parts = [s.push(c) for c in np.split(x, cuts)]
        got = np.concatenate(parts)
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def test_runtime_window_features_equal_training_features():
    """The animator's per-frame features (from a context window) equal log_mel of the track."""
    x = _speechlike(2 * SR)
    ref = log_mel(x)
    for t_s in (0.04, 0.5, 1.237, 1.99):
        end = int(round(t_s * SR))
        window = x[max(0, end - 12000):end]
        hop_end = end // 160
        hops = range(max(1, hop_end - 70), hop_end + 1)
        feats, frames = EngineSpeechAnimator.hop_features(window, end, hops)
        np.testing.assert_allclose(feats, ref[[h - 1 for h in hops]], rtol=0, atol=1e-5)
        assert frames.shape == (len(hops), 400)


def test_training_code_uses_the_same_function():
    import training.speech.make_data as make_data
    assert make_data.log_mel is log_mel


def test_bad_input():
    with pytest.raises(InputError, match="mono"):
        log_mel(np.zeros((2, 100), np.float32))
    with pytest.raises(InputError, match="NaN"):
        log_mel(np.array([0.0, np.nan], np.float32))
    with pytest.raises(InputError, match="mono"):
        StreamingLogMel().push(np.zeros((3, 3), np.float32))
