"""Live processing: the newest frame from a source, the stages on one thread, the newest state out.

A source thread delivers frames into a newest-wins slot (``capture``); the
"pipeline" thread takes the newest frame, runs :class:`FrameProcessor` on it
(the speech stage while the frame is tracked, see the processor) and
publishes an immutable AvatarState (``latest_state``, and ``on_state`` on the
pipeline thread). Stage stamps of each frame: "capture" (camera to slot),
"queue" (waiting in the slot), then the processor's stages.
"""
from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from avatar_app.core.blas import limit_blas_threads
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import AvatarError, InputError
from avatar_app.core.latency import LatencyStats
from avatar_app.core.types import AvatarState, Frame
from avatar_app.pipeline.processor import FrameProcessor

log = logging.getLogger(__name__)


class LivePipeline:
    """Newest frame from a source, stages on one thread, newest state out.

    Args:
        source: a started-or-not capture source with ``start()``, ``stop()``,
            ``get_latest(timeout_s)``, ``dropped`` and optionally ``ring``
            (an AudioRing) and ``error``/``finished``.
        stages: the :class:`~avatar_app.pipeline.stages.Stages` (built live, with audio
            when ``ring`` is given); default :func:`~avatar_app.pipeline.stages.build_stages`
            with the shipped models.
        ring: an AudioRing for speech (microphone); defaults to ``source.ring``.

    Attributes:
        processor: the FrameProcessor (its ``reconstructor``/``speech`` may be swapped; its
            ``tracker`` through :meth:`replace_tracker`).
        tracker_swaps: trackers swapped in by :meth:`replace_tracker`.
        stats: LatencyStats the overlay reads (camera-to-screen is added by the
            presenter through :meth:`presented`).
        error: the last error of the source or a stage, as a user message, or None.
        on_state: ``on_state(state)`` called on the pipeline thread for every state.
        last_frame: the newest processed Frame, or None.

    Thread: ``start``/``stop``/``latest_state`` from one controlling thread; stages on
    the "pipeline" thread; nothing here touches widgets.
    """

    def __init__(self, source, stages=None, ring=None):
        self.source = source
        self.ring = ring if ring is not None else getattr(source, "ring", None)
        if stages is None:
            from avatar_app.pipeline.stages import StageChoice, build_stages

            stages = build_stages(StageChoice(live=True, audio=self.ring is not None))
        self.stages = stages
        self.processor = FrameProcessor(stages.tracker, stages.reconstructor, stages.speech, live=True,
                                        chain=stages.chain)
        self.stats = LatencyStats(window_s=5.0)
        self.error: str | None = None
        self._noticed = False
        self.frames_processed = 0
        self._state: AvatarState | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_state: Callable[[AvatarState], None] | None = None
        self.last_frame: Frame | None = None
        self._max_fps = 0.0
        self._next_tracker: tuple | None = None  # (tracker, retire) waiting for the next frame
        self.tracker_swaps = 0

    @property
    def chain(self):
        """The post-processing chain (:class:`~avatar_app.fusion.chain.PostChain`)."""
        return self.processor.chain

    def set_max_fps(self, fps: float | None) -> None:
        """Cap the processing rate (frame-rate cap / CPU budget); None or 0 removes the cap.

        Args:
            fps: the most frames processed per second, Hz.

        Raises:
            InputError: negative or non-finite ``fps``.

        Thread: any; takes effect from the next frame.
        """
        value = float(fps or 0.0)
        if not math.isfinite(value) or value < 0:
            raise InputError(f"frame-rate cap must be a positive number of frames per second, got {fps!r}")
        self._max_fps = value

    @property
    def max_fps(self) -> float:
        """The processing-rate cap in Hz (0 = uncapped)."""
        return self._max_fps

    @property
    def tracker(self):
        """The face tracker of the next frame: one waiting to be swapped in, else the one serving."""
        waiting = self._next_tracker
        return waiting[0] if waiting is not None else self.processor.tracker

    def replace_tracker(self, tracker, retire: Callable[[object], None] | None = None) -> None:
        """Use ``tracker`` from the next frame on (a tracker switch; the current one serves until then).

        The processing thread swaps it in between two frames and hands the old tracker
        to ``retire`` (default: closed there); a later call before the swap replaces the
        waiting tracker, which is retired unused. A tracker still waiting when the pipeline
        stops is closed by :meth:`stop`.

        Args:
            tracker: a started FaceTracker in the live running mode (owned by the pipeline from now).
            retire: ``retire(old_tracker)``, called on the processing thread; it must close it
                (e.g. on a worker: closing MediaPipe's graphs takes a moment).

        Thread: any.
        """
        retire = retire or (lambda t: t.close())
        with self._lock:
            waiting, self._next_tracker = self._next_tracker, (tracker, retire)
        if waiting is not None:
            waiting[1](waiting[0])

    def _swap_tracker(self) -> None:
        """Put a waiting tracker in (processing thread, between two frames)."""
        with self._lock:
            waiting, self._next_tracker = self._next_tracker, None
        if waiting is None:
            return
        tracker, retire = waiting
        old, self.processor.tracker, self.stages.tracker = self.processor.tracker, tracker, tracker
        self.processor.order_chooser.restart()  # the speech order is measured afresh with this tracker
        self.tracker_swaps += 1
        if old is not None and old is not tracker:
            retire(old)

    def start(self) -> None:
        """Start the source and the processing thread.

        Raises:
            CaptureError / InputError: the source cannot be opened (the tracker is closed then).
        """
        limit_blas_threads(1)  # OpenBLAS's idle threads spin between the stages' small calls (core/blas.py)
        try:
            self.source.start()
        except AvatarError:
            self.stages.close()
            raise
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="pipeline", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop processing and the source; safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.processor.close()  # its speech thread
        with self._lock:
            waiting, self._next_tracker = self._next_tracker, None
        try:
            self.source.stop()
        finally:
            self.stages.close()
            if waiting is not None and waiting[0] is not self.stages.tracker:
                waiting[0].close()

    @property
    def running(self) -> bool:
        """True while the processing thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def latest_state(self) -> AvatarState | None:
        """The newest AvatarState (immutable), or None before the first frame."""
        with self._lock:
            return self._state

    def presented(self, state: AvatarState, t_present_ns: int | None = None) -> None:
        """Tell the stats that ``state`` reached the screen (camera-to-screen latency, frames lost).

        The drop count (``stats.dropped``) is what the viewer loses: the source frames
        between two presented states that never reached the screen, wherever they were
        lost (the source's slot, the display tick, the render thread).

        Args:
            state: the state drawn.
            t_present_ns: when it was presented (default now).
        """
        self.stats.add_frame(state.stamps, state.t_capture_ns, t_present_ns, frame_index=state.frame_index)

    def _wait_for_cap(self, last_start_ns: int) -> bool:
        """Sleep to honour the frame-rate cap; False when stopped meanwhile."""
        cap = self._max_fps
        if cap > 0 and last_start_ns:
            wait_s = (last_start_ns + 1e9 / cap - now_ns()) / 1e9
            if wait_s > 0 and self._stop.wait(wait_s):
                return False
        return True

    def _next_frame(self, last_index: int) -> Frame | None | bool:
        """The next new frame; None when none came yet; False when the source ended or failed."""
        src_error = getattr(self.source, "error", None)
        if src_error is not None:
            self.error = str(src_error)
            log.warning("source stopped: %s", src_error)
            return False
        notice = getattr(self.source, "notice", None)
        if notice and not self._noticed:  # once: the session shows it like a frame's error
            self._noticed, self.error = True, notice
        frame = self.source.get_latest(0.05)
        if frame is None or frame.index == last_index:
            return False if getattr(self.source, "finished", False) else None
        return frame

    def _run(self) -> None:
        last_index = -1
        last_start_ns = 0
        while not self._stop.is_set():
            if not self._wait_for_cap(last_start_ns):
                break
            frame = self._next_frame(last_index)
            if frame is False:
                break
            if frame is None:
                continue
            last_index = frame.index
            if self._next_tracker is not None:
                self._swap_tracker()
            last_start_ns = now_ns()
            stamps = frame.capture_stamps()
            if frame.t_delivered_ns:
                stamps["queue"] = (frame.t_delivered_ns, last_start_ns)
            window = None
            speech = self.processor.speech
            if speech is not None and self.ring is not None:
                window = self.ring.read_window(frame.t_capture_ns, speech.context_s)
            try:
                state = self.processor.process(frame, window, stamps=stamps)
            except AvatarError as exc:
                self.error = str(exc)
                log.warning("frame %d failed: %s", frame.index, exc)
                continue
            if self.processor.last_error:
                self.error, self.processor.last_error = self.processor.last_error, ""
            self.last_frame = frame
            with self._lock:
                self._state = state
            self.frames_processed += 1
            cb = self.on_state
            if cb is not None:
                cb(state)
