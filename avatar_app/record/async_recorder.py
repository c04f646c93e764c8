"""AsyncRecorder: a ClipRecorder behind a bounded queue, encoding in its own thread (live use)."""
from __future__ import annotations

import logging
import threading
from collections import deque

import numpy as np

from avatar_app.core.errors import InputError, RecordingError
from avatar_app.record.recorder import VIDEO_TIME_BASE, ClipRecorder, ClosingContext

_log = logging.getLogger(__name__)


class AsyncRecorder(ClosingContext):
    """Runs a :class:`ClipRecorder` in a writer thread behind a bounded queue (live use).

    ``write_video``/``write_audio`` copy their input into the queue and return
    at once. When the queue already holds ``max_video_frames`` frames the new
    frame is dropped and counted (newest-wins would reorder timestamps, so the
    oldest are kept); video frames whose time does not increase are dropped too.
    Audio is only dropped when more than ``max_audio_s`` of it is waiting (the
    writer is stuck), with a warning.

    Args:
        recorder: an open ClipRecorder, AlphaClipRecorder or SyncedRecorder (then
            the times given are capture timestamps, see record/synced.py); this
            object takes ownership and closes it.
        max_video_frames: most frames waiting for the encoder.
        max_audio_s: most audio waiting, seconds.

    Attributes:
        dropped_frames: video frames dropped because the queue was full or
            their time did not increase (``dropped_queue_full + dropped_stale``).
        dropped_queue_full: video frames dropped because the encoder was behind
            (``max_video_frames`` waiting): real losses, which the UI reports.
        dropped_stale: video frames dropped because their time did not increase
            (usually the same frame delivered twice; nothing is lost).
        dropped_audio_chunks: audio chunks dropped because the queue was full.

    Thread: the write methods may be called from any one thread (or several;
    they lock a short critical section); the encoder runs in the writer thread.
    """

    def __init__(self, recorder: ClipRecorder, max_video_frames: int = 8, max_audio_s: float = 5.0):
        if max_video_frames < 1:
            raise InputError(f"max_video_frames must be >= 1; got {max_video_frames}")
        self.recorder = recorder
        self.max_video_frames = max_video_frames
        self.max_audio_s = max_audio_s
        self.dropped_frames = 0
        self.dropped_queue_full = 0
        self.dropped_stale = 0
        self.dropped_audio_chunks = 0
        self._queue: deque[tuple[str, np.ndarray, float]] = deque()
        self._video_queued = 0
        self._audio_queued_s = 0.0
        self._last_video_t: float | None = None
        self._cond = threading.Condition()
        self._closing = False
        self._error: RecordingError | None = None
        self._thread = threading.Thread(target=self._run, name="clip-recorder", daemon=True)
        self._thread.start()

    @property
    def error(self) -> RecordingError | None:
        """The error that stopped the writer thread, if any."""
        return self._error

    @property
    def queued_frames(self) -> int:
        """Video frames waiting for the encoder."""
        return self._video_queued

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise RecordingError(f"recording {self.recorder.path} is already closed")

    def write_video(self, rgb: np.ndarray, media_time_s: float) -> bool:
        """Queue a copy of one frame.

        Args:
            rgb: (height, width, 3) uint8 RGB, or (height, width, 4) RGBA for an
                alpha recorder (copied; the caller may reuse it).
            media_time_s: presentation time, s.

        Returns:
            True if queued, False if dropped (see class doc).

        Raises:
            InputError: wrong frame shape or dtype (checked here, not in the thread).
            RecordingError: the writer thread failed earlier, or closed.
        """
        rec = self.recorder
        shape = getattr(rec, "frame_shape", (rec.height, rec.width, 3))
        if np.shape(rgb) != shape or np.asarray(rgb).dtype != np.uint8:
            raise InputError(
                f"recording frames must be {shape} uint8 "
                f"{'RGB' if shape[2] == 3 else 'RGBA'}; got {np.shape(rgb)} {np.asarray(rgb).dtype}"
            )
        with self._cond:
            self._check()
            min_step = 2 * float(VIDEO_TIME_BASE)  # the recorder needs distinct 1/90000 s ticks
            if self._last_video_t is not None and media_time_s < self._last_video_t + min_step:
                self.dropped_frames += 1
                self.dropped_stale += 1
                _log.debug("frame at %.4f s does not advance time; dropped", media_time_s)
                return False
            if self._video_queued >= self.max_video_frames:
                self.dropped_frames += 1
                self.dropped_queue_full += 1
                _log.debug("recorder queue full; frame at %.4f s dropped", media_time_s)
                return False
            self._last_video_t = media_time_s
            self._queue.append(("v", np.array(rgb, dtype=np.uint8, copy=True), media_time_s))
            self._video_queued += 1
            self._cond.notify()
        return True

    def write_audio(self, samples: np.ndarray, media_time_s: float) -> bool:
        """Queue a copy of an audio chunk.

        Args:
            samples: (N,) or (N, C) float32 at the recorder's audio rate (copied).
            media_time_s: media time of the first sample, s.

        Returns:
            True if queued, False if dropped (more than ``max_audio_s`` waiting).

        Raises:
            RecordingError: the writer thread failed earlier, or closed.
        """
        dur = len(samples) / (self.recorder.audio_sample_rate or 1)
        with self._cond:
            self._check()
            if self._audio_queued_s + dur > self.max_audio_s:
                self.dropped_audio_chunks += 1
                _log.warning("recorder is %.1f s behind; audio chunk dropped", self._audio_queued_s)
                return False
            self._queue.append(("a", np.array(samples, dtype=np.float32, copy=True), media_time_s))
            self._audio_queued_s += dur
            self._cond.notify()
        return True

    def _run(self) -> None:
        rec = self.recorder
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:  # closing and drained
                    return
                kind, data, t = self._queue.popleft()
                if kind == "v":
                    self._video_queued -= 1
                else:
                    self._audio_queued_s -= len(data) / (rec.audio_sample_rate or 1)
                if self._error is not None:
                    continue  # discard the rest after a failure
            try:
                if kind == "v":
                    rec.write_video(data, t)
                else:
                    rec.write_audio(data, t)
            except (RecordingError, InputError) as e:
                err = e if isinstance(e, RecordingError) else RecordingError(
                    f"recording {rec.path} stopped: {e}")
                _log.error("%s", err)
                with self._cond:
                    self._error = err

    def close(self, timeout_s: float | None = 30.0) -> None:
        """Write what is queued, then close the file. Idempotent.

        Args:
            timeout_s: longest wait for the queue to drain, s (None = no limit).

        Raises:
            RecordingError: the writer failed, or did not finish within ``timeout_s``.
        """
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RecordingError(
                f"recording {self.recorder.path} did not finish writing within {timeout_s} s"
            )
        try:
            self.recorder.close()
        except RecordingError as e:
            if self._error is None:
                self._error = e
        if self.dropped_queue_full:
            _log.warning("recording %s: the encoder could not keep up; %d video frames dropped",
                         self.recorder.path, self.dropped_queue_full)
        if self.dropped_frames or self.dropped_audio_chunks:
            _log.info("recording %s: dropped %d frames (%d queue full, %d not advancing time) and %d audio "
                      "chunks", self.recorder.path, self.dropped_frames, self.dropped_queue_full,
                      self.dropped_stale, self.dropped_audio_chunks)
        if self._error is not None:
            raise self._error

