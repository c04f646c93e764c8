"""The studio's dockable panels. Each panel works through the studio session and its controllers.

A panel gets the :class:`~avatar_app.pipeline.session.StudioSession` (state and
actions), its :class:`~avatar_app.ui.bridge.SessionBridge` (the session's events
as Qt signals) and the window's :class:`~avatar_app.ui.messages.Notifier`; never
the window itself.
"""
from __future__ import annotations

import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QLabel,
    QProgressBar,
    QScrollArea,
    QSizePolicy,
    QWidget,
)

_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")


def sentence(text: str) -> str:
    """``text`` ending in a full stop (or its own ``.``, ``!``, ``?``, ``…``), for joining sentences."""
    text = text.rstrip()
    return text if not text or text[-1] in ".!?…" else text + "."


def plain_error(text: str, path=None) -> str:
    """``text`` without FFmpeg/OS error numbers such as "[Errno 1094995529] ".

    The capture layer's messages start with a plain sentence ("... is not a
    readable video (corrupt, truncated or not a media file): ..."); the number
    after it means nothing to a user. Messages that would be left without any
    sentence before the library's words get "The file could not be read: " first.

    Args:
        text: the message.
        path: the file it is about, or None. Given, its full path (which the
            caller already names) is shortened to "the file" so that the reason
            comes first in a short label.
    """
    cleaned = text
    if _ERRNO.search(text):
        cleaned = _ERRNO.sub("", text).strip()
        if _ERRNO.match(text.strip()):  # the library's message was all there was
            cleaned = f"The file could not be read: {cleaned}"
    if path is not None:
        p = str(path)
        # "video path 'x' is not a file" -> "It is not a file" (not "Video path the file is not a file")
        cleaned = re.sub(rf"^\w+ (?:path|file) '{re.escape(p)}'", "It", cleaned)
        cleaned = cleaned.replace(f": '{p}'", "").replace(f"'{p}'", "the file").replace(p, "the file")
        cleaned = cleaned[:1].upper() + cleaned[1:]
    return cleaned


class ElidedLabel(QLabel):
    """A label of a fixed number of lines: longer text is elided ("…") and shown whole in the tooltip.

    It never grows, so a long error cannot push the widgets below it around or
    spill over the preview.

    Args:
        lines: most lines shown (the text's own line breaks count; each line is elided
            at the label's width).
        tooltip_prefix: text put before the full text in the tooltip.
    """

    def __init__(self, text: str = "", lines: int = 1, parent=None):
        super().__init__(parent)
        self.max_lines = max(1, int(lines))
        self._full = ""
        self.setWordWrap(False)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(self.fontMetrics().lineSpacing() * self.max_lines + 4)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.setText(text)

    def full_text(self) -> str:
        """The whole text (what the tooltip shows)."""
        return self._full

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        self._full = str(text)
        self.setToolTip(self._full if self._full else "")
        self._elide()

    def text(self) -> str:  # the whole text, as a QLabel's text() would give it
        return self._full

    def _elide(self) -> None:
        """Word-wrap the text at the label's width into at most ``max_lines`` lines; elide what is over.

        When the text has no more paragraphs (line breaks) than ``max_lines``, every
        paragraph keeps at least its first line, so a second sentence is never run
        into the first one's overflow; spare lines go to the first paragraphs.
        """
        fm = self.fontMetrics()
        width = max(20, self.contentsRect().width())
        paras: list[list[str]] = []
        for para in self._full.split("\n"):
            lines: list[str] = []
            line = ""
            for word in para.split(" "):
                candidate = f"{line} {word}" if line else word
                if line and fm.horizontalAdvance(candidate) > width:
                    lines.append(line)
                    line = word
                else:
                    line = candidate
            lines.append(line)
            paras.append(lines)
        flat = [ln for lines in paras for ln in lines]
        if len(flat) <= self.max_lines:
            shown = flat
        elif len(paras) <= self.max_lines:
            budget = [1] * len(paras)
            spare = self.max_lines - len(paras)
            for i, lines in enumerate(paras):
                extra = min(spare, len(lines) - 1)
                budget[i] += extra
                spare -= extra
            shown = []
            for lines, n in zip(paras, budget):
                part = lines[:n]
                if len(lines) > n:
                    part[-1] = fm.elidedText(" ".join([part[-1], *lines[n:]]) + " …",
                                             Qt.TextElideMode.ElideRight, width)
                shown += part
        else:
            shown = flat[: self.max_lines]
            shown[-1] = fm.elidedText(" ".join([shown[-1], *flat[self.max_lines:]]) + " …",
                                      Qt.TextElideMode.ElideRight, width)
        shown = [fm.elidedText(ln, Qt.TextElideMode.ElideRight, width) for ln in shown]
        super().setText("\n".join(shown))

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._elide()

    def minimumSizeHint(self):  # noqa: N802 (Qt override): elided, so any width will do
        hint_ = super().minimumSizeHint()
        hint_.setWidth(20)
        return hint_

    def sizeHint(self):  # noqa: N802 (Qt override)
        hint_ = super().sizeHint()
        hint_.setWidth(min(hint_.width(), 200))
        return hint_


