"""Energy-based voice activity gate with an adaptive noise floor and a speech-likeness cue.

The gate runs on the 10 ms hop grid of :mod:`avatar_app.speech.features`.
Per hop it takes the frame level (dBFS) and spectral flatness and decides
"voice" or "no voice":

- Noise floor: follows the level down quickly (time constant
  :attr:`GateConfig.floor_fall_s`) and up slowly (:attr:`GateConfig.floor_rise_s`
  while the gate is closed, :attr:`GateConfig.floor_rise_open_s` while open), a
  simple minimum-tracking estimator in the spirit of Martin's minimum
  statistics (Martin, IEEE Trans. Speech Audio Proc. 2001).
- Hysteresis: the gate opens when the level is ``open_db`` above the floor
  (and above an absolute minimum) on ``onset_s`` of consecutive hops that are
  all speech-like, and closes after the level stayed below ``close_db`` above
  the floor for ``hold_s``.
- Speech-likeness: voiced speech has a peaky (harmonic) spectrum, so a low
  spectral flatness; steady noise (white 0.56, pink ~0.37) and keyboard clicks
  (broadband, about 0.3-0.5) do not. A click also lasts less than the onset
  time. The constants below were checked on the GRID recordings
  (../shared/testdata/audio): loud speech frames had a median flatness of
  0.003-0.02, their silences 0.05-0.08 at -60 dBFS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from avatar_app.core.errors import InputError
from avatar_app.speech.features import FRAME_LEN, HOP_S, MIN_LEVEL_DB, analyse_frames


@dataclass(frozen=True)
class GateConfig:
    """Constants of :class:`VoiceActivityGate` (defaults tuned on GRID and jfk.wav).

    Attributes:
        open_db: level above the noise floor to open, dB. 12 dB is ~4x the
            noise amplitude; quiet GRID consonants sit 15-25 dB above their floor.
        close_db: level above the floor below which the hold timer runs, dB
            (hysteresis of 6 dB against chattering).
        min_level_db: absolute level needed to open, dBFS (ignores faint sounds
            right after digital silence, when the floor is at -100 dBFS).
        onset_s: how long the open condition must hold before opening, s
            (3 hops; a keyboard click lasts < 10 ms and covers at most 3 frames
            only when it is also speech-like, which clicks are not).
        hold_s: how long the gate stays open after the level dropped, s
            (bridges stop closures and short pauses inside words).
        max_flatness: flatness below which a frame counts as speech-like for
            opening (voiced speech < 0.1; noise and clicks > 0.25).
        max_flatness_open: flatness below which an open gate's hold is
            refreshed (more lenient so fricatives like /s/ keep it open).
        floor_fall_s: time constant of the floor following the level down, s.
        floor_rise_s: time constant of the floor rising while closed, s.
        floor_rise_open_s: time constant of the floor rising while open, s
            (slow, so sustained speech does not become "noise").
        silence_db: levels at or below this, dBFS, are digital silence (a muted
            or starting device): they never open the gate and leave the floor
            unchanged (16-bit dither alone is about -101 dBFS).
    """

    open_db: float = 12.0
    close_db: float = 6.0
    min_level_db: float = -65.0
    onset_s: float = 0.03
    hold_s: float = 0.2
    max_flatness: float = 0.2
    max_flatness_open: float = 0.4
    floor_fall_s: float = 0.04
    floor_rise_s: float = 1.5
    floor_rise_open_s: float = 15.0
    silence_db: float = -90.0

    def __post_init__(self) -> None:
        if self.close_db > self.open_db:
            raise InputError(
                f"voice gate close_db ({self.close_db}) must not exceed open_db ({self.open_db})"
            )
        for name in ("onset_s", "hold_s", "floor_fall_s", "floor_rise_s", "floor_rise_open_s"):
            if getattr(self, name) < 0:
                raise InputError(f"voice gate {name} must be >= 0 s")


def _alpha(tau_s: float) -> float:
    """One-pole smoothing coefficient for one hop with time constant ``tau_s``."""
    return 1.0 if tau_s <= 0 else 1.0 - math.exp(-HOP_S / tau_s)


class VoiceActivityGate:
    """Voice activity decision per 10 ms hop, with hysteresis and hold.

    Args:
        config: gate constants; default :class:`GateConfig`.

    Thread: not thread-safe; one instance per audio stream.
    """

    def __init__(self, config: GateConfig | None = None):
        self.config = config or GateConfig()
        c = self.config
        self._a_fall = _alpha(c.floor_fall_s)
        self._a_rise = _alpha(c.floor_rise_s)
        self._a_rise_open = _alpha(c.floor_rise_open_s)
        self._onset_hops = max(1, int(round(c.onset_s / HOP_S)))
        self.reset()

    def reset(self) -> None:
        """Forget the floor and close the gate."""
        self.floor_db: float | None = None
        self.is_open = False
        self.level_db = MIN_LEVEL_DB
        self.speech_like = False
        self._onset = 0
        self._hold_left_s = 0.0

    def update(self, level_db: float, flatness: float) -> bool:
        """Advance by one 10 ms hop.

        Args:
            level_db: the hop's frame level, dBFS (``FrameFeatures.level_db``).
            flatness: the hop's spectral flatness in [0, 1].

        Returns:
            Whether the gate is open after this hop.
        """
        c = self.config
        self.level_db = level_db
        self.speech_like = flatness < c.max_flatness
        if self.floor_db is None:
            if level_db <= c.silence_db:  # digital silence tells nothing about the room
                return False
            self.floor_db = level_db  # first real hop: assume it is background
        above = level_db - self.floor_db
        if self.is_open:
            if above > c.close_db and flatness < c.max_flatness_open:
                self._hold_left_s = c.hold_s
            else:
                self._hold_left_s -= HOP_S
                if self._hold_left_s <= 0.0:
                    self.is_open = False
                    self._onset = 0
        else:
            if above > c.open_db and level_db > c.min_level_db and self.speech_like:
                self._onset += 1
                if self._onset >= self._onset_hops:
                    self.is_open = True
                    self._hold_left_s = c.hold_s
            else:
                self._onset = 0
        # floor update (after the decision, so the onset does not lift its own floor much)
        if level_db <= c.silence_db:
            pass  # digital silence (muted mic, stream start) leaves the floor alone
        elif level_db < self.floor_db:
            self.floor_db += (level_db - self.floor_db) * self._a_fall
        else:
            a = self._a_rise_open if self.is_open else self._a_rise
            self.floor_db += (level_db - self.floor_db) * a
        return self.is_open

    def update_frame(self, frame: np.ndarray) -> bool:
        """Convenience: analyse one 25 ms frame and advance by one hop.

        Args:
            frame: (400,) float32 mono audio at 16 kHz ending at the hop time.

        Returns:
            Whether the gate is open after this hop.

        Raises:
            InputError: ``frame`` does not have 400 samples.
        """
        x = np.asarray(frame, dtype=np.float32)
        if x.shape != (FRAME_LEN,):
            raise InputError(f"voice gate frame must have shape ({FRAME_LEN},); got {x.shape}")
        f = analyse_frames(x[None, :])
        return self.update(float(f.level_db[0]), float(f.flatness[0]))
