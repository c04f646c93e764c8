"""Main window: avatar viewport, camera preview with landmarks, latency overlay, record button."""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, QStandardPaths, Qt, QTimer
from PySide6.QtGui import QAction, QImage, QKeySequence, QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from avatar_app.core.errors import AvatarError
from avatar_app.ui.viewport import AvatarViewportWidget

log = logging.getLogger(__name__)

RECORD_SIZE = (1280, 720)
RECORD_FPS = 30.0
AUDIO_RATE = 16000


class MainWindow(QMainWindow):
    """The streamer's window.

    Args:
        source: a video file to play live, or None for the camera.
        camera: camera index (default: the last used, else 0).
        settings: QSettings to persist into (tests pass a temporary one).

    Thread: GUI thread only. Processing runs on the pipeline's thread; this
    window polls its newest state on a display-rate timer.
    """

    def __init__(self, source: Path | None = None, camera: int | None = None, settings: QSettings | None = None):
        super().__init__()
        self.settings = settings or QSettings("avatar_app", "avatar_app")
        self.setWindowTitle("avatar_app")
        self.pipeline = None
        self.mic = None
        self.recorder = None
        self._rec_t0_ns = 0
        self._rec_audio_end_ns = 0
        self._last_state = None
        self._last_preview_index = -1
        self.last_error: str | None = None

        self.viewport = AvatarViewportWidget(self)
        self.viewport.frame_presented.connect(self._on_frame_presented)
        self.viewport.frame_captured.connect(self._on_frame_captured)
        self.viewport.gl_failed.connect(self._show_error)
        self.setCentralWidget(self.viewport)

        # side panel: preview, record, overlay toggle
        panel = QWidget()
        lay = QVBoxLayout(panel)
        self.preview = QLabel("no video")
        self.preview.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.preview.setFixedSize(320, 240)
        self.preview.setStyleSheet("background: #202020; color: #aaa;")
        lay.addWidget(self.preview)
        self.source_label = QLabel("")
        self.source_label.setWordWrap(True)
        lay.addWidget(self.source_label)
        self.mic_label = QLabel("")
        self.mic_label.setWordWrap(True)
        lay.addWidget(self.mic_label)
        self.record_button = QPushButton("● Record")
        self.record_button.setCheckable(True)
        self.record_button.setToolTip("Record the avatar with your voice (Ctrl+R)")
        self.record_button.toggled.connect(self._on_record_toggled)
        lay.addWidget(self.record_button)
        self.overlay_box = QCheckBox("Latency overlay")
        self.overlay_box.setChecked(self.settings.value("overlay", True, type=bool))
        self.overlay_box.toggled.connect(lambda on: self.settings.setValue("overlay", on))
        lay.addWidget(self.overlay_box)
        lay.addStretch(1)
        dock = QDockWidget("Camera", self)
        dock.setObjectName("camera_dock")
        dock.setWidget(panel)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)

        self._build_menu()
        self.status = self.statusBar()
        self.resize(1280, 760)

        self.display_timer = QTimer(self)
        self.display_timer.setInterval(15)
        self.display_timer.timeout.connect(self._on_display_tick)
        self.display_timer.start()
        self.slow_timer = QTimer(self)
        self.slow_timer.setInterval(200)
        self.slow_timer.timeout.connect(self._on_slow_tick)
        self.slow_timer.start()
        self.audio_timer = QTimer(self)
        self.audio_timer.setInterval(100)
        self.audio_timer.timeout.connect(self._on_audio_tick)

        if source is not None:
            self.open_file(Path(source))
        else:
            idx = camera if camera is not None else self.settings.value("camera", 0, type=int)
            self.open_camera(idx)

    # ------------------------------------------------------------------ menus
    def _build_menu(self) -> None:
        m = self.menuBar().addMenu("&File")
        a = QAction("&Open video…", self)
        a.setShortcut(QKeySequence.StandardKey.Open)
        a.triggered.connect(self._on_open_dialog)
        m.addAction(a)
        a = QAction("Use &camera", self)
        a.triggered.connect(lambda: self.open_camera(self.settings.value("camera", 0, type=int)))
        m.addAction(a)
        m.addSeparator()
        self.record_action = QAction("&Record", self)
        self.record_action.setShortcut(QKeySequence("Ctrl+R"))
        self.record_action.triggered.connect(self.record_button.toggle)
        m.addAction(self.record_action)
        a = QAction("Choose recording &folder…", self)
        a.triggered.connect(self._on_choose_folder)
        m.addAction(a)
        m.addSeparator()
        a = QAction("&Quit", self)
        a.setShortcut(QKeySequence.StandardKey.Quit)
        a.triggered.connect(self.close)
        m.addAction(a)
        t = self.menuBar().addMenu("&Tracking")
        a = QAction("Calibrate &neutral face", self)
        a.setShortcut(QKeySequence("Ctrl+N"))
        a.triggered.connect(self.calibrate_neutral)
        t.addAction(a)

    def _on_open_dialog(self) -> None:
        start = self.settings.value("last_file", str(Path.home()), type=str)
        path, _ = QFileDialog.getOpenFileName(self, "Open a video", start, "Videos (*.mp4 *.mpg *.mov *.mkv *.webm *.avi);;All files (*)")
        if path:
            self.open_file(Path(path))

    def _on_choose_folder(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Recording folder", str(self.record_folder()))
        if d:
            self.settings.setValue("record_folder", d)

    # ------------------------------------------------------------------ sources
    def _start_pipeline(self, source, ring, label: str) -> bool:
        from avatar_app.pipeline import LivePipeline

        try:
            pipe = LivePipeline(source, ring=ring)
            pipe.start()
        except AvatarError as exc:
            self._show_error(str(exc))
            self.source_label.setText(f"No source: {exc}")
            return False
        self.pipeline = pipe
        self.source_label.setText(label)
        self.status.showMessage(label, 5000)
        return True

    def open_file(self, path: Path) -> bool:
        """Play a video file live (its audio drives speech). Returns False and shows why on error."""
        from avatar_app.capture.live_file import LiveFileSource

        self.stop_pipeline()
        try:
            source = LiveFileSource(path, loop=True)
        except AvatarError as exc:
            self._show_error(str(exc))
            return False
        ok = self._start_pipeline(source, getattr(source, "ring", None), f"File: {path.name}")
        self.mic_label.setText("Audio: the file's own track" if getattr(source, "ring", None) is not None else "")
        if ok:
            self.settings.setValue("last_file", str(path))
        return ok

    def open_camera(self, index: int) -> bool:
        """Open camera ``index`` and the default microphone. Returns False and shows why on error."""
        from avatar_app.capture.camera import CameraSource
        from avatar_app.capture.mic import MicSource
        from avatar_app.capture.ring import AudioRing

        self.stop_pipeline()
        ring = AudioRing(capacity_s=10.0, sample_rate=AUDIO_RATE)
        try:
            self.mic = MicSource(ring=ring)
            self.mic.start()
            self.mic_label.setText("Microphone: default input")
        except AvatarError as exc:
            self.mic = None
            ring = None
            self.mic_label.setText(f"Microphone: none. {exc} Speech is off; tracking continues.")
            log.warning("%s", exc)
        try:
            source = CameraSource(index)
        except AvatarError as exc:
            self._show_error(str(exc))
            self.source_label.setText(f"No camera: {exc}\nUse File > Open video… to play a file.")
            return False
        ok = self._start_pipeline(source, ring, f"Camera {index}")
        if ok:
            self.settings.setValue("camera", index)
            granted = getattr(source, "granted", None)
            if granted:
                self.source_label.setText(f"Camera {index}: {granted[0]}x{granted[1]} @ {granted[2]:.0f} fps")
        return ok

    def stop_pipeline(self) -> None:
        """Stop the current source, pipeline and microphone."""
        if self.pipeline is not None:
            self.pipeline.stop()
            self.pipeline = None
        if self.mic is not None:
            self.mic.stop()
            self.mic = None

    def calibrate_neutral(self) -> None:
        """Use the current face as the neutral face (look straight, relax)."""
        pipe = self.pipeline
        lm = pipe.processor.last_landmarks if pipe is not None else None
        if lm is None:
            self.status.showMessage("No face to calibrate: look at the camera and try again", 5000)
            return
        pipe.processor.reconstructor.calibrate_neutral(lm)
        self.status.showMessage("Neutral face calibrated", 3000)

    # ------------------------------------------------------------------ timers
    def _on_display_tick(self) -> None:
        pipe = self.pipeline
        if pipe is None:
            return
        state = pipe.latest_state()
        if state is not None and state is not self._last_state:
            self._last_state = state
            self.viewport.show_state(state)
        if pipe.error and pipe.error != self.last_error:
            self._show_error(pipe.error)

    def _on_frame_presented(self, state, t_ns: int) -> None:
        if self.pipeline is not None and state is not None and state.stamps:
            self.pipeline.presented(state, t_ns)

    def _on_slow_tick(self) -> None:
        pipe = self.pipeline
        if pipe is None:
            self.viewport.set_overlay_lines(None)
            return
        summary = pipe.stats.summary()
        self.viewport.set_overlay_lines(summary.lines() if self.overlay_box.isChecked() else None)
        self._update_preview()
        rec = ""
        if self.recorder is not None:
            rec = f"   ● REC {(time.perf_counter_ns() - self._rec_t0_ns) / 1e9:6.1f} s"
        c2s = f"{summary.camera_to_screen[0]:.0f} ms" if summary.camera_to_screen else "–"
        self.status.showMessage(
            f"{summary.fps:4.1f} fps   camera-to-screen {c2s}   dropped {summary.dropped}{rec}"
        )

    def _update_preview(self) -> None:
        import cv2

        pipe = self.pipeline
        frame = pipe.last_frame if pipe is not None else None
        if frame is None or frame.index == self._last_preview_index:
            return
        self._last_preview_index = frame.index
        img = frame.image
        h, w = img.shape[:2]
        scale = min(320 / w, 240 / h)
        small = cv2.resize(img, (max(1, int(w * scale)), max(1, int(h * scale))), interpolation=cv2.INTER_AREA)
        lm = pipe.processor.last_landmarks
        if lm is not None:
            pts = (lm.points[:, :2] * np.array([small.shape[1], small.shape[0]])).astype(np.int32)
            for x, y in pts[::2]:
                small[min(max(y, 0), small.shape[0] - 1), min(max(x, 0), small.shape[1] - 1)] = (0, 255, 0)
        rgb = cv2.cvtColor(small, cv2.COLOR_BGR2RGB)
        qimg = QImage(rgb.data, rgb.shape[1], rgb.shape[0], rgb.strides[0], QImage.Format.Format_RGB888).copy()
        self.preview.setPixmap(QPixmap.fromImage(qimg))

    # ------------------------------------------------------------------ recording
    def record_folder(self) -> Path:
        """Folder recordings go to (persisted; default: the user's Videos folder / avatar_app)."""
        default = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.MoviesLocation) or str(Path.home())
        return Path(self.settings.value("record_folder", str(Path(default) / "avatar_app"), type=str))

    def _on_record_toggled(self, on: bool) -> None:
        if on:
            self.start_recording()
        else:
            self.stop_recording()

    def start_recording(self, path: Path | None = None) -> Path | None:
        """Start recording the avatar (1280x720, 30 fps) with the source's audio. Returns the path."""
        from avatar_app.record import AsyncRecorder, ClipRecorder

        if self.recorder is not None:
            return None
        if path is None:
            folder = self.record_folder()
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self._show_error(f"Cannot create the recording folder {folder}: {exc}")
                self.record_button.setChecked(False)
                return None
            path = folder / time.strftime("avatar-%Y%m%d-%H%M%S.mp4")
        ring = self.pipeline.ring if self.pipeline is not None else None
        try:
            rec = ClipRecorder(path, *RECORD_SIZE, RECORD_FPS, audio_sample_rate=AUDIO_RATE if ring is not None else None)
            self.recorder = AsyncRecorder(rec)
        except AvatarError as exc:
            self._show_error(str(exc))
            self.record_button.blockSignals(True)
            self.record_button.setChecked(False)
            self.record_button.blockSignals(False)
            return None
        self.record_path = path
        self._rec_t0_ns = time.perf_counter_ns()
        self._rec_audio_end_ns = self._rec_t0_ns
        self.viewport.capture_size = RECORD_SIZE
        self.viewport.capture_frames = True
        if ring is not None:
            self.audio_timer.start()
        self.record_button.setText("■ Stop")
        self.status.showMessage(f"Recording to {path}", 3000)
        return path

    def stop_recording(self) -> None:
        """Stop and finalise the recording; says where it went."""
        rec, self.recorder = self.recorder, None
        self.viewport.capture_frames = False
        self.audio_timer.stop()
        self.record_button.blockSignals(True)
        self.record_button.setChecked(False)
        self.record_button.blockSignals(False)
        self.record_button.setText("● Record")
        if rec is None:
            return
        try:
            self._on_audio_tick(rec)
            rec.close()
            self.status.showMessage(f"Saved {self.record_path}", 10000)
        except AvatarError as exc:
            self._show_error(f"The recording stopped with an error: {exc}. What was written is kept in {self.record_path}.")

    def _on_frame_captured(self, rgb, t_ns: int) -> None:
        rec = self.recorder
        if rec is None:
            return
        try:
            rec.write_video(rgb, (t_ns - self._rec_t0_ns) / 1e9)
        except AvatarError as exc:
            self.recorder = None
            self.stop_recording()
            self._show_error(str(exc))

    def _on_audio_tick(self, rec=None) -> None:
        rec = rec or self.recorder
        ring = self.pipeline.ring if self.pipeline is not None else None
        if rec is None or ring is None:
            return
        end = time.perf_counter_ns() - 60_000_000  # leave the newest 60 ms to arrive
        if end <= self._rec_audio_end_ns:
            return
        dur = (end - self._rec_audio_end_ns) / 1e9
        samples = ring.read_window(end, dur)
        try:
            rec.write_audio(samples, (self._rec_audio_end_ns - self._rec_t0_ns) / 1e9)
        except AvatarError as exc:
            self._show_error(str(exc))
        self._rec_audio_end_ns = end

    # ------------------------------------------------------------------ errors, close
    def _show_error(self, message: str) -> None:
        """Show a non-blocking message; the window stays usable."""
        self.last_error = message
        log.warning("%s", message)
        self.status.showMessage(message, 15000)
        box = QMessageBox(QMessageBox.Icon.Warning, "avatar_app", message, QMessageBox.StandardButton.Ok, self)
        box.setModal(False)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.show()
        self._error_box = box

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self.stop_recording()
        self.stop_pipeline()
        for t in (self.display_timer, self.slow_timer, self.audio_timer):
            t.stop()
        super().closeEvent(event)
