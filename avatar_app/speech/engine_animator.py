"""EngineSpeechAnimator: the learned speech2face engine behind the SpeechAnimator contract.

Per video frame (``process(window, t_s)``):

1. the hop grid: hop ``h`` is the 25 ms log-mel frame that ends at ``h * 10 ms``
   (:mod:`avatar_app.speech.mel`; the same frames ``log_mel`` gives for the
   whole track);
2. for the hops new since the last call (at most ``max_hops``), the log-mel
   rows and the :class:`~avatar_app.speech.vad.VoiceActivityGate`'s features are
   computed (one FFT call), the gate (hysteresis and hold) advances, and the
   engine runs once per video frame, one of two ways:

   - **conv-state streaming** (ONNX Runtime CPU, the default there): the engine
     layer derives the conv-state graph of the shipped file in memory
     (:mod:`avatar_app.inference.conv_state`: each causal Pad becomes a Concat
     with that block's last ``(k - 1) * d`` input frames, carried as state); the
     animator keeps the state and feeds only the new hops (T = 4 at 25 fps:
     ~0.17 vs ~0.46 ms a call, benchmarks/speech_state.py). A stream (re)starts
     with one zero-state call over the newest hop's receptive field (R = 65
     frames), which is the window call below, at exactly the points where the
     window path restarts its feature cache: ``reset()``, time going back (a
     seek), a gap of more than ``max_hops`` hops, and an engine swap (the
     :class:`~avatar_app.inference.EngineSlot` derives the new engine's graph on its
     worker thread before swapping both in: the old pair serves meanwhile);
   - **window call** (TensorRT, the GPU providers, a remote engine, or when the
     derivation or its check fails: logged as a warning): the engine runs over
     the receptive field of the newest hop (``T = R`` frames: only the newest
     hop's output is used, and the network is causal), older log-mel rows kept
     from earlier calls while the stream is continuous.

   Both give the same newest output (within 1e-6 on GRID speech,
   tests/speech/test_speech_streaming.py); the shipped ONNX file stays the
   engine contract (builds, calibration, verification);
3. the newest hop's output is multiplied by the gate's smoothed gain (15 ms attack,
   60 ms release, advanced over every new hop), so silence, steady noise and clicks give a closed, relaxed
   mouth even where the network would twitch.

The output of hop ``h`` stands for the mouth at ``h * 10 ms - 20 ms`` (the
network's 20 ms look-ahead): live audio-to-weights latency is that plus the
wait for the next hop (0-10 ms) and the engine call.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES
from avatar_app.core.errors import AvatarError, InputError, ModelLoadError
from avatar_app.resources import resource_path
from avatar_app.speech.base import SPEECH_MASK, SPEECH_SAMPLE_RATE, check_window
from avatar_app.speech.features import FRAME_LEN, HOP_LEN, HOP_S
from avatar_app.speech.mel import N_MELS, frames_to_log_mel, log_mel_and_gate
from avatar_app.speech.vad import GateConfig, VoiceActivityGate

_log = logging.getLogger(__name__)

#: The shipped model, relative to the project root.
DEFAULT_MODEL = "models/speech2face.onnx"
_META_RF = "avatar_app.receptive_field"
_META_LOOKAHEAD = "avatar_app.lookahead_ms"
#: How far visible mouth motion leads the sound, s (see ``offline_lookahead_s``).
VISUAL_LEAD_S = 0.04
_FRAME_OFFSETS = np.arange(FRAME_LEN)[None, :]
_SPEECH_F32 = SPEECH_MASK.astype(np.float32)


def default_model_path() -> Path:
    """Path of the shipped speech2face.onnx (it may not exist in a partial install)."""
    return resource_path(DEFAULT_MODEL)


class EngineSpeechAnimator:
    """A :class:`~avatar_app.speech.base.SpeechAnimator` running the speech2face engine.

    Args:
        model_path: speech2face ONNX (default :func:`default_model_path`).
        manager: an :class:`~avatar_app.inference.EngineManager` (default: a new
            one with the user's engine cache).
        backend, precision: the user's engine choice (None: fastest verified,
            else ONNX Runtime CPU FP32).
        gate_config: voice gate constants (default :class:`GateConfig`).
        max_hops: most 10 ms hops processed per call (older ones of a longer
            gap are skipped): 10 = calls at >= 10 fps keep every hop.
        slot: an already opened :class:`~avatar_app.inference.EngineSlot` to use
            instead of opening one (its settings panel may swap engines).

    Attributes:
        sample_rate: 16000 Hz.
        context_s: audio wanted before each frame time (receptive field +
            ``max_hops`` hops + the 15 ms frame overhang), about 0.76 s.
        lookahead_s: 0.02: the output stands for ``t_s - lookahead_s`` or up to
            10 ms before.
        offline_lookahead_s: look-ahead used by offline rendering
            (:func:`~avatar_app.speech.base.animate_offline` passes audio up to
            ``t + offline_lookahead_s``): the network's 20 ms plus the 40 ms by
            which visible mouth motion leads the acoustics (measured on the GRID
            clips as the best lag between vision-only and audio-only jawOpen;
            Schwartz and Savariaux, PLoS Comput. Biol. 10(7), 2014, report visual
            leads of this order at speech onsets). Live mode never uses it.
        gate: the voice activity gate (read-only use).
        slot: the engine slot (``slot.active.describe()`` names the backend).

    Raises:
        ModelLoadError: the model is missing or no engine can load it.

    Thread: not thread-safe; one instance per audio stream.
    """

    sample_rate: int = SPEECH_SAMPLE_RATE

    def __init__(self, model_path: str | Path | None = None, *, manager=None,
                 backend: str | None = None, precision: str | None = None,
                 gate_config: GateConfig | None = None, max_hops: int = 10, slot=None,
                 attack_s: float = 0.015, release_s: float = 0.06, streaming: bool = True):
        from avatar_app.inference import EngineManager, EngineSlot

        if slot is None:
            path = Path(model_path) if model_path is not None else default_model_path()
            if not path.is_file():
                raise ModelLoadError(f"speech model not found: {path}")
            slot = EngineSlot(manager or EngineManager(), path)
            slot.open(backend, precision)
        self.slot = slot
        meta = slot.manager.model_info(slot.model_path).metadata
        self.receptive_field = int(meta.get(_META_RF, "65"))
        self.lookahead_s = float(meta.get(_META_LOOKAHEAD, "20")) / 1000.0
        self.offline_lookahead_s = self.lookahead_s + VISUAL_LEAD_S
        if max_hops < 1:
            raise InputError(f"max_hops must be >= 1; got {max_hops}")
        self.max_hops = int(max_hops)
        self.context_s = ((self.receptive_field + self.max_hops - 1) * HOP_LEN
                          + FRAME_LEN - HOP_LEN) / SPEECH_SAMPLE_RATE
        self.gate = VoiceActivityGate(gate_config)
        self._a_att = 1.0 - math.exp(-HOP_S / attack_s)
        self._a_rel = 1.0 - math.exp(-HOP_S / release_s)
        self.streaming = bool(streaming)
        self._bad_stream = None
        self.reset()
        if self.streaming and hasattr(slot, "enable_conv_state"):  # (stand-in slots may lack it)
            slot.enable_conv_state()  # derived now (~0.1 s), not at the first frame

    def reset(self) -> None:
        """Forget the gate, the hop position and the last weights."""
        self.gate.reset()
        self._last_hop: int | None = None
        self._gain = 0.0
        self._weights = np.zeros(NUM_BLENDSHAPES, np.float32)
        self.last_raw = np.zeros(NUM_BLENDSHAPES, np.float32)
        self._cache: np.ndarray | None = None  # log-mel rows of the latest hops
        self._cache_lo = 0  # hop index of the cache's first row
        self._state: dict | None = None  # conv state after hop ``_state_hop`` (streaming path)
        self._state_owner = None  # the ConvStateEngine the state belongs to
        self._state_hop = -1

    def close(self) -> None:
        """Close the engine slot (and its conv-state engine)."""
        self.slot.close()

    def describe(self) -> str:
        """Which engine serves: ``speech2face.onnx on ort_cpu (fp32)``, ``..., conv-state`` when streaming."""
        stream = self.stream_engine()
        return stream.describe() if stream is not None else self.slot.active.describe()

    def stream_engine(self):
        """The :class:`~avatar_app.inference.conv_state.ConvStateEngine` the slot serves now, or None.

        The slot derives it for each ONNX Runtime CPU FP32 engine (:meth:`EngineSlot.enable_conv_state`,
        before a swapped engine goes in); on any other backend or precision (an FP16 / INT8 file on
        the CPU keeps the window call, as the user chose it), when the derivation failed (logged
        as a warning) or with ``streaming`` off, the window call serves. A new one (an engine
        swap) restarts the stream from zero state.
        """
        if not self.streaming:
            return None
        stream = getattr(self.slot, "conv_state", None)
        if stream is not None and stream.receptive_field != self.receptive_field:
            if stream is not self._bad_stream:
                self._bad_stream = stream
                _log.warning("speech engine: the conv-state graph's receptive field is %d frames, the "
                             "model's metadata says %d: the window call serves", stream.receptive_field,
                             self.receptive_field)
            return None
        return stream

    # -- features ----------------------------------------------------------------
    @staticmethod
    def hop_features(x: np.ndarray, end_sample: int, hops: range) -> tuple[np.ndarray, np.ndarray]:
        """Log-mel frames of hops (frame of hop h ends at sample h * 160) from a window.

        Args:
            x: (N,) float32 window whose last sample precedes sample ``end_sample``
                of the stream (``end_sample = round(t_s * 16000)``).
            end_sample: stream index one past the window's last sample.
            hops: hop indices, all with ``h * 160 <= end_sample``.

        Returns:
            features (len(hops), 64) float32, equal to ``log_mel(stream)[h - 1]``
            where the window covers the frames (samples before the window count
            as zeros), and the frames (len(hops), 400) float32 themselves.
        """
        if len(hops) == 0:
            return np.zeros((0, N_MELS), np.float32), np.zeros((0, FRAME_LEN), np.float32)
        frames = _hop_frames(x, end_sample, hops)
        return frames_to_log_mel(frames), frames

    @staticmethod
    def _hop_analysis(x: np.ndarray, end_sample: int, hops: range,
                      n_gate: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`hop_features` of ``hops`` (not empty) and the gate features of the last ``n_gate``, one FFT."""
        return log_mel_and_gate(_hop_frames(x, end_sample, hops), n_gate)

    # -- processing ----------------------------------------------------------------
    def process(self, window: np.ndarray, t_s: float) -> np.ndarray:
        """Weights for the video frame at ``t_s`` (see ``SpeechAnimator.process``).

        Args:
            window: (N,) float32 mono 16 kHz audio whose last sample is at ``t_s``.
            t_s: frame time, s; a time before the previous call's restarts the stream.

        Returns:
            (52,) float32 weights in [0, 1], zero outside SPEECH_BLENDSHAPES.

        Raises:
            InputError: bad window shape/values or non-finite ``t_s``.
            AvatarError: the engine failed (the engine layer's error).
        """
        x = check_window(window, t_s)
        end_sample = int(round(t_s * self.sample_rate))
        hop_end = end_sample // HOP_LEN
        if self._last_hop is not None and hop_end < self._last_hop:
            _log.debug("speech time went back (%.3f s): restarting the animator", t_s)
            self.reset()
        first = hop_end if self._last_hop is None else self._last_hop + 1
        first = max(first, hop_end - self.max_hops + 1, 1)
        if first <= hop_end:
            self._run(x, end_sample, first, hop_end)
            self._last_hop = hop_end
        return self._weights.copy()

    def _run(self, x: np.ndarray, end_sample: int, first: int, last: int) -> None:
        stream = self.stream_engine()
        n_new = last - first + 1
        out = None
        if (stream is not None and self._state is not None and self._state_owner is stream
                and self._state_hop == first - 1):
            # continuous stream: the conv state holds everything before `first`; run the new hops only
            new, level_db, flatness = self._hop_analysis(x, end_sample, range(first, last + 1), n_new)
            res = self.slot.step_with(stream, new[None], self._state)
            if res is not None:  # (None: the slot swapped engines since stream_engine())
                out, self._state = res[0][0, -1], res[1]
        if out is None:
            out, level_db, flatness = self._run_window(stream, x, end_sample, first, last, n_new)
        self._state_hop = last if self._state is not None else -1
        if not np.isfinite(out).all():
            raise AvatarError("the speech engine returned non-finite weights")
        for level, flat in zip(level_db.tolist(), flatness.tolist()):
            is_open = self.gate.update(level, flat)
            target = 1.0 if is_open else 0.0
            a = self._a_att if target > self._gain else self._a_rel
            self._gain += (target - self._gain) * a
        # = np.clip(out, 0, 1) with the undriven shapes zeroed (out is finite): two ufunc calls and a
        # multiply by the 0/1 mask instead of np.clip's Python wrapper and a boolean-mask assignment
        raw = np.maximum(out, np.float32(0.0))
        np.minimum(raw, np.float32(1.0), out=raw)
        raw *= _SPEECH_F32
        self.last_raw = raw
        self._weights = raw * np.float32(self._gain)

    def _run_window(self, stream, x: np.ndarray, end_sample: int, first: int, last: int, n_new: int):
        """The newest hop's raw output (52,) from one call over its receptive field, and the new hops' gate features.

        With a conv-state engine (a stream (re)starts: reset, time going back, a gap of more
        than ``max_hops``, an engine swap) the call goes through it from zero state, which
        equals the window call and leaves the state of hop ``last``.
        """
        # Only the last hop's output is used, and it needs the receptive field only (the network
        # is causal): the engine runs over R frames, not R + n_new - 1 (the same output: its
        # receptive field lies inside either window).
        t = max(self.receptive_field, n_new, 10)
        lo = last - t + 1
        c = self._cache
        if stream is None and c is not None and self._cache_lo <= lo and self._cache_lo + len(c) == first:
            # older hops' features are cached (the stream is continuous): compute the new ones only
            new, level_db, flatness = self._hop_analysis(x, end_sample, range(first, last + 1), n_new)
            feats = np.concatenate([c[lo - self._cache_lo:], new])
        else:
            feats, level_db, flatness = self._hop_analysis(x, end_sample, range(lo, last + 1), n_new)
        self._state = self._state_owner = None
        if stream is not None:
            self._cache = None  # the conv state carries the context from here on
            res = self.slot.step_with(stream, feats[None], stream.zero_state())
            if res is not None:
                self._state, self._state_owner = res[1], stream
                return res[0][0, -1], level_db, flatness
        keep = self.receptive_field + self.max_hops
        self._cache = feats[-keep:]
        self._cache_lo = last + 1 - len(self._cache)
        return self.slot.infer({"features": feats[None]})["blendshapes"][0, -1], level_db, flatness

