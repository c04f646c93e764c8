"""Log-mel features of the speech2face engine: 64 bands, 16 kHz, 25 ms window, 10 ms hop.

One definition for training (training/speech) and runtime
(:class:`~avatar_app.speech.engine_animator.EngineSpeechAnimator`):

- frame ``k`` is the 25 ms (400 samples) that END at sample ``(k + 1) * 160``,
  i.e. at time ``(k + 1) * 10 ms`` of the track (causal framing: a frame never
  needs audio after its hop time); samples before the track start are zeros;
- Hann window (periodic=False, numpy's ``np.hanning``), 512-point FFT, power
  spectrum;
- 64 triangular mel filters between 0 and 8000 Hz on the HTK mel scale
  ``mel = 2595 log10(1 + f / 700)`` (Young et al., The HTK Book, 2006, sec. 5.4),
  unit peak height (no Slaney area normalisation);
- natural log of ``power + 1e-10`` (full-scale sine peaks at about +10;
  digital silence is ``log(1e-10) = -23.03``).

:func:`log_mel` works on a whole track; :class:`StreamingLogMel` computes the
same frames incrementally from a live stream (tested for equality).
"""
from __future__ import annotations

import numpy as np

from avatar_app.core.errors import InputError
from avatar_app.speech.base import SPEECH_SAMPLE_RATE
from avatar_app.speech.features import FRAME_LEN, HOP_LEN, N_FFT, spectrum_level_and_flatness, windowed

#: Number of mel bands.
N_MELS = 64
#: Floor added to the mel power before the log.
LOG_FLOOR = 1e-10
#: Feature value of digital silence in every band.
SILENCE_VALUE = float(np.log(LOG_FLOOR))
#: Lowest and highest filter edge, Hz.
F_MIN_HZ, F_MAX_HZ = 0.0, 8000.0

_WINDOW = np.hanning(FRAME_LEN).astype(np.float64)


def _hz_to_mel(f):
    return 2595.0 * np.log10(1.0 + np.asarray(f, np.float64) / 700.0)


def _mel_to_hz(m):
    return 700.0 * (10.0 ** (np.asarray(m, np.float64) / 2595.0) - 1.0)


def mel_filterbank(n_mels: int = N_MELS, sr: int = SPEECH_SAMPLE_RATE, n_fft: int = N_FFT,
                   f_min: float = F_MIN_HZ, f_max: float = F_MAX_HZ) -> np.ndarray:
    """Triangular mel filterbank (HTK mel scale, unit peak).

    Args:
        n_mels: number of bands.
        sr: sample rate, Hz.
        n_fft: FFT size.
        f_min, f_max: lowest and highest filter edges, Hz.

    Returns:
        (n_fft // 2 + 1, n_mels) float64 weights: ``mel_power = power @ fb``.
    """
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2))
    lo, mid, hi = edges[:-2], edges[1:-1], edges[2:]
    f = freqs[:, None]
    up = (f - lo) / (mid - lo)
    down = (hi - f) / (hi - mid)
    return np.maximum(0.0, np.minimum(up, down))


_FB = mel_filterbank()


def frames_to_log_mel(frames: np.ndarray) -> np.ndarray:
    """Log-mel of a batch of 25 ms frames.

    Args:
        frames: (K, 400) float mono 16 kHz audio in [-1, 1].

    Returns:
        (K, 64) float32 log mel power.
    """
    spec = np.fft.rfft(np.asarray(frames, np.float64) * _WINDOW, N_FFT, axis=-1)
    power = spec.real**2 + spec.imag**2
    return np.log(power @ _FB + LOG_FLOOR).astype(np.float32)


