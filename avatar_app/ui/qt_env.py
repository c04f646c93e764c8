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
    """Keep CPython 3.11 alive under PySide6 6.12.0, which returns None and True without a reference.

    PySide6-Essentials 6.12.0 on CPython 3.11 (checked here): every call of a
    wrapped method that returns nothing (``QLabel.setText``, ``QWidget.update``,
    ``processEvents`` ...) lowers ``sys.getrefcount(None)`` by one, and every
    ``Signal.emit()`` lowers that of ``True`` by one (6.11.3 is correct; on
    CPython >= 3.12 these objects are immortal, so nothing happens there). A
    running window makes thousands of such calls a minute, and when a count
    reaches zero CPython aborts ("Fatal Python error: none_dealloc" /
    "bool_dealloc"). When the defect is detected on CPython < 3.12 this adds
    2**40 references to None, True and False, so they can never reach zero
    (about 35 years at 1000 calls a second).

    The real fix is another PySide6 version for Python 3.11 (``<6.12``).

    Returns:
        True when the defect was found (and compensated).
    """
    import ctypes
    import logging
    import sys

    from PySide6.QtCore import QObject, QTimer, Signal

    if sys.version_info >= (3, 12):
        return False

    class _Probe(QObject):
        pinged = Signal()

    probe, timer = _Probe(), QTimer()
    n0, t0 = sys.getrefcount(None), sys.getrefcount(True)
    for _ in range(16):
        probe.pinged.emit()
        timer.setInterval(5)
    lost_none, lost_true = n0 - sys.getrefcount(None), t0 - sys.getrefcount(True)
    if lost_none < 16 and lost_true < 16:
        return False
    logging.getLogger(__name__).warning(
        "PySide6 %s loses references to None/True on this Python (%d.%d); compensating. "
        "Install PySide6-Essentials < 6.12 for Python 3.11.", _pyside_version(), *sys.version_info[:2])
    for obj in (None, True, False):
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 40
    return True


def _pyside_version() -> str:
    import PySide6

    return getattr(PySide6, "__version__", "?")
