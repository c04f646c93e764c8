"""The one place that picks an OpenGL context: a standalone OpenGL 3.3 core context for a render thread.

Linux uses EGL (Mesa llvmpipe on machines without a GPU: Debian packages
libegl1 and libgl1-mesa-dri); other platforms use moderngl's default
standalone context (WGL, CGL). The context is current on the thread that
created it.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import moderngl

from avatar_app.core.errors import BackendUnavailableError

log = logging.getLogger(__name__)


def create_context() -> moderngl.Context:
    """A standalone OpenGL 3.3 core context (EGL on Linux, the platform's default elsewhere).

    Raises:
        BackendUnavailableError: no such context can be created (on Linux install the
            Debian packages libegl1 and libgl1-mesa-dri).
    """
    linux = sys.platform.startswith("linux")
    try:
        if linux:
            return moderngl.create_standalone_context(backend="egl", require=330)
        return moderngl.create_standalone_context(require=330)
    except Exception as exc:  # moderngl/glcontext raise plain Exception subclasses here
        raise BackendUnavailableError(
            f"Cannot create an offscreen OpenGL context: {'EGL with ' if linux else ''}OpenGL 3.3 core is not "
            f"available ({exc}). On Debian/Ubuntu install libegl1 and libgl1-mesa-dri."
        ) from exc


def gil_free_finish(ctx: moderngl.Context) -> Callable[[], None]:
    """``glFinish`` called through ctypes, which releases the GIL while it waits (else ``ctx.finish``).

    moderngl keeps Python's GIL while OpenGL works; with software rendering the
    wait for a frame (10-30 ms) then blocks every Python thread, the GUI's
    included. Finishing through ctypes first lets other threads run while the
    rasteriser works; the read-back that follows only copies.

    Args:
        ctx: the current context (its ``finish`` is the fallback).
    """
    import ctypes
    import ctypes.util

    try:
        if sys.platform.startswith("linux"):
            egl = ctypes.CDLL("libEGL.so.1")
            egl.eglGetProcAddress.restype = ctypes.c_void_p
            egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
            addr = egl.eglGetProcAddress(b"glFinish")
            fn = ctypes.CFUNCTYPE(None)(addr) if addr else None
        elif sys.platform == "win32":
            fn = ctypes.WinDLL("opengl32").glFinish
        else:
            path = ctypes.util.find_library("OpenGL")
            fn = ctypes.CDLL(path).glFinish if path else None
    except (OSError, AttributeError) as exc:
        log.info("glFinish through ctypes unavailable (%s); the render thread will hold the GIL", exc)
        fn = None
    return fn or ctx.finish
