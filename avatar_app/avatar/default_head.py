"""The default avatar head at run time: the shipped ``assets/default_head.glb``, or a build by code.

The head itself is made by :mod:`avatar_app.avatar.authoring.default_head` (about 2 s);
``training/build_default_head.py`` writes it to the asset, which start-up reads in
about 0.1 s. A missing or stale asset (another :data:`BUILDER_VERSION`) is rebuilt
by code, with a warning.
"""
from __future__ import annotations

import copy
import logging
import threading
from dataclasses import dataclass

from avatar_app.avatar.glb_reader import read_avatar_glb
from avatar_app.avatar.mesh import AvatarMesh
from avatar_app.core.errors import AvatarError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeadStyle:
    """Colours of the default head, linear RGB in [0, 1] (avoid greens: chroma key).

    Attributes:
        skin, lips, blush, hair, brows, iris, shirt, collar, lash: part colours.
        mouth_smile: upward curve of the lip line at the corners, radians of latitude.
    """

    skin: tuple[float, float, float] = (0.80, 0.52, 0.38)
    lips: tuple[float, float, float] = (0.62, 0.24, 0.22)
    blush: tuple[float, float, float] = (0.85, 0.38, 0.33)
    hair: tuple[float, float, float] = (0.105, 0.048, 0.024)
    brows: tuple[float, float, float] = (0.07, 0.035, 0.02)
    iris: tuple[float, float, float] = (0.20, 0.085, 0.030)
    shirt: tuple[float, float, float] = (0.10, 0.13, 0.32)
    collar: tuple[float, float, float] = (0.07, 0.09, 0.22)
    lash: tuple[float, float, float] = (0.035, 0.02, 0.015)
    mouth_smile: float = 0.032


_cache: dict[HeadStyle, AvatarMesh] = {}
_cache_lock = threading.Lock()

#: The shipped default head, written by ``training/build_default_head.py``.
DEFAULT_HEAD_ASSET = "assets/default_head.glb"
#: Bump when the construction changes: an asset written by another version is rebuilt.
BUILDER_VERSION = 2


def build_default_head(style: HeadStyle | None = None, *, cached: bool = True,
                       from_asset: bool = True) -> AvatarMesh:
    """The default avatar head.

    With the default style it is read from ``assets/default_head.glb`` (about
    0.1 s) when that file exists and was written by this builder version;
    otherwise it is built by code (about 2 s, see
    :func:`avatar_app.avatar.authoring.default_head.build_head`). Later
    calls return a deep copy of the cached result (a few ms), so callers may
    modify what they get. Thread-safe.

    Args:
        style: colours; default :class:`HeadStyle` (other styles are always built).
        cached: reuse (a copy of) an earlier result with the same style.
        from_asset: allow reading the shipped asset.

    Returns:
        An :class:`AvatarMesh`, see :func:`~avatar_app.avatar.authoring.default_head.build_head`.
    """
    style = style or HeadStyle()
    if not cached:
        return _load_or_build(style, from_asset)
    with _cache_lock:
        if style not in _cache:
            _cache[style] = _load_or_build(style, from_asset)
        return copy.deepcopy(_cache[style])


def _load_or_build(style: HeadStyle, from_asset: bool) -> AvatarMesh:
    if from_asset and style == HeadStyle():
        from avatar_app.resources import resource_path

        path = resource_path(DEFAULT_HEAD_ASSET)
        if path.is_file():
            try:
                mesh, extras = read_avatar_glb(path)
            except AvatarError as exc:
                logger.warning("default head asset unusable, building it instead: %s", exc)
            else:
                if extras.get("builder_version") == BUILDER_VERSION:
                    return mesh
                logger.warning("%s was written by builder version %s (this is %s): building the head "
                               "instead; run training/build_default_head.py", path,
                               extras.get("builder_version"), BUILDER_VERSION)
        else:
            logger.info("%s not found: building the default head by code", path)
    from avatar_app.avatar.authoring.default_head import build_head  # needs scipy: only when building

    return build_head(style)
