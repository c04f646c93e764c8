"""A video file played in real time as if it were a camera and a microphone.

Lets the live pipeline (newest-wins frames, causal audio) run on recordings:
frames are handed over at their media time, audio is written into an
:class:`AudioRing` at the pace it would come out of a microphone.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from avatar_app.capture import _media
from avatar_app.capture.ring import AudioRing, LatestSlot
from avatar_app.capture.video_file import VideoFileSource
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import AvatarError, CaptureError
from avatar_app.core.types import Frame

logger = logging.getLogger(__name__)

_NS_PER_S = 1_000_000_000


class LiveFileSource:
    """Play a video file in real time: frames into a LatestSlot, audio into an AudioRing.

    Time origin: ``t0 = now_ns()`` at :meth:`start`. A frame with media time ``m``
    (seconds from the first video frame) is delivered at ``t0 + m`` and stamped
    ``t_capture_ns = now_ns()`` at delivery (``frame.t_delivered_ns`` holds the
    same value). Audio sample ``i`` of the 16 kHz mono track gets the
    timestamp ``t0 + (audio_start_s + i / rate)`` and is written in blocks of
    ``block_s`` once the block's end time has passed, like a microphone. So the
    audio and the frames share one time line (within the thread's wake-up
    jitter, typically < 1 ms). When looping, loop ``n`` is shifted by
    ``n * info.duration_s``; the ring fills the gap between the end of the audio
    and the next loop with silence.

    Thread: two internal threads (video, audio); construct/start/stop and
    get_latest from one thread. Errors end the threads and are kept in
    :attr:`error`; they never raise into the app.

    Args:
        path: the video file.
        loop: start again at the end instead of finishing.
        ring: where the audio goes; default a new 10 s ring at ``sample_rate``.
        sample_rate: audio rate of the ring, Hz.
        block_s: audio block length, seconds.

    Raises:
        InputError: the file is missing or not a readable video (see
            :class:`~avatar_app.capture.video_file.VideoFileSource`).
        ValueError: ``ring.sample_rate`` differs from ``sample_rate``.
    """

    def __init__(self, path: str | Path, loop: bool = False, ring: AudioRing | None = None,
                 sample_rate: int = 16000, block_s: float = 0.01):
        self._source = VideoFileSource(path)
        self.path = self._source.path
        self.info = self._source.info
        self.loop = bool(loop)
        self.ring = ring if ring is not None else AudioRing(sample_rate=sample_rate)
        if self.ring.sample_rate != sample_rate:
            raise ValueError(f"ring runs at {self.ring.sample_rate} Hz, not {sample_rate} Hz")
        self.sample_rate = int(sample_rate)
        self.block_s = float(block_s)
        self.granted: tuple[int, int, float] = (self.info.width, self.info.height, self.info.fps)
        self.error: BaseException | None = None
        #: a warning about the file found while playing (e.g. it decodes far fewer frames than it says)
        self.notice: str | None = None
        self.timestamp_source = "delivery"
        self._slot: LatestSlot[Frame] = LatestSlot()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._done = {"video": False, "audio": not self.info.has_audio}
        self._stopped = False
        self._t0 = 0
        fps = self.info.fps or 25.0
        period = self.info.duration_s if self.info.duration_s > 0 else 1.0 / fps
        self._period_ns = int(round(period * _NS_PER_S))

    # -- running ----------------------------------------------------------------------
    def start(self) -> "LiveFileSource":
        """Start playing (no-op if playing).

        Raises:
            CaptureError: the source was stopped.
        """
        if self._stopped:
            raise CaptureError(f"Playback of '{self.path}' was stopped; create a new source",
                               device=str(self.path))
        if self._threads:
            return self
        self._t0 = now_ns()
        self._threads = [threading.Thread(target=self._guard, args=("video", self._play_video),
                                          name="livefile-video", daemon=True)]
        if self.info.has_audio:
            self._threads.append(threading.Thread(target=self._guard,
                                                  args=("audio", self._play_audio),
                                                  name="livefile-audio", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def _guard(self, kind: str, body) -> None:
        try:
            body()
            self._done[kind] = not self._stop.is_set()
        except Exception as e:  # noqa: BLE001 - thread boundary: record, never crash the app
            if not isinstance(e, AvatarError):
                e = CaptureError(f"Playback of '{self.path}' failed ({kind}): {e}",
                                 device=str(self.path))
            if self.error is None:
                self.error = e
            logger.error("%s", e)
            self._stop.set()
        finally:
            if kind == "video":
                self._slot.close()

    def _sleep_until(self, t_ns: int) -> bool:
        """Wait until ``t_ns``; False if stopped meanwhile."""
        while True:
            left = t_ns - now_ns()
            if left <= 0:
                return not self._stop.is_set()
            if self._stop.wait(left / _NS_PER_S):
                return False

    def _play_video(self) -> None:
        index = 0
        n_loop = 0
        while not self._stop.is_set():
            shift = n_loop * self._period_ns
            for fr in self._source.frames():
                due = self._t0 + shift + int(round(fr.media_time_s * _NS_PER_S))
                if not self._sleep_until(due):
                    return
                t = now_ns()
                frame = Frame(index=index, t_capture_ns=t, image=fr.image,
                              media_time_s=(shift / _NS_PER_S) + fr.media_time_s, t_delivered_ns=t)
                self._slot.put(frame)
                index += 1
            if n_loop == 0:
                self._check_decoded(index)
            if not self.loop:
                return
            n_loop += 1

    def _check_decoded(self, frames: int) -> None:
        """After the first pass: a file that decodes far fewer frames than it says it holds gets a notice."""
        expected = int(self.info.frame_count)  # the container's count where it has one
        if expected >= 10 and frames < 0.9 * expected:
            self.notice = (f"only {frames} of about {expected} frames of '{self.path.name}' could be decoded "
                           f"(the file is damaged or cut short); playing what decodes")
        elif self._source.truncated:  # found otherwise: an earlier end than declared (a cut .mkv / .webm),
            # a last packet cut inside, decode errors, timestamps out of order
            self.notice = (f"'{self.path.name}' is damaged or cut short ({self._source.problem or 'decode errors'}); "
                           "playing what decodes")
        if self.notice is not None:
            # the decoder warned already (video_file) and the notice is surfaced by the consumer (the
            # studio's status bar): logged once, not again here
            (logger.debug if self._source.truncated else logger.warning)("%s", self.notice)

    def _play_audio(self) -> None:
        rate = self.sample_rate
        block = max(1, int(round(self.block_s * rate)))
        start_s = self.info.audio_start_s
        end_s = start_s + self.info.audio_duration_s
        if self.loop:  # each loop's audio stays inside its own period
            end_s = min(end_s, self._period_ns / _NS_PER_S)
        n_loop = 0
        while not self._stop.is_set():
            # loops after the first skip audio before the first frame (it would
            # overlap the previous loop)
            skip = int(round(max(0.0, -start_s) * rate)) if n_loop else 0
            first_s = start_s + skip / rate
            n_keep = int(round((end_s - first_s) * rate))
            t_base = self._t0 + n_loop * self._period_ns + int(round(first_s * _NS_PER_S))
            written = 0
            pending = np.zeros(0, np.float32)
            report = _media.DecodeReport()
            with _media.open_container(self.path, "video") as c:
                for x, _t in _media.iter_audio(c, c.streams.audio[0], rate, report):
                    if skip:
                        k = min(skip, x.shape[0])
                        x, skip = x[k:], skip - k
                    room = n_keep - written - pending.shape[0]
                    if room <= 0:
                        break
                    pending = np.concatenate([pending, x[:room]])
                    while pending.shape[0] >= block:
                        if not self._write_when_due(pending[:block], t_base, written):
                            return
                        written += block
                        pending = pending[block:]
            if pending.shape[0] and not self._write_when_due(pending, t_base, written):
                return
            _media.check_report(report, "audio frame", self.path, warn=n_loop == 0)  # once per source
            if not self.loop:
                return
            n_loop += 1

    def _write_when_due(self, chunk: np.ndarray, t_base: int, first_index: int) -> bool:
        rate = self.sample_rate
        t_first = t_base + first_index * _NS_PER_S // rate
        t_end = t_base + (first_index + chunk.shape[0]) * _NS_PER_S // rate
        if not self._sleep_until(t_end):
            return False
        self.ring.write(chunk, t_first)
        return True

    # -- consumer side ----------------------------------------------------------------
    def get_latest(self, timeout_s: float | None = 1.0) -> Frame | None:
        """The newest frame not yet taken, waiting up to ``timeout_s`` seconds.

        Returns:
            A Frame (image (H, W, 3) uint8 BGR), or None on timeout / at the end.
        """
        return self._slot.get(timeout_s)

    @property
    def dropped(self) -> int:
        """Frames overwritten before anyone took them."""
        return self._slot.dropped

    @property
    def finished(self) -> bool:
        """True once the whole file (video and audio) was delivered (never when looping)."""
        return all(self._done.values()) and not self.loop

    @property
    def t0_ns(self) -> int:
        """Process-clock time of media time 0 (the first frame) of the first loop."""
        return self._t0

    @property
    def running(self) -> bool:
        """True while a playback thread runs."""
        return any(t.is_alive() for t in self._threads)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop playback. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)
        self._slot.close()
        self._source.close()

    def __enter__(self) -> "LiveFileSource":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
