"""Speech synthesisers with their own phone timings: espeak-ng, festival, flite.

Each family returns an :class:`Utterance`: 16 kHz mono float32 audio and the
phone segments the synthesiser itself placed (no forced alignment needed).

- espeak-ng (formant synthesis, many languages and voice variants): the C
  library through ctypes, phoneme events (DESIGN.md "Training data notes":
  ``espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, NULL,
  espeakINITIALIZE_PHONEME_EVENTS)``; events of type 7 carry the mnemonic and
  the sample position at 22050 Hz).
- festival (diphone voices kal, ked; HTS voice slt): ``festival -b`` with a
  Scheme script that saves the Segment relation (end times) and the wave.
- flite (CMU voices kal16, awb, rms, slt): ``flite -psdur`` prints
  ``phone:end_time`` pairs.

Debian packages: espeak-ng, festival, festvox-kallpc16k, festvox-kdlpc16k,
festvox-us-slt-hts, flite.
"""
from __future__ import annotations

import ctypes
import subprocess
import tempfile
import wave
from dataclasses import dataclass, field
from math import gcd
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

SR = 16000


@dataclass
class Utterance:
    """Synthesised speech with phone segments.

    Attributes:
        audio: (N,) float32 mono 16 kHz in [-1, 1].
        phones: list of (start_s, end_s, symbol) in the family's own phone set.
        family: "espeak", "festival" or "flite".
        voice: voice name.
        text: the text spoken.
    """

    audio: np.ndarray
    phones: list[tuple[float, float, str]]
    family: str
    voice: str
    text: str
    meta: dict = field(default_factory=dict)


def _to16k(x: np.ndarray, sr: int) -> np.ndarray:
    if sr == SR:
        return x.astype(np.float32)
    g = gcd(SR, sr)
    return resample_poly(x.astype(np.float64), SR // g, sr // g).astype(np.float32)


def _read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path)) as w:
        sr, n, ch = w.getframerate(), w.getnframes(), w.getnchannels()
        x = np.frombuffer(w.readframes(n), np.int16).astype(np.float32) / 32768.0
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1)
    return x, sr


# ----------------------------------------------------------------------------- espeak-ng
class _EspeakId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _EspeakEvent(ctypes.Structure):  # espeak_EVENT of speak_lib.h
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint),
                ("text_position", ctypes.c_int), ("length", ctypes.c_int),
                ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", _EspeakId)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                             ctypes.POINTER(_EspeakEvent))
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INIT_PHONEME_EVENTS = 0x0001
_EVENT_PHONEME = 7
_RATE, _PITCH, _RANGE = 1, 3, 4


class Espeak:
    """espeak-ng through ctypes (one instance per process)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libespeak-ng.so.1")
        self.sr = self.lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, None, _INIT_PHONEME_EVENTS)
        if self.sr <= 0:
            raise RuntimeError("espeak_Initialize failed")
        self._chunks: list[np.ndarray] = []
        self._events: list[tuple[str, int]] = []
        self._cb = _CALLBACK(self._on_synth)  # keep a reference
        self.lib.espeak_SetSynthCallback(self._cb)

    def _on_synth(self, wav, n, ev) -> int:
        if n > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
        i = 0
        while ev[i].type != 0:
            if ev[i].type == _EVENT_PHONEME:
                self._events.append((ev[i].id.string.decode("ascii", "replace"), ev[i].sample))
            i += 1
        return 0

    def synth(self, text: str, voice: str, rate_wpm: int = 170, pitch: int = 50,
              pitch_range: int = 50) -> Utterance:
        """Speak ``text`` with ``voice`` (e.g. ``"en+m3"``, ``"de+f2"``)."""
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ValueError(f"espeak-ng voice {voice!r} not found")
        self.lib.espeak_SetParameter(_RATE, int(rate_wpm), 0)
        self.lib.espeak_SetParameter(_PITCH, int(pitch), 0)
        self.lib.espeak_SetParameter(_RANGE, int(pitch_range), 0)
        self._chunks, self._events = [], []
        t = text.encode("utf-8")
        self.lib.espeak_Synth(t, len(t) + 1, 0, 1, 0, 0, None, None)
        x = (np.concatenate(self._chunks).astype(np.float32) / 32768.0 if self._chunks
             else np.zeros(0, np.float32))
        dur = len(x) / self.sr
        ev = [(s, p / self.sr) for s, p in self._events if not s.startswith("(")]
        phones = []
        for i, (sym, t0) in enumerate(ev):
            t1 = ev[i + 1][1] if i + 1 < len(ev) else dur
            if t1 > t0:
                phones.append((t0, t1, sym))
        return Utterance(_to16k(x, self.sr), phones, "espeak", voice, text,
                         {"rate": rate_wpm, "pitch": pitch})


# ----------------------------------------------------------------------------- festival
FESTIVAL_VOICES = ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")


def festival_synth(text: str, voice: str, stretch: float = 1.0) -> Utterance:
    """Speak ``text`` with festival voice ``voice`` (Duration_Stretch ``stretch``)."""
    safe = text.replace('"', "").replace("\\", "")
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "s.scm").write_text(
            f"(voice_{voice})\n(Parameter.set 'Duration_Stretch {stretch:.3f})\n"
            f'(set! utt (Utterance Text "{safe}"))\n(utt.synth utt)\n'
            f'(utt.save.segs utt "{d}/o.segs")\n(utt.save.wave utt "{d}/o.wav" \'riff)\n')
        subprocess.run(["festival", "-b", str(d / "s.scm")], check=True, capture_output=True, timeout=60)
        x, sr = _read_wav(d / "o.wav")
        ends = []
        for line in (d / "o.segs").read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] != "#":
                ends.append((float(parts[0]), parts[2]))
    phones, t0 = [], 0.0
    for t1, sym in ends:
        if t1 > t0:
            phones.append((t0, t1, sym))
        t0 = t1
    return Utterance(_to16k(x, sr), phones, "festival", voice, text, {"stretch": stretch})


# ----------------------------------------------------------------------------- flite
FLITE_VOICES = ("kal16", "awb", "rms", "slt")


def flite_synth(text: str, voice: str, stretch: float = 1.0) -> Utterance:
    """Speak ``text`` with flite voice ``voice`` (duration_stretch ``stretch``)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "o.wav"
        p = subprocess.run(["flite", "-voice", voice, "--setf", f"duration_stretch={stretch:.3f}",
                            "-psdur", "-t", text, "-o", str(out)],
                           check=True, capture_output=True, text=True, timeout=60)
        x, sr = _read_wav(out)
    phones, t0 = [], 0.0
    for tok in p.stdout.split():
        if ":" not in tok:
            continue
        sym, t1s = tok.rsplit(":", 1)
        t1 = float(t1s)
        if t1 > t0:
            phones.append((t0, t1, sym))
        t0 = t1
    return Utterance(_to16k(x, sr), phones, "flite", voice, text, {"stretch": stretch})
