"""Shared fixtures: where the real test recordings live."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTDATA = Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared" / "testdata"))


@pytest.fixture(scope="session")
def testdata() -> Path:
    """Path of ../shared/testdata (or $AVATAR_TESTDATA). Fails, never skips, when absent."""
    assert TESTDATA.is_dir(), f"test data not found at {TESTDATA}"
    return TESTDATA


@pytest.fixture(scope="session")
def qapp():
    """The QApplication, created the way the app creates it (PySide6 plugins, OpenGL 3.3 core)."""
    from avatar_app.ui.app import create_app

    return create_app()


@pytest.fixture(scope="session", autouse=True)
def _qt_platform_first():
    """Start Qt's platform integration (first widget shown) before any test makes an EGL context.

    Under xdist a worker that had created headless EGL contexts (render tests) and only
    later created its first QWidget sometimes aborted inside QMainWindow(); starting Qt
    first in every worker (when a display exists) keeps the initialisation order the
    app itself has.
    """
    if not os.environ.get("DISPLAY"):
        yield
        return
    from avatar_app.ui.app import create_app

    app = create_app()
    from PySide6.QtWidgets import QWidget

    w = QWidget()
    w.resize(16, 16)
    w.show()
    app.processEvents()
    w.close()
    w.deleteLater()
    app.processEvents()
    yield
