"""Engines panel: backend and precision per engine, build progress, verification of the active engine."""
from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QVBoxLayout,
)

from avatar_app.pipeline.engines import BACKEND_LABELS, PRECISIONS
from avatar_app.ui.panels import Panel, ProgressBar, hint, item_enabled, set_item_enabled


class _EngineBox(QGroupBox):
    """Controls of one engine."""

    def __init__(self, panel: "EnginesPanel", name: str, label: str):
        super().__init__(label)
        self.panel, self.name = panel, name
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.model_label = QLabel("")
        self.model_label.setWordWrap(True)
        form.addRow(self.model_label)
        self.backend = QComboBox()
        for key, text in BACKEND_LABELS.items():
            self.backend.addItem(text, key)
        self.precision = QComboBox()
        self.precision.addItem("Default", None)
        for p in PRECISIONS:
            self.precision.addItem(p.upper(), p)
        form.addRow("Backend", self.backend)
        form.addRow("Precision", self.precision)
        # the bar holds only "building NN%": what is being done goes under it, word-wrapped
        self.progress = ProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setFormat("building %p%")
        self.progress.setVisible(False)
        form.addRow(self.progress)
        self.build_label = QLabel("")
        self.build_label.setWordWrap(True)
        self.build_label.setVisible(False)
        form.addRow(self.build_label)
        self.serving = QLabel("")
        self.serving.setWordWrap(True)
        form.addRow("Serving", self.serving)
        self.verification = QLabel("")
        self.verification.setWordWrap(True)
        form.addRow(self.verification)
        self._updating = False
        self.backend.activated.connect(self._on_choice)
        self.precision.activated.connect(self._on_choice)

    def _on_choice(self, *_):
        if self._updating:
            return
        backend = self.backend.currentData()
        precision = self.precision.currentData()
        self.panel.session.set_engine_choice(self.name, backend, precision)
        self.refresh()

    def select(self, backend: str, precision: str | None) -> None:
        """Choose (backend, precision) as the user would (used by shortcuts and tests)."""
        self._updating = True
        self.backend.setCurrentIndex(max(0, self.backend.findData(backend)))
        self.precision.setCurrentIndex(max(0, self.precision.findData(precision)))
        self._updating = False
        self._on_choice()

    def refresh(self) -> None:
        ctl = self.panel.session.engines
        e = ctl.entry(self.name)
        self._updating = True
        try:
            backend, precision = e.choice
            self.backend.setCurrentIndex(max(0, self.backend.findData(backend)))
            self.precision.setCurrentIndex(max(0, self.precision.findData(precision)))
            for i in range(self.backend.count()):
                why = ctl.backend_reason(self.name, self.backend.itemData(i))
                set_item_enabled(self.backend, i, why is None, why or "")
            cur_backend = self.backend.currentData()
            for i in range(1, self.precision.count()):
                why = ctl.precision_reason(self.name, cur_backend, self.precision.itemData(i))
                set_item_enabled(self.precision, i, why is None, why or "")
            set_item_enabled(self.precision, 0, ctl.backend_reason(self.name, cur_backend) is None,
                             ctl.backend_reason(self.name, cur_backend) or "")
        finally:
            self._updating = False
        installed = e.installed
        self.backend.setEnabled(installed)
        self.precision.setEnabled(installed)
        if installed:
            self.model_label.setText(f"Model: {e.model_path.name}")
            self.model_label.setToolTip(str(e.model_path))
        else:
            from avatar_app.pipeline.engines import FALLBACKS

            fallback = FALLBACKS.get(self.name, "built-in fallback")
            off = ctl.disabled.get(self.name)
            if off:
                self.model_label.setText(f"The {fallback} drives this part: {off}.")
            else:
                self.model_label.setText(f"Model not installed ({e.model_path.name if e.model_path else self.name})."
                                         f" The {fallback} drives this part.")
        building = ctl.pending(self.name)
        self.progress.setVisible(building)
        self.build_label.setVisible(building)
        if building:
            self.progress.show_value(int(round(100 * e.build_fraction)))
            stage = e.build_stage or "starting"
            self.build_label.setText(f"{stage[:1].upper()}{stage[1:]}; the current engine keeps running.")
        self.serving.setText(ctl.describe(self.name))
        self.verification.setText(ctl.verification_text(self.name) if installed else "")
        err = bool(e.error)
        self.verification.setStyleSheet("color: #c0392b;" if err else "")

    def enabled_options(self) -> dict[str, list[str]]:
        """Which backends and precisions are enabled now (for tests and screenshots)."""
        return {"backends": [self.backend.itemData(i) for i in range(self.backend.count())
                             if item_enabled(self.backend, i)],
                "precisions": [self.precision.itemData(i) for i in range(1, self.precision.count())
                               if item_enabled(self.precision, i)]}


class EnginesPanel(Panel):
    """Per engine (face reconstruction, speech): backend and precision, build progress, verification.

    Options this machine cannot run are disabled with the reason as their tooltip.
    A switch builds and verifies the new engine in the background while the
    current one keeps serving, then swaps between two frames.
    """

    def __init__(self, session, bridge=None, notifier=None):
        super().__init__(session, bridge, notifier)
        lay = QVBoxLayout(self)
        lay.addWidget(hint("Auto picks the fastest engine that passed verification; disabled options show "
                           "why in their tooltip. Switching builds in the background; the current engine "
                           "keeps running until the new one is verified."))
        self.boxes: dict[str, _EngineBox] = {}
        for name, e in session.engines.entries.items():
            box = _EngineBox(self, name, e.label)
            self.boxes[name] = box
            lay.addWidget(box)
        lay.addStretch(1)
        bridge.statuses_ready.connect(self.refresh)
        bridge.engine_changed.connect(self.refresh)
        self.refresh()

    def refresh(self, name: str | None = None) -> None:
        """Update one engine's controls (or all)."""
        for n, box in self.boxes.items():
            if name is None or n == name:
                box.refresh()
