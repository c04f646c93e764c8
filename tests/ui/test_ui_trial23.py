"""trial23: quitting from the clean capture view (Ctrl+H) keeps the panels for the next start."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"


def test_quit_from_clean_view_restarts_with_the_panels_and_toolbar(qtbot, testdata, settings):
    from tests.ui_helpers import shown_file_window

    win = shown_file_window(qtbot, testdata / VIDEO, settings)
    qtbot.waitUntil(lambda: win.panels_visible(), timeout=20000)
    shown = sorted(k for k, d in win.docks.items() if d.isVisible())
    assert shown and win.toolbar.isVisible()
    win.toggle_panels(True)  # Ctrl+H
    assert not win.panels_visible()
    win.close()  # File › Quit closes the window (then the app)
    settings.sync()

    again = shown_file_window(qtbot, testdata / VIDEO, settings)
    qtbot.waitUntil(lambda: again.panels_visible(), timeout=20000)
    assert sorted(k for k, d in again.docks.items() if d.isVisible()) == shown
    assert again.toolbar.isVisible() and again.menuBar().isVisible() and again.statusBar().isVisible()
    again.close()
