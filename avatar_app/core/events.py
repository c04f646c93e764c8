"""Plain events: callbacks a Qt-free object emits and a view subscribes to (napari's EventEmitter idea).

A Qt bridge (``avatar_app.ui.bridge``) connects to these and re-emits Qt signals,
so widgets are called on the GUI thread; nothing here knows about Qt.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Event:
    """A list of callbacks called in order by :meth:`emit`.

    Args:
        name: what the event means (for logs), e.g. ``"source_changed"``.

    Thread: ``emit`` runs the callbacks on the emitting thread; ``connect`` and
    ``disconnect`` from any thread. A callback that raises is logged and the
    others still run: an observer never breaks the emitter.
    """

    def __init__(self, name: str = ""):
        self.name = name
        self._callbacks: list[Callable] = []
        self._lock = threading.Lock()

    def connect(self, callback: Callable) -> Callable:
        """Call ``callback(*args)`` on every emit; returns it (usable as a decorator)."""
        with self._lock:
            self._callbacks.append(callback)
        return callback

    def disconnect(self, callback: Callable | None = None) -> None:
        """Remove ``callback`` (every callback when None); unknown callbacks are ignored."""
        with self._lock:
            if callback is None:
                self._callbacks.clear()
            elif callback in self._callbacks:
                self._callbacks.remove(callback)

    def emit(self, *args) -> None:
        """Call every connected callback with ``args``."""
        with self._lock:
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb(*args)
            except Exception:  # noqa: BLE001 - an observer's bug must not stop the emitter
                log.exception("event %s: a callback failed", self.name or "?")
