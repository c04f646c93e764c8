"""Shared fixtures: where the real test recordings live."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _testdata_path() -> Path:
    """$AVATAR_TESTDATA, else ../shared/testdata beside the checkout (or beside the main checkout of a
    git worktree, whose .git file points there)."""
    if os.environ.get("AVATAR_TESTDATA"):
        return Path(os.environ["AVATAR_TESTDATA"])
    candidates = [ROOT.parent / "shared" / "testdata"]
    git = ROOT / ".git"
    if git.is_file() and git.read_text().startswith("gitdir:"):
        common = Path(git.read_text().split(":", 1)[1].strip()).parents[1]  # <main>/.git/worktrees/<name>
        candidates.append(common.parent.parent / "shared" / "testdata")
    return next((c for c in candidates if c.is_dir()), candidates[0])


TESTDATA = _testdata_path()


_WORKER_XVFB: subprocess.Popen | None = None


def pytest_configure(config):
    """Under pytest-xdist, give each worker its own Xvfb display.

    Workers that share one X server (``xvfb-run ... pytest -n 2``) take window activation
    from each other; shortcut tests then press keys into a window that is no longer the
    active one, as if another app had been clicked. A private display per worker (Xvfb
    picks a free number, ``-displayfd``) keeps each worker's windows to itself. Without
    Xvfb on the PATH, or outside xdist, the display given to pytest is used as before.
    """
    global _WORKER_XVFB
    if not os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get("DISPLAY") or not shutil.which("Xvfb"):
        return
    r, w = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1920x1080x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()
    if not number.isdigit():  # Xvfb did not start: keep the shared display
        proc.kill()
        return
    _WORKER_XVFB = proc
    os.environ["DISPLAY"] = f":{number}"


def pytest_unconfigure(config):
    """Stop the worker's own Xvfb (see :func:`pytest_configure`)."""
    if _WORKER_XVFB is not None:
        _WORKER_XVFB.terminate()
        _WORKER_XVFB.wait(timeout=10)


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
