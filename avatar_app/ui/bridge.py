"""The Qt bridge of the studio session: the session's plain events as Qt signals on the GUI thread.

:class:`SessionBridge` re-emits every :class:`~avatar_app.pipeline.session.SessionEvents`
event as a Qt signal of the same name, and gives the session its ``dispatch``:
work that finishes on a worker thread is queued to the GUI thread, so widgets
are only ever touched there.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal


class SessionBridge(QObject):
    """Qt signals for a :class:`~avatar_app.pipeline.session.StudioSession`'s events.

    Signals carry the events' arguments (see SessionEvents); ``state`` is not bridged
    (it fires per frame on the pipeline thread; the window polls the newest state).

    Thread: create on the GUI thread; :meth:`dispatch` from any thread.
    """

    source_opening = Signal(str)
    source_changed = Signal(object)
    source_failed = Signal(object, bool)
    source_lost = Signal(str, bool)
    mic_changed = Signal(str)
    engine_changed = Signal(str)
    statuses_ready = Signal()
    neutral_calibrated = Signal()
    status = Signal(str, int)
    error = Signal(str)
    output_status = Signal(str, str)
    avatar_loaded = Signal(object, object)
    settings_changed = Signal(str)
    _call = Signal(object)

    EVENTS = ("source_opening", "source_changed", "source_failed", "source_lost", "mic_changed", "engine_changed",
              "statuses_ready", "neutral_calibrated", "status", "error", "output_status", "avatar_loaded",
              "settings_changed")

    def __init__(self, parent=None):
        super().__init__(parent)
        self._call.connect(self._run, Qt.ConnectionType.QueuedConnection)

    def dispatch(self, fn) -> None:
        """Run ``fn()`` on the GUI thread (queued; from any thread)."""
        try:
            self._call.emit(fn)
        except RuntimeError:  # the bridge is gone (window closed): nothing is left to update
            pass

    @staticmethod
    def _run(fn) -> None:
        fn()

    def attach(self, session) -> None:
        """Re-emit ``session``'s events as this object's signals."""
        for name in self.EVENTS:
            getattr(session.events, name).connect(getattr(self, name).emit)