class ProgressBar(QProgressBar):
    """A progress bar whose value changes are painted with the rest of the window, at the next
    turn of the event loop (:meth:`show_value`).

    ``QProgressBar.setValue`` repaints at once (synchronously, flushing to the screen) when the
    bar shows its value as text. From the 5 Hz status tick (the level meter) and the panels'
    timers (build progress, calibration samples) that held the GUI thread, and a rendered frame
    waiting to be shown, for up to 23 ms on the loaded 2-core machine (issue 18).
    """

    def show_value(self, value: int) -> None:
        """Show ``value`` (clamped to the range by Qt) from the next paint on; nothing is painted now."""
        value = int(value)
        if value == self.value():
            return
        self.setUpdatesEnabled(False)  # setValue's repaint() paints nothing meanwhile
        try:
            self.setValue(value)
        finally:
            self.setUpdatesEnabled(True)  # schedules the paint (QWidget::update)
        self.update()


def pyqtgraph():
    """The pyqtgraph module, configured once for the studio.

    ``exitCleanup`` is off: its at-exit sweep of graphics scenes runs after Qt is
    gone with PySide6 6.12 and aborts the interpreter ("none_dealloc"); the window
    closes its plots itself.
    """
    import pyqtgraph as pg

    pg.setConfigOptions(exitCleanup=False, antialias=False)
    return pg


class Panel(QWidget):
    """Base of the panels: keeps the session and its controllers; wraps itself in a scroll area for its dock.

    Args:
        session: the StudioSession.
        bridge: its SessionBridge (signals), or None.
        notifier: the window's Notifier (status bar, message boxes), or None.

    Thread: GUI thread only.
    """

    def __init__(self, session, bridge=None, notifier=None):
        super().__init__()
        self.session = session
        self.bridge = bridge
        self.notifier = notifier

    def scroll_wrapped(self) -> QScrollArea:
        """This panel inside a frameless scrolling area: nothing clips when the dock is small.

        The panel is resized to the area (widgetResizable) but never below its minimum size; when the
        dock is narrower or shorter than that, a scroll bar reaches the rest (both directions: with
        the horizontal bar off, a panel wider than a small window's dock was cut at its right edge).
        """
        area = QScrollArea()
        area.setWidget(self)
        area.setWidgetResizable(True)
        area.setFrameShape(QFrame.Shape.NoFrame)
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        area.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        for combo in self.findChildren(QComboBox):  # a combo's longest item no longer sets the panel's width
            if combo.property(SHORT_ITEMS):
                continue
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(COMBO_MIN_CHARS)
        return area


#: Characters a panel's combo box shows at least (its popup shows whole items).
COMBO_MIN_CHARS = 10
#: A combo box property: true for one of short items only ("Default", "FP16"), which keeps the width
#: of its longest item (COMBO_MIN_CHARS would widen it, taking room from its neighbour on the line).
SHORT_ITEMS = "short_items"


def hint(text: str) -> QLabel:
    """A word-wrapped, dimmed explanatory label."""
    lab = QLabel(text)
    lab.setWordWrap(True)
    lab.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    lab.setStyleSheet("color: palette(placeholder-text);")
    return lab


def set_item_enabled(combo: QComboBox, index: int, enabled: bool, tooltip: str = "") -> None:
    """Enable or disable one combo-box item, with the reason as its tooltip."""
    model = combo.model()
    if isinstance(model, QStandardItemModel):
        item = model.item(index)
        if item is not None:
            item.setEnabled(enabled)
            item.setToolTip(tooltip)


def item_enabled(combo: QComboBox, index: int) -> bool:
    """Whether a combo-box item is enabled."""
    model = combo.model()
    if isinstance(model, QStandardItemModel):
        item = model.item(index)
        return bool(item is not None and item.isEnabled())
    return True


def legend_label(entries) -> QLabel:
    """A one-line legend outside a plot: [(name, (r, g, b)), ...] as coloured dashes."""
    lab = QLabel()
    lab.setWordWrap(True)
    set_legend(lab, entries)
    return lab


def set_legend(lab: QLabel, entries) -> None:
    """Rewrite a :func:`legend_label`."""
    lab.setText("&nbsp;&nbsp; ".join(
        f"<span style='color: rgb({r},{g},{b}); font-weight: bold;'>&#9473;</span>&nbsp;{name}"
        for name, (r, g, b) in entries))
