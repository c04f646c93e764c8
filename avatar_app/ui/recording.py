"""Recording from the studio window: the Record button and Ctrl+R, the clip, its audio and blendshape track.

:class:`RecordingController` is owned by :class:`~avatar_app.ui.main_window.MainWindow`
and does everything a window recording needs: decides whether a recording can
start (``record_blocker``) and in which format (``recording_format``), opens an
``AsyncRecorder(SyncedRecorder(...))`` and the JSON Lines blendshape track beside
the clip, feeds it the viewport's 1280x720 renders and the source's audio,
counts and warns about dropped frames, shows the REC timer, and finishes the
file on the window's worker thread ("Saved …" or what went wrong).

Threads: GUI thread only, except closing a finished clip, which runs on the
window's worker and reports back through a queued signal.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import QObject, QStandardPaths, QTimer, Signal
from PySide6.QtWidgets import QLabel, QPushButton

from avatar_app.core.clock import now_ns
from avatar_app.core.errors import AvatarError
from avatar_app.pipeline.outputs import RECORD_FPS, RECORD_SIZE
from avatar_app.pipeline.writer import unused_clip_path
from avatar_app.ui.panels import plain_error, sentence

log = logging.getLogger(__name__)
#: The REC label's note when the source delivers fewer frames than the recording's rate (not a warning).
SOURCE_RATE_NOTE = "(the source's rate)"

#: Alpha formats for live recording from the window, fastest first. Measured at 1280x720 on the
#: 2-core development machine (encoder only, 2 threads, moving avatar frames): VP9 realtime
#: (libvpx-vp9, cpu-used 8, row-mt) 9 ms CPU a frame; ProRes 4444 prores_aw 12 ms; prores_ks 66-82 ms;
#: each plus ~1.4 ms of alpha preparation (record/alpha.py straight_alpha_frame, benchmarks/alpha.py). The CLI renders
#: offline and keeps record.formats' order (ProRes 4444 first).
LIVE_ALPHA_ORDER = ("vp9-webm", "prores4444-mov", "prores4444ks-mov")
#: Shortest time between two "encoder cannot keep up" warnings in the status bar, s.
DROP_WARNING_INTERVAL_S = 5.0
#: Share of the frames offered to the encoder that its queue refused above which the "Recording at N fps"
#: note blames the encoder; below it the live pipeline presented too few new frames.
ENCODER_BLAME_SHARE = 0.2
NO_SOURCE_TO_RECORD = ("Nothing to record: no camera or video is running. Open a video (File › Open video…) "
                       "or choose a camera in Sources, then record.")


class RecordingController(QObject):
    """Records the avatar shown in the studio window, with the source's audio.

    The window owns one and forwards to it: the record button's toggles, Ctrl+R,
    the viewport's captured frames (:meth:`on_frame_captured`), the slow status
    tick (:meth:`update_status`) and a failing source (:meth:`stop_because`).
    It reads from the session: ``pipeline`` (its ``ring`` is the audio), the
    output and avatar settings, the store (the recording folder), the frame-rate
    cap, the newest state and the worker executor; it asks the viewport for
    1280x720 renders.

    Args:
        session: the StudioSession.
        viewport: the AvatarViewportWidget (renders the recording's frames).
        notifier: the window's Notifier (status bar, message boxes).
        audio_rate: sample rate of the source's audio ring, Hz (the clip's audio rate).
        parent: the QObject parent.

    Attributes:
        record_button: the checkable "● Record" / "■ Stop" toolbar button.
        record_time_label: toolbar label with the REC timer ("" when not recording).
        audio_timer: 10 Hz GUI timer that hands the recorder the source's audio while recording.
        recorder: the running ``AsyncRecorder(SyncedRecorder(...))``, or None.
        record_path: the clip of the running (or last) recording, or None.
        sidecar: the ``record.SidecarWriter`` of the running recording, or None.
        sidecar_path: its blendshape track (JSON Lines) beside the clip, or None.
        last_record_message: the last message of a recording that finished
            ("Saved …" or what went wrong).
        record_drop_warning: the last "encoder cannot keep up" warning of the
            running or last recording ("" if none).
        last_record_info: the last finished recording's ``StudioRecording.finish`` info
            (frames, synced counts, ...), plus "dropped"; {} before one finished.
        status_label: the status bar's REC label (the window adds it).

    Signals:
        format_note_changed(str): which format recordings really use ("" = the chosen one).

    Thread: GUI thread only.
    """

    _recording_closed = Signal(object, object, object)
    format_note_changed = Signal(str)

    def __init__(self, session, viewport, notifier, audio_rate: int, parent=None):
        super().__init__(parent)
        self.session = session
        self.viewport = viewport
        self.notifier = notifier
        self.status_label = QLabel("")
        self.status_label.setToolTip("Recording time, the clip's frame rate when the encoder could not keep up "
                                     "at full rate, and the window's drop count (the same as in the status bar "
                                     "and the overlay; it includes frames the recording lost)")
        self.audio_rate = int(audio_rate)
        self.record_path: Path | None = None
        self.sidecar_path: Path | None = None
        self.last_record_message = ""
        self.last_record_info: dict = {}
        self._rec_fps = RECORD_FPS
        self._rec_format = None
        self._rec_lost_pushed = 0  # the recording's losses already added to the window's drop counter
        self._rec_dropped0 = 0  # the window's drop counter when the recording started
        self._rec_drops_warned = (0, 0.0, False)  # (drops, monotonic time, encoder behind) of the last warning
        self._rec_rate_warned = -DROP_WARNING_INTERVAL_S  # monotonic time of the last "recording at N fps" note
        self._rec_queue_drops_noted = (0, 0)  # (encoder queue drops, frames offered to it) at the last rate note
        self.record_drop_warning = ""
        #: The last "Recording at N fps instead of 30" note of the running or last recording ("" if none).
        self.record_rate_warning = ""
        #: Its short form, as the status bar shows it (the whole note is the status bar's tooltip).
        self.record_rate_status = ""
        self._recording_closed.connect(self._on_recording_closed)

        self.record_button = QPushButton("● Record")
        self.record_button.setCheckable(True)
        self.record_button.setToolTip("Record the avatar with your voice (Ctrl+R)")
        self.record_button.toggled.connect(self._on_record_toggled)
        self.record_time_label = QLabel("")
        self.audio_timer = QTimer(self)
        self.audio_timer.setInterval(100)
        self.audio_timer.timeout.connect(self._on_audio_tick)

    @property
    def recorder(self):
        """The running ``AsyncRecorder(SyncedRecorder(...))`` (the session's recording), or None."""
        rec = self.session.recording
        return rec.recorder if rec is not None else None

    @property
    def sidecar(self):
        """The running recording's ``record.SidecarWriter``, or None."""
        rec = self.session.recording
        return rec.sidecar if rec is not None else None

    # ================================================================== folder
    def record_folder(self) -> Path:
        """Folder recordings go to (persisted; default: the user's Videos folder / avatar_app)."""
        default = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.MoviesLocation) or str(Path.home())
        return Path(self.session.store.value("record_folder", str(Path(default) / "avatar_app"), type=str))

    def set_record_folder(self, folder: Path) -> None:
        """Persist the recording folder.

        Args:
            folder: where the next recordings go (created when a recording starts).
        """
        self.session.store.setValue("record_folder", str(folder))

    # ================================================================== button, shortcut
    def _on_record_toggled(self, on: bool) -> None:
        if on:
            self.start_recording()
        else:
            self.stop_recording(wait=False)  # the file is finished on a worker; "Saved" follows

    def toggle_recording(self) -> None:
        """Ctrl+R / File › Record: stop a running recording, else start one (or say why not)."""
        if self.recorder is not None:
            self.stop_recording(wait=False)
        else:
            self.start_recording()

    def record_blocker(self) -> str:
        """Why a recording cannot start now, as the user should read it; "" when it can."""
        pipe = self.session.pipeline
        if pipe is None:
            return NO_SOURCE_TO_RECORD
        if not pipe.running:
            why = f" ({plain_error(pipe.error)})" if pipe.error else ""
            return f"Nothing to record: the source stopped{why}. Open a video or choose a camera in Sources."
        return ""

    def update_enabled(self) -> None:
        """Enable the record button only while a source runs (or a recording is on); the tooltip says why not."""
        why = self.record_blocker() if self.recorder is None else ""
        self.record_button.setEnabled(not why)
        self.record_button.setToolTip(why or ("Stop recording and save the clip (Ctrl+R)" if self.recorder is not None
                                              else "Record the avatar with your voice (Ctrl+R)"))

    def _reset_record_button(self) -> None:
        self.record_button.blockSignals(True)
        self.record_button.setChecked(False)
        self.record_button.blockSignals(False)
        self.record_button.setText("● Record")

    # ================================================================== format, rate
    def recording_format(self):
        """The format the next recording uses, and a note when it is not the Output panel's choice.

        With a transparent background and a format without alpha (H.264, MPEG-4) the
        recording switches to the preferred available alpha format (ProRes 4444 .mov,
        else VP9 .webm; record.formats.choose_alpha_format) so the transparency is kept,
        as the CLI requires an alpha format for ``--background transparent``.

        Returns:
            (RecordingFormat, note): note is "" when the chosen format is used as is.
        """
        from avatar_app.core.errors import RecordingError
        from avatar_app.pipeline.studio_api import choose_alpha_format, format_by_key

        try:
            fmt = format_by_key(self.session.settings.output.format)
        except AvatarError:
            fmt = format_by_key("h264-mp4")
        if self.session.settings.avatar.background != "transparent" or fmt.alpha:
            return fmt, ""
        try:
            alpha = self._live_alpha_format() or choose_alpha_format()
        except RecordingError:
            return fmt, (f"Transparent background, but this FFmpeg build has no encoder that keeps alpha: "
                         f"{fmt.label} recordings get a black background. Pick a colour background for recording.")
        return alpha, (f"Transparent background: recordings are saved as {alpha.label} to keep it; "
                       f"{fmt.label} cannot store transparency.")

    @staticmethod
    def _live_alpha_format():
        """The first available format of LIVE_ALPHA_ORDER (the fastest alpha encoder), or None."""
        from avatar_app.pipeline.studio_api import available_formats

        have = {f.key: f for f in available_formats(alpha=True)}
        return next((have[k] for k in LIVE_ALPHA_ORDER if k in have), None)

    def update_capture(self) -> None:
        """Have the viewport render 1280x720 frames while recording or feeding the virtual camera."""
        vp = self.viewport
        vp.capture_size = RECORD_SIZE
        if self.recorder is None:
            vp.capture_components = 3
        vp.capture_frames = self.recorder is not None or self.session.outputs.capturing

    def update_format_note(self) -> None:
        """Show in the Output panel which format the recording will really use."""
        _, note = self.recording_format()
        self.format_note_changed.emit(note)

    def record_fps(self) -> float:
        """Frame rate of the next recording, Hz: RECORD_FPS, or the frame-rate cap when lower.

        At most this many frames a second are encoded (each presented avatar frame once,
        held until the next; record/synced.py with ``repeat_frames=False``): a lower cap
        (Output › Performance) is what lets a slow encoder keep up.
        """
        cap = self.session.effective_fps_cap()
        return float(min(RECORD_FPS, cap)) if cap > 0 else RECORD_FPS

    # ================================================================== drops, REC timer
    def recording_dropped(self) -> int:
        """Frames the running recording lost so far: shown in the viewport, not in the clip (0 without one).

        ``StudioRecording.lost_frames``: the encoder queue's refusals (the encoder was
        behind) and frames the synced timeline could not place. Frames the viewport never
        showed are the viewer's losses, already in the window's one drop counter
        (``LatencyStats.dropped``); this count is added to that counter as it grows
        (:meth:`update_status`), so toolbar, status bar and overlay show one number.
        """
        rec = self.session.recording
        return rec.lost_frames() if rec is not None else 0

    def _push_recording_drops(self) -> None:
        """Add the running recording's new losses to the window's one drop counter (the pipeline's stats)."""
        lost = self.recording_dropped()
        pipe = self.session.pipeline
        if lost > self._rec_lost_pushed and pipe is not None:
            pipe.stats.add_dropped(lost - self._rec_lost_pushed)
        self._rec_lost_pushed = max(lost, self._rec_lost_pushed)

    def window_dropped(self) -> int:
        """The window's one drop counter: camera frames the viewer lost (status bar, overlay, toolbar)."""
        pipe = self.session.pipeline
        return int(pipe.stats.dropped) if pipe is not None else 0

    def recording_drop_message(self, dropped: int, fmt=None, encoder: bool = True, audio_lost_s: float = 0.0) -> str:
        """The warning for a recording that dropped ``dropped`` frames, with what to do about it.

        Args:
            dropped: video frames lost.
            fmt: the RecordingFormat recorded (default: the running recording's).
            encoder: the encoder was behind (else only the rendering for the recording was).
            audio_lost_s: audio that did not reach the file, s (the recorder never drops
                audio for load: only a failed write loses it).

        Returns:
            One sentence for the status bar and the "Saved …" message.
        """
        fmt = fmt or self._rec_format
        advice = []
        if fmt is not None and fmt.video_codec.startswith("prores"):
            vp9 = next((f for f in self._available_alpha() if f.key == "vp9-webm"), None)
            if vp9 is not None:
                advice.append("use VP9 (.webm) in Output › Format")
        advice.append("set a lower frame-rate cap in Output › Performance")
        advice.append("close other programs")
        s = "" if dropped == 1 else "s"
        who = "The encoder" if encoder else "Rendering for the recording"
        audio = f"{audio_lost_s:.1f} s of audio lost" if audio_lost_s > 0 else "no audio lost"
        return (f"{who} cannot keep up: {dropped} video frame{s} dropped, {audio} — "
                f"{', '.join(advice[:-1])} or {advice[-1]}.")

    @staticmethod
    def _available_alpha():
        from avatar_app.pipeline.studio_api import available_formats

        return available_formats(alpha=True)

    def _warn_recording_drops(self, dropped: int) -> None:
        """Status-bar warning when the running recording drops frames (at most every DROP_WARNING_INTERVAL_S)."""
        last, t_last, was_encoder = self._rec_drops_warned
        now = time.monotonic()
        encoder = True
        if dropped > last and (last == 0 or now - t_last >= DROP_WARNING_INTERVAL_S or encoder != was_encoder):
            self._rec_drops_warned = (dropped, now, encoder)
            self.record_drop_warning = self.recording_drop_message(dropped, encoder=encoder)
            log.warning("%s", self.record_drop_warning)
            self.notifier.status(self.record_drop_warning, 10000)

    def _warn_recording_rate(self, fps_now: float | None) -> str:
        """The REC label's rate note, and a status-bar note when the clip's frame rate adapted.

        The studio's recordings encode each presented avatar frame once and hold it on
        screen until the next one (record/synced.py, ``repeat_frames=False``): the clip's
        frame rate is the rate of new avatar frames that reached the encoder. It falls
        below the recording's rate when the live pipeline presents fewer new frames (a
        slow camera, tracking or rendering), or when the encoder is behind and its queue
        refuses frames (more than :data:`ENCODER_BLAME_SHARE` of those offered since the
        last note; the "cannot keep up" warning counts them). The window says which (at
        most every DROP_WARNING_INTERVAL_S). A source that delivers fewer frames than the
        recording's rate (a 25 fps file or camera under a 30 fps recording) sets the clip's rate
        itself: the label shows the rate and nothing is blamed (new-user trial: the window
        told the user to close programs for a 25 fps file).
        """
        fps = self._rec_fps
        if fps_now is None or fps_now >= 0.9 * fps:
            return ""
        source_fps = float(getattr(self.session, "source_fps", 0.0) or 0.0)
        if 0.0 < source_fps < 0.9 * fps and fps_now >= 0.9 * source_fps:
            return f" · {fps_now:.0f} fps {SOURCE_RATE_NOTE}"
        now = time.monotonic()
        if now - self._rec_rate_warned >= DROP_WARNING_INTERVAL_S:
            self._rec_rate_warned = now
            clip = self.session.recording
            drops = clip.queue_drops() if clip is not None else 0
            offered = clip.frames_offered() if clip is not None else 0  # frames handed to the encoder queue
            drops0, offered0 = self._rec_queue_drops_noted
            # the encoder is the cause when its queue refused a good part of the frames since the last note
            encoder = drops - drops0 > ENCODER_BLAME_SHARE * max(1, offered - offered0)
            self._rec_queue_drops_noted = (drops, offered)
            why = (f"this machine cannot encode {fps:.0f} fps now" if encoder else
                   f"the avatar shows only about {fps_now:.0f} new frames a second now (camera, tracking "
                   f"or rendering is slower than {fps:.0f} fps)")
            self.record_rate_warning = (
                f"Recording at {fps_now:.0f} fps instead of {fps:.0f}: {why}, so the clip's frame rate follows "
                f"(each new frame is held on screen until the next; none is repeated) — set a lower frame-rate "
                f"cap in Output › Performance or close other programs.")
            log.warning("%s", self.record_rate_warning)
            # the status bar gets the short form (the long one did not fit beside the REC label at the
            # default window size and was cut mid-word); the full sentence is in the log and the tooltip
            cause = "the encoder is behind" if encoder else f"the avatar shows about {fps_now:.0f} new frames a second"
            self.record_rate_status = (
                f"Recording at {fps_now:.0f} fps instead of {fps:.0f}: {cause}; no frame is repeated. "
                f"A lower cap in Output › Performance helps.")
            self.notifier.status(self.record_rate_status, 10000, detail=self.record_rate_warning)
        return f" · {fps_now:.0f} fps"

    def update_status(self) -> None:
        """Show the REC timer, the clip's frame rate when it adapted, and the window's drop counter.

        Called by the window's slow tick (5 Hz); the timer runs whatever the source does.
        The count shown is the window's one drop counter (:meth:`window_dropped`, the
        same number as the status bar and the overlay), which includes the frames the
        recording lost; those also raise the "cannot keep up" warning.
        """
        clip = self.session.recording
        rec = f"● REC {(now_ns() - clip.t0_ns) / 1e9:6.1f} s" if clip is not None else ""
        lost, note = 0, ""
        if clip is not None:
            self._push_recording_drops()
            lost = self.recording_dropped()
            note = self._warn_recording_rate(clip.recent_fps())
            rec += note
            dropped = self.window_dropped() - self._rec_dropped0
            if dropped:
                rec += f" · dropped {self.window_dropped()}"
            if lost:
                self._warn_recording_drops(lost)
        # red only for what the user loses or can act on: not for a source that sets the clip's rate
        bad = bool(rec) and (lost > 0 or (bool(note) and not note.endswith(SOURCE_RATE_NOTE)))
        for lab in (self.status_label, self.record_time_label):
            lab.setStyleSheet("color: #c0392b;" if bad else "")
        self.status_label.setText(rec)
        self.record_time_label.setText(f"  {rec}" if rec else "")

    # ================================================================== start, stop
    def start_recording(self, path: Path | None = None) -> Path | None:
        """Start recording the avatar (1280x720, 30 fps) with the source's audio. Returns the path.

        The format is the Output panel's; formats that keep transparency record RGBA.
        The session records (:class:`~avatar_app.pipeline.recording.StudioRecording`,
        synced as the CLI's: the audio sample clock is the master, each frame placed at
        the capture time of the camera frame it shows).

        Args:
            path: the clip to write (default: a time-stamped file in :meth:`record_folder`).

        Returns:
            The clip's path, or None when a recording runs already or none could
            start (the reason is shown to the user; nothing raises).
        """
        if self.recorder is not None:
            return None
        why = self.record_blocker()
        if why:  # never a recording without a running source: it would save nothing
            self._reset_record_button()
            self.update_enabled()
            self.notifier.error(why)
            return None
        fmt, note = self.recording_format()
        if path is None:
            folder = self.record_folder()
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self.notifier.error(f"Cannot create the recording folder {folder}: {exc}")
                self._reset_record_button()
                return None
            path = unused_clip_path(folder / time.strftime(f"avatar-%Y%m%d-%H%M%S{fmt.suffix}"))
        fps = self.record_fps()
        try:
            clip = self.session.start_recording(path, fmt, fps)
        except AvatarError as exc:
            self.notifier.error(str(exc))
            self._reset_record_button()
            return None
        self.record_path, self.sidecar_path = path, clip.sidecar_path
        self._rec_fps, self._rec_format = fps, fmt
        self._rec_lost_pushed = 0
        self._rec_dropped0 = self.window_dropped()
        self._rec_drops_warned = (0, 0.0, False)
        self._rec_rate_warned = -DROP_WARNING_INTERVAL_S
        self._rec_queue_drops_noted = (0, 0)
        self.record_drop_warning = self.record_rate_warning = self.record_rate_status = ""
        self.viewport.capture_components = 4 if clip.frame_shape[2] == 4 else 3
        self.update_capture()
        if clip.ring is not None:
            self.audio_timer.start()
        if not self.record_button.isChecked():
            self.record_button.blockSignals(True)
            self.record_button.setChecked(True)
            self.record_button.blockSignals(False)
        self.record_button.setText("■ Stop")
        self.update_enabled()
        self.notifier.status(f"Recording to {path}" + (f". {note}" if note else ""), 5000)
        return path

    def stop_recording(self, wait: bool = True) -> None:
        """Stop and finalise the recording; says where it went.

        Args:
            wait: finish writing on this thread (True) or on a worker (False: the
                "Saved" message comes when the file is complete).
        """
        if self.session.recording is not None:
            self._push_recording_drops()
        dropped = self.recording_dropped()  # so far; the clip's own count follows when it is closed
        clip = self.session.stop_recording(self.viewport.captured_state)
        self.update_capture()
        self.audio_timer.stop()
        self._reset_record_button()
        self.update_enabled()
        for lab in (self.status_label, self.record_time_label):
            lab.setText("")
            lab.setStyleSheet("")
        if clip is None:
            return
        path = clip.path

        def finish():
            error, info = clip.finish()
            return error, {**info, "dropped": max(dropped, clip.lost_frames()), "encoder_behind": True}

        if wait:
            self._on_recording_closed(path, *finish())
        else:
            self.session.worker.submit(lambda: self._recording_closed.emit(path, *finish()))

    def _on_recording_closed(self, path, error, info=None) -> None:
        """Say what the finished recording holds; "Saved" only for a file with video frames in it.

        Args:
            path: the clip.
            error: the AvatarError that ended writing, or None.
            info: {"frames": video frames written, "reason": why it stopped when the
                user did not stop it ("" otherwise), "sidecar": the blendshape track or None,
                "fps": the clip's frame rate, "dropped": frames lost because the encoder could
                not keep up (see :meth:`recording_dropped`), "format": its RecordingFormat}.
        """
        info = info or {}
        self.last_record_info = info
        frames = int(info.get("frames", 0))
        dropped = int(info.get("dropped", 0) or 0)
        fps = float(info.get("fps") or RECORD_FPS)
        reason = info.get("reason", "")
        stopped = f"Recording stopped: {reason}. " if reason else ""
        path = Path(path)
        try:
            written = path.is_file() and path.stat().st_size > 0
        except OSError:
            written = False
        if frames <= 0 or not written:
            for p in (path, info.get("sidecar")):  # an empty file is no clip: do not leave it behind
                if p is not None and Path(p).is_file():
                    try:
                        Path(p).unlink()
                    except OSError as exc:
                        log.warning("could not remove the empty recording %s: %s", p, exc)
            why = f" ({plain_error(str(error))})" if error is not None else ""
            self.last_record_message = (f"{stopped}Nothing was recorded: no avatar frame reached the recording"
                                        f"{why}, so no file was saved.")
            self.notifier.error(self.last_record_message)
            return
        saved = f"Saved {path} ({info.get('duration_s') or frames / fps:.1f} s)"
        if dropped:
            self.record_drop_warning = self.recording_drop_message(dropped, info.get("format"),
                                                                   bool(info.get("encoder_behind", True)),
                                                                   info.get("audio_lost_s", 0.0))
            saved += f". {self.record_drop_warning}"
        if error is not None:
            why = sentence(plain_error(str(error)))
            kept = "" if "kept" in why else f" What was written is kept: {path}."  # (the recorder may say so)
            self.last_record_message = f"{stopped}The recording stopped with an error: {why}{kept}"
            self.notifier.error(self.last_record_message)
        elif reason:
            self.last_record_message = f"{stopped}{saved}."
            self.notifier.error(self.last_record_message)
        else:
            self.last_record_message = saved
            self.notifier.status(saved, 10000)

    def stop_because(self, reason: str) -> None:
        """Finish the running recording (the clip is kept) and tell the user why it stopped.

        Args:
            reason: why, as the user should read it (e.g. "the camera was lost (…)").
        """
        if self.session.recording is None:
            return
        self.session.recording.stop_reason = reason
        self.stop_recording(wait=False)

    # ================================================================== frames, audio
    def on_frame_captured(self, rgb, t_ns: int) -> None:
        """Write a 1280x720 render into the running recording (nothing without one).

        Args:
            rgb: (720, 1280, 3 or 4) uint8 render, RGB or RGBA (as ``viewport.capture_components``).
            t_ns: when the frame was shown, ns on the process clock (``now_ns``); used
                only when the state it shows (``viewport.captured_state``) has no
                capture time. The recording places the frame at that state's
                ``t_capture_ns``.
        """
        try:
            self.session.record_frame(rgb, self.viewport.captured_state, t_ns)
        except AvatarError as exc:
            log.warning("recording stopped: %s", exc)
            self.stop_recording(wait=False)  # reports the error when the file is closed

    def _on_audio_tick(self) -> None:
        """Hand the recording the source's audio since the last tick (GUI timer, 10 Hz)."""
        clip = self.session.recording
        if clip is None:
            return
        try:
            clip.feed_audio()
        except AvatarError as exc:  # the recorder failed (a full disk): one report, when the file is closed
            log.warning("recording stopped: %s", exc)
            self.stop_recording(wait=False)


__all__ = ["RecordingController", "RECORD_SIZE", "RECORD_FPS", "LIVE_ALPHA_ORDER", "DROP_WARNING_INTERVAL_S",
           "ENCODER_BLAME_SHARE", "NO_SOURCE_TO_RECORD"]
