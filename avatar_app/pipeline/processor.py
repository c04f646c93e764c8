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
"""
from __future__ import annotations

import logging
import queue
import threading

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES
from avatar_app.core.clock import now_ns, stage_timer
from avatar_app.core.errors import AvatarError
from avatar_app.core.types import AvatarState, FaceParams, Frame, StageStamps
from avatar_app.fusion.chain import PostChain

log = logging.getLogger(__name__)


#: CPUs from which speech overlaps tracking by default (:func:`speech_overlap_default`).
OVERLAP_MIN_CPUS = 4


def speech_overlap_default(cpus: int | None = None) -> bool:
    """Whether the speech stage runs beside tracking by default: only with a CPU to spare for it.

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
    import os

    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # not Linux
            cpus = os.cpu_count() or 1
    return cpus >= OVERLAP_MIN_CPUS


class _SpeechJob:
    """One speech call: its result or exception, and when it ran.

    Whoever claims it first runs it: the worker thread, or the processing thread
    when the worker had not started it by the time vision was done (a busy
    machine that did not schedule the worker yet), so the frame never waits for
    a thread that is not running.
    """

    __slots__ = ("fn", "args", "done", "value", "error", "start_ns", "end_ns", "_claim")

    def __init__(self, fn, args):
        self.fn, self.args = fn, args
        self.done = threading.Event()
        self.value = self.error = None
        self.start_ns = self.end_ns = 0
        self._claim = threading.Lock()

    def claim(self) -> bool:
        """True for the one caller that gets to run the job."""
        return self._claim.acquire(blocking=False)

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
            self.done.set()

    def result(self):
        """Wait for the call; its return value, or raise what it raised."""
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

    Attributes:
        last_landmarks: the last frame's Landmarks, or None (no face).
        last_error: the last post-processing error, as text ("" when none).
        speech_lookahead_s: seconds of audio after the frame time given to the speech
            animator (offline rendering only: its ``offline_lookahead_s``; live stays causal).
        concurrent_speech: :func:`speech_overlap_default` (True where this process may use
            4 or more CPUs) runs the speech animator while the frame is
            tracked: inside the tracker's call while MediaPipe's threads compute
            (``tracker.runs_meanwhile``), else on the worker thread while the calling
            thread tracks and reconstructs (the calling thread runs it itself after
            vision when the worker has not started it by then); False runs the stages
            one after the other on the calling thread. All give the same states.

    Thread: one processing thread at a time. ``reconstructor`` and ``speech`` may be
    replaced between two frames (an engine swap) from another thread: every call
    returns only after its speech call ended, so no animator is in use between
    frames. Worker-thread speech calls run on a daemon thread named "speech" that
    ends after a second without frames or at :meth:`close`.
    """

    def __init__(self, tracker, reconstructor, speech=None, live: bool = False, chain: PostChain | None = None):
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
        self.concurrent_speech = speech_overlap_default()
        self._worker = _SpeechWorker()

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
        extra = {} if meanwhile is None else {"meanwhile": meanwhile}
        with stage_timer(stamps, "track"):
            if self.live:
                landmarks = self.tracker.process_live(frame.image, frame.t_capture_ns, **extra)
            else:
                landmarks = self.tracker.process_video_frame(frame.image, frame.media_time_s * 1000.0, **extra)
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
        stamps = frame.capture_stamps() if stamps is None else stamps
        t_s = frame.media_time_s
        speech = self.speech
        job = meanwhile = None
        queued = False
        if speech is not None and audio_window is not None:
            job = _SpeechJob(speech.process, (audio_window, t_s + self.speech_lookahead_s))
            if self.concurrent_speech and vision is None and self.tracker is not None:  # beside tracking
                if getattr(self.tracker, "runs_meanwhile", False):
                    meanwhile = job.run  # on this thread, while MediaPipe's threads track
                else:
                    self._worker.submit(job)
                    queued = True
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
        audio_w = np.zeros(NUM_BLENDSHAPES, np.float32)
        if job is not None:
            if mine and not job.done.is_set():
                job.run()
            stamps["speech"] = (job.start_ns, job.end_ns)
            audio_w = np.asarray(job.result(), np.float32)
        with stage_timer(stamps, "fuse"):
            weights, rot, trans = self.chain.fuse(vision, audio_w, face_found, t_s)
        state = AvatarState(
            t_capture_ns=frame.t_capture_ns, media_time_s=t_s, weights=weights, rotation=rot, translation=trans,
            gaze=np.asarray(vision.gaze, np.float32), face_found=face_found,
            vision_weights=np.asarray(vision.blendshapes, np.float32), audio_weights=audio_w,
            stamps=stamps, frame_index=frame.index)
        try:
            with stage_timer(stamps, "tune"):
                tuned = self.chain.tune(state)
        except AvatarError as exc:
            self.last_error = str(exc)
            log.warning("post-processing of frame %d failed: %s", frame.index, exc)
            return state
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
