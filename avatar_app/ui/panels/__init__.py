"""The studio's dockable panels. Each panel changes the pipeline through its MainWindow's API."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QFrame, QLabel, QScrollArea, QSizePolicy, QWidget


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
    """Base of the panels: keeps the window and wraps itself in a scroll area for its dock.

    Args:
        win: the MainWindow.

    Thread: GUI thread only.
    """

    def __init__(self, win):
        super().__init__()
        self.win = win

    def scroll_wrapped(self) -> QScrollArea:
        """This panel inside a frameless, vertically scrolling area (nothing clips when the dock is small)."""
        area = QScrollArea()
        area.setWidget(self)
        area.setWidgetResizable(True)
        area.setFrameShape(QFrame.Shape.NoFrame)
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        return area


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
