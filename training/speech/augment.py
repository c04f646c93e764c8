"""Audio augmentation and non-speech sounds for the speech2face training data (seeded).

All functions take a ``numpy.random.Generator`` and work on (N,) float32 16 kHz audio.

- warping: resampling by a factor scales formants (vocal-tract length) and pitch
  together, as VTLP does in the spectral domain (Jaitly and Hinton, "Vocal Tract
  Length Perturbation (VTLP) improves speech recognition", ICML WDLASL 2013);
  independent pitch comes from the synthesisers' own pitch settings.
- noise: white, pink (1/f power) and babble (a sum of other utterances) at an
  SNR drawn from 0-30 dB;
- reverberation: exponentially decaying noise impulse responses, RT60 0.1-0.8 s
  (Polack's statistical model of late reverberation);
- band-limiting like cheap microphones and telephony (high-pass 100-400 Hz,
  low-pass 3-7 kHz), gain -30..+6 dB, occasional soft clipping;
- non-speech: digital silence, room noise, breaths, keyboard clicks, music.
"""
from __future__ import annotations

import numpy as np

# scipy.signal is imported inside the functions that use it: importing this module (training.speech.make_data
# does) then costs no seconds until augmentation actually runs.

SR = 16000


def rms(x: np.ndarray) -> float:
    """Root mean square (0 for empty input)."""
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


def warp(x: np.ndarray, factor: float) -> np.ndarray:
    """Scale all frequencies by ``factor`` (and durations by 1/factor) by resampling."""
    from scipy.signal import resample_poly
    up = int(round(1000 / factor))
    return resample_poly(x.astype(np.float64), up, 1000).astype(np.float32)


