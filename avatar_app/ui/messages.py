"""Messages to the user: the status bar, and non-blocking message boxes for what needs reading."""
from __future__ import annotations

import logging
import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

log = logging.getLogger(__name__)


class Notifier:
    """Shows messages in the window's status bar and, where the user must read them, in a message box.

    With ``AVATAR_APP_SCREENSHOT`` set (an unattended screenshot run) no box is shown.

    Args:
        parent: the window (parent of the message boxes).
        status_bar: its QStatusBar.

    Attributes:
        last_error: the last error shown, or None.
        last_info: the last information message shown, or None.

    Thread: GUI thread only.
    """

    def __init__(self, parent, status_bar):
        self.parent = parent
        self.status_bar = status_bar
        self.last_error: str | None = None
        self.last_info: str | None = None
        self._box = None

    def status(self, message: str, ms: int = 5000) -> None:
        """A transient status-bar message (``ms`` = 0: until replaced)."""
        self.status_bar.showMessage(message, ms)

    def status_error(self, message: str) -> None:
        """Say what went wrong in the status bar only (no message box): for failures the user
        sees in place as well and needs to decide nothing about (a source that did not open)."""
        self.last_error = message
        log.warning("%s", message)
        self.status_bar.showMessage(message, 15000)

    def error(self, message: str) -> None:
        """Show a non-blocking warning; the window stays usable."""
        self.status_error(message)
        self._show(QMessageBox.Icon.Warning, message)

    def info(self, message: str) -> None:
        """Show a non-blocking information message (selectable text, e.g. a folder path)."""
        self.last_info = message
        log.info("%s", message)
        self.status_bar.showMessage(message, 15000)
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
