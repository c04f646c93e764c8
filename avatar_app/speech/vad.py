"""Energy-based voice activity gate with an adaptive noise floor and a speech-likeness cue.

The gate runs on the 10 ms hop grid of :mod:`avatar_app.speech.features`.
Per hop it takes the frame level (dBFS) and spectral flatness and decides
"voice" or "no voice":

- Noise floor: the minimum frame level over the last
  :attr:`GateConfig.floor_window_s` (kept as minima of 0.25 s blocks), a
  simplified form of Martin's minimum statistics (R. Martin, "Noise power
  spectral density estimation based on optimal smoothing and minimum
  statistics", IEEE Trans. Speech Audio Proc. 9(5), 2001) without the bias
  correction: speech always has pauses or quiet consonants within ~2 s, so the
  window minimum is background, and the floor follows a change of background
  (or a wrong start, e.g. a fade-in) within one window.
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

import collections
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
            in a very quiet room; GRID and jfk.wav speech peaks at -20..-7 dBFS).
        onset_s: how long the open condition must hold before opening, s
            (3 hops: a resonant click of ~5 ms that looks speech-like in one
            25 ms frame rarely does so in three in a row).
        hold_s: how long the gate stays open after the level dropped, s
            (bridges stop closures and short pauses inside words).
        max_flatness: flatness below which a frame counts as speech-like for
            opening (voiced speech < 0.1; noise and clicks > 0.25).
        max_flatness_open: flatness below which an open gate's hold is
            refreshed (more lenient so fricatives like /s/ keep it open).
        floor_window_s: length of the minimum-statistics window, s.
        floor_block_s: block length of the running minimum, s (the floor rises
            in steps of one block).
        silence_db: levels at or below this, dBFS, are digital silence (a muted
            or starting device): they never open the gate and leave the floor
            unchanged (16-bit TPDF dither is about -96 dBFS).
    """

    open_db: float = 12.0
    close_db: float = 6.0
    min_level_db: float = -65.0
    onset_s: float = 0.03
    hold_s: float = 0.2
    max_flatness: float = 0.2
    max_flatness_open: float = 0.4
    floor_window_s: float = 2.0
    floor_block_s: float = 0.25
    silence_db: float = -90.0

    def __post_init__(self) -> None:
        if self.close_db > self.open_db:
            raise InputError(
                f"voice gate close_db ({self.close_db}) must not exceed open_db ({self.open_db})"
            )
        for name in ("onset_s", "hold_s"):
            if getattr(self, name) < 0:
                raise InputError(f"voice gate {name} must be >= 0 s; got {getattr(self, name)}")
        if not 0 < self.floor_block_s <= self.floor_window_s:
            raise InputError(
                "voice gate needs 0 < floor_block_s <= floor_window_s; got "
                f"{self.floor_block_s} and {self.floor_window_s}"
            )


class VoiceActivityGate:
    """Voice activity decision per 10 ms hop, with hysteresis and hold.

    Args:
        config: gate constants; default :class:`GateConfig`.

    Thread: not thread-safe; one instance per audio stream.
    """

    def __init__(self, config: GateConfig | None = None):
        self.config = config or GateConfig()
        c = self.config
        self._block_hops = max(1, int(round(c.floor_block_s / HOP_S)))
        self._n_blocks = max(1, int(round(c.floor_window_s / c.floor_block_s)) - 1)
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
        self._blocks: collections.deque[float] = collections.deque(maxlen=self._n_blocks)
        self._block_min = math.inf
        self._block_count = 0

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
        if level_db > c.silence_db:  # digital silence (muted, starting) tells nothing
            self._track_floor(level_db)
        if self.floor_db is None:
            return False
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
        return self.is_open

    def _track_floor(self, level_db: float) -> None:
        """Running minimum over the window: closed blocks in a deque plus the open block."""
        self._block_min = min(self._block_min, level_db)
        self._block_count += 1
        if self._block_count >= self._block_hops:
            self._blocks.append(self._block_min)
            self._block_min, self._block_count = math.inf, 0
        older = min(self._blocks) if self._blocks else math.inf
        floor = min(older, self._block_min)
        self.floor_db = None if math.isinf(floor) else floor

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
