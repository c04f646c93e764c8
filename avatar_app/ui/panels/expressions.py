"""Expressions panel: hotkeys that trigger (toggle) or hold expressions layered over tracking."""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QGroupBox,
    QKeySequenceEdit,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
)

from avatar_app.core.errors import AvatarError
from avatar_app.pipeline.studio_api import EXPRESSION_PRESETS, format_mix, parse_mix
from avatar_app.pipeline import settings as store
from avatar_app.ui.panels import Panel, hint

_MODIFIERS = (Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.ControlModifier
              | Qt.KeyboardModifier.AltModifier | Qt.KeyboardModifier.MetaModifier)


class ExpressionsPanel(Panel):
    """Hotkeys for happy, angry, surprised, sad and a custom mix of blendshapes.

    "Toggle" switches the expression on with one press and off with the next;
    "Hold" shows it while the key is held. Expressions fade in (0.12 s) and out
    (0.25 s) and pull only the shapes they name, so tracking goes on underneath
    (fusion.expressions.ExpressionLayer). Hotkeys work while the studio window has focus.
    """

    def __init__(self, session, bridge=None, notifier=None):
        super().__init__(session, bridge, notifier)
        e = session.settings.expressions
        lay = QVBoxLayout(self)
        lay.addWidget(hint("Press a hotkey while the window has focus. Toggle: press on, press off. "
                           "Hold: on while you hold the key."))
        grid_box = QGroupBox("Hotkeys")
        grid = QGridLayout(grid_box)
        for col, text in enumerate(("Expression", "Key", "Mode", "")):
            grid.addWidget(QLabel(f"<b>{text}</b>"), 0, col)
        self.key_edits: dict[str, QKeySequenceEdit] = {}
        self.mode_combos: dict[str, QComboBox] = {}
        self.test_buttons: dict[str, QPushButton] = {}
        for row, name in enumerate(store.EXPRESSION_NAMES, start=1):
            lab = QLabel(name.capitalize())
            if name in EXPRESSION_PRESETS:
                lab.setToolTip(format_mix(EXPRESSION_PRESETS[name]))
            grid.addWidget(lab, row, 0)
            ke = QKeySequenceEdit(QKeySequence(e.hotkeys.get(name, "")))
            ke.setMaximumSequenceLength(1)
            ke.setClearButtonEnabled(True)
            ke.editingFinished.connect(self._changed)
            grid.addWidget(ke, row, 1)
            mc = QComboBox()
            mc.addItem("Toggle", "toggle")
            mc.addItem("Hold", "hold")
            mc.setCurrentIndex(max(0, mc.findData(e.modes.get(name, "toggle"))))
            mc.currentIndexChanged.connect(self._changed)
            grid.addWidget(mc, row, 2)
            tb = QPushButton("Try")
            tb.setCheckable(True)
            tb.setToolTip("Switch the expression on or off")
            tb.toggled.connect(lambda on, n=name: self.set_active(n, on))
            grid.addWidget(tb, row, 3)
            self.key_edits[name], self.mode_combos[name], self.test_buttons[name] = ke, mc, tb
        grid.setColumnStretch(1, 1)
        lay.addWidget(grid_box)

        cg = QGroupBox("Custom mix")
        cl = QVBoxLayout(cg)
        cl.addWidget(hint("ARKit blendshape names with weights 0-1, e.g. jawOpen=0.4, tongueOut=1"))
        self.custom_edit = QLineEdit(e.custom)
        self.custom_edit.editingFinished.connect(self._changed)
        cl.addWidget(self.custom_edit)
        self.custom_error = QLabel("")
        self.custom_error.setWordWrap(True)
        self.custom_error.setStyleSheet("color: #c0392b;")
        cl.addWidget(self.custom_error)
        lay.addWidget(cg)
        row_clear = QPushButton("All expressions off")
        row_clear.clicked.connect(self.clear)
        lay.addWidget(row_clear)
        self.active_label = QLabel("")
        self.active_label.setWordWrap(True)
        lay.addWidget(self.active_label)
        lay.addStretch(1)
        self.timer = QTimer(self)
        self.timer.setInterval(200)
        self.timer.timeout.connect(self._show_active)
        self.timer.start()

    # -- settings -----------------------------------------------------------------------
    def current(self) -> store.ExpressionSettings:
        """The settings the widgets show."""
        return store.ExpressionSettings(
            hotkeys={n: ke.keySequence().toString() for n, ke in self.key_edits.items()},
            modes={n: mc.currentData() for n, mc in self.mode_combos.items()},
            custom=self.custom_edit.text())

    def show_settings(self, e: store.ExpressionSettings) -> None:
        """Show hotkeys, modes and the custom mix of ``e`` (does not apply them)."""
        for name, ke in self.key_edits.items():
            ke.blockSignals(True)
            ke.setKeySequence(QKeySequence(e.hotkeys.get(name, "")))
            ke.blockSignals(False)
        for name, mc in self.mode_combos.items():
            mc.blockSignals(True)
            mc.setCurrentIndex(max(0, mc.findData(e.modes.get(name, "toggle"))))
            mc.blockSignals(False)
        self.custom_edit.setText(e.custom)

    def _changed(self, *_):
        e = self.current()
        try:
            parse_mix(e.custom)
            self.custom_error.setText("")
        except AvatarError as exc:
            self.custom_error.setText(str(exc))
        self.session.set_expression_settings(e)

    # -- activation ---------------------------------------------------------------------
    def set_active(self, name: str, on: bool) -> None:
        """Switch expression ``name`` on or off."""
        self.session.expressions.set_active(name, on)
        b = self.test_buttons[name]
        if b.isChecked() != on:
            b.blockSignals(True)
            b.setChecked(on)
            b.blockSignals(False)

    def clear(self) -> None:
        """Switch every expression off."""
        for name in self.test_buttons:
            self.set_active(name, False)

    def handle_key(self, event, pressed: bool) -> bool:
        """Apply a key press/release to the expressions; True if a hotkey matched.

        Args:
            event: the QKeyEvent (auto-repeats are filtered by the caller).
            pressed: True for a press, False for a release.
        """
        key = event.key()
        mods = event.modifiers() & _MODIFIERS
        hotkeys = self.session.settings.expressions.hotkeys
        modes = self.session.settings.expressions.modes
        matched = False
        for name, text in hotkeys.items():
            seq = QKeySequence(text)
            if seq.isEmpty():
                continue
            combo = seq[0]
            if combo.key() != key:
                continue
            if pressed and combo.keyboardModifiers() != mods:
                continue
            matched = True
            if modes.get(name) == "hold":
                self.set_active(name, pressed)
            elif pressed:
                self.set_active(name, not self.session.expressions.is_active(name))
        return matched

    def _show_active(self) -> None:
        amounts = self.session.expressions.amounts()
        text = ", ".join(f"{n} {a:.0%}" for n, a in amounts.items() if a > 0)
        self.active_label.setText(f"Active: {text}" if text else "No expression active.")
