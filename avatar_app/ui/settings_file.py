"""File › Export settings… and File › Import settings…: the studio's settings as one JSON file.

The file is the one ``avatar-app render --settings FILE`` reads
(:func:`avatar_app.pipeline.settings.save_settings_file` / ``load_settings_file``).
Importing reads and validates the whole file first: a missing, unreadable or
malformed file is refused with its reason and nothing changes. A valid file is
applied at once (tracking, expressions, avatar look, output, engines, the face
tracker, microphone, mouth fusion), shown in the panels and persisted; values it holds that are
invalid or out of range take their defaults and are named in a warning.
The camera and the playing file are not switched (the Sources panel does that).

Thread: GUI thread only.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from avatar_app.core.errors import AvatarError
from avatar_app.pipeline import settings as store

log = logging.getLogger(__name__)

SETTINGS_FILTER = "Settings (*.json);;All files (*)"
#: How many rejected values the import's warning names before "and N more".
MAX_LISTED = 8


def export_settings(win, path: Path | None = None) -> Path | None:
    """Write the running studio's settings to ``path`` (asked for when None); returns it, or None.

    Errors (the file cannot be written) are shown by the window's notifier.
    """
    if path is None:
        start = str(Path(win.settings.value("last_export", str(Path.home() / "studio-settings.json"), type=str)))
        chosen, _ = QFileDialog.getSaveFileName(win, "Export settings", start, "Settings (*.json)")
        if not chosen:
            return None
        path = Path(chosen)
    try:
        written = win.session.export_settings(path)
    except AvatarError as exc:
        win.notifier.error(str(exc))
        return None
    win.settings.setValue("last_export", str(written))
    win.notifier.status(f"Settings exported to {written} (use: avatar-app render IN -o OUT.mp4 "
                        f"--settings {written.name})", 10000)
    return written


def import_settings(win, path: Path | None = None) -> list[str] | None:
    """Read a settings file and apply it to the running studio (persisted).

    Args:
        win: the MainWindow.
        path: the file; None asks with a file dialog.

    Returns:
        The rejected values, one line each (``key: value why; using X``; [] when none), or None
        when nothing was imported (cancelled, or the file was refused: the error is shown).
    """
    if path is None:
        start = win.settings.value("last_export", str(Path.home()), type=str)
        chosen, _ = QFileDialog.getOpenFileName(win, "Import settings", start, SETTINGS_FILTER)
        if not chosen:
            return None
        path = Path(chosen)
    report: list[str] = []
    try:
        new = store.load_settings_file(Path(path), report)
    except AvatarError as exc:  # nothing applied: the whole file is read and checked first
        win.notifier.error(f"Settings not imported: {exc}")
        return None
    apply_settings(win, new)
    win.settings.setValue("last_export", str(path))
    if report:
        more = f"\n…and {len(report) - MAX_LISTED} more" if len(report) > MAX_LISTED else ""
        win.notifier.error(f"Settings imported from {Path(path).name}; these values were rejected and their "
                           "defaults used:\n" + "\n".join(report[:MAX_LISTED]) + more)
    else:
        win.notifier.status(f"Settings imported from {path}", 10000)
    return report


def apply_settings(win, new: store.StudioSettings) -> None:
    """Apply every area of ``new`` to the window's session and panels, then persist them all."""
    s, p = win.session, win.panels
    s.set_tuning(new.tuning)
    p["tracking"].load(new.tuning)
    p["expressions"].show_settings(new.expressions)
    s.set_expression_settings(new.expressions)
    path = Path(new.avatar.path) if new.avatar.path else None
    s.set_avatar_settings(replace(new.avatar, path=s.settings.avatar.path))
    p["avatar"].show_settings(new.avatar)
    if str(path or "") != s.settings.avatar.path:
        if path is None:
            p["avatar"].use_default()
        else:
            p["avatar"].load(path)  # on a worker; a missing file is said there
    p["output"].show_settings(new.output)
    s.set_output_settings(new.output)
    for name, choice in new.engines.choices.items():
        box = p["engines"].boxes.get(name)
        if box is not None and isinstance(choice, dict) and choice.get("backend"):
            box.select(choice["backend"], choice.get("precision"))
    if new.engines.face != s.settings.engines.face:  # the face path: swapped between two frames
        s.set_face_path(new.engines.face)
    t = new.engines.tracker
    if t != s.settings.engines.tracker:  # the Tracking row: the tracker switches in the background
        p["engines"].tracker_box.select(t["kind"], t["backend"], t["precision"])
    if new.source.microphone != s.settings.source.microphone:
        s.set_microphone(new.source.microphone)
    s.settings.source = replace(new.source, kind=s.settings.source.kind)
    s.settings.fusion = new.fusion
    s.chain.fusion.settings = replace(new.fusion, smoothing=False)
    s.save_settings()


__all__ = ["apply_settings", "export_settings", "import_settings"]
