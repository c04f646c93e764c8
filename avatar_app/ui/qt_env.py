"""Make Qt load PySide6's own plugins, not the ones opencv-python's wheel points at.

cv2's ``__init__`` sets ``QT_QPA_PLATFORM_PLUGIN_PATH`` to ``cv2/qt/plugins``
(built for cv2's own Qt); PySide6 must not use them. Import this module before
any PySide6 import that creates a QApplication.
"""
from __future__ import annotations

import os


def fix_qt_plugin_path() -> None:
    """Import cv2 (so it sets its variable), then point Qt at PySide6's plugins."""
    try:
        import cv2  # noqa: F401  (sets QT_QPA_PLATFORM_PLUGIN_PATH as a side effect)
    except ImportError:  # pragma: no cover - cv2 is a dependency
        pass
    os.environ.pop("QT_QPA_PLATFORM_PLUGIN_PATH", None)
    import PySide6

    plugins = os.path.join(os.path.dirname(PySide6.__file__), "Qt", "plugins")
    if os.path.isdir(plugins):
        os.environ["QT_PLUGIN_PATH"] = plugins


def set_default_gl_format() -> None:
    """Request an OpenGL 3.3 core profile with depth for every QOpenGLWidget (call before QApplication)."""
    from PySide6.QtGui import QSurfaceFormat

    fmt = QSurfaceFormat()
    fmt.setVersion(3, 3)
    fmt.setProfile(QSurfaceFormat.OpenGLContextProfile.CoreProfile)
    fmt.setDepthBufferSize(24)
    fmt.setAlphaBufferSize(8)
    fmt.setSwapInterval(0)
    QSurfaceFormat.setDefaultFormat(fmt)


def guard_emit_refcount_bug() -> bool:
    """Work around PySide6 6.12.0 dropping a reference to ``True`` at every ``Signal.emit()``.

    In PySide6-Essentials 6.12.0 ``SignalInstance.emit`` returns ``True`` without
    taking a reference (checked: 100 emits lower ``sys.getrefcount(True)`` by 100;
    6.11.3 is correct). The app emits signals every frame, and pyqtgraph does
    inside every plot update, so after some minutes CPython 3.11 frees ``True``
    and aborts ("Fatal Python error: bool_dealloc"). When the bug is detected
    on CPython < 3.12 (where ``True`` is not immortal) this adds 2**40 references
    to ``True``, so it can never reach zero (about 35 years at 1000 emits/s).
    The real fix is another PySide6 version (pyproject: ``!=6.12.0``).

    Returns:
        True when the bug was found (and, on CPython < 3.12, compensated).
    """
    import ctypes
    import logging
    import sys

    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        pinged = Signal()

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(8):
        probe.pinged.emit()
    lost = before - sys.getrefcount(True)
    if lost < 8:
        return False
    logging.getLogger(__name__).warning(
        "this PySide6 (%s) loses a reference to True at every signal emit; compensating. "
        "Install another PySide6-Essentials version (6.11.3 is correct).", _pyside_version())
    if sys.version_info < (3, 12):
        ctypes.c_ssize_t.from_address(id(True)).value += (1 << 40) + lost
    return True


def _pyside_version() -> str:
    import PySide6

    return getattr(PySide6, "__version__", "?")
