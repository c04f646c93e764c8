"""The per-frame stages: track, reconstruct, speech, fuse, tune.

:class:`FrameProcessor` is the one implementation the live pipeline, offline
rendering, the demo and the studio's offline mode all call, so the same frames
with the same stages give the same states.

Speech does not depend on vision until fusion, so it runs while the frame is
tracked, and the processor has its result before fusing:

- with MediaPipe's tracker (``tracker.runs_meanwhile``), on the calling thread
  itself, between handing the frame to MediaPipe's graph and waiting for it:
  the graph computes on MediaPipe's own threads, so nothing but MediaPipe's two
  output callbacks (which wait for the GIL while the animator's Python runs)
  serialises;
- with other trackers, on a worker thread (:class:`_SpeechWorker`) beside track
  and reconstruct. ONNX Runtime's ``run`` and MediaPipe's graph calls release
  the GIL, but the animator's Python and numpy work holds it, and whatever the
  calling thread does in Python waits for it then.

Measured on the 2-core machine, interleaved in one process with the CPUs given
to it (``chrt``, the machine being loaded by others): frame p50 7.37 ms
sequential, 6.38 on the worker thread, 6.21 alongside MediaPipe's graph. Each
animator call still sees the frames in order, one at a time, so the states
equal those of the sequential order (tests/pipeline/test_processor_concurrency.py).

Which order is faster depends on what else the machine runs (alone on 2 cores
the overlap gains ~14 %; beside two busy processes it loses ~3 %), so by default
the processor measures both at run time (:class:`OrderChooser`) and runs the
faster; ``speech_order`` (argument, attribute, or the ``AVATAR_APP_SPEECH_ORDER``
environment variable) forces one. The states are the same whichever ran.
"""
from __future__ import annotations

import collections
import logging
import math
import os
import queue
import threading
from collections.abc import Callable

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES
from avatar_app.core.clock import now_ns, stage_timer
from avatar_app.core.errors import AvatarError, InputError
from avatar_app.core.types import AvatarState, FaceParams, Frame, StageStamps, make_state
from avatar_app.fusion.chain import PostChain

log = logging.getLogger(__name__)


#: CPUs from which speech overlaps tracking by default (:func:`speech_overlap_default`).
OVERLAP_MIN_CPUS = 4


def speech_overlap_default(cpus: int | None = None) -> bool:
    """The order "auto" starts in (:class:`OrderChooser` then measures): overlapped only with a CPU to spare.

    MediaPipe's graph already keeps about two cores busy while it tracks (process CPU
    6.2 ms per 3.4 ms frame on the 2-core test machine, benchmarks/peers.py), so the
    animator needs a third. Measured there, alone: frame p50 5.27 ms overlapped
    against 5.70 sequential; beside two busy processes (a game): 4.45 against 4.30,
    p95 9.94 against 9.35. So on fewer than :data:`OVERLAP_MIN_CPUS` CPUs the stages
    run one after the other.

    Args:
        cpus: CPUs this process may run on (default: its affinity mask, which containers and
            ``taskset`` narrow; ``os.cpu_count()`` where the platform has no affinity).

    Returns:
        True to overlap.
    """
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # not Linux
            cpus = os.cpu_count() or 1
    return cpus >= OVERLAP_MIN_CPUS


#: Values of ``FrameProcessor.speech_order``: measure and pick, or one order forced.
SPEECH_ORDERS = ("auto", "overlapped", "sequential")
#: Environment variable that forces the order (one of :data:`SPEECH_ORDERS`; unset: "auto").
SPEECH_ORDER_ENV = "AVATAR_APP_SPEECH_ORDER"


