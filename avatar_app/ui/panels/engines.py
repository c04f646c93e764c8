"""Engines panel: backend and precision per engine, build progress, verification of the active engine;
the face row also chooses the face path (the geometric solver or the learned face engine)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from avatar_app.pipeline.engines import BACKEND_LABELS, PRECISIONS, REFERENCE_ENGINE_NOTE
from avatar_app.pipeline.stages import FACE_ENGINE_OFF_REASON, resolve_face_path
from avatar_app.ui.panels import SHORT_ITEMS, Panel, ProgressBar, hint, item_enabled, set_item_enabled


def _backend_precision_combos() -> tuple[QComboBox, QComboBox]:
    """The Backend and Precision choosers every engine row shows (data: backend key; precision or None)."""
    backend = QComboBox()
    for key, text in BACKEND_LABELS.items():
        backend.addItem(text, key)
    precision = QComboBox()
    precision.addItem("Default", None)
    for p in PRECISIONS:
        precision.addItem(p.upper(), p)
    return backend, precision


def _engine_choosers(form: QFormLayout) -> tuple[QComboBox, QComboBox, QWidget]:
    """The Backend and Precision choosers side by side on one "Engine" line of ``form``
    (one line, not two: the three rows fit the dock at the default window size).

    Returns:
        (backend, precision, the line's widget).
    """
    backend, precision = _backend_precision_combos()
    backend.setAccessibleName("Backend")
    precision.setAccessibleName("Precision")
    # the backend's long names ("ONNX Runtime TensorRT") may be cut: the popup and tooltip show them whole
    backend.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    backend.setMinimumContentsLength(8)
    backend.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
    precision.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)  # "Default" / "FP16": short
    precision.setProperty(SHORT_ITEMS, True)
    line = QWidget()
    row = QHBoxLayout(line)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(backend, 1)
    row.addWidget(precision)
    form.addRow("Engine", line)
    return backend, precision, line


def _why_link(text: str, why: str) -> str:
    """``text`` with a "why?" link (rich text; plain ``text`` when there is no ``why``)."""
    from html import escape

    return escape(text, quote=False) + (' <a href="#why">why?</a>' if why else "")


#: The face row's face paths: settings value -> label (the default one gets " (default)").
FACE_PATH_LABELS = {"solver": "Geometric solver", "engine": "Learned engine"}


class _EngineBox(QGroupBox):
    """Controls of one engine; the face reconstruction row also has the face path (:attr:`face_path`,
    None on the other rows): which of the geometric solver and the learned engine drives the face,
    persisted and applied to the running pipeline between two frames (the session's ``set_face_path``).
    """

    def __init__(self, panel: "EnginesPanel", name: str, label: str):
        super().__init__(label)
        self.panel, self.name = panel, name
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        # one short line; a long reason (why the engine is off) folds under its "why?" link and is its tooltip
        self.model_label = QLabel("")
        self.model_label.setWordWrap(True)
        self.model_label.setTextFormat(Qt.TextFormat.RichText)
        self.model_label.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse
                                                 | Qt.TextInteractionFlag.LinksAccessibleByKeyboard)
        self.model_label.linkActivated.connect(lambda _href: self.show_why(not self._why_shown))
        if name != "face_recon":
            form.addRow(self.model_label)
        self.why_label = hint("")
        self.why_label.setVisible(False)
        if name != "face_recon":
            form.addRow(self.why_label)
        self._model_text = self._why = ""
        self._why_shown = False
        self.face_path: QComboBox | None = None
        if name == "face_recon":
            # one line: the chooser, and the "why?" of the default as the row's model line (the three rows
            # fit the dock at the default window size; the model's path is the tooltip)
            self.face_path = QComboBox()
            self.face_path.setAccessibleName("Face path")
            for key, text in FACE_PATH_LABELS.items():
                self.face_path.addItem(text, key)
            self.face_path.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
            self.model_label.setWordWrap(False)
            line = QWidget()
            row = QHBoxLayout(line)
            row.setContentsMargins(0, 0, 0, 0)
            row.addWidget(self.face_path, 1)
            row.addWidget(self.model_label)
            form.addRow("Face path", line)
            form.addRow(self.why_label)
        self.backend, self.precision, self.choosers = _engine_choosers(form)
        self._form = form
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
        if self.face_path is not None:
            self.face_path.activated.connect(self._on_face_path)

    def show_why(self, shown: bool) -> None:
        """Unfold (or fold) the reason under the row's first line, as its "why?" link does."""
        self._why_shown = bool(shown)
        self.why_label.setVisible(self._why_shown and bool(self._why))

    def model_text(self) -> str:
        """The row's first line as plain text (without the "why?" link)."""
        return self._model_text

    def _set_model_text(self, text: str, why: str = "") -> None:
        """The row's first line, and the reason behind it under "why?" (also the line's tooltip)."""
        self._model_text, self._why = text, why
        self.model_label.setText(_why_link(text, why))
        self.model_label.setToolTip(why)
        self.why_label.setText(why)
        self.show_why(self._why_shown)

    def _on_choice(self, *_):
        if self._updating:
            return
        backend = self.backend.currentData()
        precision = self.precision.currentData()
        self.panel.session.set_engine_choice(self.name, backend, precision)
        self.refresh()

    def _on_face_path(self, *_):
        if self._updating:
            return
        self.panel.session.set_face_path(self.face_path.currentData())
        self.refresh()

    def select_face_path(self, face: str) -> None:
        """Choose the face path (``"solver"`` or ``"engine"``) as the user would (tests, shortcuts)."""
        self._updating = True
        self.face_path.setCurrentIndex(max(0, self.face_path.findData(face)))
        self._updating = False
        self._on_face_path()

    def _refresh_face_path(self, installed: bool) -> None:
        """The face path chooser: the session's path, the default one marked, the engine off without a model."""
        default = resolve_face_path("default")
        for i in range(self.face_path.count()):
            key = self.face_path.itemData(i)
            self.face_path.setItemText(i, FACE_PATH_LABELS[key] + (" (default)" if key == default else ""))
        self.face_path.setCurrentIndex(max(0, self.face_path.findData(self.panel.session.face_path)))
        e = self.panel.session.engines.entry(self.name)
        why = None if installed else f"model not installed ({e.model_path.name if e.model_path else 'face_recon.onnx'})"
        set_item_enabled(self.face_path, self.face_path.findData("engine"), why is None, why or "")

    def _refresh_face_model(self, e, installed: bool) -> None:
        """The face row's "why?" beside its chooser: why the learned engine is not the default face path,
        or that its model is not installed; the chooser's tooltip names the model file."""
        from avatar_app.pipeline.engines import FALLBACKS

        name = e.model_path.name if e.model_path else "face_recon.onnx"
        if not installed:
            why = f"Model not installed ({name}): the {FALLBACKS[self.name]} drives the face."
        elif resolve_face_path("default") == "solver":
            why = f"The geometric solver is the default face path: {FACE_ENGINE_OFF_REASON}."
        else:
            why = ""
        self._set_model_text("", why)
        self.model_label.setVisible(bool(why))
        self.face_path.setToolTip("What turns the tracked landmarks into the avatar's blendshapes and head pose; "
                                  f"switching keeps the avatar moving. The learned engine's model: {e.model_path}")

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
            installed = e.installed
            if self.face_path is not None:
                self._refresh_face_path(installed)
        finally:
            self._updating = False
        self.backend.setEnabled(installed)
        self.precision.setEnabled(installed)
        self.backend.setToolTip(self.backend.currentText())
        if self.face_path is not None:
            self._refresh_face_model(e, installed)
        elif installed:
            self._set_model_text(f"Model: {e.model_path.name}")
            self.model_label.setToolTip(str(e.model_path))
        else:
            from avatar_app.pipeline.engines import FALLBACKS

            fallback = FALLBACKS.get(self.name, "built-in fallback")
            self._set_model_text(f"Model not installed ({e.model_path.name if e.model_path else self.name})."
                                 f" The {fallback} drives this part.")
        building = ctl.pending(self.name)
        self.progress.setVisible(building)
        self.build_label.setVisible(building)
        if building:
            self.progress.show_value(int(round(100 * e.build_fraction)))
            stage = e.build_stage or "starting"
            self.build_label.setText(f"{stage[:1].upper()}{stage[1:]}; the current engine keeps running.")
        engine_serves = self.face_path is not None and self.panel.session.face_serving() == "engine"
        # the face row: "Face path: Learned engine" above already names the path; the engine line says
        # which engine, as the speech row's does (the status bar keeps "learned engine (...)")
        self.serving.setText(ctl.describe(self.name) if self.face_path is None or engine_serves
                             else self.panel.session.describe_face())
        if self.face_path is not None:
            # "Serving: geometric solver" under "Face path: Geometric solver" says nothing more: shown only
            # when the engine serves or the solver stands in for it (the status bar always says it)
            session = self.panel.session
            self._form.setRowVisible(self.serving, not (session.face_path == "solver"
                                                        and session.face_serving() != "engine"))
        # the face row: the engine's verification only while it drives the face (or an error), so the
        # three rows fit the dock at the default window size
        idle = self.face_path is not None and self.panel.session.face_serving() != "engine" and not e.error
        text = ctl.verification_text(self.name) if installed and not idle else ""
        if self.face_path is not None and text.endswith(REFERENCE_ENGINE_NOTE) and "\n" not in text:
            text = ""  # FP32, its own reference: nothing verified to report, and the three rows must fit
        self.verification.setText(text)
        self.verification.setVisible(bool(self.verification.text()))
        err = bool(e.error)
        self.verification.setStyleSheet("color: #c0392b;" if err else "")

    def enabled_options(self) -> dict[str, list[str]]:
        """Which backends and precisions are enabled now (for tests and screenshots)."""
        return {"backends": [self.backend.itemData(i) for i in range(self.backend.count())
                             if item_enabled(self.backend, i)],
                "precisions": [self.precision.itemData(i) for i in range(1, self.precision.count())
                               if item_enabled(self.precision, i)]}


class _TrackerBox(QGroupBox):
    """The Tracking row: which face tracker runs (Auto, MediaPipe, the ONNX engines with backend and precision).

    The choice goes to the session's TrackerController: the new tracker is built in the
    background while the current one keeps tracking.
    """

    TRACKERS = ("auto", "mediapipe", "onnx")

    def __init__(self, panel: "EnginesPanel"):
        super().__init__("Tracking")
        self.panel = panel
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.tracker = QComboBox()
        for kind in self.TRACKERS:
            self.tracker.addItem(kind, kind)
        form.addRow("Tracker", self.tracker)
        self.backend, self.precision, self.choosers = _engine_choosers(form)
        # as the engine rows: the bar holds "building NN%" (both engines), what is done goes under it
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
        self.message = QLabel("")
        self.message.setWordWrap(True)
        form.addRow(self.message)
        self._updating = False
        for combo in (self.tracker, self.backend, self.precision):
            combo.activated.connect(self._on_choice)

    def _on_choice(self, *_):
        if self._updating:
            return
        self.panel.session.set_tracker_choice(self.tracker.currentData(), self.backend.currentData(),
                                              self.precision.currentData())
        self.refresh()

    def select(self, kind: str, backend: str = "auto", precision: str | None = None) -> None:
        """Choose a tracker as the user would (settings import, tests)."""
        self._updating = True
        for combo, value in ((self.tracker, kind), (self.backend, backend), (self.precision, precision)):
            combo.setCurrentIndex(max(0, combo.findData(value)))
        self._updating = False
        self._on_choice()

    def refresh(self) -> None:
        ctl = self.panel.session.trackers
        c = ctl.choice
        self._updating = True
        try:
            for combo, value in ((self.tracker, c["kind"]), (self.backend, c["backend"]),
                                 (self.precision, c["precision"])):
                combo.setCurrentIndex(max(0, combo.findData(value)))
            for i, kind in enumerate(self.TRACKERS):
                self.tracker.setItemText(i, ctl.label(kind))
                why = ctl.kind_reason(kind)
                set_item_enabled(self.tracker, i, why is None, why or "")
            for i in range(self.backend.count()):
                why = ctl.backend_reason(self.backend.itemData(i))
                set_item_enabled(self.backend, i, why is None, why or "")
            cur = self.backend.currentData()
            for i in range(1, self.precision.count()):
                why = ctl.precision_reason(cur, self.precision.itemData(i))
                set_item_enabled(self.precision, i, why is None, why or "")
        finally:
            self._updating = False
        onnx = c["kind"] == "onnx" or (c["kind"] == "auto" and ctl.auto_kind() == "onnx")
        self.backend.setEnabled(c["kind"] == "onnx")
        self.precision.setEnabled(c["kind"] == "onnx")
        tip = "" if c["kind"] == "onnx" else "choose ONNX engines to pick the landmark engines' backend and precision"
        self.backend.setToolTip(tip)
        self.precision.setToolTip(tip)
        building = ctl.building
        # a bar only where the engine layer builds (the ONNX engines); MediaPipe's loads in a moment
        self.progress.setVisible(building and onnx)
        self.build_label.setVisible(building)
        if building:
            self.progress.show_value(int(round(100 * ctl.build_fraction)))
            # short: the three rows must fit the dock at the default window size while it builds
            first = (" (up to a minute the first time)"
                     if onnx and c.get("precision") in ("fp16", "int8") and not ctl.build_stage else "")
            doing = f", {ctl.build_stage}" if ctl.build_stage else first
            then = ("; the source starts once it is ready." if ctl.for_source
                    else "; the current one keeps running.")
            self.build_label.setText("Loading the " + ("ONNX tracker" if onnx else "MediaPipe tracker") + doing
                                     + then)
        self.serving.setText(ctl.serving() or "no source")
        text = "\n".join(t for t in (ctl.error, ctl.notice) if t)
        self.message.setText(text)
        self.message.setToolTip("\n".join(t for t in (ctl.error, ctl.notice_detail) if t))
        self.message.setVisible(bool(text))
        self.message.setStyleSheet("color: #c0392b;" if text else "")

    def enabled_options(self) -> dict[str, list[str]]:
        """Which trackers, backends and precisions are enabled now (for tests and screenshots)."""
        return {name: [combo.itemData(i) for i in range(start, combo.count()) if item_enabled(combo, i)]
                for name, combo, start in (("trackers", self.tracker, 0), ("backends", self.backend, 0),
                                           ("precisions", self.precision, 1))}


class EnginesPanel(Panel):
    """Per engine (face reconstruction, speech): backend and precision, build progress, verification,
    and for the face the face path (geometric solver or learned engine); and the Tracking row (the face
    tracker: Auto, MediaPipe or the ONNX landmark engines).

    Options this machine cannot run are disabled with the reason as their tooltip.
    A switch builds and verifies the new engine in the background while the
    current one keeps serving, then swaps between two frames.
    """

    def __init__(self, session, bridge=None, notifier=None):
        super().__init__(session, bridge, notifier)
        lay = QVBoxLayout(self)
        # short, so that all three rows fit the dock at the default window size; the rest is its tooltip
        self.hint = hint("Switching keeps the current engine running.")
        self.hint.setToolTip("Auto picks the fastest engine that passed verification; disabled options show "
                             "why in their tooltip. Switching builds in the background; the current engine "
                             "keeps running until the new one is verified.")
        lay.addWidget(self.hint)
        self.boxes: dict[str, _EngineBox] = {}
        for name, e in session.engines.entries.items():
            box = _EngineBox(self, name, e.label)
            self.boxes[name] = box
            lay.addWidget(box)
        self.tracker_box = _TrackerBox(self)
        lay.addWidget(self.tracker_box)
        lay.addStretch(1)
        bridge.statuses_ready.connect(self.refresh)
        bridge.engine_changed.connect(self.refresh)
        bridge.source_changed.connect(lambda _info: self.tracker_box.refresh())  # a new pipeline's tracker
        self.refresh()

    def refresh(self, name: str | None = None) -> None:
        """Update one engine's controls (``"tracker"``: the Tracking row; None: all)."""
        for n, box in self.boxes.items():
            if name is None or n == name:
                box.refresh()
        if name is None or name == "tracker":
            self.tracker_box.refresh()
