"""A live recording of the studio, without Qt: the clip, its audio and its blendshape track.

:class:`StudioRecording` is the session's recording output
(:meth:`avatar_app.pipeline.session.StudioSession.start_recording`): an
``AsyncRecorder(SyncedRecorder(...))`` fed with rendered frames and the
source's audio, and the JSON Lines sidecar beside the clip. Each frame the
viewport presents is encoded once and held on screen until the next one
(``SyncedRecorder(repeat_frames=False)``): when the live pipeline presents fewer
than ``fps`` new frames a second, the clip's frame rate follows it (variable
frame rate timestamps on the 1/fps grid) instead of repeating frames, and the
sidecar gets one row per video frame, written as the frame is encoded. Sync is the CLI's
(record/synced.py): the audio sample clock is the master; each rendered frame
is placed at the capture time of the camera frame it shows
(``AvatarState.t_capture_ns``), the audio at the capture time of its samples,
both on the process clock, so the avatar's lips meet the voice whatever the
camera-to-screen latency, and the clip does not drift.
"""
from __future__ import annotations

import logging
from collections import deque
from pathlib import Path

from avatar_app.core.clock import now_ns
from avatar_app.core.errors import AvatarError
from avatar_app.pipeline.outputs import RECORD_SIZE

log = logging.getLogger(__name__)