def speech_order_setting(value: str | None = None) -> str:
    """The speech order to use: ``value``, else :data:`SPEECH_ORDER_ENV`, else "auto".

    Args:
        value: one of :data:`SPEECH_ORDERS` (any case), or None.

    Returns:
        One of :data:`SPEECH_ORDERS`.

    Raises:
        InputError: ``value`` (or the environment variable) is not one of them.
    """
    raw = value if value is not None else (os.environ.get(SPEECH_ORDER_ENV, "").strip() or "auto")
    order = str(raw).strip().lower()
    if order not in SPEECH_ORDERS:
        where = "speech order" if value is not None else SPEECH_ORDER_ENV
        raise InputError(f"{where} must be one of {', '.join(SPEECH_ORDERS)}, got {raw!r}")
    return order


#: While the order estimate is unsure (within twice the margin), probes come this many times as often
#: (with the defaults every 3 s / 75 frames: a first call that left the faster order out, e.g. made under
#: a passing load, is corrected within seconds; the probes cost little then, the orders being close).
UNSURE_PROBE_DIVISOR = 5


class OrderChooser:
    """Runs each frame in the faster speech order, measured at run time: overlapped or sequential.

    The "home" order runs; every ``interval_s`` (of ``clock``) and ``interval_frames``
    frames, whichever is later, a probe runs ``probe_frames`` frames in the other order. Each probe gives one ratio: the
    median frame cost of the overlapped frames over that of the sequential ones
    (the probe's frames against the ``probe_frames`` home frames just before it,
    so both saw the same load). The estimate is the mean of the logs of the last
    ``history`` ratios; the other order becomes home when that estimate says it is
    faster by more than ``margin``. That is hysteresis both ways (an order must beat
    the home one by ``margin``, and one noisy probe moves the mean by 1/``history``
    of its deviation), so noise does not make it flap. The first ``confirm``
    probes run back to back (a decision within a second or two), later ones every
    ``interval_s`` / ``interval_frames``, or :data:`UNSURE_PROBE_DIVISOR` times as often
    while the estimate is within twice the margin of even. The first ``warmup_frames``
    frames (graph and allocator start-up) are not measured.

    Probing costs ``probe_frames`` frames in the slower order per interval (with the
    defaults 6 frames each 15 s and at least 375 frames: 1.6 % of frames at 25 fps, and
    never more, however slowly frames come; 8 % while unsure, when the orders cost about
    the same, so the probe frames are hardly slower). A probe frame costs ~15 % more than
    a home frame, so probes must stay well under 5 % of frames to stay out of the frame
    time's 95th percentile: with 10 frames each 6 s (6.7 %) they were most of it
    (``benchmarks/peers.py --tail``). The price is a slower reaction to a change of load:
    about ``history`` intervals (~75 s) before the estimate has forgotten the old one (one
    clearly faster order turns it sooner).

    Args:
        start: the first home order (True: overlapped), e.g. :func:`speech_overlap_default`.
        clock: integer nanoseconds, monotonic (default ``perf_counter_ns``); the
            processor times its frames with it too (tests inject one).
        probe_frames: frames per probe and per home window (>= 1).
        interval_s: seconds between the end of one probe and the next.
        interval_frames: frames between the end of one probe and the next (at least).
        margin: relative gain the other order needs, 0..1 (0.03: 3 % faster).
        confirm: probes before the first switch (>= 1).
        history: probes the estimate averages (>= 1).
        warmup_frames: frames at the start left out.

    Attributes:
        overlapped: the home order (True: speech overlaps tracking).
        frames: frames recorded per order, ``{"overlapped": n, "sequential": m}``.
        switches: how often the home order changed.
        probes: probes completed.
        last_probe_ms: (home median, other median) of the last probe, ms, or None.

    Thread: the processing thread only.
    """

    def __init__(self, start: bool, clock: Callable[[], int] = now_ns, probe_frames: int = 6,
                 interval_s: float = 15.0, interval_frames: int = 375, margin: float = 0.03, confirm: int = 2,
                 history: int = 5, warmup_frames: int = 10):
        if (probe_frames < 1 or confirm < 1 or history < 1 or not 0.0 <= margin < 1.0 or interval_s < 0
                or interval_frames < 0):
            raise InputError("order chooser: probe_frames, confirm and history >= 1, 0 <= margin < 1, "
                             "interval_s and interval_frames >= 0")
        self.overlapped = bool(start)
        self.clock = clock
        self.probe_frames, self.confirm = int(probe_frames), int(confirm)
        self._log_gain = math.log(1.0 - float(margin))  # < 0: log(other / home) below it switches
        self.interval_ns = int(interval_s * 1e9)
        self.interval_frames = int(interval_frames)
        self._next_probe_frame = 0  # frames recorded before the next probe may start
        self.warmup_frames = int(warmup_frames)
        self.frames = {"overlapped": 0, "sequential": 0}
        self.switches = self.probes = 0
        self.last_probe_ms: tuple[float, float] | None = None
        self._ratios: collections.deque[float] = collections.deque(maxlen=int(history))  # log(overlapped / seq)
        self._home: collections.deque[int] = collections.deque(maxlen=self.probe_frames)
        self._probe: list[int] = []
        self._probing = False
        self._seen = 0
        self._next_probe_ns: int | None = None  # None: as soon as a home window is measured

    def restart(self) -> None:
        """Forget the measurements (another tracker or engine costs differently); the home order stays.

        The next frames are a new warm-up, then ``confirm`` probes back to back.
        """
        self._ratios.clear()
        self._home.clear()
        self._probe = []
        self._probing = False
        self._seen = 0
        self._next_probe_ns, self._next_probe_frame = None, 0

    def next_order(self) -> bool:
        """The order of the next frame (True: overlapped): the other one during a probe."""
        return self.overlapped != self._probing

    def record(self, overlapped: bool, cost_ns: int) -> None:
        """Note that a frame ran in order ``overlapped`` and took ``cost_ns`` (integer ns)."""
        self.frames["overlapped" if overlapped else "sequential"] += 1
        self._seen += 1
        if self._seen <= self.warmup_frames:
            return
        if overlapped == self.overlapped:
            if not self._probing:
                self._home.append(int(cost_ns))
        elif self._probing:
            self._probe.append(int(cost_ns))
        now = self.clock()
        if self._probing:
            if len(self._probe) >= self.probe_frames:
                self._decide(now)
        elif (len(self._home) >= self.probe_frames and self._seen >= self._next_probe_frame
              and (self._next_probe_ns is None or now >= self._next_probe_ns)):
            self._probing, self._probe = True, []

    def estimate(self) -> float | None:
        """Mean log(overlapped cost / sequential cost) over the last probes (< 0: overlap faster), or None."""
        return sum(self._ratios) / len(self._ratios) if self._ratios else None

    def _decide(self, now: int) -> None:
        home, other = float(np.median(self._home)), float(np.median(self._probe))
        self.probes += 1
        self.last_probe_ms = (home / 1e6, other / 1e6)
        self._probing = False
        r = math.log(max(other, 1.0) / max(home, 1.0))  # log(other / home)
        self._ratios.append(-r if self.overlapped else r)
        est = self.estimate()
        other_gain = -est if self.overlapped else est  # mean log(other / home)
        if len(self._ratios) >= self.confirm and other_gain < self._log_gain:
            # the other order is home now; its probe frames are its first window
            self.overlapped = not self.overlapped
            self.switches += 1
            self._home = collections.deque(self._probe, maxlen=self.probe_frames)
        else:
            self._home.clear()
        if len(self._ratios) < self.confirm:
            self._next_probe_ns, self._next_probe_frame = None, 0
        else:
            # While the estimate lies near the threshold the next probe comes sooner: the orders cost
            # about the same then, so probing is cheap, and a wrong first call is corrected quickly.
            # Far from it (one order clearly faster), probes are rare.
            div = 1 if abs(est) >= 2.0 * abs(self._log_gain) else UNSURE_PROBE_DIVISOR
            self._next_probe_ns = now + self.interval_ns // div
            self._next_probe_frame = self._seen + self.interval_frames // div

    def describe(self) -> dict:
        """What ran: home order, frames per order, switches, probes, the estimate, the last probe (ms)."""
        est = self.estimate()
        return {"home": "overlapped" if self.overlapped else "sequential", "frames": dict(self.frames),
                "switches": self.switches, "probes": self.probes,
                "overlapped_over_sequential": None if est is None else round(math.exp(est), 4),
                "last_probe_ms": None if self.last_probe_ms is None else [round(v, 3) for v in self.last_probe_ms]}


