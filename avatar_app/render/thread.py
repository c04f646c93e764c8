"""The render thread: owns one OpenGL context and Renderer, renders the states it is given.

One class for both modes, with a hand-off policy:

- :attr:`RenderPolicy.ORDERED` (offline rendering): every submitted state is
  rendered, in order; :meth:`RenderThread.submit` blocks while ``queue_size``
  states wait (back-pressure on the decoder, never a drop).
- :attr:`RenderPolicy.NEWEST` (the studio's viewport): one pending request;
  a newer one replaces it (newest wins, replaced states are counted in
  :attr:`RenderThread.skipped`), so the thread always draws the newest state
  and never falls behind. The hand-off is a single slot guarded by a
  condition variable: the latency it adds is at most one render.

Results come back through ``on_frame(RenderedFrame)`` on the render thread:
the image at the requested size and, when asked for, a second render at a
capture size (recording, virtual camera), both as numpy arrays. Only this
package touches moderngl; the caller decides what to do with the pixels.
"""
from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from avatar_app.core.clock import now_ns
from avatar_app.core.errors import AvatarError, InputError
from avatar_app.core.types import AvatarState

log = logging.getLogger(__name__)

#: Largest render edge, pixels.
MAX_SIZE_PX = 8192


class RenderPolicy(enum.Enum):
    """How submitted states are handed to the render thread (see the module docstring)."""

    ORDERED = "ordered"
    NEWEST = "newest"


@dataclass(frozen=True)
class RenderedFrame:
    """One finished render.

    Attributes:
        state: the state drawn, with ``stamps["render"]`` added when it had stamps.
        image: (H, W, 3) uint8 RGB, or (H, W, 4) RGBA with a transparent background,
            top row first; a new array per frame.
        captured: the same state rendered at the capture size, (h, w, 3 or 4) uint8, or None.
        seq: the request number :meth:`RenderThread.submit` returned.
    """

    state: AvatarState
    image: np.ndarray
    captured: np.ndarray | None
    seq: int


@dataclass(frozen=True)
class _Request:
    state: AvatarState
    size: tuple[int, int]
    capture: tuple[int, int, int] | None
    seq: int


def check_size(width: int, height: int) -> tuple[int, int]:
    """``(width, height)`` as ints.

    Raises:
        InputError: an edge outside 1..:data:`MAX_SIZE_PX` pixels.
    """
    if not (0 < int(width) <= MAX_SIZE_PX and 0 < int(height) <= MAX_SIZE_PX):
        raise InputError(f"render size must be within 1..{MAX_SIZE_PX} pixels, got {width}x{height}")
    return int(width), int(height)


