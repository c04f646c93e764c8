"""Screenshots of the studio window with each panel in front, for the README.

Usage (under a display or Xvfb; the 200% set needs a screen large enough for
the window at twice its size, e.g. Xvfb ``-screen 0 3840x2160x24``)::

    python -m avatar_app.ui.screenshots docs/screenshots --source VIDEO [--suffix @2x] [--panels engines]
    QT_SCALE_FACTOR=2 python -m avatar_app.ui.screenshots docs/screenshots --source VIDEO --suffix @2x

Writes ``studio-<panel><suffix>.png`` for every tabbed panel (or those of ``--panels``) and
``studio-clean<suffix>.png`` (panels hidden; not with ``--panels``). A panel taller than its dock
is scrolled to the part named in :data:`SHOWN` (the Engines panel: its Tracking row). Settings go to a temporary
QSettings file, so the user's own settings are neither used nor changed.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

TABBED = ("sources", "engines", "calibration", "tracking", "expressions", "avatar", "output")
#: Panel -> the attribute of the part its screenshot scrolls to.
SHOWN = {"engines": "tracker_box"}


def _wait(app, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def _save(pixmap, path: Path) -> None:
    """Write a QPixmap as a maximally compressed PNG (zlib level 9)."""
    pixmap.save(str(path), "PNG", 0)


def _scroll_to(win, key: str) -> None:
    """Scroll panel ``key``'s dock so that its :data:`SHOWN` part is in view."""
    from PySide6.QtWidgets import QScrollArea

    area, part = win.docks[key].widget(), getattr(win.panels[key], SHOWN.get(key, ""), None)
    if isinstance(area, QScrollArea) and part is not None:
        area.ensureWidgetVisible(part, 0, 0)


def take(out_dir: Path, source: Path, suffix: str = "", size=(1440, 900), panels=TABBED) -> list[Path]:
    """Open the window on ``source``, then save one screenshot per panel into ``out_dir``.

    Args:
        panels: the panels to take (default all, then the clean view).

    Returns:
        The PNG paths written.
    """
    from PySide6.QtCore import QSettings

    from avatar_app.ui.app import check_display, create_app
    from avatar_app.ui.main_window import MainWindow

    check_display()
    app = create_app()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        settings = QSettings(str(Path(tmp) / "settings.ini"), QSettings.Format.IniFormat)
        win = MainWindow(source=source, settings=settings)
        win.resize(*size)
        win.show()
        t0 = time.monotonic()
        while win.viewport.frames_presented < 60 and time.monotonic() - t0 < 60:
            _wait(app, 0.1)
        _wait(app, 2.0)
        written = []
        for key in panels:
            win.docks[key].raise_()
            _wait(app, 1.0)
            _scroll_to(win, key)
            _wait(app, 0.3)
            p = out_dir / f"studio-{key}{suffix}.png"
            _save(win.grab(), p)
            written.append(p)
        if tuple(panels) == TABBED:
            win.toggle_panels(True)
            _wait(app, 1.0)
            p = out_dir / f"studio-clean{suffix}.png"
            _save(win.grab(), p)
            written.append(p)
            win.toggle_panels(False)
        win.close()
        win.deleteLater()
        _wait(app, 0.5)
    return written


def _size(text: str) -> tuple[int, int]:
    """``WxH`` -> (W, H) pixels, each 320-7680 (argparse type; raises ArgumentTypeError)."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WxH in pixels, e.g. 1280x720; got {text!r}") from None
    if not (320 <= w <= 7680 and 320 <= h <= 7680):
        raise argparse.ArgumentTypeError(f"each side must be 320-7680 pixels; got {text!r}")
    return w, h


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--source", type=Path, required=True, help="a video with a face to play")
    ap.add_argument("--suffix", default="", help="file name suffix, e.g. @2x")
    ap.add_argument("--panels", nargs="+", choices=TABBED, default=list(TABBED), help="only these panels")
    ap.add_argument("--size", type=_size, default=(1440, 900), metavar="WxH",
                    help="window size in pixels (default 1440x900, the window's first-run size)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from avatar_app.core.errors import AvatarError, error_line

    try:
        paths = take(args.out_dir, args.source, args.suffix, size=args.size, panels=tuple(args.panels))
    except AvatarError as exc:  # no display: one line, as the avatar-app commands print it
        print(error_line(exc), file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