class _SpeechJob:
    """One speech call: its result or exception, and when it ran.

    Whoever claims it first runs it: the worker thread, or the processing thread
    when the worker had not started it by the time vision was done (a busy
    machine that did not schedule the worker yet), so the frame never waits for
    a thread that is not running. Only a ``threaded`` job (one handed to the worker)
    has the event and the lock that takes (~10 us a frame otherwise spent on them);
    the others run on the processing thread.
    """

    __slots__ = ("fn", "args", "done", "value", "error", "start_ns", "end_ns", "finished", "_claim")

    def __init__(self, fn, args, threaded: bool = False):
        self.fn, self.args = fn, args
        self.done = threading.Event() if threaded else None
        self.value = self.error = None
        self.start_ns = self.end_ns = 0
        self.finished = False
        self._claim = threading.Lock() if threaded else None

    def claim(self) -> bool:
        """True for the one caller that gets to run the job (always, for a job not threaded)."""
        return self._claim is None or self._claim.acquire(blocking=False)

    def run(self) -> None:
        """Run the call (after :meth:`claim`), keeping its result or exception."""
        self.start_ns = now_ns()
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            self.error = exc
        finally:
            self.end_ns = now_ns()
            self.fn = self.args = None
            self.finished = True
            if self.done is not None:
                self.done.set()

    def result(self):
        """Wait for the call; its return value, or raise what it raised."""
        if self.done is not None:
            self.done.wait()
        if self.error is not None:
            exc, self.error = self.error, None
            raise exc
        return self.value


