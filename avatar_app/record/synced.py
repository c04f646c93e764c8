"""Drift-free audio/video sync for long live recordings: the audio clock is the master.

Problem. A webcam that claims 30 fps delivers, say, 30.03; a sound card that
claims 16 kHz delivers 16 kHz x (1 + 100e-6) of the process clock. A file that
stores every audio sample at the nominal rate (it must: dropping or inserting
samples is audible) runs 100 ppm slower than the process clock, so video placed
by process-clock timestamps slides 60 ms (two frames) against the sound over
ten minutes.

Method (the audio device is the master clock, as in broadcast capture):

1. Audio samples are written contiguously; sample ``n`` of the stream is at
   file time ``n / nominal_rate``. Nothing is resampled, dropped or inserted,
   except silence for a real dropout (a chunk whose timestamp lies more than
   ``audio_gap_s`` beyond where the clock model expects it).
2. :class:`AudioClock` fits the line ``n = a + b t`` from each chunk's
   process-clock timestamp ``t`` of its first sample to that sample's index
   ``n`` (least squares over the last ``clock_window_s`` seconds, one pass of
   outlier rejection at 5 robust sigmas; the slope is clamped to the nominal
   rate +- ``max_rate_error``). ``b`` is the device's true rate measured on the
   process clock, so timestamp jitter averages out and drift is followed.
3. Each video frame's capture timestamp ``t`` is mapped to file time
   ``(a + b t) / nominal_rate``, the position of the audio sample captured at
   the same instant.
4. The output has a constant frame rate: slot ``k`` (file time ``k / fps``)
   shows the frame whose mapped time is nearest to it (each frame owns the
   slots before the midpoint to the next frame), so frames are duplicated or
   dropped as the rates require and the error never exceeds half a frame plus
   the clock-model error; it does not grow with the length of the clip.
   While the writer is behind (``behind()``, given by
   :class:`~avatar_app.record.async_recorder.AsyncRecorder`), a frame is
   encoded in its first slot only and held on screen over the others (the
   file's frame rate is then variable there): a starved pipeline delivering
   2 fps would otherwise cost fifteen encodes per frame and starve the audio.
   With ``repeat_frames=False`` (the studio's live recordings) a frame is never
   encoded twice: each new frame is encoded once, in the slot nearest to its time, and held
   on screen until the next one (variable frame rate timestamps on the slot
   grid), so a pipeline presenting 8 new frames a second gives an 8 fps clip
   without repeated frames (only the clip's last frame is written once more at
   its end, so that the video track lasts as long as the audio);
   ``on_frame_encoded`` reports every encoded frame (the blendshape track's rows
   follow the video frames).

File time 0 is the earlier of the first video frame and the first audio
sample; audio before it is trimmed, and slots before the first frame show that
frame.

Timestamps: any clock shared by the audio and video sources, in seconds
(``now_ns() / 1e9`` for live capture: ``Frame.t_capture_ns``,
``AudioChunk.t_start_ns``). The audio timestamp must be the capture time of the
chunk's *first sample* (PortAudio's ``inputBufferAdcTime``), not its arrival.
"""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from avatar_app.core.errors import InputError, RecordingError
from avatar_app.record.recorder import ClipRecorder, ClosingContext

_log = logging.getLogger(__name__)