def _hop_frames(x: np.ndarray, end_sample: int, hops: range) -> np.ndarray:
    """(len(hops), 400) float32 frames of hops (see ``hop_features``); samples before ``x`` are zeros."""
    first_start = hops[0] * HOP_LEN - FRAME_LEN
    start = end_sample - len(x)
    need = start - first_start
    if need > 0:
        x = np.concatenate([np.zeros(need, np.float32), x])
        start = first_start
    offs = np.arange(hops.start, hops.stop, hops.step) * HOP_LEN - (FRAME_LEN + start)
    return x[offs[:, None] + _FRAME_OFFSETS]

def infer_features(slot, feats: np.ndarray, receptive_field: int, max_t: int = 300,
                   max_b: int = 16) -> np.ndarray:
    """Ungated engine output for every frame of a whole track, inside the engine's profile.

    The track is cut into windows of at most ``max_t`` frames that overlap by
    ``receptive_field - 1`` frames (the causal context; digital silence before
    the start), batched by at most ``max_b``; each frame's output comes from a
    window that holds its full receptive field, so the result equals one call
    over the whole sequence.

    Args:
        slot: an open EngineSlot (or any object with ``infer(feeds)``).
        feats: (F, 64) float32 log-mel of the track (:func:`~avatar_app.speech.mel.log_mel`).
        receptive_field: the model's receptive field, frames.
        max_t, max_b: the profile's largest T and B.

    Returns:
        (F, 52) float32 weights; row k stands for ``(k + 1) * 10 ms - look-ahead``.

    Raises:
        InputError: ``feats`` is not (F, 64) or the profile is too small for the context.
    """
    from avatar_app.speech.mel import SILENCE_VALUE

    f = np.asarray(feats, np.float32)
    if f.ndim != 2 or f.shape[1] != N_MELS:
        raise InputError(f"features must have shape (F, {N_MELS}); got {f.shape}")
    ctx = receptive_field - 1
    step = max_t - ctx
    if step < 1:
        raise InputError(f"profile T max {max_t} cannot hold the receptive field {receptive_field}")
    n = len(f)
    out = np.zeros((n, NUM_BLENDSHAPES), np.float32)
    if n == 0:
        return out
    padded = np.concatenate([np.full((ctx, N_MELS), SILENCE_VALUE, np.float32), f])
    starts = list(range(0, n, step))
    t_win = min(max_t, max(10, ctx + min(step, n)))
    wins = np.full((len(starts), t_win, N_MELS), SILENCE_VALUE, np.float32)
    for i, s in enumerate(starts):
        seg = padded[s: s + t_win]
        wins[i, : len(seg)] = seg
    for b in range(0, len(starts), max_b):
        y = slot.infer({"features": wins[b: b + max_b]})["blendshapes"]
        for j, s in enumerate(starts[b: b + max_b]):
            m = min(step, n - s)
            out[s: s + m] = y[j, ctx: ctx + m]
    return out
