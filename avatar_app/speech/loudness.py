"""LoudnessSpeechAnimator: the first speech animator, driven by voice activity, loudness and tilt.

No model: per 10 ms hop (the :mod:`avatar_app.speech.features` grid)

- the :class:`~avatar_app.speech.vad.VoiceActivityGate` decides voice / no voice;
- while voiced, the level above the adaptive noise floor, scaled by the
  tracked speech peak, sets the jaw target (louder = more open: vowels open
  the jaw more than consonants, Lindblom & Sundberg 1971 link jaw opening to F1
  and intensity);
- the spectral tilt (1-3 kHz over 0.2-1 kHz, relative to its running mean
  for this speaker) pushes the lips a little toward rounded (mouthFunnel,
  mouthPucker: low F2 of u/o) or spread (mouthSmile, mouthStretch: high F2 of i/e);
- targets are smoothed with separate attack and release time constants.

Silence, steady noise and clicks keep the gate shut, so all weights decay to 0.
The hop grid is anchored to the frame times (hop ends at multiples of 10 ms),
so the output does not depend on the video frame rate, and offline runs are
deterministic.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES, Blendshape
from avatar_app.core.errors import InputError
from avatar_app.speech.base import SPEECH_SAMPLE_RATE, check_window
from avatar_app.speech.features import FRAME_LEN, HOP_S, analyse_frames
from avatar_app.speech.vad import GateConfig, VoiceActivityGate

_log = logging.getLogger(__name__)

_B = Blendshape


@dataclass(frozen=True)
class LoudnessConfig:
    """Constants of :class:`LoudnessSpeechAnimator`.

    Attributes:
        jaw_max: jawOpen at the speech peak level (ARKit jawOpen ~0.5-0.6 is a
            wide-open speaking mouth; 1.0 is a yawn).
        min_range_db: smallest level range mapped onto 0..jaw_max, dB; stops
            a faint voice just above the floor from opening the jaw fully.
        max_range_db: the range below the tracked speech peak mapped onto
            0..jaw_max, dB (never reaching below floor + close_db): voiced frames
            quieter than ``peak - max_range_db`` keep the jaw closed.
        peak_decay_db_per_s: how fast the tracked speech peak falls, dB/s.
        jaw_gamma: exponent of the level-to-jaw curve (< 1 opens quieter sounds more).
        attack_s: jaw smoothing time constant while opening, s.
        release_s: jaw smoothing time constant while closing, s.
        shape_attack_s: lip-shape smoothing time constant while rising, s.
        shape_release_s: lip-shape smoothing time constant while falling, s.
        tilt_mean_s: time constant of the speaker's running mean tilt, s.
        tilt_scale_db: tilt deviation giving a full rounded/spread cue, dB.
        funnel_max, pucker_max, smile_max, stretch_max: weights at a full cue,
            times the relative jaw opening (kept modest: a rough cue).
        lower_down_gain: mouthLowerDown* = gain * jawOpen (lower lip follows the jaw).
    """

    jaw_max: float = 0.6
    min_range_db: float = 18.0
    max_range_db: float = 30.0
    peak_decay_db_per_s: float = 2.0
    jaw_gamma: float = 0.8
    attack_s: float = 0.02
    release_s: float = 0.06
    shape_attack_s: float = 0.05
    shape_release_s: float = 0.1
    tilt_mean_s: float = 3.0
    tilt_scale_db: float = 8.0
    funnel_max: float = 0.35
    pucker_max: float = 0.3
    smile_max: float = 0.2
    stretch_max: float = 0.15
    lower_down_gain: float = 0.3


def _alpha(tau_s: float) -> float:
    return 1.0 if tau_s <= 0 else 1.0 - math.exp(-HOP_S / tau_s)


class LoudnessSpeechAnimator:
    """A :class:`~avatar_app.speech.base.SpeechAnimator` from loudness and a vowel cue.

    Args:
        config: animation constants; default :class:`LoudnessConfig`.
        gate_config: voice gate constants; default :class:`~avatar_app.speech.vad.GateConfig`.

    Attributes:
        sample_rate: 16000 Hz.
        context_s: 0.12 s: holds the 25 ms frames of the last 10 hops (100 ms
            between calls, i.e. >= 10 fps); older hops of a longer gap are skipped.
            The hop grid sits at multiples of 10 ms of ``t_s``, so the newest
            up to 10 ms of a window wait for the next call.
        gate: the voice activity gate (read-only use: ``gate.is_open``, ``gate.floor_db``).

    Thread: not thread-safe; one instance per audio stream.
    """

    sample_rate: int = SPEECH_SAMPLE_RATE
    context_s: float = 0.12

    def __init__(self, config: LoudnessConfig | None = None, gate_config: GateConfig | None = None):
        self.config = config or LoudnessConfig()
        c = self.config
        if not 0.0 < c.jaw_max <= 1.0:
            raise InputError(f"jaw_max must be in (0, 1]; got {c.jaw_max}")
        self.gate = VoiceActivityGate(gate_config)
        self._a_att, self._a_rel = _alpha(c.attack_s), _alpha(c.release_s)
        self._a_satt, self._a_srel = _alpha(c.shape_attack_s), _alpha(c.shape_release_s)
        self._a_tilt = _alpha(c.tilt_mean_s)
        self._max_hops = int(round(self.context_s / HOP_S)) - 2  # frames of 25 ms fit
        self.reset()

    def describe(self) -> str:
        """``"loudness solver"`` (what the render report names, as the engine's ``describe``)."""
        return "loudness solver"

    def reset(self) -> None:
        """Forget floor, gate, smoothing and the speaker's tilt mean."""
        self.gate.reset()
        self._last_hop: int | None = None
        self._peak_db: float | None = None
        self._tilt_mean: float | None = None
        self._jaw = 0.0
        self._round = 0.0
        self._spread = 0.0

    def process(self, window: np.ndarray, t_s: float) -> np.ndarray:
        """Weights for the video frame at ``t_s`` (see ``SpeechAnimator.process``).

        Args:
            window: (N,) float32 mono 16 kHz audio whose last sample is at ``t_s``.
            t_s: frame time, s; a time before the previous call's restarts the stream.

        Returns:
            (52,) float32 weights: jawOpen, mouthFunnel, mouthPucker,
            mouthSmile*, mouthStretch*, mouthLowerDown*; all others 0.

        Raises:
            InputError: bad window shape/values or non-finite ``t_s``.
        """
        x = check_window(window, t_s)
        hop_end = int(math.floor(t_s / HOP_S + 1e-6))
        if self._last_hop is not None and hop_end < self._last_hop:
            _log.debug("speech time went back (%.3f s): restarting the animator", t_s)
            self.reset()
        first = hop_end if self._last_hop is None else self._last_hop + 1
        first = max(first, hop_end - self._max_hops + 1)
        if first <= hop_end:
            self._run_hops(x, t_s, first, hop_end)
            self._last_hop = hop_end
        return self._weights()

    def _run_hops(self, x: np.ndarray, t_s: float, first: int, last: int) -> None:
        sr = self.sample_rate
        # sample offset (from the window's end) where each hop ends
        ends = [len(x) - int(round((t_s - k * HOP_S) * sr)) for k in range(first, last + 1)]
        # hops whose 25 ms frame is not all inside the window (stream start) are skipped
        keep = [i for i, e in enumerate(ends) if e >= FRAME_LEN]
        if not keep:
            return
        ends = [ends[i] for i in keep]
        n_hops = len(ends)
        frames = np.stack([x[e - FRAME_LEN:e] for e in ends])
        feats = analyse_frames(frames)
        for i in range(n_hops):
            self._step(float(feats.level_db[i]), float(feats.flatness[i]), float(feats.tilt_db[i]))

    def _step(self, level_db: float, flatness: float, tilt_db: float) -> None:
        c = self.config
        g = self.gate
        voiced = g.update(level_db, flatness)
        jaw_t = round_t = spread_t = 0.0
        if voiced:
            base = g.floor_db + g.config.close_db
            if self._peak_db is None:
                self._peak_db = base + c.min_range_db
            self._peak_db = max(level_db, self._peak_db - c.peak_decay_db_per_s * HOP_S)
            bottom = max(base, self._peak_db - c.max_range_db)
            rng = max(self._peak_db - bottom, c.min_range_db)
            rel = min(max((level_db - bottom) / rng, 0.0), 1.0)
            jaw_t = c.jaw_max * rel**c.jaw_gamma
            if g.speech_like:  # vowel cue only on voiced (harmonic) frames
                if self._tilt_mean is None:
                    self._tilt_mean = tilt_db
                self._tilt_mean += (tilt_db - self._tilt_mean) * self._a_tilt
                dev = (tilt_db - self._tilt_mean) / c.tilt_scale_db
                round_t = min(max(-dev, 0.0), 1.0) * rel
                spread_t = min(max(dev, 0.0), 1.0) * rel
        self._jaw += (jaw_t - self._jaw) * (self._a_att if jaw_t > self._jaw else self._a_rel)
        self._round += (round_t - self._round) * (
            self._a_satt if round_t > self._round else self._a_srel)
        self._spread += (spread_t - self._spread) * (
            self._a_satt if spread_t > self._spread else self._a_srel)

    def _weights(self) -> np.ndarray:
        c = self.config
        w = np.zeros(NUM_BLENDSHAPES, np.float32)
        w[_B.jawOpen] = self._jaw
        w[_B.mouthFunnel] = c.funnel_max * self._round
        w[_B.mouthPucker] = c.pucker_max * self._round
        w[_B.mouthSmileLeft] = w[_B.mouthSmileRight] = c.smile_max * self._spread
        w[_B.mouthStretchLeft] = w[_B.mouthStretchRight] = c.stretch_max * self._spread
        w[_B.mouthLowerDownLeft] = w[_B.mouthLowerDownRight] = c.lower_down_gain * self._jaw
        np.clip(w, 0.0, 1.0, out=w)
        return w
