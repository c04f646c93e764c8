"""The studio session: everything the studio does, without Qt (napari's ViewerModel idea).

:class:`StudioSession` owns

- the sources: camera (with its microphone) or a video file played live, opened
  on an opener thread, and the reconnect of a lost camera by its device id;
- the live pipeline (:class:`~avatar_app.pipeline.live.LivePipeline`), built by
  :func:`~avatar_app.pipeline.stages.build_stages` with the engine controller's
  slots, and its post-processing chain (fusion, tuning, expressions);
- the engine choice and swaps (:class:`~avatar_app.pipeline.engines.EngineController`), the
  face path (the geometric solver or the learned face engine, :meth:`StudioSession.set_face_path`)
  and the face tracker's (:class:`~avatar_app.pipeline.stage_swaps.TrackerController`);
- the output fan-out (:class:`~avatar_app.pipeline.outputs.LiveOutputs`: VMC, the
  virtual camera, calibration samples; :class:`~avatar_app.pipeline.recording.StudioRecording`:
  the clip, its audio and blendshape track from the view's rendered frames);
- the settings model (:class:`~avatar_app.pipeline.settings.StudioSettings`),
  persisted in the store it is given (the user's QSettings in the studio);
- an offline mode (:meth:`StudioSession.run_offline`): every frame of a file
  in media time through the same stages and chain as ``avatar-app render``.

It emits plain events (:class:`~avatar_app.core.events.Event`, see
:class:`SessionEvents`); the studio's Qt bridge (``ui/bridge.py``) turns them
into signals. Work that finishes on another thread comes back through the
``dispatch`` callable (the bridge queues it to the GUI thread; without one it
runs where it finished).

Thread: call from one controlling thread (the GUI's); :attr:`SessionEvents.state`
fires on the pipeline thread.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from avatar_app.core.errors import AvatarError
from avatar_app.core.events import Event
from avatar_app.core.types import AvatarState
from avatar_app.fusion.chain import PostChain
from avatar_app.fusion.expressions import ExpressionLayer, parse_mix
from avatar_app.pipeline import settings as store
from avatar_app.pipeline.outputs import LiveOutputs
from avatar_app.pipeline.session_events import SessionEvents, SourceInfo, sentence  # noqa: F401
from avatar_app.pipeline.stage_swaps import TrackerController, attach_engines, swap_face
from avatar_app.pipeline.stages import StageChoice, build_stages, resolve_face_path

log = logging.getLogger(__name__)

#: Sample rate of the source's audio ring (and of recordings), Hz.
AUDIO_RATE = 16000
#: Seconds between two attempts to find a lost camera again.
RECONNECT_INTERVAL_S = 2.0


def _index_camera(camera_id: str) -> int | None:
    """``"index:N"`` -> N (the default camera resolver; the studio lists devices by name)."""
    head, _, n = camera_id.partition(":")
    return int(n) if head == "index" and n.isdigit() else None


class StudioSession:
    """The studio without its window (see the module docstring).

    Args:
        settings_store: a key-value store with QSettings' ``value``/``setValue``/``sync``
            (default an in-memory :class:`~avatar_app.pipeline.settings.MemoryStore`).
        engines: the EngineController (default: one over ``models/``); started here.
        dispatch: ``dispatch(fn)`` runs ``fn()`` on the controlling thread (default: at once).
        priorities: the window's ThreadPriorities (its audio opener keeps the GUI's priority), or None.
        resolve_camera: ``resolve_camera(camera_id) -> index or None`` (reconnect; default: "index:N").
        reconstructor_factory: ``f(engines) -> FaceReconstructor or None`` instead of the
            stage factory's choice (tests wire an EngineSlot stand-in here).
        speech_factory: ``f(engines) -> SpeechAnimator or None`` likewise.

    Attributes:
        settings: the StudioSettings in force (apply changes with the ``set_*`` methods).
        events: :class:`SessionEvents`.
        expressions: the ExpressionLayer the hotkeys drive (shared by every pipeline).
        chain: the live post-processing chain (reset for each new source).
        pipeline: the running LivePipeline, or None.
        mic: the running MicSource, or None.
        outputs: VMC, virtual camera and the calibration sampler (:class:`LiveOutputs`).
        recording: the running :class:`~avatar_app.pipeline.recording.StudioRecording`, or None.
        frame_rendered: Event ``(rgb, state)``: a 1280x720 render for the recording and the
            virtual camera (the view emits it).
        neutral_landmarks: the Landmarks of the last neutral calibration, or None.
        worker: a one-thread executor for short background jobs (device listing, probes).
    """

    def __init__(self, settings_store=None, engines=None, dispatch: Callable[[Callable], None] | None = None,
                 priorities=None, resolve_camera: Callable[[str], int | None] | None = None,
                 reconstructor_factory: Callable | None = None, speech_factory: Callable | None = None):
        from avatar_app.pipeline.engines import EngineController

        self.store = settings_store if settings_store is not None else store.MemoryStore()
        self.settings = store.StudioSettings.load(self.store)
        self.events = SessionEvents()
        self.dispatch = dispatch or (lambda fn: fn())
        self.priorities = priorities
        self.resolve_camera = resolve_camera or _index_camera
        self.reconstructor_factory = reconstructor_factory
        self.speech_factory = speech_factory
        self.expressions = ExpressionLayer()
        self.chain = PostChain(self.settings.chain(), self.expressions)
        self.pipeline = None
        self.mic = None
        self.source_kind = ""
        self.camera_id = ""
        self.camera_index: int | None = None
        self.neutral_landmarks = None
        self.frame_rendered = Event("frame rendered")
        self.recording = None
        self._reconnect_at = 0.0
        self.reconnecting = False
        self._reconnect_pending = False
        self._closing = False
        self._retired: list[tuple] = []
        self._last_error: str | None = None
        self._lost = None  # the pipeline whose death was reported
        self._source_fps = (0, 0.0, 0.0)
        self._opener = ThreadPoolExecutor(max_workers=1, thread_name_prefix="source-opener")
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-worker")
        self._audio_opener = (priorities.kept_executor("audio-opener") if priorities is not None
                              else ThreadPoolExecutor(max_workers=1, thread_name_prefix="audio-opener"))
        self.engines = engines or EngineController()
        self.engines.changed.connect(lambda name: self.dispatch(lambda: self._on_engine_changed(name)))
        self.engines.statuses_ready.connect(lambda: self.dispatch(self.events.statuses_ready.emit))
        self.trackers = TrackerController(self)
        self.outputs = LiveOutputs(self)
        self.frame_rendered.connect(self.outputs.on_frame_rendered)

    def start(self, source: Path | None = None, camera: int | None = None) -> None:
        """Open the engines, the live outputs and the first source (a file, the camera, or the last one)."""
        choices = {k: dict(v) for k, v in self.settings.engines.choices.items()}
        self.engines.start(choices)
        self.trackers.start()
        self.outputs.apply(self.settings.output)
        last = self.store.value("last_file", "", type=str)
        # a source whose tracker is the ONNX engines opens on the opener thread: the window shows meanwhile,
        # with the engines' build progress in the Tracking row (MediaPipe's tracker loads in a moment)
        wait = not self.trackers.builds_engines()
        if source is not None:
            self.open_file(Path(source), wait=wait)
        elif camera is None and self.settings.source.kind == "file" and last and Path(last).is_file():
            self.open_file(Path(last), wait=wait)
        else:
            self.open_camera(camera if camera is not None else self.store.value("camera", 0, type=int), wait=wait)

    # ================================================================== sources
    def slots(self) -> dict:
        """Engine name -> the controller's open EngineSlot or None (the stage factory's ``slots``)."""
        return {n: self.engines.slot(n) for n in ("face_recon", "speech2face")}

    def _make_pipeline(self, source, ring):
        """A started LivePipeline on ``source`` (stages from the stage factory, the session's chain)."""
        from avatar_app.pipeline.live import LivePipeline

        choice = StageChoice(live=True, audio=ring is not None, slots=self.slots(), **self.trackers.stage_fields(),
                             on_fallback=self.trackers.note_fallback, face=self.settings.engines.face)
        recon = self.reconstructor_factory(self.engines) if self.reconstructor_factory is not None else None
        speech = self.speech_factory(self.engines) if self.speech_factory is not None and ring is not None else None
        with self.trackers.source_build(choice.tracker):  # the Tracking row's progress bar
            stages = build_stages(choice, reconstructor=recon, speech=speech, chain=self.chain)
        pipe = LivePipeline(source, stages, ring=ring)
        pipe.set_max_fps(self.effective_fps_cap())
        pipe.on_state = self.outputs.on_state
        pipe.start()
        return pipe

    def _open(self, make: Callable[[], SourceInfo], wait: bool, keep_old: bool = False, what: str = "") -> bool:
        """Open a source with ``make`` on the opener thread and install it.

        Args:
            make: builds the :class:`SourceInfo` (runs on the opener thread).
            wait: block until it is installed (True) or return once queued (False).
            keep_old: open the new source while the current one keeps running, and stop
                the current one only once the new one works (files: a wrong path or a
                broken file leaves what plays now playing). False stops the current
                source first (a camera cannot be opened twice).
            what: name of the source for the "Opening …" message.
        """
        self.reconnecting = False
        if keep_old:
            if wait:
                return self._install(self._opener.submit(self._run_opener, make, None).result())
            self.events.status.emit(f"Opening {what or 'the source'}…", 5000)
            self._opener.submit(lambda: self._installed_later(self._run_opener(make, None)))
            return True
        if wait:
            self.stop_pipeline()
            # opened on the opener thread all the same, so the threads it starts inherit its priority
            return self._install(self._opener.submit(self._run_opener, make, None).result())
        old = (self.pipeline, self.mic)
        self.pipeline, self.mic = None, None
        self.events.source_opening.emit("Opening…")
        self._opener.submit(lambda: self._installed_later(self._run_opener(make, old)))
        return True

    def _installed_later(self, info: SourceInfo) -> None:
        self.dispatch(lambda: self._install(info))

    @staticmethod
    def _run_opener(make, old) -> SourceInfo:
        for obj in old or ():
            if obj is not None:
                obj.stop()
        try:
            return make()
        except AvatarError as exc:
            return SourceInfo(error=str(exc))

    @staticmethod
    def _discard(info: SourceInfo) -> None:
        for obj in (info.pipeline, info.mic):
            if obj is not None:
                obj.stop()

    def _install(self, info: SourceInfo) -> bool:
        """Make an opened source the running one (controlling thread); False when it failed."""
        if info.reconnect:
            self._reconnect_pending = False
            if not self.reconnecting:  # the user chose another source meanwhile
                self._discard(info)
                return False
        if self._closing:
            self._discard(info)
            return False
        if info.mic_text:
            self.events.mic_changed.emit(info.mic_text)
        if info.error:
            if info.mic is not None:
                info.mic.stop()
            if not self.reconnecting:
                self.events.source_failed.emit(info, self.pipeline is None)
            return False
        old = (self.pipeline, self.mic)
        self.pipeline, self.mic = info.pipeline, info.mic
        if any(o is not None for o in old):  # the new source replaces one that kept running while it opened
            self._retired.append(old)
            self._opener.submit(self._stop_retired, old)
        self.chain.reset()
        if info.reconnect and self.neutral_landmarks is not None:
            info.pipeline.processor.reconstructor.calibrate_neutral(self.neutral_landmarks)  # same user
        else:
            self.neutral_landmarks = None  # another source: calibrate again
        self.source_kind = info.kind
        self.reconnecting = False
        self._last_error = None
        self._remember_source(info)
        self.events.source_changed.emit(info)
        if self.priorities is not None:
            self.priorities.sweep()
        return True

    def _remember_source(self, info: SourceInfo) -> None:
        src = self.settings.source
        if info.kind == "camera":
            self.camera_id = info.camera_id
            src.kind, src.camera_id = "camera", info.camera_id
            self.store.setValue("camera", self.camera_index)
        elif info.kind == "file" and info.path is not None:
            self.store.setValue("last_file", str(info.path))
            src.kind = "file"
        store.save_area(self.store, src)

    def _stop_retired(self, objs) -> None:
        """Stop a replaced pipeline and microphone (opener thread: joining takes a moment)."""
        for obj in objs:
            if obj is not None:
                obj.stop()
        if objs in self._retired:
            self._retired.remove(objs)

    def open_file(self, path: Path, wait: bool = True) -> bool:
        """Play a video file live, looping (its audio drives speech).

        The file is opened before the current source stops: a failure leaves it running.

        Args:
            path: the video.
            wait: open and install before returning (True) or on the opener thread (False).

        Returns:
            False (and emits ``source_failed``) when it cannot be opened; with ``wait=False``
            True once queued.
        """
        from avatar_app.capture.live_file import LiveFileSource

        path = Path(path)

        def make() -> SourceInfo:
            try:
                source = LiveFileSource(path, loop=True)
                pipe = self._make_pipeline(source, getattr(source, "ring", None))
            except AvatarError as exc:
                return SourceInfo(error=str(exc), kind="file", path=path)
            w, h, fps = source.granted
            has_audio = pipe.ring is not None and bool(getattr(getattr(source, "info", None), "has_audio", True))
            return SourceInfo(pipe, None, f"File: {path.name} ({w}x{h} @ {fps:.0f} fps)",
                              "Audio: the file's own track" if has_audio
                              else "Audio: the file has no audio track (recording will be silent)",
                              kind="file", path=path)

        return self._open(make, wait, keep_old=True, what=path.name)

    def open_camera(self, index: int, wait: bool = True, camera_id: str = "") -> bool:
        """Open camera ``index`` and the chosen microphone; False (``source_failed``) on error.

        Args:
            index: OpenCV camera index.
            wait: open on this thread's behalf and install before returning (True) or later (False).
            camera_id: stable id of the device (for reconnecting), default "index:<index>".
        """
        self.camera_index = int(index)
        cam_id = camera_id or f"index:{index}"
        return self._open(lambda: self._camera_opened(int(index), cam_id), wait)

    def _camera_opened(self, index: int, cam_id: str, reconnect: bool = False) -> SourceInfo:
        """Open camera ``index`` with the chosen microphone (opener thread)."""
        from avatar_app.capture.camera import CameraSource
        from avatar_app.capture.ring import AudioRing

        ring = AudioRing(capacity_s=10.0, sample_rate=AUDIO_RATE)
        mic, mic_text = self._open_mic(ring, self.settings.source.microphone)
        try:
            source = CameraSource(index, open_timeout_s=2.0) if reconnect else CameraSource(index)
            pipe = self._make_pipeline(source, ring if mic is not None else None)
        except AvatarError as exc:
            if mic is not None:
                mic.stop()
            return SourceInfo(error=str(exc), kind="camera", mic_text=mic_text)
        g = getattr(source, "granted", None)
        label = f"Camera {index}" + (" (reconnected)" if reconnect else "")
        if g:
            label += f": {g[0]}x{g[1]} @ {g[2]:.0f} fps granted"
        return SourceInfo(pipe, mic, label, mic_text, kind="camera", camera_id=cam_id, reconnect=reconnect)

    def _open_mic(self, ring, name: str):
        """Open and start microphone ``name`` on the audio opener (its threads keep the GUI's priority)."""
        from avatar_app.capture.mic import MicSource

        def work():
            if self.priorities is None:
                mic = MicSource(device=name or None, ring=ring)
                mic.start()
                return mic
            with self.priorities.keeping_new_threads():
                mic = MicSource(device=name or None, ring=ring)
                mic.start()
            return mic

        try:
            return self._audio_opener.submit(work).result(), f"Microphone: {name or 'default input'}"
        except AvatarError as exc:
            log.warning("%s", exc)
            return None, f"Microphone: none. {sentence(str(exc))} Speech is off; tracking continues."

    def set_microphone(self, name: str) -> bool:
        """Use microphone ``name`` ("" = default) with the camera; persisted. Returns False on error."""
        self.settings.source.microphone = name
        store.save_area(self.store, self.settings.source)
        if self.pipeline is None or self.source_kind != "camera" or self.pipeline.ring is None:
            return True
        if self.mic is not None:
            self.mic.stop()
            self.mic = None
        self.mic, text = self._open_mic(self.pipeline.ring, name)
        self.events.mic_changed.emit(text)
        return self.mic is not None

    def stop_pipeline(self) -> None:
        """Stop the current source, pipeline and microphone."""
        if self.pipeline is not None:
            self.pipeline.stop()
            self.pipeline = None
        if self.mic is not None:
            self.mic.stop()
            self.mic = None

    @property
    def mic_overflows(self) -> int:
        """Input overflows of the running microphone (PortAudio blocks whose samples were lost), else 0."""
        return int(getattr(self.mic, "overflows", 0) or 0)

    def playing_file(self) -> Path | None:
        """The video file playing now, or None (a camera, or nothing)."""
        return getattr(getattr(self.pipeline, "source", None), "path", None)

    def latest_state(self) -> AvatarState | None:
        """The running pipeline's newest state, or None."""
        pipe = self.pipeline
        return pipe.latest_state() if pipe is not None else None

    # ================================================================== health, reconnect
    def tick(self) -> None:
        """Periodic check (the window's 5 Hz timer): a source that died, the camera's reconnect, the fps."""
        pipe = self.pipeline
        if pipe is not None and pipe.error:
            if not pipe.running and pipe is not self._lost:  # the source (or the pipeline) died
                self._lost, self._last_error = pipe, pipe.error
                camera = self.source_kind == "camera"
                if camera:
                    self._reconnect_at = time.monotonic() + 1.0
                    self.reconnecting = True
                self.events.source_lost.emit(pipe.error, camera)
            elif pipe.running and pipe.error != self._last_error:  # a frame failed; it goes on
                self._last_error = pipe.error
                self.events.error.emit(pipe.error)
        if self.reconnecting and time.monotonic() >= self._reconnect_at:
            self._try_reconnect()
        self._measure_source_fps()

    def _try_reconnect(self) -> None:
        """Look for the lost camera by its device id (on the opener thread) and reopen it."""
        self._reconnect_at = time.monotonic() + RECONNECT_INTERVAL_S
        if self._reconnect_pending:
            return
        self._reconnect_pending = True
        cam_id = self.camera_id or f"index:{self.camera_index or 0}"

        def job():
            try:
                index = self.resolve_camera(cam_id)
            except Exception as exc:  # noqa: BLE001 - listing devices must not stop the reconnect
                log.warning("looking for camera %s failed: %s", cam_id, exc)
                index = None
            if index is None:
                info = SourceInfo(error=f"camera {cam_id} is not connected", kind="camera")
            else:
                self.camera_index = index
                info = self._run_opener(lambda: self._camera_opened(index, cam_id, reconnect=True), None)
            info.reconnect = True
            self._installed_later(info)

        self._opener.submit(job)

    def _measure_source_fps(self) -> None:
        frame = self.pipeline.last_frame if self.pipeline is not None else None
        if frame is None:
            return
        idx0, t0, fps = self._source_fps
        now = time.monotonic()
        if now - t0 >= 2.0:
            if frame.index > idx0 and t0 > 0:
                fps = (frame.index - idx0) / (now - t0)
            self._source_fps = (frame.index, now, fps)

    @property
    def source_fps(self) -> float:
        """Frame rate the source really delivers (frame indices per second over ~2 s)."""
        return self._source_fps[2]

    # ================================================================== neutral, engines
    def calibrate_neutral(self) -> bool:
        """Use the current face as the neutral face (look straight, relax). Returns whether it worked."""
        pipe = self.pipeline
        lm = pipe.processor.last_landmarks if pipe is not None else None
        if lm is None:
            self.events.status.emit("No face to calibrate: look at the camera and try again", 5000)
            return False
        try:
            pipe.processor.reconstructor.calibrate_neutral(lm)
        except AvatarError as exc:
            self.events.error.emit(str(exc))
            return False
        self.neutral_landmarks = lm
        from avatar_app.reconstruction.neutral_check import neutral_face_problems

        try:
            problems = neutral_face_problems(lm)
        except AvatarError:
            problems = []
        if problems:
            self.events.status.emit(
                f"Neutral face calibrated, but {' and '.join(problems)}: press Ctrl+N again while you look "
                "at the camera with your eyes open and your face relaxed", 10000)
        else:
            self.events.status.emit("Neutral face calibrated", 3000)
        self.events.neutral_calibrated.emit()
        return True

    def set_engine_choice(self, name: str, backend: str, precision: str | None) -> Future | None:
        """Switch engine ``name`` (built and verified in the background; persisted). Returns the Future."""
        self.settings.engines.choices[name] = {"backend": backend, "precision": precision}
        store.save_area(self.store, self.settings.engines)
        return self.engines.request(name, backend, precision)

    def _on_engine_changed(self, name: str) -> None:
        self.events.engine_changed.emit(name)
        self._attach_engines()

    @property
    def face_path(self) -> str:
        """The face path the user chose, resolved: ``"solver"`` or ``"engine"`` (``settings.engines.face``)."""
        return resolve_face_path(self.settings.engines.face)

    def set_face_path(self, face: str) -> Future | None:
        """Choose the face path (persisted) and apply it to the running pipeline between two frames.

        Args:
            face: ``"solver"`` (the geometric solver), ``"engine"`` (the learned face engine; the
                solver while its slot is not open or when it failed) or ``"default"``
                (:data:`~avatar_app.pipeline.stages.FACE_ENGINE_BY_DEFAULT`).

        Returns:
            The swap's Future (see :func:`~avatar_app.pipeline.stage_swaps.swap_face`), None without
            a pipeline (the next one is built with the new path).

        Raises:
            InputError: ``face`` is not a face path.
        """
        resolve_face_path(face)
        self.settings.engines.face = face
        store.save_area(self.store, self.settings.engines)
        fut = swap_face(self)
        self.events.engine_changed.emit("face_recon")
        return fut

    def face_serving(self) -> str:
        """What drives the running pipeline's face: ``"engine"``, ``"solver"``, or "" without a pipeline."""
        pipe = self.pipeline
        if pipe is None:
            return ""
        return "engine" if getattr(pipe.processor.reconstructor, "slot", None) is not None else "solver"

    def describe_face(self) -> str:
        """Which face path drives the face, for the status bar and the Engines panel's face row:
        ``learned engine (ONNX Runtime CPU FP32)``, ``geometric solver``, or the solver standing in for the
        chosen engine and why (``geometric solver (the learned engine failed)``, ``… (learned engine opening…)``)."""
        engines = self.engines
        serving = self.face_serving() or ("engine" if self.face_path == "engine" and engines.active("face_recon")
                                          else "solver")
        if serving == "engine":
            return f"learned engine ({engines.describe('face_recon')})"
        if self.face_path == "solver":
            return "geometric solver"
        e = engines.entry("face_recon")
        if not e.installed:
            return "geometric solver (the learned engine's model is not installed)"
        if e.error and engines.active("face_recon") is None:
            return "geometric solver (the learned engine failed)"
        return "geometric solver (learned engine opening…)"

    def set_tracker_choice(self, kind: str, backend: str = "auto", precision: str | None = None) -> Future:
        """Switch the face tracker (built in the background, swapped between two frames; persisted).

        See :meth:`~avatar_app.pipeline.stage_swaps.TrackerController.request`.
        """
        return self.trackers.request(kind, backend, precision)

    def _attach_engines(self) -> None:
        attach_engines(self)

    # ================================================================== settings
    def set_tuning(self, s) -> None:
        """Apply and persist the Tracking panel's settings (from the next frame).

        Raises:
            InputError: invalid settings.
        """
        self.chain.tuner.set_settings(s)
        self.settings.tuning = s.copy()
        store.save_tuning(self.store, s)
        self.events.settings_changed.emit("tuning")

    def set_expression_settings(self, e: store.ExpressionSettings) -> str:
        """Apply and persist hotkeys, modes and the custom mix; returns why the custom mix is ignored ("")."""
        self.settings.expressions = store.validate(e)
        store.save_area(self.store, self.settings.expressions)
        try:
            self.expressions.set_mix("custom", parse_mix(e.custom))
        except AvatarError as exc:
            self.events.status.emit(f"Custom expression: {exc}", 8000)
            return str(exc)
        return ""

    def set_avatar_settings(self, a: store.AvatarSettings) -> None:
        """Apply and persist background, lighting and MSAA (``settings_changed("avatar")``).

        Raises:
            InputError: an invalid value.
        """
        self.settings.avatar = store.validate(a)
        store.save_area(self.store, self.settings.avatar)
        self.events.settings_changed.emit("avatar")

    def set_output_settings(self, o: store.OutputSettings) -> None:
        """Apply and persist recording format, overlay, frame-rate cap, CPU mode and live outputs."""
        self.settings.output = store.validate(o)
        if self.pipeline is not None:
            self.pipeline.set_max_fps(self.effective_fps_cap())
        self.outputs.apply(self.settings.output)
        store.save_area(self.store, self.settings.output)
        self.events.settings_changed.emit("output")

    def effective_fps_cap(self) -> float:
        """The processing cap in Hz: the lower of the user's cap and the CPU mode's (0 = none)."""
        o = self.settings.output
        caps = [c for c in (o.fps_cap, store.CPU_MODES[o.cpu_mode][0]) if c > 0]
        return float(min(caps)) if caps else 0.0

    def effective_msaa(self) -> int:
        """MSAA samples to render with (0 when the CPU mode forbids it)."""
        return self.settings.avatar.msaa if store.CPU_MODES[self.settings.output.cpu_mode][1] else 0

    def save_settings(self) -> None:
        """Write every area into the store."""
        self.settings.tuning = self.chain.tuner.settings
        self.settings.save(self.store)
        self.store.sync()

    def export_settings(self, path: Path) -> Path:
        """Write every area to a settings file for ``avatar-app render --settings`` (File › Export settings…).

        Raises:
            InputError: the file cannot be written.
        """
        self.settings.tuning = self.chain.tuner.settings
        return store.save_settings_file(Path(path), self.settings)

    # ================================================================== recording
    def start_recording(self, path: Path, fmt, fps: float):
        """Start recording the rendered avatar with the source's audio (:attr:`recording`).

        Audio starts at the newest frame's capture (the clip starts with its first frame).

        Args:
            path: the clip. fmt: its RecordingFormat. fps: its frame rate, Hz.

        Returns:
            The :class:`~avatar_app.pipeline.recording.StudioRecording`.

        Raises:
            AvatarError: the clip cannot be opened (nothing runs then).
        """
        from avatar_app.pipeline.recording import StudioRecording

        ring = self.pipeline.ring if self.pipeline is not None else None
        st, now = self.latest_state(), time.perf_counter_ns()
        start = st.t_capture_ns if st is not None and st.t_capture_ns < now else now
        self.recording = StudioRecording(path, fmt, fps, ring, AUDIO_RATE, start)
        return self.recording

    def record_frame(self, rgb, state, t_ns: int) -> bool:
        """A 1280x720 render into the running recording (with the latency overlay when the Output
        settings ask for it); False when none runs or the encoder queue dropped it.

        Raises:
            AvatarError: the recorder failed (stop the recording; its finish reports why).
        """
        rec = self.recording
        if rec is None:
            return False
        if self.settings.output.overlay_in_recording and self.pipeline is not None:
            from avatar_app.pipeline.offline import draw_overlay

            rgb = draw_overlay(rgb, self.pipeline.stats.summary().lines())
        return rec.write_frame(rgb, state, t_ns)

    def stop_recording(self, last_state=None):
        """Stop the running recording (its audio ends with ``last_state``'s frame); returns it to finish
        (:meth:`StudioRecording.finish`, which may run on a worker), or None."""
        rec, self.recording = self.recording, None
        if rec is not None:
            try:
                rec.end_audio(last_state)
            except AvatarError as exc:  # the recorder's own failure: its finish() reports it, once
                log.warning("recording: the audio could not be ended: %s", exc)
        return rec

    # ================================================================== avatar
    def load_avatar(self, path: Path) -> None:
        """Load a glTF/VRM avatar on the worker thread; ``avatar_loaded(path, mesh or error)`` follows.

        The path is remembered once it loaded (:meth:`avatar_applied`).
        """
        from avatar_app.avatar.loader import load_avatar

        path = Path(path)

        def work():
            try:
                mesh = load_avatar(path)
            except AvatarError as exc:
                mesh = exc
            self.dispatch(lambda: self.events.avatar_loaded.emit(path, mesh))

        self.worker.submit(work)

    def avatar_applied(self, path: Path | None) -> None:
        """Remember the avatar shown (None: the default head) in the settings."""
        self.settings.avatar.path = str(path) if path is not None else ""
        store.save_area(self.store, self.settings.avatar)

    # ================================================================== offline mode
    def run_offline(self, path: Path, on_state: Callable[[AvatarState], None] | None = None,
                    stop=None) -> list[AvatarState]:
        """Every frame of a video in media time through the studio's stages and chain (no drops).

        The same stage factory, tracker choice, processor and chain settings as ``avatar-app render
        --settings`` with this session's exported settings
        (:func:`~avatar_app.pipeline.offline.offline_states`), so both give the same states.

        Args:
            path: the video.
            on_state: called with each state, in order, on this thread.
            stop: a threading.Event that ends the run before the next frame.

        Returns:
            The states, one per decoded frame.

        Raises:
            InputError: the file cannot be read, or its audio is silent.
        """
        from avatar_app.pipeline.offline import offline_states

        self.settings.tuning = self.chain.tuner.settings
        t = self.settings.engines.tracker
        return offline_states(Path(path), self.settings.chain(), on_state, stop,
                              tracker=(t["kind"], t["backend"], t["precision"]), face=self.settings.engines.face)

    # ================================================================== close
    def close(self) -> None:
        """Stop everything: openers, the pipeline and microphone, live outputs, engines. Safe to call twice."""
        self._closing = True
        self.save_settings()
        rec = self.stop_recording()
        if rec is not None:
            rec.finish()
        self._opener.shutdown(wait=True, cancel_futures=True)
        self.worker.shutdown(wait=True, cancel_futures=True)
        self._audio_opener.shutdown(wait=True, cancel_futures=True)
        self.trackers.close()
        for objs in list(self._retired):  # their stop was cancelled with the opener's queue
            self._stop_retired(objs)
        self.stop_pipeline()
        self.outputs.close()
        self.engines.close()
