"""Tracking panel: smoothing per region with a live preview, per-shape sensitivity and remap, toggles."""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QVBoxLayout,
)

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape
from avatar_app.core.errors import AvatarError
from avatar_app.pipeline.studio_api import (
    MIRROR_CONVENTION,
    REGION_NAMES,
    TuningSettings,
    smoothing_cutoff_hz,
)
from avatar_app.ui.panels import Panel, hint, legend_label, pyqtgraph


class TrackingPanel(Panel):
    """Smoothing per region (eyes, brows, mouth, head) with a live raw-vs-smoothed plot, per-shape
    sensitivity and min/max remap, link eyes, mirror, auto-blink and idle motion.

    Every control writes the session's TuningSettings at once (the pipeline applies
    them from the next frame) and persists them.
    """

    def __init__(self, session, bridge=None, notifier=None):
        super().__init__(session, bridge, notifier)
        s = session.chain.tuner.settings
        lay = QVBoxLayout(self)
        lay.addWidget(self._build_behaviour())
        lay.addWidget(self._build_smoothing())
        lay.addWidget(self._build_per_shape())
        lay.addStretch(1)
        self._loading = False
        self.load(s)
        self.timer = QTimer(self)
        self.timer.setInterval(200)
        self.timer.timeout.connect(self._update_preview)
        self.timer.start()

    def _build_behaviour(self) -> QGroupBox:
        g = QGroupBox("Behaviour")
        gl = QVBoxLayout(g)
        self.mirror = QCheckBox("Mirror (the avatar is your reflection)")
        self.mirror.setToolTip(MIRROR_CONVENTION)
        self.link_eyes = QCheckBox("Link eyes (blink both together)")
        self.link_eyes.setToolTip("For users whose winks track badly: both eyes take the mean of the two.")
        self.auto_blink = QCheckBox("Auto-blink while the face is lost")
        self.idle = QCheckBox("Gentle idle motion while the face is lost")
        for box in (self.mirror, self.link_eyes, self.auto_blink, self.idle):
            box.toggled.connect(self._changed)
            gl.addWidget(box)
        self.mirror_hint = hint(MIRROR_CONVENTION)
        gl.addWidget(self.mirror_hint)
        return g

    def _build_smoothing(self) -> QGroupBox:
        sg = QGroupBox("Smoothing (0 = off)")
        sl = QVBoxLayout(sg)
        form = QFormLayout()
        self.sliders: dict[str, QSlider] = {}
        self.slider_labels: dict[str, QLabel] = {}
        for region in REGION_NAMES:
            row = QHBoxLayout()
            sld = QSlider(Qt.Orientation.Horizontal)
            sld.setRange(0, 100)
            sld.valueChanged.connect(self._changed)
            lab = QLabel("")
            lab.setMinimumWidth(lab.fontMetrics().horizontalAdvance("0.30 Hz "))
            row.addWidget(sld, 1)
            row.addWidget(lab)
            form.addRow(region.capitalize(), row)
            self.sliders[region], self.slider_labels[region] = sld, lab
        sl.addLayout(form)
        prow = QHBoxLayout()
        prow.addWidget(QLabel("Live preview"))
        self.preview_region = QComboBox()
        for region in REGION_NAMES:
            self.preview_region.addItem(region.capitalize(), region)
        self.preview_region.setCurrentIndex(REGION_NAMES.index("mouth"))
        prow.addWidget(self.preview_region, 1)
        sl.addLayout(prow)
        self.plot = self._make_plot()
        sl.addWidget(legend_label([("tracked", (150, 150, 150)), ("after smoothing and remap", (40, 130, 230))]))
        sl.addWidget(self.plot)
        return sg

    def _build_per_shape(self) -> QGroupBox:
        pg = QGroupBox("Per shape")
        pl = QFormLayout(pg)
        self.shape = QComboBox()
        for n in BLENDSHAPE_NAMES:
            self.shape.addItem(n)
        self.shape.setCurrentText("jawOpen")
        self.shape.currentIndexChanged.connect(self._load_shape)
        pl.addRow("Shape", self.shape)
        self.gain = QDoubleSpinBox()
        self.gain.setRange(0.0, 5.0)
        self.gain.setSingleStep(0.1)
        self.gain.setToolTip("Multiplies the tracked weight before the remap")
        self.lo = QDoubleSpinBox()
        self.lo.setRange(0.0, 0.99)
        self.lo.setSingleStep(0.05)
        self.lo.setToolTip("Tracked weight that maps to 0 (ignore small twitches)")
        self.hi = QDoubleSpinBox()
        self.hi.setRange(0.01, 1.0)
        self.hi.setSingleStep(0.05)
        self.hi.setToolTip("Tracked weight that maps to 1 (reach the full shape sooner)")
        for w in (self.gain, self.lo, self.hi):
            w.valueChanged.connect(self._shape_changed)
        pl.addRow("Sensitivity", self.gain)
        pl.addRow("Min", self.lo)
        pl.addRow("Max", self.hi)
        brow = QHBoxLayout()
        reset_shape = QPushButton("Reset shape")
        reset_shape.clicked.connect(self.reset_shape)
        reset_all = QPushButton("Reset all shapes")
        reset_all.clicked.connect(self.reset_all_shapes)
        brow.addWidget(reset_shape)
        brow.addWidget(reset_all)
        pl.addRow(brow)
        self.shape_value = QLabel("")
        pl.addRow("Live", self.shape_value)
        return pg

    def _make_plot(self):
        pg = pyqtgraph()

        w = pg.PlotWidget()
        w.setMinimumHeight(130)
        w.setMaximumHeight(170)
        w.setBackground(None)
        w.showGrid(y=True, alpha=0.3)
        w.setMouseEnabled(False, False)
        w.hideButtons()
        w.getPlotItem().setLabel("bottom", "seconds")
        self._raw_curve = w.plot(pen=pg.mkPen((150, 150, 150), width=1))
        self._out_curve = w.plot(pen=pg.mkPen((40, 130, 230), width=2))
        return w

    # -- settings <-> widgets ------------------------------------------------------------
    def load(self, s: TuningSettings) -> None:
        """Show settings ``s`` (does not apply them)."""
        self._loading = True
        try:
            self.mirror.setChecked(s.mirror)
            self.link_eyes.setChecked(s.link_eyes)
            self.auto_blink.setChecked(s.auto_blink)
            self.idle.setChecked(s.idle_motion)
            for region, sld in self.sliders.items():
                sld.setValue(int(round(100 * s.smoothing.get(region, 0.0))))
            self._update_slider_labels()
            self._load_shape()
        finally:
            self._loading = False

    def _update_slider_labels(self) -> None:
        for region, sld in self.sliders.items():
            v = sld.value() / 100.0
            self.slider_labels[region].setText("off" if v <= 0 else f"{smoothing_cutoff_hz(v):.2g} Hz")
            self.slider_labels[region].setToolTip("One Euro minimum cut-off: lower is smoother but lags more")

    def _load_shape(self, *_):
        s = self.session.chain.tuner.settings
        i = Blendshape[self.shape.currentText()]
        was = self._loading
        self._loading = True
        self.gain.setValue(float(s.sensitivity[i]))
        self.lo.setValue(float(s.remap_min[i]))
        self.hi.setValue(float(s.remap_max[i]))
        self._loading = was

    def current(self) -> TuningSettings:
        """The settings the widgets show."""
        s = self.session.chain.tuner.settings
        s.mirror = self.mirror.isChecked()
        s.link_eyes = self.link_eyes.isChecked()
        s.auto_blink = self.auto_blink.isChecked()
        s.idle_motion = self.idle.isChecked()
        s.smoothing = {r: sld.value() / 100.0 for r, sld in self.sliders.items()}
        return s

    def _changed(self, *_):
        self._update_slider_labels()
        if not self._loading:
            self.session.set_tuning(self.current())

    def _shape_changed(self, *_):
        if self._loading:
            return
        s = self.current()
        i = Blendshape[self.shape.currentText()]
        lo, hi = self.lo.value(), self.hi.value()
        if hi - lo < 0.01:
            self.notifier.status("Max must be above min", 3000)
            return
        s.sensitivity[i], s.remap_min[i], s.remap_max[i] = self.gain.value(), lo, hi
        try:
            self.session.set_tuning(s)
        except AvatarError as exc:
            self.notifier.status(str(exc), 5000)

    def reset_shape(self) -> None:
        """Sensitivity 1, min 0, max 1 for the selected shape."""
        s = self.current()
        i = Blendshape[self.shape.currentText()]
        s.sensitivity[i], s.remap_min[i], s.remap_max[i] = 1.0, 0.0, 1.0
        self.session.set_tuning(s)
        self._load_shape()

    def reset_all_shapes(self) -> None:
        """Sensitivity 1, min 0, max 1 for every shape."""
        s = self.current()
        d = TuningSettings()
        s.sensitivity, s.remap_min, s.remap_max = d.sensitivity, d.remap_min, d.remap_max
        self.session.set_tuning(s)
        self._load_shape()

    # -- live preview --------------------------------------------------------------------
    def _update_preview(self) -> None:
        if not self.isVisible():
            return
        hist = self.session.chain.tuner.preview()
        if len(hist) < 2:
            return
        region = self.preview_region.currentData()
        t = np.array([h[0] for h in hist])
        raw = np.array([h[1][region] for h in hist])
        out = np.array([h[2][region] for h in hist])
        t = t - t[-1]
        self._raw_curve.setData(t, raw)
        self._out_curve.setData(t, out)
        st = self.session.latest_state()
        if st is not None:
            i = Blendshape[self.shape.currentText()]
            self.shape_value.setText(f"tracked {float(st.vision_weights[i]):.2f} → avatar {float(st.weights[i]):.2f}")
