"""Start the Qt application and the studio window.

Environment hook for packaging tests: when ``AVATAR_APP_SCREENSHOT=<path>`` is
set, :func:`run_window` saves a PNG screenshot of the whole window to ``path``
once the viewport has presented :data:`SCREENSHOT_FRAMES` frames from the
source, then quits with exit status 0. If that many frames do not arrive
within :data:`SCREENSHOT_TIMEOUT_S` seconds it saves what the window shows and
quits with status 3 (the message names how many frames came). Message boxes are
suppressed in that mode so that nothing covers the window.

Ctrl+C (SIGINT) in the terminal that started the window closes it as File ›
Quit does: a recording in progress is finished and kept, settings are saved,
and the exit status is 0 (see :func:`install_interrupt_handler`).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from avatar_app.ui.qt_env import fix_qt_plugin_path, guard_emit_refcount_bug, set_default_gl_format

log = logging.getLogger(__name__)

#: Frames presented before the AVATAR_APP_SCREENSHOT hook saves its picture.
SCREENSHOT_FRAMES = 30
#: Seconds the hook waits for those frames.
SCREENSHOT_TIMEOUT_S = 120.0
#: Milliseconds between a failed source and the screenshot of it (the layout settles meanwhile).
FAILED_SOURCE_SHOT_DELAY_MS = 500


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
        guard_emit_refcount_bug()
        apply_button_style(app)
    return app


def apply_button_style(app) -> None:
    """Dialog buttons (OK, Cancel, Open…) without icons, as Windows, macOS and GNOME show them.

    Without a desktop's platform theme (Xvfb, bare X11 sessions) Qt's Fusion style
    puts the fallback theme's icon on each dialog button, and the icon overlapped the
    label ("OK" in QMessageBox). A proxy style turns the
    ``SH_DialogButtonBox_ButtonsHaveIcons`` hint off; everything else is the style's own.
    """
    from PySide6.QtWidgets import QProxyStyle, QStyle

    class _NoDialogButtonIcons(QProxyStyle):
        def styleHint(self, hint, option=None, widget=None, returnData=None):  # noqa: N802 (Qt override)
            if hint == QStyle.StyleHint.SH_DialogButtonBox_ButtonsHaveIcons:
                return 0
            return super().styleHint(hint, option, widget, returnData)

    if not isinstance(app.style(), QProxyStyle):
        app.setStyle(_NoDialogButtonIcons(app.style().name()))


def install_screenshot_hook(win, path: Path, frames: int = SCREENSHOT_FRAMES,
                            timeout_s: float = SCREENSHOT_TIMEOUT_S) -> None:
    """Save ``win`` to ``path`` after ``frames`` frames with a source state, then quit the app.

    A source that fails with nothing else running (a file that is not a video, a missing
    camera) saves the window as it shows the failure and quits at once with status 3, the
    reason logged, instead of waiting ``timeout_s`` (new-user trial: 120 s, then only "0 of 30
    frames were presented").

    Args:
        win: the MainWindow (its ``live.source_failure`` is read now and at each
            ``bridge.source_failed``).
        path: PNG to write (folders are created).
        frames: frames from the pipeline presented first.
        timeout_s: give up waiting after this many seconds (exit status 3).
    """
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    path = Path(path)
    count = {"n": 0, "done": False}

    def save_and_quit(status: int, why: str = "") -> None:
        if count["done"]:
            return
        count["done"] = True
        path.parent.mkdir(parents=True, exist_ok=True)
        ok = win.grab().save(str(path))
        if not ok:
            log.error("could not write the screenshot %s", path)
            status = status or 4
        elif why:
            log.error("%s; screenshot saved to %s anyway", why, path)
        elif status:
            log.error("only %d of %d frames were presented in %.0f s; screenshot saved to %s anyway",
                      count["n"], frames, timeout_s, path)
        win.close()
        QApplication.instance().exit(status)

    def on_presented(state, _t) -> None:
        if state is not None and state.stamps:
            count["n"] += 1
            if count["n"] == frames:
                QTimer.singleShot(0, lambda: save_and_quit(0))

    def check_failed(*_args) -> None:
        why = win.live.source_failure
        if why:  # the window's own words ("Could not play x.mp4: ..."); the shot once the docks have
            # laid out the failure's text (at once, the Sources panel was caught half laid out)
            QTimer.singleShot(FAILED_SOURCE_SHOT_DELAY_MS, lambda: save_and_quit(3, why))

    win.viewport.frame_presented.connect(on_presented)
    win.bridge.source_failed.connect(check_failed)  # a source opened on the opener thread fails later
    check_failed()  # one opened in the window's constructor has already failed
    QTimer.singleShot(int(timeout_s * 1000), lambda: save_and_quit(3))


def install_interrupt_handler(app, quit_window: Callable[[], None]) -> Callable[[], None]:
    """Run ``quit_window()`` on the GUI thread when SIGINT (Ctrl+C in the terminal) arrives.

    Python runs a signal handler only when the interpreter gets control, and
    inside Qt's C++ event loop it may not for a long time; PySide6 also swallows
    the default handler's KeyboardInterrupt in a slot, so Ctrl+C used to be
    ignored. A socket pair wakes the loop: ``signal.set_wakeup_fd`` writes a byte
    to it from the C-level handler, a QSocketNotifier on the other end returns
    to Python, and the Python handler queues ``quit_window`` (a zero-time
    single-shot timer). The first Ctrl+C quits gracefully; a second one, while
    that is still under way (e.g. a long recording being finished), restores the
    default action and ends the process at once.

    Args:
        app: the QApplication (parent of the notifier).
        quit_window: what File › Quit does (close the window, then quit the app).

    Returns:
        ``restore()``: puts the previous SIGINT handler and wakeup fd back (after ``app.exec()``).

    Raises:
        ValueError: not called on the main thread (Python's signal module allows that only).

    Thread: main (GUI) thread only.
    """
    from PySide6.QtCore import QSocketNotifier, QTimer

    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    notifier = QSocketNotifier(reader.fileno(), QSocketNotifier.Type.Read, app)

    def drain() -> None:  # returning to Python is what lets the pending handler run
        try:
            reader.recv(512)
        except OSError:
            pass

    notifier.activated.connect(drain)

    def on_sigint(_signum, _frame) -> None:
        log.warning("Ctrl+C: closing the window (press it again to end at once)")
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        QTimer.singleShot(0, quit_window)

    previous = signal.signal(signal.SIGINT, on_sigint)

    def restore() -> None:
        notifier.setEnabled(False)
        signal.signal(signal.SIGINT, previous)
        signal.set_wakeup_fd(previous_fd)
        reader.close()
        writer.close()
        notifier.deleteLater()

    return restore


def check_display(environ: dict[str, str] | None = None, platform: str | None = None) -> None:
    """Refuse to open the window where no display exists (Linux, BSD), before Qt aborts.

    Without ``DISPLAY`` (X11) or ``WAYLAND_DISPLAY`` and no ``QT_QPA_PLATFORM`` chosen, Qt's xcb
    plugin fails to connect and aborts the process (status 134), with lines claiming that
    ``libxcb-cursor0`` is missing and suggesting a reinstall (new-user trial).

    Args:
        environ: the environment (default: ``os.environ``).
        platform: ``sys.platform`` (default: this one); Windows and macOS always have a display.

    Raises:
        InputError: no display, naming what to do instead.
    """
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    if plat.startswith(("win", "darwin")) or env.get("QT_QPA_PLATFORM"):
        return
    if env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"):
        return
    from avatar_app.core.errors import InputError

    raise InputError("no display to open the studio window on (neither DISPLAY nor WAYLAND_DISPLAY is set): "
                     "run it in a desktop session, or under xvfb-run -a for a virtual one; "
                     "'avatar-app render' needs no display")


def run_window(source: Path | None = None, camera: int | None = None) -> int:
    """Open the studio window and run the event loop. Returns the exit status.

    Ctrl+C in the terminal closes the window as File › Quit does (status 0). With
    ``AVATAR_APP_SCREENSHOT=<path>`` in the environment, the window saves a
    screenshot after the first ~30 presented frames and quits (see the module doc).
    """
    check_display()
    app = create_app()
    from avatar_app.ui.main_window import MainWindow

    win = MainWindow(source=source, camera=camera)
    shot = os.environ.get("AVATAR_APP_SCREENSHOT")
    if shot:
        install_screenshot_hook(win, Path(shot))
    restore = install_interrupt_handler(app, win.quit)
    win.show()
    try:
        return app.exec()
    finally:
        restore()
