"""Sources panel: camera (by name), microphone with a live level meter, video file, camera preview."""
from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from avatar_app.core.clock import now_ns
from avatar_app.pipeline.calibration import METER_FLOOR_DB, level_dbfs
from avatar_app.ui.panels import ElidedLabel, Panel, ProgressBar, hint, plain_error, sentence

log = logging.getLogger(__name__)

#: Shortest time between two log lines about new microphone overflows, s.
OVERFLOW_LOG_INTERVAL_S = 10.0

class PreviewPanel(QWidget):
    """The camera preview with landmarks, what the source is and what it really delivers."""

    def __init__(self):
        super().__init__()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        self.preview = QLabel("no video")
        self.preview.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.preview.setMinimumSize(240, 180)
        self.preview.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.preview.setFixedHeight(220)
        self.preview.setStyleSheet("background: #202020; color: #aaa;")
        self.preview.setWordWrap(True)
        #: whether the preview says the source stopped (show_stopped) rather than showing a frame
        self.stopped = False
        lay.addWidget(self.preview)
        # fixed heights, elided, the whole text in the tooltip: a long error never covers the preview
        self.source_label = ElidedLabel("", lines=3)
        lay.addWidget(self.source_label)
        self.delivering_label = ElidedLabel("", lines=1)
        lay.addWidget(self.delivering_label)
        lay.addStretch(1)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

    def show_frame(self, frame, landmarks, mirror: bool) -> bool:
        """Show a camera frame with every second landmark in green; False (nothing done) while hidden.

        Args:
            frame: the Frame ((H, W, 3) uint8 BGR image).
            landmarks: its Landmarks, or None.
            mirror: show it as a mirror does, like the avatar with mirror on.
        """
        import cv2
        import numpy as np
        from PySide6.QtGui import QImage, QPixmap

        if not self.preview.isVisible():
            return False
        img = frame.image
        h, w = img.shape[:2]
        scale = min(self.preview.width() / w, self.preview.height() / h)
        small = cv2.resize(img, (max(1, int(w * scale)), max(1, int(h * scale))), interpolation=cv2.INTER_AREA)
        if landmarks is not None:
            pts = (landmarks.points[:, :2] * np.array([small.shape[1], small.shape[0]])).astype(np.int32)
            pts[:, 0] = np.clip(pts[:, 0], 0, small.shape[1] - 1)
            pts[:, 1] = np.clip(pts[:, 1], 0, small.shape[0] - 1)
            small[pts[::2, 1], pts[::2, 0]] = (0, 255, 0)
        if mirror:
            small = small[:, ::-1]  # the preview shows you as a mirror does, like the avatar
        rgb = np.ascontiguousarray(cv2.cvtColor(small, cv2.COLOR_BGR2RGB))
        qimg = QImage(rgb.data, rgb.shape[1], rgb.shape[0], rgb.strides[0], QImage.Format.Format_RGB888).copy()
        self.preview.setPixmap(QPixmap.fromImage(qimg))
        self.stopped = False
        return True

    def show_stopped(self, why: str = "") -> None:
        """Replace the last frame by "Source stopped" (and why): a frozen frame looked like a live one."""
        self.stopped = True
        self.preview.clear()
        self.preview.setText(f"Source stopped\n{why}" if why else "Source stopped")
        self.preview.setToolTip(why)


