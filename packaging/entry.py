"""Entry script of the frozen ``avatar-app`` executable (PyInstaller).

Does what the ``avatar-app`` console script does (``avatar_app.cli:main``):
the window without a sub-command, ``render`` / ``demo`` / ``engines`` with one.

Frozen-only duties:
- ``multiprocessing.freeze_support()`` first: the engine layer builds engines in
  ``spawn``-ed child processes, which re-run this executable.
- A windowed Windows build (``console=False``) has no ``sys.stdout`` /
  ``sys.stderr``; they are sent to a log file so CLI messages and logging
  do not crash the app.
"""
from __future__ import annotations

import multiprocessing
import os
import sys


def _ensure_streams() -> None:
    """Give a GUI-subsystem executable somewhere to write (Windows ``console=False``)."""
    if sys.stdout is not None and sys.stderr is not None:
        return
    base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~")
    log_dir = os.path.join(base, "avatar_app", "logs")
    os.makedirs(log_dir, exist_ok=True)
    stream = open(os.path.join(log_dir, "avatar-app-gui.log"), "a", encoding="utf-8", buffering=1)  # noqa: SIM115
    if sys.stdout is None:
        sys.stdout = stream
    if sys.stderr is None:
        sys.stderr = stream


if __name__ == "__main__":
    multiprocessing.freeze_support()
    _ensure_streams()
    from avatar_app.inference.gpu_detect import add_extra_site_dirs

    add_extra_site_dirs()
    from avatar_app.cli import main

    sys.exit(main())
