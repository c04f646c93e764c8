"""The avatar viewport: the shared Renderer on a render thread, shown in a plain widget, plus the overlay.

Why not a QOpenGLWidget: with one in a window, Qt composes the whole window
through OpenGL on the GUI thread at every update. On software OpenGL (Mesa
llvmpipe, the machines without a GPU this app supports) that kept the GUI
thread busy for 50-200 ms at a time. Here a render thread owns an offscreen
OpenGL 3.3 context (EGL on Linux, the platform's default elsewhere) and the
project's :class:`~avatar_app.render.renderer.Renderer`; it renders the newest
state at the widget's size in device pixels (HiDPI-correct), reads it back and
hands a QImage to the widget, which only draws the image. Frames for the
recorder are rendered at the recording size on the same thread, so the GUI
thread never reads pixels back either.
"""
from __future__ import annotations

import logging
import sys
import threading
from dataclasses import replace

import numpy as np
from PySide6.QtCore import QRect, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QImage, QPainter
from PySide6.QtWidgets import QLabel, QWidget

from avatar_app.core.clock import now_ns
from avatar_app.core.errors import AvatarError
from avatar_app.core.types import AvatarState

log = logging.getLogger(__name__)

_STOP = object()


def _gil_free_finish():
    """``glFinish`` called through ctypes, which releases the GIL while it waits.

    moderngl keeps Python's GIL while OpenGL works; with software rendering the
    wait for a frame (10-30 ms) then blocks every Python thread, the GUI's
    included. Finishing through ctypes first lets other threads run while the
    rasteriser works; the read-back that follows only copies. Returns None when
    the function cannot be found (moderngl's own finish is used then).
    """
    import ctypes
    import ctypes.util

    try:
        if sys.platform.startswith("linux"):
            egl = ctypes.CDLL("libEGL.so.1")
            egl.eglGetProcAddress.restype = ctypes.c_void_p
            egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
            addr = egl.eglGetProcAddress(b"glFinish")
            return ctypes.CFUNCTYPE(None)(addr) if addr else None
        if sys.platform == "win32":
            return ctypes.WinDLL("opengl32").glFinish
        path = ctypes.util.find_library("OpenGL")
        return ctypes.CDLL(path).glFinish if path else None
    except (OSError, AttributeError) as exc:
        log.info("glFinish through ctypes unavailable (%s); the render thread will hold the GIL", exc)
        return None


def _create_context():
    """A standalone OpenGL 3.3 core context for the render thread."""
    import moderngl

    if sys.platform.startswith("linux"):
        from avatar_app.render.headless import create_egl_context

        return create_egl_context()
    return moderngl.create_standalone_context(require=330)