def white(n: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-RMS white noise."""
    return rng.standard_normal(n).astype(np.float32)


def pink(n: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-RMS pink (1/f) noise by spectral shaping."""
    spec = np.fft.rfft(rng.standard_normal(n))
    k = np.arange(spec.size, dtype=np.float64)
    k[0] = 1.0
    y = np.fft.irfft(spec / np.sqrt(k), n)
    return (y / max(rms(y), 1e-12)).astype(np.float32)


def brown(n: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-RMS brown (1/f^2) noise: room rumble / fans."""
    from scipy.signal import butter, sosfilt
    y = np.cumsum(rng.standard_normal(n))
    y = sosfilt(butter(2, 40, "hp", fs=SR, output="sos"), y)
    return (y / max(rms(y), 1e-12)).astype(np.float32)


def clicks(n: int, rng: np.random.Generator) -> np.ndarray:
    """Keyboard-like clicks: 4-10 ms noise bursts with a 1.5-4 kHz resonance, peak ~1."""
    y = np.zeros(n, np.float32)
    pos = int(rng.uniform(0.0, 0.2) * SR)
    while pos < n:
        length = int(rng.uniform(0.004, 0.01) * SR)
        env = np.exp(-np.arange(length) / (rng.uniform(0.001, 0.003) * SR))
        f = rng.uniform(1500, 4000)
        burst = rng.standard_normal(length) * 0.6 + np.sin(2 * np.pi * f * np.arange(length) / SR)
        seg = (burst * env * rng.uniform(0.3, 1.0)).astype(np.float32)
        y[pos:pos + length] += seg[: max(0, min(length, n - pos))]
        pos += int(rng.uniform(0.08, 0.35) * SR)
    return y


def breath(n: int, rng: np.random.Generator) -> np.ndarray:
    """Breaths: band-passed noise (500-3000 Hz) with slow 0.3-0.7 s swells, peak RMS ~1."""
    from scipy.signal import butter, sosfilt
    y = sosfilt(butter(2, [rng.uniform(300, 700), rng.uniform(2000, 4000)], "bp", fs=SR,
                       output="sos"), rng.standard_normal(n))
    env = np.zeros(n)
    pos = 0
    while pos < n:
        length = int(rng.uniform(0.3, 0.7) * SR)
        w = np.hanning(length) ** 2
        env[pos:pos + length] += w[: max(0, min(length, n - pos))]
        pos += length + int(rng.uniform(0.1, 1.0) * SR)
    return (y * env / max(rms(y), 1e-12)).astype(np.float32)


def music(n: int, rng: np.random.Generator) -> np.ndarray:
    """Music-like sound: chords of harmonic tones with vibrato and note changes, some drums."""
    t = np.arange(n) / SR
    y = np.zeros(n)
    pos = 0
    while pos < n:
        length = int(rng.uniform(0.15, 0.8) * SR)
        seg = slice(pos, min(n, pos + length))
        tt = t[seg] - t[pos]
        for _ in range(rng.integers(1, 4)):
            f0 = 110 * 2 ** (rng.integers(0, 36) / 12)
            vib = 1 + 0.004 * np.sin(2 * np.pi * rng.uniform(4, 7) * tt)
            for h in range(1, rng.integers(2, 9)):
                if f0 * h > 7500:
                    break
                y[seg] += np.sin(2 * np.pi * f0 * h * vib * tt + rng.uniform(0, 6.28)) / h ** rng.uniform(0.8, 2)
        y[seg] *= np.exp(-tt / rng.uniform(0.2, 2.0))
        pos += length
    if rng.random() < 0.5:  # drums: noise hits
        for p in range(0, n, int(rng.uniform(0.25, 0.5) * SR)):
            ln = min(n - p, int(0.08 * SR))
            y[p:p + ln] += rng.standard_normal(ln) * np.exp(-np.arange(ln) / (0.015 * SR)) * 0.5
    return (y / max(rms(y), 1e-12)).astype(np.float32)


def non_speech(n: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """A non-speech segment of ``n`` samples (level set here, -80..-25 dBFS) and its kind."""
    kind = rng.choice(["silence", "room", "breath", "clicks", "music", "mixed"],
                      p=[0.2, 0.15, 0.15, 0.2, 0.2, 0.1])
    if kind == "silence":
        return np.zeros(n, np.float32), str(kind)
    if kind == "room":
        y = (pink(n, rng) if rng.random() < 0.5 else brown(n, rng)) * 10 ** (rng.uniform(-75, -40) / 20)
    elif kind == "breath":
        y = breath(n, rng) * 10 ** (rng.uniform(-50, -30) / 20)
    elif kind == "clicks":
        y = clicks(n, rng) * 10 ** (rng.uniform(-30, -6) / 20)
    elif kind == "music":
        y = music(n, rng) * 10 ** (rng.uniform(-45, -20) / 20)
    else:
        y = (clicks(n, rng) * 10 ** (rng.uniform(-25, -8) / 20)
             + pink(n, rng) * 10 ** (rng.uniform(-50, -30) / 20))
    return y.astype(np.float32), str(kind)


def reverb(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Convolve with a synthetic room impulse response (RT60 0.1-0.8 s, random wet/dry)."""
    from scipy.signal import fftconvolve
    rt60 = rng.uniform(0.1, 0.8)
    n = int(rt60 * SR)
    h = rng.standard_normal(n) * np.exp(-6.91 * np.arange(n) / n)  # -60 dB at rt60
    h[0] = 0.0
    h /= max(np.sqrt(np.sum(h**2)), 1e-12)
    wet = fftconvolve(x, h)[: len(x)]
    mix = rng.uniform(0.2, 0.7)
    y = (1 - mix) * x + mix * wet
    return (y * rms(x) / max(rms(y), 1e-12)).astype(np.float32)


def band_limit(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """High-pass 100-400 Hz and low-pass 3-7 kHz, like cheap microphones."""
    from scipy.signal import butter, sosfilt
    sos_h = butter(2, rng.uniform(100, 400), "hp", fs=SR, output="sos")
    sos_l = butter(4, rng.uniform(3000, 7000), "lp", fs=SR, output="sos")
    return sosfilt(sos_l, sosfilt(sos_h, x)).astype(np.float32)


def add_noise(x: np.ndarray, speech_rms: float, rng: np.random.Generator,
              babble_pool: list[np.ndarray]) -> np.ndarray:
    """Add white/pink/babble noise at SNR 0-30 dB relative to ``speech_rms``."""
    n = len(x)
    kind = rng.choice(["white", "pink", "babble"], p=[0.3, 0.4, 0.3])
    if kind == "white":
        noise = white(n, rng)
    elif kind == "pink":
        noise = pink(n, rng)
    else:
        noise = np.zeros(n, np.float32)
        for _ in range(rng.integers(3, 7)):
            src = babble_pool[rng.integers(len(babble_pool))]
            src = np.tile(src, int(np.ceil(n / max(len(src), 1))) + 1)
            off = rng.integers(0, max(1, len(src) - n))
            noise += src[off:off + n] / max(rms(src), 1e-9)
        noise /= max(rms(noise), 1e-12)
    snr = rng.uniform(0.0, 30.0)
    return (x + noise * speech_rms * 10 ** (-snr / 20)).astype(np.float32)
