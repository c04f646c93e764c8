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
