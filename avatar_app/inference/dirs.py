"""User cache and data directories (the platformdirs conventions, without the dependency).

- Linux/BSD: ``$XDG_CACHE_HOME/avatar-app`` (default ``~/.cache/avatar-app``) and
  ``$XDG_DATA_HOME/avatar-app`` (default ``~/.local/share/avatar-app``).
- macOS: ``~/Library/Caches/avatar-app`` and ``~/Library/Application Support/avatar-app``.
- Windows: ``%LOCALAPPDATA%\\avatar-app\\Cache`` and ``%LOCALAPPDATA%\\avatar-app``.

``AVATAR_APP_CACHE_DIR`` and ``AVATAR_APP_DATA_DIR`` override them (tests, portable installs).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

APP_DIR_NAME = "avatar-app"


def user_cache_dir() -> Path:
    """Root of the engine cache (not created here)."""
    env = os.environ.get("AVATAR_APP_CACHE_DIR")
    if env:
        return Path(env)
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / APP_DIR_NAME / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / APP_DIR_NAME
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / APP_DIR_NAME


def user_data_dir() -> Path:
    """Root of user data kept on this machine (recorded calibration samples)."""
    env = os.environ.get("AVATAR_APP_DATA_DIR")
    if env:
        return Path(env)
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / APP_DIR_NAME
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_DIR_NAME
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / APP_DIR_NAME
