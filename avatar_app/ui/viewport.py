"""The avatar viewport: the shared Renderer inside a QOpenGLWidget, plus the latency overlay."""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtOpenGLWidgets import QOpenGLWidget
from PySide6.QtWidgets import QLabel

from avatar_app.core.clock import now_ns
from avatar_app.core.types import AvatarState

log = logging.getLogger(__name__)


class AvatarViewportWidget(QOpenGLWidget):
    """Renders the newest AvatarState with the project's moderngl Renderer.

    The widget owns no pipeline: the window calls :meth:`show_state` with the
    newest state; ``frame_presented(state, t_present_ns)`` is emitted after each
    paint (camera-to-screen latency); with ``capture_frames`` set, every painted
    frame is read back and emitted as ``frame_captured(rgb, t_present_ns)``
    (H, W, 3) uint8 for the recorder.

    Thread: GUI thread only.
    """

    frame_presented = Signal(object, object)
    frame_captured = Signal(object, object)
    gl_failed = Signal(str)

    def __init__(self, parent=None, background=(0, 177, 64), msaa: int = 0, lighting: str = "studio"):
        super().__init__(parent)
        self.setMinimumSize(320, 240)
        self.background = background
        self.msaa = msaa
        self.lighting = lighting
        self.capture_frames = False
        self.capture_size: tuple[int, int] | None = None
        #: 3 (RGB) or 4 (RGBA, for recording formats that keep transparency).
        self.capture_components = 3
        self.frames_presented = 0
        self._state = AvatarState.neutral()
        self._ctx = None
        self._renderer = None
        self._offscreen = None
        self._offscreen_c = 3
        self._error: str | None = None
        self.overlay = QLabel(self)
        self.overlay.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        font = QFont("monospace")
        font.setStyleHint(QFont.StyleHint.Monospace)
        font.setPointSize(9)
        self.overlay.setFont(font)
        self.overlay.setStyleSheet("color: white; background: rgba(0,0,0,140); padding: 4px; border-radius: 3px;")
        self.overlay.move(8, 8)
        self.overlay.hide()

    # -- API
    def show_state(self, state: AvatarState) -> None:
        """Schedule a repaint showing ``state``."""
        self._state = state
        self.update()

    def set_overlay_lines(self, lines: list[str] | None) -> None:
        """Show (or hide, with None) the latency overlay text."""
        if not lines:
            self.overlay.hide()
            return
        self.overlay.setText("\n".join(lines))
        self.overlay.adjustSize()
        self.overlay.show()

    def set_render_settings(self, background=None, lighting: str | None = None, msaa: int | None = None) -> None:
        """Change the background ((R, G, B) bytes or "transparent"), lighting preset or MSAA samples.

        Settings given before OpenGL starts are applied when it does.

        Raises:
            InputError: an invalid value (see Renderer).
        """
        if background is not None:
            self.background = tuple(background) if not isinstance(background, str) else background
        if lighting is not None:
            self.lighting = lighting
        if msaa is not None:
            self.msaa = int(msaa)
        if self._renderer is None:
            return
        self.makeCurrent()
        try:
            r = self._renderer
            if background is not None:
                r.background = self.background
            if lighting is not None:
                r.lighting = self.lighting
            if msaa is not None:
                r.msaa = self.msaa
        finally:
            self.doneCurrent()
        self.update()

    @property
    def renderer(self):
        """The Renderer (None before OpenGL started or when it failed)."""
        return self._renderer

    @property
    def error(self) -> str | None:
        """Why OpenGL could not start, or None."""
        return self._error

    def set_avatar(self, mesh) -> None:
        """Show another avatar (an AvatarMesh)."""
        if self._renderer is None:
            self._pending_avatar = mesh
            return
        self.makeCurrent()
        try:
            self._renderer.set_avatar(mesh)
        finally:
            self.doneCurrent()
        self.update()

    # -- QOpenGLWidget
    def initializeGL(self) -> None:  # noqa: N802 (Qt override)
        import moderngl

        from avatar_app.avatar.default_head import build_default_head
        from avatar_app.render.renderer import Renderer

        try:
            self._ctx = moderngl.create_context(require=330)
            self._renderer = Renderer(self._ctx, background=self.background, msaa=self.msaa,
                                      lighting=self.lighting)
            mesh = getattr(self, "_pending_avatar", None) or build_default_head()
            self._renderer.set_avatar(mesh)
        except Exception as exc:  # OpenGL missing or too old: the window stays usable
            self._error = f"OpenGL 3.3 could not be started for the avatar view: {exc}"
            log.error("%s", self._error)
            self._renderer = None
            self.gl_failed.emit(self._error)

    def paintGL(self) -> None:  # noqa: N802 (Qt override)
        if self._renderer is None:
            return
        state = self._state
        ratio = self.devicePixelRatioF()
        w, h = max(1, int(self.width() * ratio)), max(1, int(self.height() * ratio))
        fbo = self._ctx.detect_framebuffer(self.defaultFramebufferObject())
        t0 = now_ns()
        self._renderer.render(state, w, h, fbo)
        self._ctx.finish()
        t = now_ns()
        rgb = None
        if self.capture_frames:
            rgb = self._capture(state)
        if state.stamps:
            stamps = dict(state.stamps)
            stamps["render"] = (t0, t)
            state = replace(state, stamps=stamps)
        self.frames_presented += 1
        self.frame_presented.emit(state, t)
        if rgb is not None:
            self.frame_captured.emit(rgb, t)

    def _capture(self, state: AvatarState) -> np.ndarray:
        """Render ``state`` at the recording size offscreen and read it back, (H, W, C) uint8.

        C is :attr:`capture_components` (3 = RGB, 4 = RGBA with straight alpha).
        """
        w, h = self.capture_size or (1280, 720)
        c = 4 if self.capture_components == 4 else 3
        if self._offscreen is None or self._offscreen.size != (w, h) or self._offscreen_c != c:
            if self._offscreen is not None:
                self._offscreen.release()
            self._offscreen = self._ctx.simple_framebuffer((w, h), components=4)
            self._offscreen_c = c
        self._renderer.render(state, w, h, self._offscreen)
        data = self._offscreen.read(components=c, alignment=1)
        return np.frombuffer(data, np.uint8).reshape(h, w, c)[::-1].copy()
