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


#: OpenGL enums (the OpenGL 3.3 core specification, table 2.3 and section 2.8.3).
_GL_TRIANGLES = 0x0004
_GL_UNSIGNED_INT = 0x1405


def gil_free_draw() -> Callable[[int, int, int], None] | None:
    """``draw(program_glo, vao_glo, index_count)``: ``glUseProgram``, ``glBindVertexArray`` and
    ``glDrawElements(GL_TRIANGLES, index_count, GL_UNSIGNED_INT, 0)`` through ctypes, which releases
    the GIL while the driver works; None where unavailable (then draw with ``VertexArray.render``).

    Why: Mesa llvmpipe shades the vertices (the avatar's morph targets are applied in the vertex
    shader) inside the draw call, on the calling thread. Through moderngl that held the GIL for
    ~7 ms per frame (the default head, 658x593 view, on the 2-core machine), and the GUI
    thread, which needs the GIL to show a frame, waited for it. Linux (EGL) only: the function
    pointers come from ``eglGetProcAddress`` and act on the context current on the calling
    thread, which must be one of :func:`create_context`'s (4-byte indices, as the Renderer's).
    """
    import ctypes

    if not sys.platform.startswith("linux"):
        return None
    try:
        egl = ctypes.CDLL("libEGL.so.1")
        egl.eglGetProcAddress.restype = ctypes.c_void_p
        egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
        addrs = [egl.eglGetProcAddress(n) for n in (b"glUseProgram", b"glBindVertexArray", b"glDrawElements")]
    except (OSError, AttributeError) as exc:
        log.info("OpenGL draw calls through ctypes unavailable (%s); drawing holds the GIL", exc)
        return None
    if not all(addrs):
        return None
    use = ctypes.CFUNCTYPE(None, ctypes.c_uint)(addrs[0])
    bind = ctypes.CFUNCTYPE(None, ctypes.c_uint)(addrs[1])
    draw = ctypes.CFUNCTYPE(None, ctypes.c_uint, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p)(addrs[2])

    def draw_elements(program_glo: int, vao_glo: int, index_count: int) -> None:
        use(program_glo)
        bind(vao_glo)
        draw(_GL_TRIANGLES, int(index_count), _GL_UNSIGNED_INT, None)

    return draw_elements