class AudioClock:
    """Linear model from process-clock seconds to the audio sample index.

    Args:
        nominal_rate_hz: the device's nominal sample rate, Hz.
        window_s: fit over the points of the last ``window_s`` seconds.
        min_span_s: below this span of points the slope is the nominal rate
            (only the offset is fitted).
        max_rate_error: largest accepted relative deviation of the measured rate
            from the nominal one (0.01 = 1 %); beyond it the slope is clamped and a
            warning logged (a wrong nominal rate, not drift).
        refit_interval_s: refit after points spanning this much new time.

    Thread: not thread-safe.
    """

    def __init__(self, nominal_rate_hz: float, window_s: float = 30.0, min_span_s: float = 2.0,
                 max_rate_error: float = 0.01, refit_interval_s: float = 0.25):
        if not nominal_rate_hz > 0:
            raise InputError(f"audio clock rate must be positive; got {nominal_rate_hz!r}")
        self.nominal_rate_hz = float(nominal_rate_hz)
        self.window_s = float(window_s)
        self.min_span_s = float(min_span_s)
        self.max_rate_error = float(max_rate_error)
        self.refit_interval_s = float(refit_interval_s)
        self._pts: deque[tuple[float, float]] = deque()
        self._t_ref: float | None = None
        self._a = 0.0  # samples at t_ref
        self._b = self.nominal_rate_hz
        self._last_fit_t = -np.inf
        self._warned = False

    @property
    def fitted(self) -> bool:
        """Whether at least one point was added."""
        return self._t_ref is not None

    @property
    def rate_hz(self) -> float:
        """Current slope: samples per second of the process clock."""
        return self._b

    @property
    def drift_ppm(self) -> float:
        """(measured rate / nominal rate - 1) x 1e6."""
        return (self._b / self.nominal_rate_hz - 1.0) * 1e6

    def add(self, t_s: float, sample_index: float) -> None:
        """Add the timestamp of one sample (normally each chunk's first sample).

        Args:
            t_s: process-clock time of that sample, seconds.
            sample_index: its index in the audio stream (samples since file time 0).
        """
        if self._t_ref is None:
            self._t_ref = float(t_s)
        self._pts.append((float(t_s), float(sample_index)))
        while self._pts and self._pts[0][0] < t_s - self.window_s:
            self._pts.popleft()
        if t_s - self._last_fit_t >= self.refit_interval_s or len(self._pts) <= 2:
            self._fit()
            self._last_fit_t = t_s

    def _fit(self) -> None:
        arr = np.asarray(self._pts, dtype=np.float64)
        t = arr[:, 0] - self._t_ref
        n = arr[:, 1]
        b = self._slope(t, n)
        a = float(np.mean(n - b * t))
        if len(t) >= 8:  # one pass of outlier rejection (late callbacks, clock hiccups)
            r = n - (a + b * t)
            med = np.median(r)
            mad = 1.4826 * np.median(np.abs(r - med))
            keep = np.abs(r - med) <= max(5.0 * mad, 1e-3 * self.nominal_rate_hz)
            if 2 <= keep.sum() < len(t):
                b = self._slope(t[keep], n[keep])
                a = float(np.mean(n[keep] - b * t[keep]))
        self._a, self._b = a, b

    def _slope(self, t: np.ndarray, n: np.ndarray) -> float:
        nominal = self.nominal_rate_hz
        if len(t) < 2 or t.max() - t.min() < self.min_span_s:
            return nominal
        tc = t - t.mean()
        b = float(np.dot(tc, n - n.mean()) / np.dot(tc, tc))
        lo, hi = nominal * (1 - self.max_rate_error), nominal * (1 + self.max_rate_error)
        if not lo <= b <= hi:
            if not self._warned:
                _log.warning("audio device runs at %.1f Hz for a nominal %.0f Hz (more than %.1f %% "
                             "off); is the sample rate right?", b, nominal, 100 * self.max_rate_error)
                self._warned = True
            b = min(max(b, lo), hi)
        return b

    def position(self, t_s: float) -> float | None:
        """Sample index (fractional) captured at process time ``t_s``; None before any point."""
        if self._t_ref is None:
            return None
        return self._a + self._b * (float(t_s) - self._t_ref)