class SourcesPanel(Panel):
    """Cameras listed by name, microphones with a level meter, a video file, and the camera preview.

    Camera names come from :func:`avatar_app.ui.devices.list_camera_devices`
    (QtMultimedia when installed, else V4L2 names or OpenCV probing; the panel says
    which), listed on a worker thread. The label under the preview shows what the
    opened source really delivers (granted size and the measured frame rate).
    """

    devices_listed = Signal(object, str, object)

    def __init__(self, session, bridge=None, notifier=None):
        super().__init__(session, bridge, notifier)
        self.preview_panel = PreviewPanel()
        self.preview = self.preview_panel.preview
        self.source_label = self.preview_panel.source_label
        self.delivering_label = self.preview_panel.delivering_label
        self._delivered = False  # a source delivered since the last change: without one now, it stopped
        lay = QVBoxLayout(self)
        lay.addWidget(self._camera_group())
        lay.addWidget(self._mic_group())
        lay.addWidget(self._file_group())
        lay.addStretch(1)

        self.devices_listed.connect(self._on_devices_listed)
        self.cameras = []
        self.microphones = []
        self.refresh_devices()

    def _camera_group(self) -> QGroupBox:
        cam = QGroupBox("Camera")
        cl = QVBoxLayout(cam)
        row = QHBoxLayout()
        self.camera_combo = QComboBox()
        self.camera_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.camera_combo.setMinimumContentsLength(12)
        row.addWidget(self.camera_combo, 1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("List the cameras and microphones again")
        self.refresh_button.clicked.connect(self.refresh_devices)
        row.addWidget(self.refresh_button)
        cl.addLayout(row)
        self.use_camera_button = QPushButton("Use this camera")
        self.use_camera_button.clicked.connect(self._on_use_camera)
        cl.addWidget(self.use_camera_button)
        self.camera_method = hint("")
        cl.addWidget(self.camera_method)
        return cam

    def _mic_group(self) -> QGroupBox:
        mic = QGroupBox("Microphone")
        ml = QVBoxLayout(mic)
        self.mic_combo = QComboBox()
        self.mic_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.mic_combo.setMinimumContentsLength(12)
        self.mic_combo.activated.connect(self._on_mic_chosen)
        ml.addWidget(self.mic_combo)
        self.meter = ProgressBar()
        self.meter.setRange(int(METER_FLOOR_DB), 0)
        self.meter.setValue(int(METER_FLOOR_DB))
        self.meter.setFormat("%v dBFS")
        self.meter.setToolTip("Live input level (RMS over the last 100 ms). Speech should peak around -20 dBFS.")
        meter_row = QHBoxLayout()
        meter_row.addWidget(self.meter, 1)
        # input overflows (samples PortAudio lost), shown beside the meter once there are any
        self.overflow_label = QLabel("")
        self.overflow_label.setStyleSheet("color: #c0392b; font-weight: bold;")
        self.overflow_label.setToolTip("Times the microphone's input overflowed: samples were lost before the app "
                                       "read them (the machine was too busy). Close other programs if it rises.")
        self.overflow_label.hide()
        meter_row.addWidget(self.overflow_label)
        ml.addLayout(meter_row)
        self._overflows_logged = (0, 0.0)  # (count, monotonic time) of the last log line
        self.mic_label = ElidedLabel("", lines=3)
        ml.addWidget(self.mic_label)
        return mic

    def _file_group(self) -> QGroupBox:
        fg = QGroupBox("Video file")
        fl = QVBoxLayout(fg)
        # shows the file that is playing (set by on_source_changed), never a remembered one
        self.file_edit = QLineEdit("")
        self.file_edit.setPlaceholderText("A recording with a face (mp4, mov, mkv…)")
        self.file_edit.setToolTip("Path of a video to play as if it were a camera; Enter plays it")
        self.file_edit.returnPressed.connect(self._on_play)
        fl.addWidget(self.file_edit)
        # two elided lines that keep their place when hidden: the Play button never moves
        self.file_error = ElidedLabel("", lines=2)
        self.file_error.setStyleSheet("color: #c0392b;")
        policy = self.file_error.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.file_error.setSizePolicy(policy)
        self.file_error.hide()
        fl.addWidget(self.file_error)
        frow = QHBoxLayout()
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse)
        frow.addWidget(browse)
        self.play_button = QPushButton("Play file")
        self.play_button.setToolTip("Play the file in a loop as if it were a camera, with its sound")
        self.play_button.clicked.connect(self._on_play)
        frow.addWidget(self.play_button)
        fl.addLayout(frow)
        return fg

    # -- devices -----------------------------------------------------------------------
    def refresh_devices(self) -> None:
        """List cameras and microphones on the session's worker thread."""
        self.camera_combo.clear()
        self.camera_combo.addItem("looking for cameras…")
        self.camera_combo.setEnabled(False)

        def work():
            from avatar_app.pipeline.studio_api import list_microphones
            from avatar_app.ui.devices import list_camera_devices

            try:
                cams, method = list_camera_devices()
            except Exception as exc:  # noqa: BLE001 - listing must never take the window down
                log.warning("listing cameras failed: %s", exc)
                cams, method = [], f"listing failed: {exc}"
            self.devices_listed.emit(cams, method, list_microphones())

        self.session.worker.submit(work)

    def _on_devices_listed(self, cams, method: str, mics) -> None:
        self.cameras, self.microphones = cams, mics
        self.camera_combo.clear()
        for d in cams:
            self.camera_combo.addItem(d.name, d.id)
        if not cams:
            self.camera_combo.addItem("no camera found")
        self.camera_combo.setEnabled(bool(cams))
        self.use_camera_button.setEnabled(bool(cams))
        s = self.session
        wanted = s.settings.source.camera_id or f"index:{s.camera_index or 0}"
        for i, d in enumerate(cams):
            if d.id == wanted or (s.camera_index is not None and d.index == s.camera_index):
                self.camera_combo.setCurrentIndex(i)
                break
        self.camera_method.setText(f"Cameras found by: {method}.")
        self.mic_combo.clear()
        self.mic_combo.addItem("System default", "")
        for _, name, rate in mics:
            self.mic_combo.addItem(f"{name} ({rate / 1000:.0f} kHz)", name)
        i = self.mic_combo.findData(s.settings.source.microphone)
        self.mic_combo.setCurrentIndex(max(0, i))

    def _on_use_camera(self) -> None:
        i = self.camera_combo.currentIndex()
        if 0 <= i < len(self.cameras):
            d = self.cameras[i]
            self.session.open_camera(d.index, wait=False, camera_id=d.id)

    def _on_mic_chosen(self, i: int) -> None:
        self.session.set_microphone(self.mic_combo.itemData(i) or "")

    # -- file --------------------------------------------------------------------------
    def _on_browse(self) -> None:
        start = self.file_edit.text() or self.session.store.value("last_file", "", type=str) or str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open a video", start,
                                              "Videos (*.mp4 *.mpg *.mov *.mkv *.webm *.avi);;All files (*)")
        if path:
            self.file_edit.setText(path)
            self._on_play()

    def _on_play(self) -> None:
        """Play the typed file (Play file, or Enter in the box).

        A path that is not a file is refused here, before anything is opened: the
        current source keeps running and the typed text stays for correcting.
        Other failures (not a video) come back through :meth:`on_source_failed`;
        the window opens the new file before it stops the current source.
        """
        text = self.file_edit.text().strip()
        if not text:
            self.show_file_error("Type the path of a video file, or use Browse…")
            return
        path = Path(text).expanduser()
        if not path.exists():
            self.show_file_error(f"No such file: {path}. Check the path and press Enter to try again.")
            return
        if not path.is_file():
            self.show_file_error(f"{path} is a folder, not a video file.")
            return
        self.file_error.hide()
        self.session.open_file(path, wait=False)

    def show_file_error(self, message: str, details: str = "") -> None:
        """Show why a file cannot be played under the box (elided; the whole text in the tooltip)."""
        self.file_error.setText(message)
        if details and details != message:
            self.file_error.setToolTip(f"{message}\n\nDetails: {details}")
        self.file_error.show()

    # -- updates from the session ------------------------------------------------------
    def on_source_changed(self) -> None:
        """A new source runs: the file box shows the file playing, or nothing."""
        path = self.session.playing_file()
        self.file_edit.setText(str(path) if path is not None else "")
        self.file_error.hide()
        self.file_error.setText("")

    def on_source_failed(self, path: Path | None, error: str) -> None:
        """A source could not be opened: say what failed; the typed text stays so it can be corrected.

        The box is not rewritten: after a failed switch the user fixes the path they
        typed (the source playing before keeps playing); at start-up it stays empty
        rather than showing a remembered file.

        Args:
            path: the video file that failed (None for a camera).
            error: why, as the user should read it.
        """
        if path is not None:
            playing = self.session.playing_file()
            pipe = self.session.pipeline
            still = (f" {playing.name} keeps playing." if playing is not None
                     else " The current source keeps running." if pipe is not None and pipe.running else "")
            reason = plain_error(error, path)
            self.show_file_error(f"Could not play {path.name}: {sentence(reason) if still else reason}{still}", error)

    def on_tick(self) -> None:
        """5 Hz: level meter, microphone overflows and the delivered frame rate."""
        self._update_overflows(self.session.mic_overflows)
        pipe = self.session.pipeline
        ring = getattr(pipe, "ring", None)
        if ring is not None:
            db = level_dbfs(ring.read_window(now_ns(), 0.1))
            self.meter.show_value(int(round(db)))
        else:
            self.meter.show_value(int(METER_FLOOR_DB))
        src = getattr(pipe, "source", None)
        granted = getattr(src, "granted", None)
        if (pipe is None and self._delivered) or (pipe is not None and not pipe.running):
            # stopped (StudioSession.stop_pipeline) or ended / failed: say so, here and on the preview
            why = plain_error(pipe.error) if pipe is not None and getattr(pipe, "error", None) else ""
            self.delivering_label.setText(f"Stopped: {why}" if why else "Stopped: nothing is delivered")
            if not self.preview_panel.stopped:
                self.preview_panel.show_stopped(why)
        elif granted and self.session.source_fps > 0:
            self._delivered = True
            self.delivering_label.setText(
                f"Delivering {granted[0]}x{granted[1]} at {self.session.source_fps:.1f} fps (measured)")
        elif pipe is None:
            self.delivering_label.setText("")

    def _update_overflows(self, count: int) -> None:
        """Show the microphone's input overflows beside the meter when there are any; log new ones
        (at most every OVERFLOW_LOG_INTERVAL_S).

        Args:
            count: overflows of the running microphone so far (``StudioSession.mic_overflows``).
        """
        self.overflow_label.setVisible(count > 0)
        if count <= 0:
            self._overflows_logged = (0, 0.0)
            return
        self.overflow_label.setText(f"{count} overflow{'s' if count != 1 else ''}")
        last, t_last = self._overflows_logged
        now = time.monotonic()
        if count > last and (last == 0 or now - t_last >= OVERFLOW_LOG_INTERVAL_S):
            self._overflows_logged = (count, now)
            log.warning("microphone input overflowed %d time%s so far: some audio was lost (the machine is busy)",
                        count, "" if count == 1 else "s")
