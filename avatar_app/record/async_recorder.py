"""AsyncRecorder: a ClipRecorder behind a bounded queue, encoding in its own thread (live use)."""
from __future__ import annotations

import logging
import threading
from collections import deque

import numpy as np

from avatar_app.core.errors import InputError, RecordingError
from avatar_app.record.recorder import VIDEO_TIME_BASE, ClipRecorder, ClosingContext

_log = logging.getLogger(__name__)


#: Audio waiting for the writer above which the wrapped SyncedRecorder stops encoding
#: repeated frames (it holds the last frame instead), seconds.
CATCH_UP_BACKLOG_S = 0.3
#: Video frames waiting above which the wrapped SyncedRecorder stops encoding repeats.
CATCH_UP_VIDEO_FRAMES = 3


class AsyncRecorder(ClosingContext):
    """Runs a :class:`ClipRecorder` in a writer thread behind a queue (live use).

    ``write_video``/``write_audio`` copy their input into the queue and return
    at once. Audio is never dropped: every chunk waits for the writer. When the
    writer falls behind, video gives:

    - a wrapped :class:`~avatar_app.record.synced.SyncedRecorder` is told to catch
      up (its ``behind`` callable) while more than :data:`CATCH_UP_BACKLOG_S` of
      audio or :data:`CATCH_UP_VIDEO_FRAMES` frames wait: it holds the last frame
      on screen instead of encoding it again for every 1/fps slot;
    - when more than ``max_audio_s`` of audio waits, the video frames waiting are
      dropped (and new ones refused until the audio is written), so the encoder
      spends its time on the sound;
    - when ``max_video_frames`` frames wait, a new frame is dropped (newest-wins
      would reorder timestamps, so the oldest are kept);
    - video frames whose time does not increase are dropped too (nothing is lost).

    Args:
        recorder: an open ClipRecorder, AlphaClipRecorder or SyncedRecorder (then
            the times given are capture timestamps, see record/synced.py); this
            object takes ownership and closes it.
        max_video_frames: most frames waiting for the encoder.
        max_audio_s: audio waiting above which waiting video frames are dropped, s.

    Attributes:
        dropped_frames: video frames dropped (``dropped_queue_full + dropped_stale``).
        dropped_queue_full: video frames dropped because the encoder was behind:
            real losses, which the UI reports.
        dropped_stale: video frames dropped because their time did not increase
            (usually the same frame delivered twice; nothing is lost).
        dropped_audio_chunks: audio chunks that did not reach the file: only those
            still waiting when the writer failed (disk full); never dropped for load.
        audio_lost_s: their duration, seconds.

    Thread: the write methods may be called from any one thread (or several;
    they lock a short critical section); the encoder runs in the writer thread.
    """

    def __init__(self, recorder: ClipRecorder, max_video_frames: int = 8, max_audio_s: float = 1.0):
        if max_video_frames < 1:
            raise InputError(f"max_video_frames must be >= 1; got {max_video_frames}")
        self.recorder = recorder
        self.max_video_frames = max_video_frames
        self.max_audio_s = max_audio_s
        self.dropped_frames = 0
        self.dropped_queue_full = 0
        self.dropped_stale = 0
        self.dropped_audio_chunks = 0
        self.audio_lost_s = 0.0
        self._queue: deque[tuple[str, np.ndarray, float]] = deque()
        self._video_queued = 0
        self._audio_queued_s = 0.0
        self._last_video_t: float | None = None
        self._cond = threading.Condition()
        self._closing = False
        self._error: RecordingError | None = None
        if hasattr(recorder, "behind"):  # SyncedRecorder: hold frames instead of repeating them
            recorder.behind = self.behind
        self._thread = threading.Thread(target=self._run, name="clip-recorder", daemon=True)
        self._thread.start()

    def behind(self) -> bool:
        """Whether the writer is behind: more than CATCH_UP_BACKLOG_S of audio or CATCH_UP_VIDEO_FRAMES waiting.

        Read without the lock (two numbers the writer and the producers update; a
        stale answer only shifts one repeat).
        """
        return self._audio_queued_s > CATCH_UP_BACKLOG_S or self._video_queued >= CATCH_UP_VIDEO_FRAMES

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
            if self._video_queued >= self.max_video_frames or self._audio_queued_s > self.max_audio_s:
                self.dropped_frames += 1
                self.dropped_queue_full += 1
                _log.debug("recorder behind (%d frames, %.2f s of audio waiting); frame at %.4f s dropped",
                           self._video_queued, self._audio_queued_s, media_time_s)
                return False
            self._last_video_t = media_time_s
            self._queue.append(("v", np.array(rgb, dtype=np.uint8, copy=True), media_time_s))
            self._video_queued += 1
            self._cond.notify()
        return True

    def write_audio(self, samples: np.ndarray, media_time_s: float) -> bool:
        """Queue a copy of an audio chunk (never dropped).

        When more than ``max_audio_s`` of audio waits, the video frames waiting are
        dropped (counted in ``dropped_queue_full``) so that the writer reaches the sound.

        Args:
            samples: (N,) or (N, C) float32 at the recorder's audio rate (copied).
            media_time_s: media time of the first sample, s.

        Returns:
            True (the chunk is queued).

        Raises:
            RecordingError: the writer thread failed earlier, or closed.
        """
        dur = len(samples) / (self.recorder.audio_sample_rate or 1)
        with self._cond:
            self._check()
            self._queue.append(("a", np.array(samples, dtype=np.float32, copy=True), media_time_s))
            self._audio_queued_s += dur
            if self._audio_queued_s > self.max_audio_s and self._video_queued:
                self._shed_video()
            self._cond.notify()
        return True

    def _shed_video(self) -> None:
        """Drop every video frame waiting (caller holds the lock): the audio behind them goes first."""
        n = self._video_queued
        self._queue = deque(item for item in self._queue if item[0] != "v")
        self._video_queued = 0
        self.dropped_frames += n
        self.dropped_queue_full += n
        _log.info("recorder %.1f s behind on audio; %d waiting video frame(s) dropped", self._audio_queued_s, n)

    def loss_summary(self) -> str:
        """What the recording lost, for the user: ``"3 video frames dropped, no audio lost"``."""
        n = self.dropped_queue_full
        video = f"{n} video frame{'' if n == 1 else 's'} dropped" if n else "no video frame dropped"
        audio = f"{self.audio_lost_s:.1f} s of audio lost" if self.dropped_audio_chunks else "no audio lost"
        return f"{video}, {audio}"

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
                if self._error is not None:  # discard the rest after a failure
                    if kind == "a":
                        self.dropped_audio_chunks += 1
                        self.audio_lost_s += len(data) / (rec.audio_sample_rate or 1)
                    continue
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
                    if kind == "a":
                        self.dropped_audio_chunks += 1
                        self.audio_lost_s += len(data) / (rec.audio_sample_rate or 1)

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
        if (self.dropped_queue_full or self.dropped_audio_chunks) and self._error is None:
            _log.warning("recording %s: the encoder could not keep up; %s", self.recorder.path,
                         self.loss_summary())
        if self.dropped_frames:
            _log.info("recording %s: dropped %d frames (%d encoder behind, %d not advancing time)",
                      self.recorder.path, self.dropped_frames, self.dropped_queue_full, self.dropped_stale)
        if self._error is not None:
            raise self._error

