"""avatar_app: a webcam and a microphone drive a 3D avatar head in real time.

See README.md (architecture) and ../shared/DESIGN.md for the data flow.
"""
from __future__ import annotations

__all__ = ["__version__"]

try:  # the version lives in pyproject.toml only
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("avatar-app")
except PackageNotFoundError:  # pragma: no cover - source tree without install
    __version__ = "0.0.0+source"