class StudioRecording:
    """One running recording (see the module docstring).

    Args:
        path: the clip to write.
        fmt: its RecordingFormat (record.formats).
        fps: the clip's constant frame rate, Hz.
        ring: the source's AudioRing (None: a silent clip).
        audio_rate: the ring's sample rate, Hz.
        audio_start_ns: capture time of the first audio sample to record (the newest
            frame's capture), process clock.

    Attributes:
        recorder: the ``AsyncRecorder(SyncedRecorder(...))``.
        path, fmt, fps: as given. t0_ns: when the recording started.
        sidecar: the SidecarWriter, or None (a track that cannot be written is skipped).
        sidecar_path: the blendshape track beside the clip, or None.
        stop_reason: why it stopped when the user did not stop it ("" otherwise).

    Raises:
        AvatarError (RecordingError, InputError): the clip cannot be opened.

    Thread: frames, audio and stop from one thread (the GUI's); :meth:`finish` may
    run on a worker once stopped.
    """

    def __init__(self, path: Path, fmt, fps: float, ring, audio_rate: int, audio_start_ns: int):
        from avatar_app.record import AsyncRecorder, SyncedRecorder
        from avatar_app.record.factory import open_recorder

        rec = open_recorder(path, *RECORD_SIZE, fps, audio_sample_rate=audio_rate if ring is not None else None,
                            fmt=fmt)
        self._pending_states: deque = deque()  # (capture time s, state) queued for the encoder, oldest first
        self._last_encoded: tuple[float | None, object] = (None, None)  # the last encoded frame's (time, state)
        self.recorder = AsyncRecorder(SyncedRecorder(rec, repeat_frames=False,
                                                     on_frame_encoded=self._on_frame_encoded))
        self.frame_shape = rec.frame_shape
        self.path, self.fmt, self.fps = Path(path), fmt, float(fps)
        self.ring, self.audio_rate = ring, int(audio_rate)
        self.t0_ns = now_ns()
        self.stop_reason = ""
        self._audio_end_ns = int(audio_start_ns)
        self._rate_samples: deque[tuple[float, int]] = deque()
        self._open_sidecar(audio_start_ns if ring is not None else None)

    def _open_sidecar(self, audio_start_ns: int | None) -> None:
        """Start the JSON Lines blendshape track beside the clip (as the CLI's render writes).

        One line per video frame of the clip (record/sidecar.py), written on the
        encoder's thread as the frame is encoded (:meth:`_on_frame_encoded`); its ``t``
        is the frame's time in the file (the slot SyncedRecorder placed it in).
        """
        from avatar_app.pipeline.writer import sidecar_path_for
        from avatar_app.record.sidecar import SidecarWriter

        self.sidecar, self.sidecar_path = None, sidecar_path_for(self.path)
        try:
            self.sidecar = SidecarWriter(self.sidecar_path, fps=self.fps, clip=self.path.name)
        except AvatarError as exc:
            log.warning("no blendshape track for this recording: %s", exc)
            self.sidecar_path = None

    def _on_frame_encoded(self, t_capture_s: float, file_time_s: float) -> None:
        """Writer thread: a queued frame was encoded at ``file_time_s``; write its state's sidecar row.

        Frames queued before it that never reached the file (shed by the encoder queue,
        or dropped by the synced timeline) get no row; a frame encoded again (the clip's
        last, at its end) gets its state's row again, so there is one row per video frame.
        """
        pending = self._pending_states
        state = self._last_encoded[1] if self._last_encoded[0] == t_capture_s else None
        while pending and pending[0][0] <= t_capture_s:
            t, st = pending.popleft()
            if t == t_capture_s:
                state = st
        self._last_encoded = (t_capture_s, state)
        sidecar = self.sidecar
        if sidecar is None or state is None:
            return
        try:
            sidecar.write(state, media_time_s=max(0.0, float(file_time_s)))
        except AvatarError as exc:
            log.warning("blendshape track stopped: %s", exc)
            self.sidecar = None

    def write_frame(self, rgb, state, t_ns: int) -> bool:
        """Place a 1280x720 render at the capture time of the frame it shows; False when the queue dropped it.

        Args:
            rgb: (720, 1280, 3 or 4) uint8 RGB or RGBA.
            state: the AvatarState it shows (None: unknown).
            t_ns: when it was shown, process clock (used when the state has no capture time).

        Raises:
            AvatarError: the recorder failed (stop the recording; :meth:`finish` reports it).
        """
        t_capture_ns = state.t_capture_ns if state is not None and state.t_capture_ns > 0 else t_ns
        t_s = t_capture_ns / 1e9  # shared-clock capture time
        # before queuing: the writer may encode it at once. One the queue refuses stays until the writer
        # encodes a later frame and takes it off (no row); only the writer takes entries off.
        self._pending_states.append((t_s, state))
        return bool(self.recorder.write_video(rgb, t_s))

    def feed_audio(self, until_ns: int | None = None) -> None:
        """Hand the recorder the source's audio since the last call (whole samples).

        Args:
            until_ns: end of the audio to write (default: 60 ms before now, so that late
                blocks have arrived).

        Raises:
            AvatarError: the recorder refused the audio.
        """
        ring = self.ring
        if ring is None:
            return
        rate = self.audio_rate
        end = now_ns() - 60_000_000 if until_ns is None else int(until_ns)
        # whole samples only, so that consecutive windows continue the stream sample by sample
        n = (end - self._audio_end_ns) * rate // 1_000_000_000
        if n <= 0:
            return
        end = self._audio_end_ns + n * 1_000_000_000 // rate
        samples = ring.read_window(end, n / rate)
        start_ns, self._audio_end_ns = self._audio_end_ns, end
        self.recorder.write_audio(samples, start_ns / 1e9)  # SyncedRecorder: capture time of the first sample

    def end_audio(self, last_state) -> None:
        """Feed the audio up to the end of the last frame's slot, so that both tracks end together."""
        ring = self.ring
        if last_state is not None and ring is not None and ring.latest_t_ns is not None:
            self.feed_audio(min(last_state.t_capture_ns + int(1e9 / self.fps), ring.latest_t_ns))
        else:
            self.feed_audio()

    def queue_drops(self) -> int:
        """Frames the encoder queue refused so far (the encoder was behind)."""
        full = getattr(self.recorder, "dropped_queue_full", None)
        if full is None:  # an older AsyncRecorder: its total
            full = getattr(self.recorder, "dropped_frames", 0)
        return int(full)

    def frames_offered(self) -> int:
        """Frames handed to the encoder queue so far: those it took (the synced timeline's
        ``frames_in``) plus those it refused (:meth:`queue_drops`)."""
        synced = getattr(self.recorder, "recorder", None)
        return self.queue_drops() + int(getattr(synced, "frames_in", 0) or 0)

    def lost_frames(self) -> int:
        """Frames shown in the viewport that will not be in the clip (0 when the encoder keeps up).

        The encoder queue's refusals (:meth:`queue_drops`) plus the frames the synced
        timeline could not place (two in one 1/fps slot, or not after the previous one).
        Frames the viewport never showed are not counted here: they are the viewer's
        losses (``LatencyStats.dropped``), counted once for the whole window.
        """
        synced = getattr(self.recorder, "recorder", None)
        return self.queue_drops() + int(getattr(synced, "frames_dropped", 0) or 0)

    def recent_fps(self, window_s: float = 2.0) -> float | None:
        """Frames encoded per second of clip over about the last ``window_s`` s of clip time.

        Each new frame is encoded once (no repeats), so this is the rate of new avatar
        frames in the clip: :attr:`fps` while the pipeline presents that many and the
        encoder keeps up, lower when it presents fewer or the encoder drops frames (the
        clip's frame rate adapts; record/synced.py). Call it regularly
        (the window's 5 Hz tick): each call adds one sample.

        Returns:
            Hz, or None before ``window_s`` of clip was written.
        """
        synced = getattr(self.recorder, "recorder", None)
        dur = getattr(synced, "duration_s", None)
        if dur is None:
            return None
        samples = self._rate_samples
        samples.append((float(dur), int(getattr(synced, "frames_written", 0) or 0)))
        while len(samples) > 2 and samples[1][0] <= dur - window_s:
            samples.popleft()
        d0, n0 = samples[0]
        if dur - d0 < 0.5 * window_s:
            return None
        return (samples[-1][1] - n0) / (dur - d0)

    def finish(self) -> tuple[AvatarError | None, dict]:
        """Close the clip and the track (may block; any thread once stopped).

        Returns:
            ``(error or None, {"frames": video frames written, "reason": stop_reason,
            "fps", "format", "duration_s": the clip's length or None, "audio_lost_s": audio
            that did not reach the file (only a failed write loses any), "sidecar": the track or None,
            "synced": the synced timeline's counts {"frames_in", "frames_written", "frames_duplicated",
            "slots_held", "frames_dropped"} (record/synced.py)})``.
        """
        error = None
        try:
            self.recorder.close()
        except AvatarError as exc:
            error = exc
        if self.sidecar is not None:
            try:
                self.sidecar.close()
            except AvatarError as exc:
                log.warning("%s", exc)
        inner = getattr(self.recorder, "recorder", None)
        frames = int(getattr(inner, "frames_written", 0) or 0)
        return error, {"frames": frames, "reason": self.stop_reason, "fps": self.fps, "format": self.fmt,
                       "duration_s": getattr(inner, "duration_s", None),
                       "audio_lost_s": float(getattr(self.recorder, "audio_lost_s", 0.0)),
                       "sidecar": self.sidecar_path if self.sidecar is not None else None,
                       "synced": {k: int(getattr(inner, k, 0) or 0) for k in
                                  ("frames_in", "frames_written", "frames_duplicated", "slots_held",
                                   "frames_dropped")}}
