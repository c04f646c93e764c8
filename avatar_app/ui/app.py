"""Start the Qt application and the main window."""
from __future__ import annotations

import sys
from pathlib import Path

from avatar_app.ui.qt_env import fix_qt_plugin_path, set_default_gl_format


def create_app():
    """The QApplication (created once), with PySide6's plugins and an OpenGL 3.3 core default format."""
    fix_qt_plugin_path()
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        set_default_gl_format()
        app = QApplication(sys.argv[:1])
        app.setApplicationName("avatar_app")
        app.setOrganizationName("avatar_app")
    return app


def run_window(source: Path | None = None, camera: int | None = None) -> int:
    """Open the main window and run the event loop. Returns the exit status."""
    app = create_app()
    from avatar_app.ui.main_window import MainWindow

    win = MainWindow(source=source, camera=camera)
    win.show()
    return app.exec()
