"""VoiceActivityGate: floor tracking, hysteresis, hold, speech-likeness."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.speech.features import FRAME_LEN, HOP_LEN, analyse_frames
from avatar_app.speech.vad import GateConfig, VoiceActivityGate

SR = 16000


def voiced(n: int, f0: float = 120.0, level: float = 0.1) -> np.ndarray:
    """(n,) float32 harmonic complex (vowel-like: 1/k amplitudes up to 4 kHz)."""
    t = np.arange(n) / SR
    y = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, int(4000 / f0)))
    return (level * y / np.abs(y).max()).astype(np.float32)


def run_gate(gate: VoiceActivityGate, x: np.ndarray) -> np.ndarray:
    """(K,) bool gate state per hop over a whole signal."""
    frames = np.stack([x[e - FRAME_LEN:e] for e in range(FRAME_LEN, len(x) + 1, HOP_LEN)])
    f = analyse_frames(frames)
    return np.array([gate.update(lv, fl) for lv, fl in zip(f.level_db, f.flatness)])


def test_features_of_known_signals():
    rng = np.random.default_rng(0)
    white = rng.standard_normal((20, FRAME_LEN)).astype(np.float32) * 0.01
    f = analyse_frames(white)
    assert 0.45 < np.median(f.flatness) < 0.65  # Gaussian periodogram: exp(-gamma) ~ 0.56
    assert abs(np.median(f.level_db) - (-40.0)) < 1.5  # RMS 0.01 = -40 dBFS, 1% lost <80 Hz
    v = analyse_frames(voiced(FRAME_LEN)[None, :])
    assert v.flatness[0] < 0.1
    silent = analyse_frames(np.zeros((1, FRAME_LEN), np.float32))
    assert silent.level_db[0] == -100.0


def test_opens_on_voice_after_noise_and_closes_after_hold():
    rng = np.random.default_rng(1)
    noise = (rng.standard_normal(3 * SR) * 10 ** (-55 / 20)).astype(np.float32)
    x = noise.copy()
    x[SR:2 * SR] += voiced(SR, level=0.1)
    gate = VoiceActivityGate()
    state = run_gate(gate, x)
    t = (np.arange(len(state)) * HOP_LEN + FRAME_LEN) / SR
    assert not state[t < 0.99].any()
    on = t[state.argmax()]
    assert 1.0 < on <= 1.0 + 0.025 + gate.config.onset_s + 0.011, on
    off = t[len(state) - 1 - state[::-1].argmax()]
    assert 2.0 + gate.config.hold_s - 0.02 <= off <= 2.0 + gate.config.hold_s + 0.03, off
    assert gate.floor_db == pytest.approx(-55.0, abs=4.0)


def test_steady_noise_and_clicks_never_open():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(3 * SR) * 10 ** (-30 / 20)).astype(np.float32)
    for pos in range(2000, len(x) - 200, 3000):  # loud broadband clicks
        x[pos:pos + 80] += (rng.standard_normal(80) * 0.3).astype(np.float32)
    assert not run_gate(VoiceActivityGate(), x).any()


def test_floor_follows_a_step_in_background():
    """A steady tone (speech-like spectrum) switching on is voice at first, then background."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(6 * SR) * 10 ** (-60 / 20)).astype(np.float32)
    x[SR:] += voiced(5 * SR, f0=100.0, level=0.05)  # a hum starts at 1 s and stays
    gate = VoiceActivityGate()
    state = run_gate(gate, x)
    t = (np.arange(len(state)) * HOP_LEN + FRAME_LEN) / SR
    assert state[(t > 1.1) & (t < 1.5)].all()
    limit = 1.0 + gate.config.floor_window_s + gate.config.hold_s + 0.1
    assert not state[t > limit].any()


def test_digital_silence_leaves_floor_unset():
    gate = VoiceActivityGate()
    assert not run_gate(gate, np.zeros(SR, np.float32)).any()
    assert gate.floor_db is None


def test_update_frame_and_config_checks():
    gate = VoiceActivityGate()
    with pytest.raises(InputError, match="shape"):
        gate.update_frame(np.zeros(100, np.float32))
    assert gate.update_frame(np.zeros(FRAME_LEN, np.float32)) is False
    with pytest.raises(InputError, match="close_db"):
        GateConfig(open_db=6.0, close_db=12.0)
    with pytest.raises(InputError, match="floor_block_s"):
        GateConfig(floor_block_s=3.0, floor_window_s=2.0)
