"""Messages to the user: the status bar, and non-blocking message boxes for what needs reading."""
from __future__ import annotations

import logging
import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

#: Space QStatusBar puts between its permanent widgets, px (measured under Fusion at 100 % and 200 %).
STATUS_SPACING_PX = 6
#: Width the status bar keeps for its own margins and the size grip, px.
STATUS_EDGES_PX = 40

log = logging.getLogger(__name__)


class Notifier:
    """Shows messages in the window's status bar and, where the user must read them, in a message box.

    With ``AVATAR_APP_SCREENSHOT`` set (an unattended screenshot run) no box is shown.

    Args:
        parent: the window (parent of the message boxes).
        status_bar: its QStatusBar.

    A status-bar message is never clipped: when it does not fit beside the permanent
    labels, groups of them step aside while it shows, in the order given to
    :meth:`set_permanent` (first what is shown elsewhere too); if it is still too
    long it is elided in the middle (the start says what, the end what to do). The
    whole text is the status bar's tooltip, and the labels come back with the
    message's end.

    Attributes:
        last_error: the last error shown, or None.
        last_info: the last information message shown, or None.
        message: the whole text of the last status-bar message ("" once it is gone).

    Thread: GUI thread only.
    """

    def __init__(self, parent, status_bar):
        self.parent = parent
        self.status_bar = status_bar
        self.last_error: str | None = None
        self.last_info: str | None = None
        self.message = ""
        self._box = None
        self._permanent: list[QWidget] = []
        self._step_aside: list[list[QWidget]] = []
        status_bar.messageChanged.connect(self._on_message_changed)

    def set_permanent(self, widgets: list[QWidget], step_aside: list[list[QWidget]]) -> None:
        """The status bar's permanent widgets, and the groups of them that may step aside for a long message.

        Args:
            widgets: every permanent widget (their widths leave the message its room).
            step_aside: groups hidden, one more at a time, while a message needs their room.
        """
        self._permanent, self._step_aside = list(widgets), [list(g) for g in step_aside]

    def _room(self, hidden: int) -> int:
        """Width left for the message, px, with the first ``hidden`` groups stepped aside."""
        movable = [w for g in self._step_aside for w in g]
        gone = [w for g in self._step_aside[:hidden] for w in g]
        kept = [w for w in self._permanent if w not in gone and (w in movable or not w.isHidden())]
        used = sum(w.sizeHint().width() + STATUS_SPACING_PX for w in kept)
        return max(40, self.status_bar.width() - used - STATUS_EDGES_PX)

    def status(self, message: str, ms: int = 5000, detail: str | None = None) -> None:
        """A transient status-bar message (``ms`` = 0: until replaced), never clipped (see the class doc).

        ``detail``: a longer form of the message for the status bar's tooltip (default: the message).
        """
        self.message = message
        self.status_bar.setToolTip(detail or message)
        fm = self.status_bar.fontMetrics()
        width = fm.horizontalAdvance(message)
        hidden = next((k for k in range(len(self._step_aside) + 1) if width <= self._room(k)), len(self._step_aside))
        for k, group in enumerate(self._step_aside):
            for w in group:
                w.setVisible(k >= hidden)
        room = self._room(hidden)
        shown = message if width <= room else fm.elidedText(message, Qt.TextElideMode.ElideMiddle, room)
        self.status_bar.showMessage(shown, ms)

    def _on_message_changed(self, text: str) -> None:
        if not text:  # the message timed out or was cleared: the labels come back
            self.message = ""
            self.status_bar.setToolTip("")
            for w in (w for g in self._step_aside for w in g):
                w.show()

    def status_error(self, message: str) -> None:
        """Say what went wrong in the status bar only (no message box): for failures the user
        sees in place as well and needs to decide nothing about (a source that did not open)."""
        self.last_error = message
        log.warning("%s", message)
        self.status(message, 15000)

    def error(self, message: str) -> None:
        """Show a non-blocking warning; the window stays usable."""
        self.status_error(message)
        self._show(QMessageBox.Icon.Warning, message)

    def info(self, message: str) -> None:
        """Show a non-blocking information message (selectable text, e.g. a folder path)."""
        self.last_info = message
        log.info("%s", message)
        self.status(message, 15000)
        self._show(QMessageBox.Icon.Information, message, selectable=True)

    def _show(self, icon, message: str, selectable: bool = False) -> None:
        if os.environ.get("AVATAR_APP_SCREENSHOT"):
            return  # unattended screenshot run: no message boxes over the window
        box = QMessageBox(icon, "avatar_app", message, QMessageBox.StandardButton.Ok, self.parent)
        if selectable:
            box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.setModal(False)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.show()
        self._box = box
