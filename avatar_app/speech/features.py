"""Short-time spectral features of 16 kHz speech audio on a fixed 10 ms hop grid.

Frames are 25 ms (400 samples) with a 10 ms hop, the framing DESIGN.md fixes
for the speech2face log-mel input, analysed with a Hann window and a 512-point
FFT (31.25 Hz bins). All features of a batch of frames come from one FFT call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from avatar_app.speech.base import SPEECH_SAMPLE_RATE

#: Analysis frame length, samples (25 ms at 16 kHz).
FRAME_LEN = 400
#: Hop between frames, samples (10 ms at 16 kHz).
HOP_LEN = 160
#: Hop in seconds.
HOP_S = HOP_LEN / SPEECH_SAMPLE_RATE
#: FFT size (next power of two above FRAME_LEN).
N_FFT = 512
#: Lowest level reported, dBFS (digital silence would otherwise be -inf).
MIN_LEVEL_DB = -100.0

_WINDOW = np.hanning(FRAME_LEN).astype(np.float32)
_FREQS = np.fft.rfftfreq(N_FFT, 1.0 / SPEECH_SAMPLE_RATE)
# Band 80-8000 Hz: everything but DC and hum-range rumble.
_BAND = (_FREQS >= 80.0) & (_FREQS <= 8000.0)
# Flatness band 80-4000 Hz, where voiced speech shows its harmonics.
_FLAT_BAND = (_FREQS >= 80.0) & (_FREQS <= 4000.0)
# Vowel cue bands: "low" 200-1000 Hz holds F1 (and F2 of back rounded vowels),
# "mid" 1000-3000 Hz holds F2 of front spread vowels (Peterson & Barney, 1952).
_LOW = (_FREQS >= 200.0) & (_FREQS < 1000.0)
_MID = (_FREQS >= 1000.0) & (_FREQS <= 3000.0)

_N_FLAT = int(_FLAT_BAND.sum())


def _band(mask: np.ndarray) -> slice:
    """The bins of a contiguous band mask as a slice."""
    idx = np.flatnonzero(mask)
    if not idx.size or idx[-1] - idx[0] + 1 != idx.size:
        raise ValueError("a band mask must be one run of bins")
    return slice(int(idx[0]), int(idx[-1]) + 1)


_BAND_S, _FLAT_S, _LOW_S, _MID_S = (_band(m) for m in (_BAND, _FLAT_BAND, _LOW, _MID))
# Mean square of the band-limited frame from the one-sided power spectrum (Parseval):
# sum_k 2|X_k|^2 / (N_FFT * sum(w^2)).
_POWER_SCALE = 2.0 / (N_FFT * float(np.sum(_WINDOW.astype(np.float64) ** 2)))
_EPS = 1e-20


@dataclass(frozen=True)
class FrameFeatures:
    """Features of K analysis frames (all arrays (K,) float64).

    Attributes:
        level_db: band-limited (80-8000 Hz) mean-square level, dBFS (a full-scale
            square wave is 0 dBFS), clamped below at :data:`MIN_LEVEL_DB`.
        flatness: spectral flatness (geometric / arithmetic mean of the power
            spectrum, Gray & Markel 1974) over 80-4000 Hz, in [0, 1]. About 0.56
            for white noise, 0.3-0.45 for pink noise and clicks, below ~0.1 for
            voiced speech (its harmonics make the spectrum peaky).
        tilt_db: energy in 1000-3000 Hz over 200-1000 Hz, dB. Higher for
            front spread vowels (i, e: high F2), lower for back rounded vowels
            (u, o: low F1 and F2).
    """

    level_db: np.ndarray
    flatness: np.ndarray
    tilt_db: np.ndarray


def windowed(frames: np.ndarray) -> np.ndarray:
    """(K, 400) float32: the frames times this module's float32 Hann window (the FFT's input)."""
    return frames * _WINDOW


def _power(frames: np.ndarray) -> np.ndarray:
    return _spectrum_power(np.fft.rfft(windowed(frames), N_FFT, axis=-1))


def _spectrum_power(spec: np.ndarray) -> np.ndarray:
    """(K, 257) float64 power spectra (+ eps), column-major: the band slices of it are views whose row
    sums add the bins in the order numpy sums a boolean-mask copy (``power[:, mask]`` is column-major
    too), so the features equal those of the masked copies bit for bit, without the copies."""
    return np.asfortranarray(spec.real**2 + spec.imag**2 + _EPS)


def spectrum_level_and_flatness(spec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`level_and_flatness` from the spectra ``np.fft.rfft(windowed(frames), N_FFT, axis=-1)``.

    Args:
        spec: (K, 257) complex128 spectra (rows of a larger FFT call too: numpy transforms rows
            one by one, so a row's spectrum does not depend on the batch).

    Returns:
        (K,) float64 level_db and flatness, bit-identical to ``level_and_flatness(frames)``.
    """
    return _level_flatness(_spectrum_power(spec))


def _level_flatness(power: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    band_power = power[:, _BAND_S].sum(axis=1)
    level_db = np.maximum(10.0 * np.log10(band_power * _POWER_SCALE + _EPS), MIN_LEVEL_DB)
    flat = power[:, _FLAT_S]
    # geometric over arithmetic mean (sums / count: what ndarray.mean computes, without its overhead)
    flatness = np.exp(np.log(flat).sum(axis=1) / _N_FLAT) / (flat.sum(axis=1) / _N_FLAT)
    return level_db, flatness


def level_and_flatness(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``level_db`` and ``flatness`` of :func:`analyse_frames` alone (what the voice gate reads).

    Args:
        frames: (K, 400) float32 mono audio at 16 kHz in [-1, 1].

    Returns:
        (K,) float64 arrays, equal to ``analyse_frames(frames).level_db`` and ``.flatness``.
    """
    return _level_flatness(_power(frames))


def analyse_frames(frames: np.ndarray) -> FrameFeatures:
    """Compute :class:`FrameFeatures` for a batch of frames.

    Args:
        frames: (K, 400) float32 mono audio at 16 kHz in [-1, 1].

    Returns:
        FrameFeatures with (K,) arrays.
    """
    power = _power(frames)
    level_db, flatness = _level_flatness(power)
    tilt_db = 10.0 * np.log10(power[:, _MID_S].sum(axis=1) / power[:, _LOW_S].sum(axis=1))
    return FrameFeatures(level_db=level_db, flatness=flatness, tilt_db=tilt_db)
