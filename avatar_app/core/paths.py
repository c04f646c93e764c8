"""File-system checks shared by everything that writes a file the user named."""
from __future__ import annotations

from pathlib import Path


def file_in_the_way(folder: str | Path) -> Path | None:
    """The first of ``folder`` and its parents that exists but is a file, or None.

    Such a file keeps the folder from being made (``mkdir`` then says only "File exists" or
    "Not a directory"); naming it tells the user what to move.

    Args:
        folder: the folder an output would go into.

    Returns:
        The path of the file, or None when every existing one of them is a folder.
    """
    folder = Path(folder)
    return next((a for a in (folder, *folder.parents) if a.exists() and not a.is_dir()), None)