class _SpeechWorker:
    """A daemon thread ("speech") that runs the jobs handed to :meth:`submit`, one at a time, in order.

    It starts with the first job and ends after ``idle_s`` without one (or at
    :meth:`close`), so a processor that is dropped without being closed leaves
    no thread behind; a later job starts a new one.
    """

    def __init__(self, idle_s: float = 1.0):
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, job: _SpeechJob) -> None:
        """Run ``job`` on the worker thread (wait on it with ``job.result()``)."""
        with self._lock:
            self._jobs.put(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="speech", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._thread = None
                        return
                continue
            if job is None:
                return
            if job.claim():
                job.run()

    def close(self) -> None:
        """End the thread after the jobs already handed over (it does not wait for them)."""
        with self._lock:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None


class FrameProcessor:
    """Runs the per-frame stages: track and reconstruct beside speech, then fuse and tune.

    Args:
        tracker: a FaceTracker (tracking.face_mesh) or None (vision supplied by the caller).
        reconstructor: a FaceReconstructor (reconstruction.base).
        speech: a SpeechAnimator (speech.base) or None.
        live: True calls the tracker's live method (process_live, ns stamps),
            False its video method (process_video_frame, media ms).
        chain: the post-processing chain (fusion, tuning, expressions; default a fresh
            studio's, :class:`~avatar_app.fusion.chain.PostChain`).
        speech_order: "auto" (default; :func:`speech_order_setting` reads
            ``AVATAR_APP_SPEECH_ORDER`` when the argument is None), "overlapped" or
            "sequential". Overlapped runs the speech animator while the frame is
            tracked: inside the tracker's call while MediaPipe's threads compute
            (``tracker.runs_meanwhile``), else on the worker thread while the calling
            thread tracks and reconstructs (the calling thread runs it itself after
            vision when the worker has not started it by then); sequential runs the
            stages one after the other on the calling thread. "auto" runs the faster,
            measured by :attr:`order_chooser` on this machine as it is loaded now,
            starting from :func:`speech_overlap_default`. All give the same states.
        clock: integer-ns clock the frames are timed with for "auto" (tests inject one).

    Attributes:
        last_landmarks: the last frame's Landmarks, or None (no face).
        last_error: the last post-processing error, as text ("" when none).
        speech_lookahead_s: seconds of audio after the frame time given to the speech
            animator (offline rendering only: its ``offline_lookahead_s``; live stays causal).
        speech_order: as the argument; settable between frames.
        concurrent_speech: the order of the next frame (True: overlapped). Setting it
            True or False forces that order (``speech_order``), None restores "auto".
        order_chooser: the :class:`OrderChooser` (measures frames with speech only).
        last_overlapped: the order the last frame with speech ran in, or None.

    Thread: one processing thread at a time. ``reconstructor`` and ``speech`` may be
    replaced between two frames (an engine swap) from another thread: every call
    returns only after its speech call ended, so no animator is in use between
    frames. Worker-thread speech calls run on a daemon thread named "speech" that
    ends after a second without frames or at :meth:`close`.
    """

    def __init__(self, tracker, reconstructor, speech=None, live: bool = False, chain: PostChain | None = None,
                 speech_order: str | None = None, clock: Callable[[], int] = now_ns):
        from avatar_app.reconstruction.hold import NoFaceHold

        self.tracker = tracker
        self.reconstructor = reconstructor
        self.speech = speech
        self.live = live
        self.chain = chain or PostChain()
        self.hold = NoFaceHold()
        self.last_landmarks = None
        self.last_error = ""
        self.speech_lookahead_s = 0.0
        self.order_chooser = OrderChooser(speech_overlap_default(), clock=clock)
        self.speech_order = speech_order_setting(speech_order)
        self.last_overlapped: bool | None = None
        self._worker = _SpeechWorker()

    @property
    def speech_order(self) -> str:
        """"auto", "overlapped" or "sequential" (see the class docstring)."""
        return self._speech_order

    @speech_order.setter
    def speech_order(self, value: str) -> None:
        self._speech_order = speech_order_setting(value)

    @property
    def concurrent_speech(self) -> bool:
        """Whether the next frame's speech overlaps tracking (forced, or the chooser's pick)."""
        order = self._speech_order
        return self.order_chooser.next_order() if order == "auto" else order == "overlapped"

    @concurrent_speech.setter
    def concurrent_speech(self, value: bool | None) -> None:
        self._speech_order = "auto" if value is None else ("overlapped" if value else "sequential")

    def close(self) -> None:
        """End the speech worker thread now (a later frame starts it again). Idempotent."""
        self._worker.close()

    @property
    def fusion(self):
        """The chain's mouth-fusion step (:class:`~avatar_app.fusion.mouth.Fusion`)."""
        return self.chain.fusion

    def _vision(self, frame: Frame, vision: FaceParams | None, stamps: StageStamps,
                meanwhile=None) -> tuple[FaceParams, bool]:
        """Track and reconstruct (or take ``vision`` as given); FaceParams and whether a face was found.

        ``meanwhile`` goes to the tracker (``runs_meanwhile`` trackers only)."""
        t_s = frame.media_time_s
        if vision is not None:
            return vision, True
        if self.tracker is None:
            return self.hold.update(None, t_s), False
        with stage_timer(stamps, "track"):
            if meanwhile is not None:
                if self.live:
                    landmarks = self.tracker.process_live(frame.image, frame.t_capture_ns, meanwhile=meanwhile)
                else:
                    landmarks = self.tracker.process_video_frame(frame.image, t_s * 1000.0, meanwhile=meanwhile)
            elif self.live:
                landmarks = self.tracker.process_live(frame.image, frame.t_capture_ns)
            else:
                landmarks = self.tracker.process_video_frame(frame.image, t_s * 1000.0)
        self.last_landmarks = landmarks
        with stage_timer(stamps, "reconstruct"):
            params = self.reconstructor.reconstruct(landmarks, t_s) if landmarks is not None else None
            return self.hold.update(params, t_s), params is not None

    def process(self, frame: Frame, audio_window: np.ndarray | None, vision: FaceParams | None = None,
                stamps: StageStamps | None = None) -> AvatarState:
        """Process one frame.

        Args:
            frame: the frame (frozen; never written to).
            audio_window: (N,) float32 16 kHz audio ending at the frame's time plus
                ``speech_lookahead_s``, or None.
            vision: precomputed FaceParams (demo mode) instead of tracking.
            stamps: the frame's stage-timing record to fill (default: a new one with
                the frame's capture stamp); it becomes the state's ``stamps``.

        Returns:
            The tuned AvatarState of this frame. A tuning step that raises an
            AvatarError is logged and kept in :attr:`last_error`; the untuned state
            is returned then.

        Raises:
            AvatarError: a stage (tracker, reconstructor, speech) failed. When vision
                fails, its error is raised; the frame's speech call may have run
                then (it runs while the frame is tracked) and has ended.

        The ``speech`` stamp is the speech call's own start and end; with
        :attr:`concurrent_speech` it lies inside ``track`` (or overlaps ``track``
        and ``reconstruct`` on the worker thread).
        """
        clock = self.order_chooser.clock
        start_ns = clock()
        stamps = frame.capture_stamps() if stamps is None else stamps
        t_s = frame.media_time_s
        speech = self.speech
        job = meanwhile = None
        queued = False
        overlapped = None  # the order, where it matters: speech beside tracking
        if speech is not None and audio_window is not None:
            if vision is None and self.tracker is not None:
                order = self._speech_order
                overlapped = self.order_chooser.next_order() if order == "auto" else order == "overlapped"
                self.last_overlapped = overlapped
            queued = bool(overlapped) and not getattr(self.tracker, "runs_meanwhile", False)
            job = _SpeechJob(speech.process, (audio_window, t_s + self.speech_lookahead_s), threaded=queued)
            if queued:  # on the worker thread, beside tracking
                self._worker.submit(job)
            elif overlapped:
                meanwhile = job.run  # on this thread, while MediaPipe's threads track
        mine = False
        try:
            vision, face_found = self._vision(frame, vision, stamps, meanwhile)
        finally:
            # The animator is idle again when this call returns or raises: a job the worker
            # started is waited for; one it did not start yet is taken back (and run below).
            if job is not None:
                mine = not queued or job.claim()
                if not mine:
                    job.done.wait()
        if job is not None:
            if mine and not job.finished:
                job.run()
            stamps["speech"] = (job.start_ns, job.end_ns)
            audio_w = np.asarray(job.result(), np.float32)
        else:
            audio_w = np.zeros(NUM_BLENDSHAPES, np.float32)
        chain = self.chain
        with stage_timer(stamps, "fuse"):
            weights, rot, trans = chain.fuse(vision, audio_w, face_found, t_s)
        state = make_state(frame.t_capture_ns, t_s, weights, rot, trans, np.asarray(vision.gaze, np.float32),
                           face_found, np.asarray(vision.blendshapes, np.float32), audio_w, stamps, frame.index)
        try:
            with stage_timer(stamps, "tune"):
                tuned = chain.tune(state)
        except AvatarError as exc:
            self.last_error = str(exc)
            log.warning("post-processing of frame %d failed: %s", frame.index, exc)
            tuned = state
        if overlapped is not None and self._speech_order == "auto":
            self.order_chooser.record(overlapped, clock() - start_ns)
        return tuned


def audio_window(samples: np.ndarray, rate: int, t_s: float, context_s: float) -> np.ndarray:
    """The ``context_s`` seconds of ``samples`` ending at ``t_s`` (zero-padded before 0).

    Args:
        samples: (N,) float32 mono audio starting at media time 0.
        rate: its sample rate, Hz.
        t_s: end time, seconds.
        context_s: window length, seconds.

    Returns:
        (round(context_s * rate),) float32.
    """
    n = int(round(context_s * rate))
    end = int(round(t_s * rate))
    start = end - n
    out = np.zeros(n, np.float32)
    lo, hi = max(start, 0), min(end, len(samples))
    if hi > lo:
        out[lo - start: hi - start] = samples[lo:hi]
    return out
