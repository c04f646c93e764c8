"""Find shipped data (assets/, models/) in the source tree, an installed wheel or a frozen bundle.

One function, :func:`resource_path`, so no module guesses paths on its own.
"""
from __future__ import annotations

import sys
from pathlib import Path

_PKG_DIR = Path(__file__).resolve().parent


def resource_path(relative: str | Path) -> Path:
    """Absolute path of a shipped resource such as ``"assets/default_head.glb"``.

    Search order: a PyInstaller bundle (``sys._MEIPASS``), the installed package
    (``avatar_app/assets`` in a wheel), the source tree (repository root).

    Args:
        relative: path below the project root, starting with ``assets/`` or ``models/``.

    Returns:
        The first existing candidate; if none exists, the source-tree candidate
        (so error messages name a sensible place).
    """
    rel = Path(relative)
    candidates = []
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        candidates.append(Path(bundle) / rel)
    candidates.append(_PKG_DIR / rel)
    candidates.append(_PKG_DIR.parent / rel)
    for c in candidates:
        if c.exists():
            return c
    return candidates[-1]
