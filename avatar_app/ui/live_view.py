"""What the studio window shows of the running session: viewport, preview, status bar, latency history.

:class:`LiveView` is the window's presenter: each new state goes from the pipeline
thread straight to the viewport's render thread (:meth:`LiveView._on_state_published`;
no timer on a frame's way to the screen), and a display-rate timer only notices new
states (the garbage collector's freeze); a 5 Hz timer runs the session's health
check (lost camera, reconnect), the recording's REC timer, the "No face found"
notice, the overlay, the camera preview and the status labels; the bridge's
signals (source changed, failed or lost, microphone, engines, avatar) update
the labels and panels. It holds no state of the session itself.

Thread: GUI thread only.
"""
from __future__ import annotations

import gc
import logging
import time
from pathlib import Path
from collections import deque

from PySide6.QtCore import QObject, QTimer

from avatar_app.pipeline import settings as store
from avatar_app.ui.panels import plain_error, sentence

log = logging.getLogger(__name__)

#: Seconds of per-frame latency history the plots show.
PLOT_WINDOW_S = 30.0
#: Seconds without a face before "No face found" shows (a blink or a turn of the head is not reported).
NO_FACE_DELAY_S = 0.6


def no_source_caption(error: str, kind: str) -> str:
    """The preview caption when no source runs: what failed, then what to do, as separate sentences.

    Args:
        error: why the source did not open, as the user should read it.
        kind: "camera", "file" or "".
    """
    from avatar_app.pipeline.session_events import sentence

    error = sentence(error)
    if kind == "camera":
        return f"No source: {error}\nUse File › Open video… to play a file."
    return f"No source: {error}"