def log_mel_and_gate(frames: np.ndarray, n_gate: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`frames_to_log_mel` of all frames and the voice gate's features of the last ``n_gate``, one FFT call.

    The two analyses window differently (float64 Hann here, the float32 one of
    :func:`~avatar_app.speech.features.windowed` for the gate), so their rows are stacked into
    one ``rfft`` call (numpy transforms rows one by one: each row's spectrum is the one a
    separate call gives); every result is bit-identical to the separate calls.

    Args:
        frames: (K, 400) float32 mono 16 kHz frames.
        n_gate: 1 <= n_gate <= K: how many of the newest frames the gate reads.

    Returns:
        (K, 64) float32 log-mel, (n_gate,) float64 level_db and flatness
        (:func:`~avatar_app.speech.features.level_and_flatness` of ``frames[-n_gate:]``).
    """
    k = len(frames)
    both = np.concatenate([np.asarray(frames, np.float64) * _WINDOW, windowed(frames[k - n_gate:])])
    spec = np.fft.rfft(both, N_FFT, axis=-1)
    mel = spec[:k]
    power = mel.real**2 + mel.imag**2
    level_db, flatness = spectrum_level_and_flatness(spec[k:])
    return np.log(power @ _FB + LOG_FLOOR).astype(np.float32), level_db, flatness


def n_frames(n_samples: int) -> int:
    """Number of complete hops in ``n_samples`` samples: ``n_samples // 160``."""
    return int(n_samples) // HOP_LEN


def log_mel(samples: np.ndarray) -> np.ndarray:
    """Log-mel features of a whole mono track.

    Args:
        samples: (N,) float32 mono audio at 16 kHz in [-1, 1], starting at time 0.

    Returns:
        (N // 160, 64) float32; row ``k`` is the frame ending at ``(k + 1) * 10 ms``.

    Raises:
        InputError: ``samples`` is not 1-D or holds non-finite values.
    """
    x = np.asarray(samples)
    if x.ndim != 1:
        raise InputError(f"log-mel input must be mono audio of shape (N,); got shape {x.shape}")
    x = x.astype(np.float32, copy=False)
    if x.size and not np.isfinite(x).all():
        raise InputError("log-mel input contains NaN or infinite samples")
    k = n_frames(len(x))
    if k == 0:
        return np.zeros((0, N_MELS), np.float32)
    pad = np.concatenate([np.zeros(FRAME_LEN - HOP_LEN, np.float32), x[: k * HOP_LEN]])
    idx = np.arange(k)[:, None] * HOP_LEN + np.arange(FRAME_LEN)[None, :]
    return frames_to_log_mel(pad[idx])


class StreamingLogMel:
    """Incremental :func:`log_mel` of a stream fed in arbitrary chunks.

    ``push(chunk)`` returns the frames completed by the chunk; the concatenation
    of all outputs equals ``log_mel`` of the concatenated input.

    Thread: not thread-safe; one instance per stream.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start a new stream (the samples before it count as zeros)."""
        self._buf = np.zeros(FRAME_LEN - HOP_LEN, np.float32)
        self.frames_out = 0

    def push(self, chunk: np.ndarray) -> np.ndarray:
        """Append samples; return the newly completed frames.

        Args:
            chunk: (M,) float32 mono 16 kHz audio, M >= 0.

        Returns:
            (K, 64) float32 log-mel frames completed by this chunk (K may be 0).

        Raises:
            InputError: ``chunk`` is not 1-D or holds non-finite values.
        """
        x = np.asarray(chunk)
        if x.ndim != 1:
            raise InputError(f"audio chunk must be mono, shape (M,); got shape {x.shape}")
        x = x.astype(np.float32, copy=False)
        if x.size and not np.isfinite(x).all():
            raise InputError("audio chunk contains NaN or infinite samples")
        buf = np.concatenate([self._buf, x])
        k = (len(buf) - (FRAME_LEN - HOP_LEN)) // HOP_LEN
        if k <= 0:
            self._buf = buf
            return np.zeros((0, N_MELS), np.float32)
        idx = np.arange(k)[:, None] * HOP_LEN + np.arange(FRAME_LEN)[None, :]
        out = frames_to_log_mel(buf[idx])
        self._buf = buf[k * HOP_LEN:]
        self.frames_out += k
        return out