class _RenderThread(threading.Thread):
    """Owns the GL context and Renderer; renders the newest state on request.

    Thread: everything except the public request methods runs on this thread.
    """

    def __init__(self, view: "AvatarViewportWidget", background, lighting, msaa):
        super().__init__(name="viewport-render", daemon=True)
        self.view = view
        self._cond = threading.Condition()
        self._state: AvatarState | None = None
        self._seq = 0
        self._done_seq = 0
        self._size = (0, 0, 1.0)
        self._capture: tuple[int, int, int] | None = None
        self._unrendered = False  # the state waiting was not rendered yet
        #: States replaced before they were rendered while capturing (lost to the recording).
        self.captures_skipped = 0
        self._commands: list = []
        self._settings = {"background": background, "lighting": lighting, "msaa": msaa}
        self._stopping = False
        self.renderer = None
        self.ready = threading.Event()
        self.error: str | None = None
        #: The newest rendered frame as a QImage (also delivered by signal).
        self.last_image: QImage | None = None

    # -- requests (any thread) ---------------------------------------------------------
    def submit(self, state: AvatarState) -> int:
        """Render ``state`` next (newest wins); returns its request number.

        While capturing, a new state that replaces one not rendered yet counts in
        ``captures_skipped`` (that frame never reaches the recording).
        """
        with self._cond:
            if self._capture is not None and self._unrendered and state is not self._state:
                self.captures_skipped += 1
            self._unrendered = state is not self._state or self._unrendered
            self._state = state
            self._seq += 1
            self._cond.notify()
            return self._seq

    def command(self, name: str, value) -> None:
        with self._cond:
            self._commands.append((name, value))
            self._seq += 1
            self._cond.notify()

    def set_size(self, width: int, height: int, ratio: float) -> None:
        with self._cond:
            self._size = (int(width), int(height), float(ratio))

    def set_capture(self, spec: tuple[int, int, int] | None) -> None:
        with self._cond:
            self._capture = spec

    def wait_done(self, seq: int, timeout_s: float) -> bool:
        """Block until request ``seq`` was rendered (GUI thread: only for explicit grabs)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._done_seq >= seq or self._stopping, timeout_s)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.join(timeout=5)

    # -- the thread -------------------------------------------------------------------
    def run(self) -> None:
        from avatar_app.render.renderer import Renderer

        what = "OpenGL 3.3 could not be started for the avatar view"
        try:
            self.ctx = _create_context()
            s = self._settings
            self.renderer = Renderer(self.ctx, background=s["background"], msaa=s["msaa"], lighting=s["lighting"])
            from avatar_app.avatar.default_head import build_default_head

            what = "The default avatar could not be built"
            self.renderer.set_avatar(build_default_head())
        except Exception as exc:  # noqa: BLE001 - OpenGL missing or too old: the window stays usable
            self.error = f"{what}: {exc}"
            log.error("%s", self.error)
            if self.renderer is not None:
                self.renderer.release()
            if getattr(self, "ctx", None) is not None:
                self.ctx.release()
            self.renderer = None
            self.ready.set()
            try:
                self.view.gl_failed.emit(self.error)
            except RuntimeError:  # the widget is gone
                pass
            return
        self.error = None
        self._finish = _gil_free_finish() or self.ctx.finish
        self.ready.set()
        fbos: dict[tuple[int, int], object] = {}
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping or self._seq > self._done_seq)
                    if self._stopping:
                        break
                    seq, state, commands = self._seq, self._state, self._commands
                    self._unrendered = False
                    self._commands = []
                    width, height, ratio = self._size
                    capture = self._capture
                for name, value in commands:
                    self._apply(name, value)
                if state is not None and width > 0 and height > 0:
                    self._render(state, width, height, ratio, capture, fbos)
                with self._cond:
                    self._done_seq = seq
                    self._cond.notify_all()
        finally:
            for fbo, col, dep in fbos.values():
                fbo.release()
                col.release()
                dep.release()
            self.renderer.release()
            self.ctx.release()

    def _apply(self, name: str, value) -> None:
        try:
            if name == "avatar":
                self.renderer.set_avatar(value)
            elif name == "background":
                self.renderer.background = value
            elif name == "lighting":
                self.renderer.lighting = value
            elif name == "msaa":
                self.renderer.msaa = value
        except AvatarError as exc:
            log.warning("viewport: cannot apply %s: %s", name, exc)

    def _fbo(self, fbos, w: int, h: int):
        key = (w, h)
        if key not in fbos:
            if len(fbos) > 3:  # drop sizes from old resizes
                for k in [k for k in fbos if k != self._capture_key]:
                    for obj in fbos.pop(k):
                        obj.release()
            col = self.ctx.renderbuffer((w, h), 4)
            dep = self.ctx.depth_renderbuffer((w, h))
            fbos[key] = (self.ctx.framebuffer(color_attachments=[col], depth_attachment=dep), col, dep)
        return fbos[key][0]

    _capture_key = None

    def _read(self, fbo, w: int, h: int, components: int) -> np.ndarray:
        self._finish()  # wait for the rasteriser without holding the GIL
        out = np.empty((h, w, components), np.uint8)
        fbo.read_into(out, components=components, alignment=1)
        return out

    def _render(self, state: AvatarState, width: int, height: int, ratio: float, capture, fbos) -> None:
        r = self.renderer
        comps = 4 if r.transparent else 3
        fbo = self._fbo(fbos, width, height)
        t0 = now_ns()
        r.render(state, width, height, fbo, flip_y=True)
        rgb = self._read(fbo, width, height, comps)
        t1 = now_ns()
        fmt = QImage.Format.Format_RGBA8888 if comps == 4 else QImage.Format.Format_RGB888
        img = QImage(rgb.data, width, height, width * comps, fmt).copy()
        img.setDevicePixelRatio(ratio)
        if state.stamps:
            stamps = dict(state.stamps)
            stamps["render"] = (t0, t1)
            state = replace(state, stamps=stamps)
        captured = None
        if capture is not None:
            cw, ch, cc = capture
            self._capture_key = (cw, ch)
            cfbo = self._fbo(fbos, cw, ch)
            r.render(state, cw, ch, cfbo, flip_y=True)
            captured = self._read(cfbo, cw, ch, 4 if cc == 4 else 3)
        self.last_image = img
        if not self._stopping:
            try:
                self.view._frame_rendered.emit(img, state, captured)
            except RuntimeError:  # the widget was deleted while we rendered
                self._stopping = True


class AvatarViewportWidget(QWidget):
    """Shows the newest AvatarState rendered by the project's moderngl Renderer (on a render thread).

    The widget owns no pipeline: the window calls :meth:`show_state` with the
    newest state; ``frame_presented(state, t_present_ns)`` is emitted after each
    new frame is painted (camera-to-screen latency; ``state.stamps["render"]``
    holds the render time); with ``capture_frames`` set, every frame is also
    rendered at ``capture_size`` and emitted as ``frame_captured(rgb, t_present_ns)``,
    (H, W, 3) uint8 RGB, or (H, W, 4) RGBA when ``capture_components`` is 4.

    Thread: GUI thread only (the render thread is internal).
    """

    frame_presented = Signal(object, object)
    frame_captured = Signal(object, object)
    gl_failed = Signal(str)
    _frame_rendered = Signal(object, object, object)

    def __init__(self, parent=None, background=(0, 177, 64), msaa: int = 0, lighting: str = "studio"):
        super().__init__(parent)
        self.setMinimumSize(320, 240)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.background = tuple(background) if not isinstance(background, str) else background
        self.msaa = int(msaa)
        self.lighting = lighting
        self.capture_frames = False
        self.capture_size: tuple[int, int] | None = None
        #: 3 (RGB) or 4 (RGBA, for recording formats that keep transparency).
        self.capture_components = 3
        self.frames_presented = 0
        #: The AvatarState of the newest ``frame_captured`` frame (its ``t_capture_ns``
        #: places the frame in a recording).
        self.captured_state: AvatarState | None = None
        self._state = AvatarState.neutral()
        self._image: QImage | None = None
        self._image_state = None
        self._pending_present = None
        self._pending_capture = None
        self._captures_overwritten = 0
        self._error: str | None = None
        self.gl_failed.connect(self._on_gl_failed)
        self._frame_rendered.connect(self._on_frame_rendered)
        self.overlay = QLabel(self)
        self.overlay.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        font = QFont("monospace")
        font.setStyleHint(QFont.StyleHint.Monospace)
        font.setPointSize(9)
        self.overlay.setFont(font)
        self.overlay.setStyleSheet("color: white; background: rgba(0,0,0,140); padding: 4px; border-radius: 3px;")
        self.overlay.move(8, 8)
        self.overlay.hide()
        #: A persistent notice at the bottom centre (e.g. "No face found"); see set_notice.
        self.notice = self._message_label("color: white; background: rgba(160,30,30,190); padding: 6px 10px;"
                                          " border-radius: 4px;")
        #: A transient hint at the bottom centre (e.g. "Press Ctrl+H to show panels"); see flash_hint.
        self.hint = self._message_label("color: white; background: rgba(0,0,0,170); padding: 8px 14px;"
                                        " border-radius: 5px;")
        self._hint_timer = QTimer(self)
        self._hint_timer.setSingleShot(True)
        self._hint_timer.timeout.connect(self._hide_hint)
        self._thread = _RenderThread(self, self.background, lighting, self.msaa)
        self._thread.start()

    # -- API -------------------------------------------------------------------------
    @property
    def captures_skipped(self) -> int:
        """States shown while capturing that never became a ``frame_captured`` frame (newest wins).

        Counts since the widget was made; the window takes the difference over a recording.
        """
        return self._thread.captures_skipped + self._captures_overwritten

    def show_state(self, state: AvatarState) -> None:
        """Render ``state`` next (asynchronously; newest wins)."""
        self._state = state
        self._sync_capture()
        self._thread.submit(state)

    def set_overlay_lines(self, lines: list[str] | None) -> None:
        """Show (or hide, with None) the latency overlay text."""
        if not lines:
            self.overlay.hide()
            return
        self.overlay.setText("\n".join(lines))
        self.overlay.adjustSize()
        self.overlay.show()

    def _message_label(self, style: str) -> QLabel:
        lab = QLabel(self)
        lab.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        font = lab.font()
        font.setPointSize(font.pointSize() + 2)
        lab.setFont(font)
        lab.setStyleSheet(style)
        lab.hide()
        return lab

    def _place_messages(self) -> None:
        # bottom centre, clear of the latency overlay (top left); the hint under the notice
        w, h = self.width(), self.height()
        bottom = h - 16
        if self.hint.isVisible():
            self.hint.move(max(0, (w - self.hint.width()) // 2), max(0, bottom - self.hint.height()))
            bottom -= self.hint.height() + 8
        if self.notice.isVisible():
            self.notice.move(max(0, (w - self.notice.width()) // 2), max(0, bottom - self.notice.height()))

    def _hide_hint(self) -> None:
        self.hint.hide()
        self._place_messages()

    def set_notice(self, text: str | None) -> None:
        """Show ``text`` at the bottom centre of the view until it is set to None.

        On the widget only: never in recordings or the virtual camera (those come from
        the render thread).
        """
        if not text:
            self.notice.hide()
            return
        if self.notice.text() != text or not self.notice.isVisible():
            self.notice.setText(text)
            self.notice.adjustSize()
            self.notice.show()
            self.notice.raise_()
            self._place_messages()

    def flash_hint(self, text: str | None, duration_ms: int = 3000) -> None:
        """Show ``text`` at the bottom centre for ``duration_ms`` (None hides it now). Widget only, as set_notice."""
        self._hint_timer.stop()
        if not text:
            self._hide_hint()
            return
        self.hint.setText(text)
        self.hint.adjustSize()
        self.hint.show()
        self.hint.raise_()
        self._place_messages()
        self._hint_timer.start(int(duration_ms))

    def set_render_settings(self, background=None, lighting: str | None = None, msaa: int | None = None) -> None:
        """Change the background ((R, G, B) bytes or "transparent"), lighting preset or MSAA samples.

        Applied on the render thread before the next frame (which is rendered at once).
        Invalid values are logged and ignored by the renderer.
        """
        if background is not None:
            self.background = tuple(background) if not isinstance(background, str) else background
            self._thread.command("background", self.background)
        if lighting is not None:
            self.lighting = lighting
            self._thread.command("lighting", lighting)
        if msaa is not None:
            self.msaa = int(msaa)
            self._thread.command("msaa", self.msaa)
        self._thread.submit(self._state)

    def set_avatar(self, mesh) -> None:
        """Show another avatar (an AvatarMesh)."""
        self._thread.command("avatar", mesh)
        self._thread.submit(self._state)

    @property
    def renderer(self):
        """The Renderer (owned by the render thread; read its settings only), or None."""
        return self._thread.renderer

    @property
    def error(self) -> str | None:
        """Why OpenGL could not start, or None."""
        return self._error or self._thread.error

    def grabFramebuffer(self, timeout_s: float = 5.0) -> QImage:  # noqa: N802 (QOpenGLWidget's name)
        """Render the current state now and return it, (device-pixel size) QImage.

        Blocks the calling (GUI) thread until the frame is rendered: for tests and
        screenshots, not for the display path.
        """
        self._thread.ready.wait(timeout_s)
        self._sync_size()
        seq = self._thread.submit(self._state)
        self._thread.wait_done(seq, timeout_s)
        img = self._thread.last_image
        return img.copy() if img is not None else QImage()

    def shutdown(self) -> None:
        """Stop the render thread (the window calls this when it closes)."""
        self._hint_timer.stop()
        self._thread.stop()

    # -- internals ---------------------------------------------------------------------
    def _sync_size(self) -> None:
        ratio = self.devicePixelRatioF()
        self._thread.set_size(max(1, round(self.width() * ratio)), max(1, round(self.height() * ratio)), ratio)

    def _sync_capture(self) -> None:
        if self.capture_frames:
            w, h = self.capture_size or (1280, 720)
            self._thread.set_capture((w, h, self.capture_components))
        else:
            self._thread.set_capture(None)

    def _on_gl_failed(self, message: str) -> None:
        self._error = message
        self.update()

    def _on_frame_rendered(self, img: QImage, state, captured) -> None:
        # Runs on the GUI thread (queued from the render thread).
        self._image = img
        self._pending_present = state
        if captured is not None and self._pending_capture is not None:
            self._captures_overwritten += 1  # rendered for the recording, replaced before it was handed on
        self._pending_capture = captured
        self.update()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._sync_size()
        self._thread.submit(self._state)
        self._place_messages()
        super().resizeEvent(event)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._sync_size()
        self._thread.submit(self._state)
        super().showEvent(event)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        p = QPainter(self)
        rect = self.rect()
        img = self._image
        if img is None or img.isNull():
            p.fillRect(rect, QColor(40, 40, 40))
            if self._error:
                p.setPen(QColor(230, 230, 230))
                p.drawText(rect.adjusted(20, 20, -20, -20), Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
                           self._error)
            p.end()
            return
        if img.hasAlphaChannel():
            self._checkerboard(p, rect)
        p.drawImage(QRect(0, 0, round(img.width() / img.devicePixelRatio()),
                          round(img.height() / img.devicePixelRatio())), img)
        p.end()
        state, self._pending_present = self._pending_present, None
        if state is not None:
            t = now_ns()
            self.frames_presented += 1
            self.frame_presented.emit(state, t)
            captured, self._pending_capture = self._pending_capture, None
            if captured is not None:
                self.captured_state = state
                self.frame_captured.emit(captured, t)

    @staticmethod
    def _checkerboard(p: QPainter, rect) -> None:
        """Grey checks behind a transparent background, as image editors show transparency."""
        s = 16
        p.fillRect(rect, QColor(200, 200, 200))
        for y in range(0, rect.height(), s):
            for x in range((y // s) % 2 * s, rect.width(), 2 * s):
                p.fillRect(x, y, s, s, QColor(150, 150, 150))
