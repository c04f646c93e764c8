"""The avatar viewport: the project's render thread, shown in a plain widget, plus the overlay.

Why not a QOpenGLWidget: with one in a window, Qt composes the whole window
through OpenGL on the GUI thread at every update. On software OpenGL (Mesa
llvmpipe, the machines without a GPU this app supports) that kept the GUI
thread busy for 50-200 ms at a time. Here a
:class:`~avatar_app.render.thread.RenderThread` with the newest-wins policy owns
an offscreen OpenGL 3.3 context (EGL on Linux) and the Renderer; it renders the
newest state at the widget's size, in device pixels up to a ratio of
:data:`VIEW_MAX_DPR` (Qt scales the image up on HiDPI screens beyond it), and reads it
back; this widget wraps the pixels in a QImage and only draws the image. Frames
for the recorder are rendered at the recording size on the same thread, so the
GUI thread never reads pixels back either. Nothing here touches OpenGL.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time

from PySide6.QtCore import QRect, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QImage, QPainter
from PySide6.QtWidgets import QLabel, QWidget

from avatar_app.core.clock import now_ns
from avatar_app.core.types import AvatarState
from avatar_app.pipeline.studio_api import RenderedFrame, RenderPolicy, RenderThread

log = logging.getLogger(__name__)

#: Highest device-pixel ratio the live view renders at (AVATAR_APP_VIEW_DPR overrides it). On a
#: HiDPI screen (ratio 2) rendering every device pixel costs four times the pixels for a preview;
#: the software rasteriser's share of a frame is about 60 % of its render time at 658x593 (llvmpipe
#: 9 of 15.7 ms CPU, benchmarks/live_latency.py), the largest single cost of camera-to-screen.
#: Recordings and the virtual camera render at their own sizes, unaffected.
VIEW_MAX_DPR = float(os.environ.get("AVATAR_APP_VIEW_DPR", "1.0"))


def view_render_size(width: int, height: int, ratio: float, max_ratio: float = VIEW_MAX_DPR):
    """Pixels to render a view of ``width`` x ``height`` logical pixels at, and the image's pixel ratio.

    Args:
        width, height: the widget's size, logical pixels.
        ratio: the screen's device-pixel ratio (``devicePixelRatioF``).
        max_ratio: the most device pixels per logical pixel rendered (:data:`VIEW_MAX_DPR`).

    Returns:
        ``(render_width, render_height, image_ratio)``: Qt scales the image by
        ``ratio / image_ratio`` when it paints it (none at ratios up to ``max_ratio``).
    """
    r = max(min(float(ratio), float(max_ratio)), 0.25)
    return max(1, round(width * r)), max(1, round(height * r)), r


#: The latency overlay's font size (points; its compact form one point less) and its margin (pixels).
_OVERLAY_PT = 9
_OVERLAY_MARGIN = 8


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
    _frame_rendered = Signal(object, object, object, object)

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
        #: GUI-thread CPU time spent in paintEvent so far, ns (benchmarks/live_latency.py reads it).
        self.paint_cpu_ns = 0
        #: The AvatarState of the newest ``frame_captured`` frame (its ``t_capture_ns``
        #: places the frame in a recording).
        self.captured_state: AvatarState | None = None
        self._state = AvatarState.neutral()
        self._image: QImage | None = None
        self._image_state = None
        self._pending_present = None
        #: Of the newest presented frame: (handed over by the render thread, reached the GUI
        #: thread, painted), process-clock ns (benchmarks/live_latency.py splits ``to_screen`` with it).
        self.present_ns: tuple[int, int, int] | None = None
        self._pending_timing: tuple[int, int] | None = None
        self._pending_capture = None
        self._captures_overwritten = 0
        self._grab_lock = threading.Lock()  # held while grabFramebuffer renders its state
        self._error: str | None = None
        self.gl_failed.connect(self._on_gl_failed)
        self._frame_rendered.connect(self._on_frame_rendered)
        self.overlay = QLabel(self)
        self.overlay.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        font = QFont("monospace")
        font.setStyleHint(QFont.StyleHint.Monospace)
        font.setPointSize(_OVERLAY_PT)
        self.overlay.setFont(font)
        self.overlay.setStyleSheet("color: white; background: rgba(0,0,0,140); padding: 4px; border-radius: 3px;")
        self.overlay.move(_OVERLAY_MARGIN, _OVERLAY_MARGIN)
        self.overlay.hide()
        self._overlay_texts: tuple[list[str], list[str]] | None = None
        #: A persistent notice at the bottom centre (e.g. "No face found"); see set_notice.
        self.notice = self._message_label("color: white; background: rgba(160,30,30,190); padding: 6px 10px;"
                                          " border-radius: 4px;")
        #: A transient hint at the bottom centre (e.g. "Press Ctrl+H to show panels"); see flash_hint.
        self.hint = self._message_label("color: white; background: rgba(0,0,0,170); padding: 8px 14px;"
                                        " border-radius: 5px;")
        self._hint_timer = QTimer(self)
        self._hint_timer.setSingleShot(True)
        self._hint_timer.timeout.connect(self._hide_hint)
        self._size = (1, 1, 1.0)
        self._last_image: QImage | None = None
        self._thread = RenderThread(RenderPolicy.NEWEST, self._on_render_thread_frame, size=(1, 1),
                                    background=self.background, lighting=lighting, msaa=self.msaa,
                                    name="viewport-render", on_failed=self._on_render_thread_failed)
        self._thread.start()

    # -- API -------------------------------------------------------------------------
    @property
    def captures_skipped(self) -> int:
        """States shown while capturing that never became a ``frame_captured`` frame (newest wins).

        Counts since the widget was made; the window takes the difference over a recording.
        """
        return self._thread.skipped + self._captures_overwritten

    def _submit(self, state: AvatarState) -> int:
        w, h, _ = self._size
        capture = None
        if self.capture_frames:
            cw, ch = self.capture_size or (1280, 720)
            capture = (cw, ch, self.capture_components)
        return self._thread.submit(state, size=(w, h), capture=capture)

    def show_state(self, state: AvatarState) -> None:
        """Render ``state`` next (asynchronously; newest wins).

        Thread: any. The window hands each new state over from the pipeline thread as it
        is published (no wait for a GUI timer); only the render thread's lock is taken.
        """
        self._state = state
        self._submit(state)

    def set_overlay_lines(self, lines: list[str] | None, short: list[str] | None = None) -> None:
        """Show (or hide, with None) the latency overlay text, clear of the avatar's face.

        Args:
            lines: the full table (``LatencySummary.lines``).
            short: its compact form (``LatencySummary.short_lines``; default: the first line), shown
                where the full table would cover the face (small windows).

        The overlay goes top left, else bottom left, in full, else compact, wherever it covers neither
        the head (:meth:`face_rect`) nor the bottom-centre notice and hint; nowhere free (a view too
        small for even the compact form beside the head): hidden, the Latency panel shows the same.
        """
        if not lines:
            self._overlay_texts = None
            self.overlay.hide()
            return
        self._overlay_texts = (list(lines), list(short or lines[:1]))
        self._place_overlay()

    def face_rect(self) -> QRect | None:
        """The avatar's head in the widget (logical pixels): the renderer's
        :meth:`~avatar_app.render.renderer.Renderer.head_rect`; None until the renderer has an avatar."""
        renderer = self._thread.renderer
        box = renderer.head_rect(self.width(), self.height()) if renderer is not None else None
        if box is None:
            return None
        x0, y0, x1, y1 = math.floor(box[0]), math.floor(box[1]), math.ceil(box[2]), math.ceil(box[3])
        return QRect(x0, y0, x1 - x0, y1 - y0)

    def _place_overlay(self) -> None:
        texts = getattr(self, "_overlay_texts", None)
        if not texts:
            return
        face = self.face_rect()
        avoid = [r for r in (face, *(w.geometry() for w in (self.notice, self.hint) if w.isVisible())) if r]
        view = self.rect()
        for lines, size in ((texts[0], _OVERLAY_PT), (texts[1], _OVERLAY_PT - 1)):
            font = self.overlay.font()
            if font.pointSize() != size:
                font.setPointSize(size)
                self.overlay.setFont(font)
            self.overlay.setText("\n".join(lines))
            self.overlay.adjustSize()
            w, h = self.overlay.width(), self.overlay.height()
            for x, y in ((_OVERLAY_MARGIN, _OVERLAY_MARGIN), (_OVERLAY_MARGIN, view.height() - _OVERLAY_MARGIN - h)):
                box = QRect(x, y, w, h)
                if view.contains(box) and not any(box.intersects(a) for a in avoid):
                    self.overlay.move(x, y)
                    self.overlay.show()
                    return
        self.overlay.hide()

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
        # bottom centre; the hint under the notice; then the latency overlay, clear of both
        w, h = self.width(), self.height()
        bottom = h - 16
        if self.hint.isVisible():
            self.hint.move(max(0, (w - self.hint.width()) // 2), max(0, bottom - self.hint.height()))
            bottom -= self.hint.height() + 8
        if self.notice.isVisible():
            self.notice.move(max(0, (w - self.notice.width()) // 2), max(0, bottom - self.notice.height()))
        self._place_overlay()  # clear of the messages and the face at this size

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
        self._submit(self._state)

    def set_avatar(self, mesh) -> None:
        """Show another avatar (an AvatarMesh)."""
        self._thread.command("avatar", mesh)
        self._submit(self._state)

    @property
    def renderer(self):
        """The Renderer (owned by the render thread; read its settings only), or None."""
        return self._thread.renderer

    @property
    def error(self) -> str | None:
        """Why OpenGL could not start, or None."""
        return self._error or (self._thread.error_message or None)

    def grabFramebuffer(self, timeout_s: float = 5.0, state: AvatarState | None = None) -> QImage:  # noqa: N802
        """Render ``state`` (default: the current one) now and return it, a QImage of the rendered size
        (:func:`view_render_size`); the name is QOpenGLWidget's.

        Blocks the calling (GUI) thread until the frame is rendered: for tests and
        screenshots, not for the display path. States offered meanwhile from the
        pipeline thread (:meth:`offer_state`) are not shown, so the picture is this state's.
        """
        with self._grab_lock:
            if state is not None:
                self._state = state
            self._thread.ready.wait(timeout_s)
            self._sync_size()
            seq = self._submit(self._state)
            self._thread.wait_done(seq, timeout_s)
            img = self._last_image
            return img.copy() if img is not None else QImage()

    def offer_state(self, state: AvatarState) -> bool:
        """Any thread: render ``state`` next, as :meth:`show_state`, unless a grab is rendering now.

        The window hands each new state over from the pipeline thread with this.

        Returns:
            False when skipped (a :meth:`grabFramebuffer` was rendering its own state).
        """
        if not self._grab_lock.acquire(blocking=False):
            return False
        try:
            self.show_state(state)
        finally:
            self._grab_lock.release()
        return True

    def shutdown(self) -> None:
        """Stop the render thread (the window calls this when it closes)."""
        self._hint_timer.stop()
        self._thread.stop()

    # -- internals ---------------------------------------------------------------------
    def _sync_size(self) -> None:
        self._size = view_render_size(self.width(), self.height(), self.devicePixelRatioF())

    def _on_render_thread_frame(self, frame: RenderedFrame) -> None:
        """Render thread: wrap the pixels in a QImage and hand it to the GUI thread (queued signal)."""
        rgb = frame.image
        h, w, comps = rgb.shape
        fmt = QImage.Format.Format_RGBA8888 if comps == 4 else QImage.Format.Format_RGB888
        img = QImage(rgb.data, w, h, w * comps, fmt).copy()
        img.setDevicePixelRatio(self._size[2])
        self._last_image = img
        try:
            self._frame_rendered.emit(img, frame.state, frame.captured, now_ns())
        except RuntimeError:  # the widget was deleted while the thread rendered
            self._thread.stop(timeout_s=0)

    def _on_render_thread_failed(self, message: str) -> None:
        """Render thread: OpenGL or the default avatar could not be set up (the window stays usable)."""
        log.error("%s", message)
        try:
            self.gl_failed.emit(message)
        except RuntimeError:  # the widget is gone
            pass

    def _on_gl_failed(self, message: str) -> None:
        self._error = message
        self.update()

    def _on_frame_rendered(self, img: QImage, state, captured, t_handed_ns: int) -> None:
        # Runs on the GUI thread (queued from the render thread).
        self._image = img
        self._pending_present = state
        self._pending_timing = (t_handed_ns, now_ns())
        if captured is not None and self._pending_capture is not None:
            self._captures_overwritten += 1  # rendered for the recording, replaced before it was handed on
        self._pending_capture = captured
        # paint now, not at a later turn of the event loop: the frame is already late by its render
        self.repaint()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._sync_size()
        self._submit(self._state)
        self._place_messages()
        super().resizeEvent(event)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._sync_size()
        self._submit(self._state)
        super().showEvent(event)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        t0 = time.thread_time_ns()
        try:
            self._paint()
        finally:
            self.paint_cpu_ns += time.thread_time_ns() - t0

    def _paint(self) -> None:
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
            self.present_ns = (*(self._pending_timing or (t, t)), t)
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
