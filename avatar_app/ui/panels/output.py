"""Output panel: recording folder and format, overlay in recordings, frame-rate cap, CPU budget mode."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
)

from avatar_app.pipeline import settings as store
from avatar_app.ui.panels import Panel, hint, set_item_enabled


class OutputPanel(Panel):
    """Where and how clips are recorded, live outputs, and how much CPU the studio may use.

    Live outputs (avatar_app.outputs, off by default): the VMC protocol sender
    (sent from the processing thread at the tracking rate) and a virtual camera
    (fed with the 1280x720 frames the render thread makes for recording).

    The frame-rate cap limits how often frames are processed and drawn. The CPU
    budget modes are for streaming while a game runs: Balanced caps at 30 fps;
    Low CPU caps at 20 fps, turns MSAA off and pauses the camera preview and the
    latency plots.
    """

    def __init__(self, session, bridge=None, notifier=None, recording=None):
        super().__init__(session, bridge, notifier)
        self.recording = recording
        o = session.settings.output
        lay = QVBoxLayout(self)
        lay.addWidget(self._build_recording(recording))
        lay.addWidget(self._build_performance())
        lay.addWidget(self._build_live_outputs(o))
        lay.addStretch(1)
        self._load(o)
        recording.format_note_changed.connect(self.set_format_note)
        session.worker.submit(self._probe_vcam)

    def _build_recording(self, recording) -> QGroupBox:
        rg = QGroupBox("Recording")
        form = QFormLayout(rg)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        frow = QHBoxLayout()
        self.folder_edit = QLineEdit(str(recording.record_folder()))
        self.folder_edit.editingFinished.connect(lambda: recording.set_record_folder(Path(self.folder_edit.text())))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self.choose_folder)
        frow.addWidget(self.folder_edit, 1)
        frow.addWidget(browse)
        form.addRow("Folder", frow)
        self.open_folder = QPushButton("Show recordings")
        self.open_folder.setToolTip("Open the recording folder in the file manager")
        self.open_folder.clicked.connect(self.show_recordings)
        form.addRow("", self.open_folder)
        self.format = QComboBox()
        self._fill_formats()
        self.format.setToolTip(
            "Format of recorded clips. H.264 and MPEG-4 (MP4) have no transparency: with Avatar › Background "
            "› Transparent the recording switches to VP9 with alpha (.webm), the fastest encoder that keeps "
            "the alpha channel (ProRes 4444 .mov needs more CPU than a 2-core machine can spare while it "
            "tracks and renders), or to ProRes 4444 without it; the note below says which. A colour "
            "background records in the format chosen here. If the encoder cannot keep up, the status bar "
            "counts the frames the recording dropped.")
        form.addRow("Format", self.format)
        #: Which format recordings really use, when it is not the one chosen (transparent background).
        self.format_note = hint("")
        self.format_note.setStyleSheet("color: #b9770e;")
        self.format_note.hide()
        form.addRow(self.format_note)
        self.overlay = QCheckBox("Latency overlay in recordings")
        form.addRow(self.overlay)
        return rg

    def _build_performance(self) -> QGroupBox:
        pg = QGroupBox("Performance")
        pf = QFormLayout(pg)
        pf.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.fps_cap = QDoubleSpinBox()
        self.fps_cap.setRange(0, 240)
        self.fps_cap.setDecimals(0)
        self.fps_cap.setSingleStep(5)
        self.fps_cap.setSpecialValueText("No cap")
        self.fps_cap.setSuffix(" fps")
        pf.addRow("Frame-rate cap", self.fps_cap)
        self.cpu_mode = QComboBox()
        for key, label in store.CPU_MODE_LABELS.items():
            self.cpu_mode.addItem(label, key)
        pf.addRow("CPU budget", self.cpu_mode)
        pf.addRow(hint("Balanced: 30 fps cap. Low CPU: 20 fps cap, no MSAA, no camera preview or plots."))
        #: Says when the CPU budget's cap is lower than the one set here (the lower one is in force).
        self.cap_note = hint("")
        self.cap_note.setStyleSheet("color: #b9770e;")
        self.cap_note.hide()
        pf.addRow(self.cap_note)
        return pg

    def show_cap_in_force(self) -> None:
        """Make the frame-rate field say the cap in force: the CPU budget's when it is the lower one.

        With no cap of its own the field shows the budget's ("30 fps (Balanced)"), never
        "No cap" while a budget caps; a higher cap of its own gets a note that the budget's applies.
        """
        mode = self.cpu_mode.currentData()
        mode_cap = store.CPU_MODES.get(mode, (0.0,))[0]
        name = store.CPU_MODE_LABELS.get(mode, "").split(" (")[0]
        self.fps_cap.setSpecialValueText(f"{mode_cap:.0f} fps ({name})" if mode_cap > 0 else "No cap")
        own = float(self.fps_cap.value())
        over = mode_cap > 0 and own > mode_cap
        self.cap_note.setText(f"{name} caps the frame rate at {mode_cap:.0f} fps, below the {own:.0f} fps set "
                              f"here: {mode_cap:.0f} fps is in force." if over else "")
        self.cap_note.setVisible(over)

    def _build_live_outputs(self, o) -> QGroupBox:
        og = QGroupBox("Live outputs")
        ol = QFormLayout(og)
        ol.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.vmc = QCheckBox("Send to VMC receivers")  # short: the panel fits a small window's dock
        self.vmc.setToolTip("VMC protocol over OSC/UDP (VSeeFace, VNyan, Warudo…): blendshapes, head and eye "
                            "bones, at the tracking rate")
        ol.addRow(self.vmc)
        vrow = QHBoxLayout()
        self.vmc_host = QLineEdit(o.vmc_host)
        self.vmc_port = QSpinBox()
        self.vmc_port.setRange(1, 65535)
        self.vmc_port.setValue(o.vmc_port)
        vrow.addWidget(self.vmc_host, 1)
        vrow.addWidget(self.vmc_port)
        ol.addRow("Receiver", vrow)
        self.vmc_names = QComboBox()
        self.vmc_names.addItem("PerfectSync (EyeBlinkLeft…)", "unity")
        self.vmc_names.addItem("ARKit (eyeBlinkLeft…)", "arkit")
        ol.addRow("Shape names", self.vmc_names)
        self.vmc_status = QLabel("")
        self.vmc_status.setWordWrap(True)
        ol.addRow(self.vmc_status)
        self.vcam = QCheckBox("Virtual camera (1280x720)")
        ol.addRow(self.vcam)
        self.vcam_status = hint("checking…")
        ol.addRow(self.vcam_status)
        return og

    def show_settings(self, o: store.OutputSettings) -> None:
        """Show OutputSettings ``o`` (does not apply them)."""
        self._loading = True
        self.format.setCurrentIndex(max(0, self.format.findData(o.format)))
        self.overlay.setChecked(o.overlay_in_recording)
        self.fps_cap.setValue(o.fps_cap)
        self.cpu_mode.setCurrentIndex(max(0, self.cpu_mode.findData(o.cpu_mode)))
        self.vmc.setChecked(o.vmc_enabled)
        self.vmc_host.setText(o.vmc_host)
        self.vmc_port.setValue(o.vmc_port)
        self.vmc_names.setCurrentIndex(max(0, self.vmc_names.findData(o.vmc_names)))
        self.vcam.setChecked(o.virtual_camera)
        self.show_cap_in_force()
        self._loading = False

    def _load(self, o) -> None:
        """Show OutputSettings ``o`` and connect the controls."""
        self.show_settings(o)
        self.vcam.setEnabled(False)  # until the probe says a backend exists
        self.format.currentIndexChanged.connect(self._changed)
        self.overlay.toggled.connect(self._changed)
        self.fps_cap.valueChanged.connect(self._changed)
        self.cpu_mode.currentIndexChanged.connect(self._changed)
        for w in (self.vmc, self.vcam):
            w.toggled.connect(self._changed)
        self.vmc_host.editingFinished.connect(self._changed)
        self.vmc_port.editingFinished.connect(self._changed)
        self.vmc_names.currentIndexChanged.connect(self._changed)
        self.vcam_probed.connect(self._on_vcam_probed)

    vcam_probed = Signal(bool, str)

    def _probe_vcam(self) -> None:
        try:
            from avatar_app.pipeline.studio_api import virtual_camera_status
        except ImportError:
            self.vcam_probed.emit(False, "virtual camera output is not part of this version")
            return
        ok, text = virtual_camera_status(1280, 720, 30.0)
        self.vcam_probed.emit(ok, text)

    def _on_vcam_probed(self, ok: bool, text: str) -> None:
        self.vcam.setEnabled(ok)
        self.vcam.setToolTip(text)
        self.vcam_status.setText(("Available: " if ok else "") + text)
        if not ok and self.vcam.isChecked():
            self.vcam.setChecked(False)

    def _fill_formats(self) -> None:
        from avatar_app.pipeline.studio_api import available_formats, known_formats

        have = {f.key for f in available_formats()}
        for f in known_formats():
            self.format.addItem(f.label, f.key)
            if f.key not in have:
                set_item_enabled(self.format, self.format.count() - 1, False,
                                 f"this FFmpeg build has no {f.video_codec} encoder")

    def current(self) -> store.OutputSettings:
        """The settings the widgets show."""
        return store.OutputSettings(format=self.format.currentData(), overlay_in_recording=self.overlay.isChecked(),
                                    fps_cap=float(self.fps_cap.value()), cpu_mode=self.cpu_mode.currentData(),
                                    vmc_enabled=self.vmc.isChecked(), vmc_host=self.vmc_host.text().strip(),
                                    vmc_port=int(self.vmc_port.value()), vmc_names=self.vmc_names.currentData(),
                                    virtual_camera=self.vcam.isChecked())

    def _changed(self, *_):
        self.show_cap_in_force()
        if not self._loading:
            self.session.set_output_settings(self.current())

    def set_format_note(self, text: str) -> None:
        """Show (or hide, with "") the note on the format recordings really use."""
        self.format_note.setText(text)
        self.format_note.setVisible(bool(text))

    def show_recordings(self) -> bool:
        """Open the recording folder in the file manager; without one, show the folder's path.

        Returns:
            Whether a file manager opened it.
        """
        folder = self.recording.record_folder()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.notifier.error(f"Cannot create the recording folder {folder}: {exc}")
            return False
        if QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            return True
        self.notifier.info(f"No file manager could be opened on this system. Your recordings are in:\n{folder}")
        return False

    def choose_folder(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Recording folder", str(self.recording.record_folder()))
        if d:
            self.recording.set_record_folder(Path(d))
            self.folder_edit.setText(d)