class SyncedRecorder(ClosingContext):
    """Constant-frame-rate recording placed on the audio clock (see the module doc).

    Wraps a fresh :class:`ClipRecorder` (or :class:`~avatar_app.record.alpha.AlphaClipRecorder`)
    and offers the same ``write_video`` / ``write_audio`` / ``close`` calls, but
    the times passed are *capture timestamps on a shared clock*, not file times.
    ``AsyncRecorder(SyncedRecorder(ClipRecorder(...)))`` runs it in a writer thread.

    Args:
        recorder: a ClipRecorder nothing has been written to; its nominal ``fps``
            is the output frame rate and its ``audio_sample_rate`` the nominal
            rate of the audio given to :meth:`write_audio`. This object owns it.
        clock_window_s: seconds of audio timestamps in the clock fit.
        audio_gap_s: a chunk this much later than the clock model expects is a
            dropout: the gap is filled with silence. Smaller offsets are jitter.
        max_rate_error: see :class:`AudioClock`.
        repeat_frames: fill every slot (constant frame rate, a frame encoded again
            while no new one came; the default), or encode each frame once and hold it
            (False: variable frame rate, no repeated frame in the file).
        on_frame_encoded: called as ``on_frame_encoded(t_capture_s, file_time_s)`` after each
            video frame is encoded (on the writer's thread; ``t_capture_s`` is the capture time
            the frame was given with, the same again for a repeat; never for a dropped frame), or None.

    Attributes:
        frames_in: frames given to :meth:`write_video`.
        frames_duplicated: extra output slots filled by encoding a frame again.
        slots_held: slots over which a frame stayed on screen without being encoded
            again (while catching up; the file has a variable frame rate there).
        behind: a callable, true while the writer is behind (asked before each repeat;
            :class:`~avatar_app.record.async_recorder.AsyncRecorder` sets it); repeats
            are then held, not encoded. Default: never behind.
        frames_dropped: frames never shown (two frames in one slot, or not after
            the previous frame on the file timeline, or before file time 0).
        audio_gap_samples: silence inserted for dropouts, samples.
        audio_trimmed_samples: audio before file time 0 that was dropped, samples.

    Raises:
        InputError: the recorder was already written to.

    Thread: not thread-safe (one writer thread).
    """

    def __init__(self, recorder: ClipRecorder, *, clock_window_s: float = 30.0,
                 audio_gap_s: float = 0.1, max_rate_error: float = 0.01, repeat_frames: bool = True,
                 on_frame_encoded: Callable[[float, float], None] | None = None):
        if recorder.frames_written or recorder.audio_samples_written:
            raise InputError(f"SyncedRecorder needs a fresh recorder; {recorder.path} already has data")
        if recorder.time_origin_s not in (None, 0.0):
            raise InputError("SyncedRecorder sets the file's time origin itself; "
                             "open the recorder without time_origin_s")
        recorder._origin = 0.0  # we pass file times directly
        self.recorder = recorder
        self._rate = Fraction(recorder.fps).limit_denominator(1001)
        self._sr = recorder.audio_sample_rate
        self._clock = (AudioClock(self._sr, clock_window_s, max_rate_error=max_rate_error)
                       if self._sr else None)
        self.audio_gap_s = float(audio_gap_s)
        self._origin_s: float | None = None
        self._prev: tuple[np.ndarray, float, float] | None = None  # (image, file time, capture time)
        self.repeat_frames = bool(repeat_frames)
        self.on_frame_encoded = on_frame_encoded
        self._slot = 0
        self._closed = False
        self.frames_in = 0
        self.frames_duplicated = 0
        self.slots_held = 0
        self.behind: Callable[[], bool] = lambda: False
        self.frames_dropped = 0
        self.audio_gap_samples = 0
        self.audio_trimmed_samples = 0

    # ------------------------------------------------------------ pass-through
    path = property(lambda self: self.recorder.path, doc="Output file.")
    width = property(lambda self: self.recorder.width, doc="Frame width, pixels.")
    height = property(lambda self: self.recorder.height, doc="Frame height, pixels.")
    fps = property(lambda self: self.recorder.fps, doc="Output frame rate, Hz.")
    audio_sample_rate = property(lambda self: self.recorder.audio_sample_rate,
                                 doc="Nominal audio rate, Hz (None = no audio).")
    audio_channels = property(lambda self: self.recorder.audio_channels, doc="1 or 2.")
    frame_shape = property(lambda self: self.recorder.frame_shape,
                           doc="(height, width, channels) of the images taken.")
    frames_written = property(lambda self: self.recorder.frames_written,
                              doc="Output frames encoded so far (slots, less the held ones).")
    duration_s = property(lambda self: self.slot_time(self._slot),
                          doc="File time up to which video has been placed (the end of the last slot), s.")
    error = property(lambda self: self.recorder.error, doc="The write error, if any.")
    closed = property(lambda self: self._closed, doc="True after close().")

    @property
    def drift_ppm(self) -> float | None:
        """Measured audio clock rate against the shared clock, ppm (None without audio)."""
        return None if self._clock is None else self._clock.drift_ppm

    def slot_time(self, k: int) -> float:
        """File time of output slot ``k``, seconds (exact for 29.97 etc.)."""
        return k * self._rate.denominator / self._rate.numerator

    def file_time(self, t_s: float) -> float:
        """File time (s) of an instant given on the shared clock (before the first write: 0)."""
        if self._origin_s is None:
            return 0.0
        if self._clock is not None:
            n = self._clock.position(t_s)
            if n is not None:
                return n / self._sr
        return float(t_s) - self._origin_s

    def _check(self) -> None:
        if self._closed:
            raise RecordingError(f"recording {self.path} is already closed")
        if self.recorder.error is not None:
            raise self.recorder.error

    # ------------------------------------------------------------------ audio
    def write_audio(self, samples: np.ndarray, t_first_s: float) -> None:
        """Append audio captured from ``t_first_s`` on.

        Args:
            samples: (N,) or (N, channels) float32 in [-1, 1] at the nominal rate,
                continuing the previous chunk (the device's sample stream).
            t_first_s: shared-clock time of ``samples[0]``, seconds.

        Raises:
            InputError: no audio track, a non-finite time, or bad samples.
            RecordingError: closed, or writing failed.
        """
        self._check()
        if self._sr is None:
            raise InputError(f"recording {self.path} was opened without an audio track")
        if not np.isfinite(t_first_s):
            raise InputError(f"audio time must be finite seconds; got {t_first_s!r}")
        x = np.asarray(samples, dtype=np.float32)
        if len(x) == 0:
            return
        if self._origin_s is None:
            self._origin_s = float(t_first_s)
        written = self.recorder.audio_samples_written
        expected = self._clock.position(t_first_s)
        if expected is None:  # first chunk: place it by the timestamp against the origin
            expected = (float(t_first_s) - self._origin_s) * self._sr
            start = int(round(expected))
            if start < written:  # starts before file time 0 (or before lag-filled silence)
                cut = min(len(x), written - start)
                x = x[cut:]
                self.audio_trimmed_samples += cut
                t_first_s += cut / self._sr
                start = written
        else:
            start = written
            if expected - written > self.audio_gap_s * self._sr:  # a dropout
                start = int(round(expected))
                self.audio_gap_samples += start - written
                _log.info("audio dropout of %.3f s in %s filled with silence",
                          (start - written) / self._sr, self.path)
        if len(x) == 0:
            return
        self.recorder.write_audio(x, start / self._sr)
        self._clock.add(t_first_s, start)

    # ------------------------------------------------------------------ video
    def write_video(self, image: np.ndarray, t_capture_s: float) -> bool:
        """Place one frame captured at ``t_capture_s`` on the output timeline.

        The frame is held until the next one arrives (a copy is kept), then
        written to every output slot nearer to it than to its neighbours.

        Args:
            image: uint8 image of :attr:`frame_shape` (RGB, or RGBA for alpha recorders).
            t_capture_s: shared-clock capture time, seconds (increasing).

        Returns:
            True if the frame was taken, False if dropped at once (see ``frames_dropped``).

        Raises:
            InputError: wrong shape/dtype or a non-finite time.
            RecordingError: closed, or writing failed.
        """
        self._check()
        img = np.asarray(image)
        if img.shape != self.frame_shape or img.dtype != np.uint8:
            raise InputError(f"recording frames must be {self.frame_shape} uint8; "
                             f"got {img.shape} {img.dtype}")
        if not np.isfinite(t_capture_s):
            raise InputError(f"frame time must be finite seconds; got {t_capture_s!r}")
        self.frames_in += 1
        if self._origin_s is None:
            self._origin_s = float(t_capture_s)
        f = self.file_time(t_capture_s)
        half_slot = 0.5 / float(self._rate)
        if f < -half_slot or (self._prev is not None and f <= self._prev[1]):
            self.frames_dropped += 1
            _log.debug("frame at %.4f s (file %.4f s) dropped: not after the previous one",
                       t_capture_s, f)
            return False
        if self._prev is not None and self.repeat_frames:  # the previous frame fills the slots nearer to it
            self._emit_until(0.5 * (self._prev[1] + f))
        elif self._prev is not None:  # held: the slots before the one nearest to this frame; when that slot
            # is the previous frame's own (timestamp jitter), the previous keeps it and this frame takes the
            # next one, at most one slot late, rather than one of the two being dropped
            limit = f - half_slot
            if self.slot_time(self._slot) >= limit and self.slot_time(self._slot + 1) <= f + 3 * half_slot:
                limit = self.slot_time(self._slot) + half_slot
            self._emit_until(limit)
        held = np.array(img, copy=True)
        held.flags.writeable = False  # lets an AlphaClipRecorder reuse its prepared frame on repeats
        self._prev = (held, f, float(t_capture_s))
        return True

    def _emit_until(self, limit_s: float, final: bool = False) -> None:
        """Place the held frame in every slot with time < limit_s.

        The first slot is encoded; the others are encoded again, or held while
        :attr:`behind` says so (except the last one of the clip when ``final``, so that
        the video track lasts as long as the audio).
        """
        img, f, t_capture = self._prev
        encoded = held = 0
        if limit_s - self.slot_time(self._slot) > 10.0:
            _log.warning("no new video frame for %.1f s in %s; repeating the last one",
                         limit_s - f, self.path)
        while self.slot_time(self._slot) < limit_s:
            last = self.slot_time(self._slot + 1) >= limit_s
            if encoded == 0 or (final and last) or (self.repeat_frames and not self.behind()):
                self.recorder.write_video(img, self.slot_time(self._slot))
                if self.on_frame_encoded is not None:
                    self.on_frame_encoded(t_capture, self.slot_time(self._slot))
                encoded += 1
            else:
                held += 1
            self._slot += 1
        if encoded == 0:
            self.frames_dropped += 1
        else:
            self.frames_duplicated += encoded - 1
            self.slots_held += held

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Write the held frame (up to the end of the audio), then finish the file. Idempotent.

        Raises:
            RecordingError: writing failed (what was written stays playable).
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._prev is not None and self.recorder.error is None:
                end = self._prev[1] + 0.5 / float(self._rate)
                if not self.repeat_frames:  # a held frame that took the next slot (jitter) still gets it
                    end = max(end, self.slot_time(self._slot) + 0.5 / float(self._rate))
                if self._sr:
                    end = max(end, self.recorder.audio_samples_written / self._sr)
                self._emit_until(end, final=True)
        finally:
            self.recorder.close()
        if self.frames_in:
            _log.info("recording %s: %d frames in, %d encoded (%d repeated, %d slots held while catching up, "
                      "%d dropped), audio clock %+.0f ppm", self.path, self.frames_in, self.frames_written,
                      self.frames_duplicated, self.slots_held, self.frames_dropped, self.drift_ppm or 0.0)