class LiveView(QObject):
    """The window's presenter (see the module docstring).

    Args:
        session: the StudioSession.
        bridge: its SessionBridge.
        viewport: the AvatarViewportWidget.
        notifier: the window's Notifier.
        recording: the RecordingController.
        panels: the window's panels by key ("sources", "engines", ...).
        status_labels: the status bar's labels by key ("engines", "fps", "c2s", "dropped", "face").
        panels_visible: ``panels_visible() -> bool`` (the "No face found" notice shows only then).
        raise_sources: ``raise_sources()`` brings the Sources dock to the front.
        parent: the QObject parent.

    Attributes:
        latency_history: (t_s, stage -> ms, camera-to-screen ms) of the frames shown in the
            last :data:`PLOT_WINDOW_S` seconds.
        fps_history: (t_s, fps, dropped) every 200 ms over the same window.
        no_face_shown: whether "No face found" is shown.
        last_state: the newest state handed to the viewport, or None.
        clean_view: the clean capture view (Ctrl+H) is on: the latency overlay is hidden
            whatever the Latency panel's "overlay" box says, and comes back with the panels.
    """

    def __init__(self, session, bridge, viewport, notifier, recording, panels: dict, status_labels: dict,
                 panels_visible, raise_sources, parent=None):
        super().__init__(parent)
        self.session, self.viewport, self.notifier, self.recording = session, viewport, notifier, recording
        self.panels, self.status_labels = panels, status_labels
        self.panels_visible, self.raise_sources = panels_visible, raise_sources
        self.latency_history: deque = deque()
        self.fps_history: deque = deque()
        self.no_face_shown = False
        self.last_state = None
        self.clean_view = False
        self._no_face_since: float | None = None
        self._freeze_pending = True  # gc.freeze() at the next new frame (see freeze_gc)
        self._last_preview_index = -1
        self._shown_error: str | None = None
        #: Why no source runs, after a source failed with nothing else running (None while one runs).
        self.source_failure: str | None = None
        viewport.frame_presented.connect(self._on_frame_presented)
        viewport.frame_captured.connect(self._on_frame_captured)
        viewport.gl_failed.connect(notifier.error)
        for name, slot in (("source_opening", self._on_source_opening), ("source_changed", self._on_source_changed),
                           ("source_failed", self._on_source_failed), ("source_lost", self._on_source_lost),
                           ("mic_changed", self._on_mic_changed), ("engine_changed", self._on_engine_changed),
                           ("status", notifier.status), ("error", self._on_error),
                           ("output_status", self._on_output_status), ("avatar_loaded", self._on_avatar_loaded),
                           ("settings_changed", self._on_settings_changed)):
            getattr(bridge, name).connect(slot)
        #: Hand each new state to the viewport from the pipeline thread as it is published (True),
        #: or from the display timer only (False; tests that show their own states turn it off).
        self.push_states = True
        session.events.state.connect(self._on_state_published)
        self.display_timer = QTimer(self)
        self.display_timer.setInterval(15)
        self.display_timer.timeout.connect(self._on_display_tick)
        self.slow_timer = QTimer(self)
        self.slow_timer.setInterval(200)
        self.slow_timer.timeout.connect(self._on_slow_tick)
        self.update_engine_status()

    def start(self) -> None:
        """Start the display and status timers."""
        self.display_timer.start()
        self.slow_timer.start()

    def stop(self) -> None:
        """Stop the timers and the hand-over of new states (the window closes)."""
        self.push_states = False
        self.session.events.state.disconnect(self._on_state_published)
        self.display_timer.stop()
        self.slow_timer.stop()

    # ================================================================== session events
    def _on_source_opening(self, text: str) -> None:
        self.panels["sources"].source_label.setText(text)
        self.recording.update_enabled()

    def _on_source_changed(self, info) -> None:
        self.source_failure = None
        self._freeze_pending = True
        self.panels["sources"].source_label.setText(info.label)
        self.notifier.status(info.label, 5000)
        self.panels["sources"].on_source_changed()
        self.recording.update_enabled()
        self.update_engine_status()  # the new pipeline's tracker

    def _on_source_failed(self, info, nothing_runs: bool) -> None:
        error = plain_error(info.error)
        if info.path is not None:  # the file's name first, then why (the full path is in the panel)
            error = f"Could not play {info.path.name}: {plain_error(info.error, info.path)}"
        # no message box: the failure is shown where the source was chosen (the red text
        # under the file box, the preview caption) and in the status bar; nothing to decide
        self.notifier.status_error(error if nothing_runs else f"{sentence(error)} The current source keeps running.")
        if nothing_runs:
            self.source_failure = error
            self.panels["sources"].source_label.setText(no_source_caption(error, info.kind))
        self.panels["sources"].on_source_failed(info.path if info.kind == "file" else None, info.error)
        if info.kind == "file":
            self.raise_sources()  # the red text under the file box says what failed
        self.recording.update_enabled()

    def _on_source_lost(self, error: str, camera: bool) -> None:
        # a recording of the source ends here, kept and playable
        what = "the camera was lost" if camera else "the source failed"
        self.recording.stop_because(f"{what} ({plain_error(error)})")
        self.panels["sources"].source_label.setText(f"Stopped: {plain_error(error)}")
        self.recording.update_enabled()
        if camera:
            self.notifier.last_error = error
            self.notifier.status(f"Camera lost ({plain_error(error)}); waiting for it to return…", 0)
        else:
            self.notifier.error(plain_error(error))

    def _on_error(self, message: str) -> None:
        self.notifier.error(plain_error(message))

    def _on_mic_changed(self, text: str) -> None:
        self.panels["sources"].mic_label.setText(text)

    def _on_engine_changed(self, name: str) -> None:
        tr = self.session.trackers
        if name == tr.NAME and tr.building and tr.said and self.notifier.message == tr.said:
            self.notifier.status_bar.clearMessage()  # a new choice: the old choice's fallback notice is stale
        self.update_engine_status()
        self._freeze_pending = True

    def update_engine_status(self) -> None:
        """The status bar's engine label: what serves each engine."""
        engines = self.session.engines
        short = {"face_recon": "Face", "speech2face": "Speech"}
        self.status_labels["engines"].setText(
            "   ".join([f"{short.get(n, n)}: "
                        + (self.session.describe_face() if n == "face_recon" else engines.describe(n))
                        for n in engines.entries]
                       + [f"Tracking: {self.session.trackers.short()}"]))

    def _on_output_status(self, kind: str, text: str) -> None:
        out = self.panels["output"]
        (out.vmc_status if kind == "vmc" else out.vcam_status).setText(text)
        self.recording.update_capture()

    def _on_settings_changed(self, area: str) -> None:
        s = self.session
        if area == "avatar":
            a = s.settings.avatar
            self.viewport.set_render_settings(background=a.background, lighting=a.lighting, msaa=s.effective_msaa())
        elif area == "output":
            cap = s.effective_fps_cap()
            self.display_timer.setInterval(15 if not cap else max(15, int(1000 / cap / 2)))
            self.viewport.set_render_settings(msaa=s.effective_msaa())
            self.recording.update_capture()
        if area in ("avatar", "output"):
            self.recording.update_format_note()

    def _on_avatar_loaded(self, path, mesh) -> None:
        if isinstance(mesh, BaseException):
            self.notifier.error(str(mesh))
            return
        self.viewport.set_avatar(mesh)
        self._freeze_pending = True
        self.session.avatar_applied(path)
        self.panels["avatar"].on_avatar_loaded(path, mesh)
        self.notifier.status(avatar_loaded_message(path, mesh), 15000)

    def _on_frame_captured(self, rgb, t_ns: int) -> None:
        """A 1280x720 render: to the session's outputs (virtual camera) and the recording."""
        self.session.frame_rendered.emit(rgb, self.viewport.captured_state)
        self.recording.update_capture()
        self.recording.on_frame_captured(rgb, t_ns)

    # ================================================================== timers
    @staticmethod
    def freeze_gc() -> None:
        """Move every object alive now out of the cyclic garbage collector's view (``gc.freeze``).

        After start-up the process holds ~180 000 tracked objects (Qt wrappers,
        MediaPipe, ONNX Runtime, numpy); a full collection then took 170 ms on
        whichever thread triggered it, often the GUI thread. Frozen objects are
        skipped, so collections only scan what is newer (measured: 0.05 ms). Called
        once the first frame shows and after each source, engine or avatar change;
        cyclic garbage that already existed then is kept (a few objects).
        """
        gc.freeze()

    def _on_state_published(self, state) -> None:
        """Pipeline thread: a new state goes to the render thread at once (newest wins).

        Before, the GUI thread's 15 ms display timer picked the newest state up: up to
        15 ms of waiting, more while the GUI thread was busy (benchmarks/live_latency.py:
        ``to_render`` 22 ms median on the loaded 2-core machine).
        """
        if self.push_states:
            self.viewport.offer_state(state)

    def _on_display_tick(self) -> None:
        state = self.session.latest_state()
        if state is not None and state is not self.last_state:
            if self.last_state is None or self._freeze_pending:
                self._freeze_pending = False
                self.freeze_gc()
            self.last_state = state
            if not self.push_states:
                self.viewport.show_state(state)

    def _on_frame_presented(self, state, t_ns: int) -> None:
        pipe = self.session.pipeline
        if pipe is not None and state is not None and state.stamps:
            pipe.presented(state, t_ns)
            durations = {k: (e - s) / 1e6 for k, (s, e) in state.stamps.items()}
            self.latency_history.append((t_ns / 1e9, durations, (t_ns - state.t_capture_ns) / 1e6))
            cutoff = t_ns / 1e9 - PLOT_WINDOW_S
            while self.latency_history and self.latency_history[0][0] < cutoff:
                self.latency_history.popleft()

    def _on_slow_tick(self) -> None:
        s = self.session
        if s.priorities is not None:
            s.priorities.sweep()  # threads started since (decoder, engine pools, encoder)
        s.tick()
        pipe = s.pipeline
        self.recording.update_status()  # the recording timer runs whatever the source does
        self.recording.update_enabled()
        self._update_no_face(pipe)
        if pipe is None:
            self.viewport.set_overlay_lines(None)
            self.panels["sources"].on_tick()  # "Stopped" once a source was stopped (stop_pipeline)
            return
        summary = pipe.stats.summary()
        self.update_overlay(summary)
        now = time.perf_counter()
        self.fps_history.append((now, summary.fps, summary.dropped))
        while self.fps_history and self.fps_history[0][0] < now - PLOT_WINDOW_S:
            self.fps_history.popleft()
        if store.CPU_MODES[s.settings.output.cpu_mode][2]:
            self._update_preview(pipe)
        c2s = f"{summary.camera_to_screen[0]:.0f} ms" if summary.camera_to_screen else "–"
        self.status_labels["fps"].setText(f"{summary.fps:4.1f} fps" if pipe.running else "stopped")
        self.status_labels["c2s"].setText(f"camera-to-screen {c2s}")
        self.status_labels["dropped"].setText(f"dropped {summary.dropped}")
        self.panels["latency"].show_summary(summary.fps, summary.dropped)  # the same numbers as above
        self.panels["sources"].on_tick()

    def overlay_wanted(self) -> bool:
        """Whether the viewport shows the latency overlay: the user's choice, never on the clean view."""
        return self.panels["latency"].overlay_box.isChecked() and not self.clean_view

    def update_overlay(self, summary=None) -> None:
        """Show the latency overlay (``summary``: the pipeline's StatsSummary, default: a fresh one) or hide it."""
        pipe = self.session.pipeline
        if pipe is None or not self.overlay_wanted():
            self.viewport.set_overlay_lines(None)
            return
        summary = summary or pipe.stats.summary()
        self.viewport.set_overlay_lines(summary.lines(), summary.short_lines())

    def _update_preview(self, pipe) -> None:
        frame = pipe.last_frame
        if frame is None or frame.index == self._last_preview_index:
            return
        if self.panels["sources"].preview_panel.show_frame(frame, pipe.processor.last_landmarks,
                                                           self.session.chain.tuner.settings.mirror):
            self._last_preview_index = frame.index

    def _update_no_face(self, pipe) -> None:
        """Show "No face found" while the source runs and the tracker has found no face for NO_FACE_DELAY_S."""
        st = self.last_state if pipe is not None and pipe.running else None
        if st is None or st.face_found:
            self._no_face_since = None
            self.show_no_face(False)
            return
        now = time.monotonic()
        if self._no_face_since is None:
            self._no_face_since = now
        self.show_no_face(now - self._no_face_since >= NO_FACE_DELAY_S)

    def show_no_face(self, on: bool) -> None:
        """Status bar label always; the viewport notice only with the panels shown (never on a clean capture)."""
        self.no_face_shown = on
        self.status_labels["face"].setText("No face found" if on else "")
        self.status_labels["face"].setStyleSheet("color: #c0392b; font-weight: bold;" if on else "")
        self.viewport.set_notice("No face found: face the camera, or play a video with a face in it"
                                 if on and self.panels_visible() else None)


def avatar_loaded_message(path, mesh) -> str:
    """The status-bar line for an avatar now shown: its name, and its load report's first warning
    (e.g. that none of its shapes moves the face), so that it replaces an earlier load's error.

    Args:
        path: the avatar file, or None for the default head.
        mesh: the loaded AvatarMesh (its ``report``, when it has one: ``warnings``, list of str).

    Returns:
        One line, e.g. ``"Avatar: robot.vrm"`` or ``"Avatar: robot.vrm - none of the 52 ..."``.
    """
    if path is None:
        return "Avatar: the default head"
    warnings = list(getattr(getattr(mesh, "report", None), "warnings", None) or [])
    line = f"Avatar: {Path(path).name}"
    return f"{line} - {warnings[0]}" if warnings else line