class RenderThread:
    """A thread with its own OpenGL 3.3 context and :class:`~avatar_app.render.renderer.Renderer`.

    Args:
        policy: :class:`RenderPolicy` (ORDERED offline, NEWEST live).
        on_frame: ``on_frame(RenderedFrame)``, called on the render thread after each render.
        size: default render size (width, height) in pixels.
        background, lighting, msaa: the renderer's settings (see Renderer).
        avatar: an AvatarMesh (default: the default head).
        queue_size: ORDERED: how many states may wait before :meth:`submit` blocks.
        name: the thread's name.
        on_failed: ``on_failed(message)`` on the render thread when the context or the
            avatar could not be set up (the thread ends; :attr:`error` holds why).

    Attributes:
        error: the exception that stopped the thread (or kept it from starting), or None.
        error_message: what failed, as the user should read it ("" when nothing did).
        skipped: NEWEST: capture requests replaced before they were rendered.

    Raises:
        InputError: a bad size.

    Thread: ``start``, ``submit``, ``command``, ``finish``, ``stop`` from any one
    thread; ``on_frame`` runs on the render thread.
    """

    def __init__(self, policy: RenderPolicy, on_frame: Callable[[RenderedFrame], None],
                 size: tuple[int, int] = (1280, 720), background=(0, 177, 64), lighting="studio", msaa: int = 0,
                 avatar=None, queue_size: int = 8, name: str = "render",
                 on_failed: Callable[[str], None] | None = None):
        self.policy = RenderPolicy(policy)
        self.on_frame = on_frame
        self.on_failed = on_failed
        self._size = check_size(*size)
        self._settings = {"background": background, "lighting": lighting, "msaa": int(msaa), "avatar": avatar}
        self._queue_size = max(1, int(queue_size))
        self._cond = threading.Condition()
        self._pending: deque[_Request] = deque()
        self._commands: list[tuple[str, object]] = []
        self._seq = 0
        self._done_seq = 0
        self._stopping = False
        self.skipped = 0
        self.error: BaseException | None = None
        self.error_message = ""
        self.ready = threading.Event()
        self.renderer = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- control (any one thread) --------------------------------------------------------
    def start(self, wait: bool = False) -> RenderThread:
        """Start the thread; with ``wait``, block until the context is up and re-raise its error.

        Raises:
            AvatarError (BackendUnavailableError ...): with ``wait``, the context or the
                renderer could not be made.
        """
        self._thread.start()
        if wait:
            self.ready.wait()
            if self.error is not None:
                raise self.error
        return self

    @property
    def alive(self) -> bool:
        """Whether the thread runs."""
        return self._thread.is_alive()

    def submit(self, state: AvatarState, size: tuple[int, int] | None = None,
               capture: tuple[int, int, int] | None = None) -> int:
        """Hand ``state`` to the thread (see the policies); returns its request number.

        Args:
            state: what to draw.
            size: (width, height) pixels (default: the last size given).
            capture: (width, height, components 3 or 4) of a second render for a
                recording, or None.

        Raises:
            AvatarError: ORDERED: the thread failed (its error is re-raised here).
        """
        with self._cond:
            if size is not None:
                self._size = check_size(*size)
            self._seq += 1
            req = _Request(state, self._size, capture, self._seq)
            if self.policy is RenderPolicy.NEWEST:
                if self._pending:
                    old = self._pending.pop()
                    if old.capture is not None and old.state is not state:
                        self.skipped += 1
                self._pending.append(req)
            else:
                while len(self._pending) >= self._queue_size and self._thread.is_alive() and self.error is None:
                    self._cond.wait(0.2)
                if self.error is not None:
                    raise self.error
                self._pending.append(req)
            self._cond.notify_all()
            return req.seq

    def command(self, name: str, value) -> None:
        """Change a setting before the next render: "avatar", "background", "lighting" or "msaa"."""
        with self._cond:
            self._commands.append((name, value))
            self._cond.notify_all()

    def wait_done(self, seq: int, timeout_s: float) -> bool:
        """Block until request ``seq`` was rendered (or replaced by a newer one that was)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._done_seq >= seq or self._stopping or not self.alive,
                                       timeout_s)

    def finish(self) -> None:
        """Render what is queued, stop the thread and re-raise its error, if any."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive() or self._thread.ident is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop without rendering what waits (NEWEST: the window closes); safe to call twice."""
        with self._cond:
            self._stopping = True
            self._pending.clear()
            self._cond.notify_all()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    # -- the thread ---------------------------------------------------------------------
    def _setup(self):
        from avatar_app.render.context import create_context, gil_free_draw, gil_free_finish
        from avatar_app.render.renderer import Renderer

        what = "OpenGL 3.3 could not be started"
        ctx = renderer = None
        try:
            ctx = create_context()
            s = self._settings
            renderer = Renderer(ctx, background=s["background"], msaa=s["msaa"], lighting=s["lighting"],
                                draw_elements=gil_free_draw())
            what = "The avatar could not be built"
            avatar = s["avatar"]
            if avatar is None:
                from avatar_app.avatar.default_head import build_default_head

                what = "The default avatar could not be built"
                avatar = build_default_head()
            renderer.set_avatar(avatar)
        except BaseException as exc:
            self.error, self.error_message = exc, f"{what}: {exc}"
            if renderer is not None:
                renderer.release()
            if ctx is not None:
                ctx.release()
            raise
        return ctx, renderer, gil_free_finish(ctx)

    def _run(self) -> None:
        try:
            ctx, renderer, finish = self._setup()
        except BaseException:  # reported through .error (start(wait=True) re-raises)
            log.debug("render thread could not start: %s", self.error_message, exc_info=True)
            self.ready.set()
            if self.on_failed is not None:
                self.on_failed(self.error_message)
            return
        self.renderer = renderer
        self.ready.set()
        targets = _Targets(ctx)
        try:
            self._loop(renderer, targets, finish)
        except BaseException as exc:  # re-raised to the caller by submit/finish
            self.error, self.error_message = exc, f"Rendering failed: {exc}"
            log.debug("render thread failed: %s", exc, exc_info=True)
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            targets.release()
            renderer.release()
            ctx.release()

    def _loop(self, renderer, targets: _Targets, finish) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or self._pending or self._commands)
                commands, self._commands = self._commands, []
                req = self._pending.popleft() if self._pending else None
                if req is None and self._stopping and not commands:
                    return
                self._cond.notify_all()
            for name, value in commands:
                self._apply(renderer, name, value)
            if req is not None:
                self.on_frame(self._render(renderer, targets, finish, req))
                with self._cond:
                    self._done_seq = req.seq
                    self._cond.notify_all()

    @staticmethod
    def _apply(renderer, name: str, value) -> None:
        try:
            if name == "avatar":
                renderer.set_avatar(value)
            elif name in ("background", "lighting", "msaa"):
                setattr(renderer, name, value)
            else:
                raise InputError(f"unknown render setting {name!r}")
        except AvatarError as exc:
            log.warning("render thread: cannot apply %s: %s", name, exc)

    @staticmethod
    def _render(renderer, targets: _Targets, finish, req: _Request) -> RenderedFrame:
        comps = 4 if renderer.transparent else 3
        w, h = req.size
        t0 = now_ns()
        image = targets.draw(renderer, req.state, w, h, comps, finish)
        t1 = now_ns()
        state = req.state
        if state.stamps:
            state = replace(state, stamps={**state.stamps, "render": (t0, t1)})
        captured = None
        if req.capture is not None:
            cw, ch, cc = req.capture
            captured = targets.draw(renderer, state, cw, ch, 4 if cc == 4 else 3, finish, keep=True)
        return RenderedFrame(state, image, captured, req.seq)


class _Targets:
    """Framebuffers by size (a few kept: the view's current size and the capture size)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.fbos: dict[tuple[int, int], tuple] = {}
        self.keep: tuple[int, int] | None = None

    def draw(self, renderer, state: AvatarState, w: int, h: int, comps: int, finish, keep: bool = False):
        key = (w, h)
        if keep:
            self.keep = key
        if key not in self.fbos:
            if len(self.fbos) > 3:  # sizes of old resizes
                for k in [k for k in self.fbos if k != self.keep]:
                    for obj in self.fbos.pop(k):
                        obj.release()
            col = self.ctx.renderbuffer((w, h), 4)
            dep = self.ctx.depth_renderbuffer((w, h))
            self.fbos[key] = (self.ctx.framebuffer(color_attachments=[col], depth_attachment=dep), col, dep)
        fbo = self.fbos[key][0]
        renderer.render(state, w, h, fbo, flip_y=True)
        finish()  # wait for the rasteriser without holding the GIL
        out = np.empty((h, w, comps), np.uint8)
        fbo.read_into(out, components=comps, alignment=1)
        return out

    def release(self) -> None:
        for objs in self.fbos.values():
            for obj in objs:
                obj.release()
        self.fbos.clear()
