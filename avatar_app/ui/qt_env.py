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
