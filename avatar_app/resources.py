"""Find shipped data (assets/, models/) in the source tree, an installed wheel or a frozen bundle.

One function, :func:`resource_path`, so no module guesses paths on its own.

Layouts it knows (``rel`` is e.g. ``"assets/shaders/avatar.vert"``):

- PyInstaller bundle (``packaging/avatar_app.spec``): the data sits in
  ``sys._MEIPASS/avatar_app/assets`` and ``.../avatar_app/models``, the same
  place as in a wheel; ``sys._MEIPASS/<rel>`` is also accepted (other specs).
- Installed wheel: pyproject maps the repository's top-level ``assets/`` and
  ``models/`` into the package, so ``<site-packages>/avatar_app/<rel>``.
- Source tree / editable install: ``<repository>/<rel>``. Only used when the
  package's parent directory really is the repository (it holds
  ``pyproject.toml``), so a stray top-level ``assets/`` folder that some other
  distribution left in ``site-packages`` is never picked up.
"""
from __future__ import annotations

import sys
from pathlib import Path, PurePath

_PKG_DIR = Path(__file__).resolve().parent


def _candidates(rel: PurePath) -> list[Path]:
    """Where ``rel`` may live, most specific first."""
    out: list[Path] = []
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        out.append(Path(bundle) / "avatar_app" / rel)
        out.append(Path(bundle) / rel)
    out.append(_PKG_DIR / rel)
    repo = _PKG_DIR.parent
    if (repo / "pyproject.toml").is_file():
        out.append(repo / rel)
    return out


def resource_path(relative: str | Path) -> Path:
    """Absolute path of a shipped resource such as ``"assets/default_head.glb"``.

    Search order: a PyInstaller bundle (``sys._MEIPASS``), the installed package
    (``avatar_app/assets`` in a wheel), the source tree (repository root).

    Args:
        relative: path below the project root, starting with ``assets/`` or
            ``models/``; ``/`` separators on every platform.

    Returns:
        The first existing candidate; if none exists, the source-tree candidate
        when running from a checkout, else the installed-package one (so error
        messages name a sensible place). Never raises; callers check existence.
    """
    rel = PurePath(relative)
    candidates = _candidates(rel)
    for c in candidates:
        if c.exists():
            return c
    return candidates[-1]
