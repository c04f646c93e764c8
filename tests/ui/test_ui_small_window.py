"""A small window (1024x640): every dock panel fits or scrolls, no stray tab bars (issue 21, trial fixes 1)."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtWidgets import QScrollArea, QTabBar, QWidget
from ui_helpers import save_shot

# Qt's xcb plugin sometimes logs "This plugin does not support propagateSizeHints()" for the docks at
# QT_SCALE_FACTOR=2 under load (a platform notice, no layout effect; it failed 2 of 5 full runs through
# qt_log_level_fail): that one message is ignored here, every assertion stays
pytestmark = [pytest.mark.gui, pytest.mark.gl, pytest.mark.qt_log_ignore(r"does not support propagateSizeHints")]

VIDEO = "video/grid_s1_bbaf2n.mp4"


@pytest.fixture(scope="module")
def small_window(shared_window, testdata):
    """A MainWindow playing a file (built-in solvers), shown and resized to 1024x640, once for the module
    (shared_window): the first test only looks at each panel, the second (last) hides and closes docks."""
    from tests.ui_helpers import file_window

    return shared_window(lambda settings: file_window(testdata / VIDEO, settings), window_size=(1024, 640))


SCROLLED = ("sources", "engines", "calibration", "tracking", "expressions", "avatar", "output")


def _settle(qtbot, win, timeout_s: float = 5.0) -> None:
    """Process events until every dock's geometry holds still for two turns (a loaded machine lays the
    docks out later than a fixed short wait allows; the suite's full runs failed here 2 of 3 times)."""
    import time

    def shape():
        return tuple((d.isVisible(), d.geometry().getRect(), d.widget().viewport().size().toTuple()
                      if isinstance(d.widget(), QScrollArea) else None) for d in win.docks.values())

    last, end = None, time.monotonic() + timeout_s
    while time.monotonic() < end:
        qtbot.wait(30)
        now = shape()
        if now == last:
            return
        last = now


def _reachable(area: QScrollArea, panel: QWidget, horizontal: bool) -> bool:
    """Whether the panel fits the area's viewport in one direction, or a scroll bar reaches all of it."""
    size, view = (panel.width(), area.viewport().width()) if horizontal else (panel.height(), area.viewport().height())
    if size <= view:
        return True
    policy = area.horizontalScrollBarPolicy() if horizontal else area.verticalScrollBarPolicy()
    bar = area.horizontalScrollBar() if horizontal else area.verticalScrollBar()
    return policy != Qt.ScrollBarPolicy.ScrollBarAlwaysOff and bar.maximum() >= size - view


def test_the_same_at_200_percent():
    """Both checks below again in a subprocess with QT_SCALE_FACTOR=2 (the same 1024x640 logical window)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, QT_SCALE_FACTOR="2")
    r = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k", "not 200",
                        "-o", "addopts="], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or "2 passed" not in r.stdout:
        pytest.fail("at 200 %:\n" + r.stdout[-6000:] + r.stderr[-2000:], pytrace=False)


def test_every_panel_fits_or_scrolls_in_a_small_window(qtbot, small_window):
    win = small_window
    for key in SCROLLED:
        win.docks[key].raise_()
        _settle(qtbot, win)
        area, panel = win.docks[key].widget(), win.panels[key]
        assert isinstance(area, QScrollArea) and area.widgetResizable() and area.widget() is panel, key
        save_shot(win, f"small_window_{key}")
        assert _reachable(area, panel, True), (key, panel.width(), area.viewport().width())
        assert _reachable(area, panel, False), (key, panel.height(), area.viewport().height())
        for w in panel.findChildren(QWidget):
            if w.isVisibleTo(panel) and w.width() > 0:
                box = QRect(w.mapTo(panel, w.rect().topLeft()), w.size())
                assert panel.rect().contains(box), (key, type(w).__name__, box, panel.rect())


def test_no_stray_tab_bars_after_hiding_and_showing_the_panels(qtbot, small_window):
    """(Closes three docks of the module's window: the module's last test on it.)"""
    from PySide6.QtWidgets import QApplication

    win = small_window
    for key in SCROLLED:  # as a user looking at each panel does
        win.docks[key].raise_()
        QApplication.processEvents()
    win.toggle_panels(True)
    QApplication.processEvents()
    win.toggle_panels(False)
    _settle(qtbot, win)
    bars = [b for b in win.findChildren(QTabBar) if b.parent() is win and b.isVisible()]
    assert bars and all(b.count() >= 2 for b in bars), [(b.count(), b.geometry()) for b in bars]
    for key in ("tracking", "expressions", "avatar"):  # Output alone is left on the right: no tab bar there
        win.docks[key].close()
    _settle(qtbot, win)
    # Qt keeps the lone Output dock's one-tab bar, off the window: none of fewer than 2 tabs on it
    bars = [b for b in win.findChildren(QTabBar) if b.parent() is win and b.isVisible()
            and b.geometry().intersects(win.rect())]
    assert all(b.count() >= 2 for b in bars), [(b.count(), b.geometry()) for b in bars]
    assert win.docks["output"].isVisible()
