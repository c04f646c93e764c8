"""Offscreen rendering into numpy arrays on the calling thread (EGL: Mesa llvmpipe without a GPU).

Used by tests, benchmarks and training scripts; the app's own rendering runs on a
:class:`~avatar_app.render.thread.RenderThread`.
"""
from __future__ import annotations

import logging

import numpy as np

from avatar_app.avatar.mesh import AvatarMesh
from avatar_app.core.errors import InputError
from avatar_app.core.types import AvatarState
from avatar_app.render.context import create_context
from avatar_app.render.renderer import CHROMA_GREEN, Background, Lighting, Renderer

logger = logging.getLogger(__name__)


#: The context picker's old name (training and benchmark scripts use it).
create_egl_context = create_context


class HeadlessRenderer:
    """Renders avatar frames offscreen and reads them back.

    Thread: create, use and close it on one thread (the EGL context is current there).

    Args:
        width, height: output size in pixels.
        msaa: 0, 2, 4 or 8 samples (see :class:`Renderer`).
        background: (R, G, B) sRGB bytes, default chroma green (0, 177, 64), or
            ``"transparent"`` for RGBA output.
        avatar: the avatar; default :func:`~avatar_app.avatar.default_head.build_default_head`.
        lighting: preset name or :class:`Lighting`.

    Raises:
        BackendUnavailableError: no EGL / OpenGL 3.3 context can be created.
        InputError: a size or setting is invalid.
    """

    def __init__(
        self,
        width: int,
        height: int,
        msaa: int = 0,
        background: Background = CHROMA_GREEN,
        avatar: AvatarMesh | None = None,
        lighting: str | Lighting = "studio",
    ):
        if width <= 0 or height <= 0 or width > 8192 or height > 8192:
            raise InputError(f"render size must be within 1..8192 pixels, got {width}x{height}")
        self.width, self.height = int(width), int(height)
        self.ctx = create_context()
        try:
            self.renderer = Renderer(self.ctx, msaa=msaa, background=background, lighting=lighting)
            if avatar is None:
                from avatar_app.avatar.default_head import build_default_head

                avatar = build_default_head()
            self.renderer.set_avatar(avatar)
            self._components = 4 if self.renderer.transparent else 3
            self._color = self.ctx.renderbuffer((self.width, self.height), 4)
            self._depth = self.ctx.depth_renderbuffer((self.width, self.height))
            self.fbo = self.ctx.framebuffer(color_attachments=[self._color], depth_attachment=self._depth)
            self._out = np.empty((self.height, self.width, self._components), np.uint8)
        except BaseException:
            self.ctx.release()
            raise
        logger.info("headless renderer %dx%d msaa=%d on %s", self.width, self.height, self.renderer.msaa,
                    self.ctx.info.get("GL_RENDERER", "?"))

    @property
    def channels(self) -> int:
        """3 (RGB) or 4 (RGBA, transparent background)."""
        return self._components

    def render(self, state: AvatarState) -> np.ndarray:
        """Render one frame.

        Args:
            state: the avatar state to draw.

        Returns:
            (H, W, 3) uint8 RGB, or (H, W, 4) RGBA with a transparent background,
            top row first. The array is reused by the next call: copy it to keep it.

        Raises:
            InputError: the renderer was closed.
        """
        if self.fbo is None:
            raise InputError("HeadlessRenderer.render called after close()")
        with self.ctx:  # make this context current (several renderers may coexist)
            self.renderer.render(state, self.width, self.height, self.fbo, flip_y=True)
            self.fbo.read_into(self._out, components=self._components, alignment=1)
        return self._out

    def set_avatar(self, avatar: AvatarMesh) -> None:
        """Replace the avatar (see :meth:`Renderer.set_avatar`)."""
        with self.ctx:
            self.renderer.set_avatar(avatar)

    def close(self) -> None:
        """Release the GL objects and the context. Idempotent."""
        if self.fbo is None:
            return
        with self.ctx:
            self.renderer.release()
            for obj in (self.fbo, self._color, self._depth):
                obj.release()
        self.fbo = None
        self.ctx.release()

    def __enter__(self) -> "HeadlessRenderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
