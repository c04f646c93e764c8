"""Wiring of the stages, offline (every frame, media time) and live (newest frame wins).

Offline (``render_file``, ``render_demo``): decode -> track -> reconstruct ->
speech -> fuse runs on the calling thread in media time; rendering runs on a
render thread (it owns the EGL context) and encoding on the recorder's thread,
so the three overlap on a multi-core machine while the order of frames and the
results stay deterministic.

Live (``LivePipeline``): a source thread delivers frames into a newest-wins slot
(``capture``), one processing thread runs the stages on the newest frame and
publishes an immutable AvatarState; the GUI renders the newest state.
"""
from __future__ import annotations

import logging
import math
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES, Blendshape
from avatar_app.core.clock import now_ns, stage_timer
from avatar_app.core.errors import AvatarError, InputError, NoFaceError, RecordingError
from avatar_app.core.latency import LatencyStats
from avatar_app.core.types import AvatarState, FaceParams, Frame
from avatar_app.fusion import Fusion, FusionSettings
from avatar_app.speech.base import describe_speech

log = logging.getLogger(__name__)

SPEECH_RATE = 16000


@dataclass
class RenderOptions:
    """Options of an offline render.

    Attributes:
        size: output (width, height) in pixels.
        fps: output frame rate (Hz); None = the input's.
        overlay: draw the latency overlay into the video.
        msaa: MSAA samples (0 = off; software OpenGL pays dearly for it).
        background: RGB 0..255 tuple or "transparent".
        audio_path: audio to use instead of the video's own track.
        use_audio: False renders without sound and without speech drive.
        avatar_path: a glTF/VRM avatar instead of the default head.
        fusion: fusion settings.
    """

    size: tuple[int, int] = (1280, 720)
    fps: float | None = None
    overlay: bool = False
    msaa: int = 0
    background: tuple[int, int, int] | str = (0, 177, 64)
    audio_path: Path | None = None
    use_audio: bool = True
    avatar_path: Path | None = None
    fusion: FusionSettings = field(default_factory=FusionSettings)


@dataclass
class RenderReport:
    """What an offline render produced.

    Attributes:
        output_path: the MP4 written.
        sidecar_path: the JSON Lines blendshape track.
        frames_in: input video frames processed (= sidecar lines).
        frames_out: output video frames written.
        faces_found: input frames in which a face was tracked.
        duration_s: output video duration, seconds.
        audio_duration_s: audio in the clip, seconds (0 when none); it ends with the
            video: longer audio is cut, shorter audio padded with silence.
        wall_s: wall-clock time of the render.
        stage_ms: stage -> (p50, p95) in ms.
        warnings: messages for the user (e.g. silent stretches).
        input_problem: set when the input was damaged (truncated or corrupt): the
            clip holds only the frames that decoded.
        face_solver: what turned landmarks into blendshapes: ``"geometric solver"`` or the
            learned engine's description (``face_recon.onnx on ort_cpu (fp32)``).
        speech_backend: what turned the voice into mouth motion: the speech engine's
            description (``speech2face.onnx on ort_cpu (fp32)``), ``"loudness solver"``
            (its fallback), or "" when no audio drove the mouth.
        interrupted: the render was stopped early (``stop`` was set): the clip and
            the sidecar hold the frames rendered so far and the audio is cut to the
            video's length; when no frame was rendered nothing is written.

    Outputs are written to hidden part files beside the targets and renamed over
    them only when the render is kept (complete, interrupted after the first
    frame, or a truncated input's partial render; both go to
    ``<stem>.partial<suffix>`` when the output exists): a render that fails leaves
    existing files at ``output_path`` and ``sidecar_path`` as they were.
    """

    output_path: Path
    sidecar_path: Path
    frames_in: int = 0
    frames_out: int = 0
    faces_found: int = 0
    duration_s: float = 0.0
    audio_duration_s: float = 0.0
    wall_s: float = 0.0
    stage_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    input_problem: str | None = None
    interrupted: bool = False
    face_solver: str = ""
    speech_backend: str = ""

    @property
    def fps(self) -> float:
        """Input frames processed per wall-clock second."""
        return self.frames_in / self.wall_s if self.wall_s > 0 else 0.0


#: Suffix of the blendshape sidecar written beside a clip.
SIDECAR_SUFFIX = ".blendshapes.jsonl"


def sidecar_path_for(output_path: Path) -> Path:
    """``clip.mp4`` -> ``clip.blendshapes.jsonl``."""
    return Path(output_path).with_suffix(SIDECAR_SUFFIX)


class FrameProcessor:
    """Runs the per-frame stages synchronously: track, reconstruct, speech, fuse.

    Args:
        tracker: a FaceTracker (tracking.face_mesh) or None (vision supplied by the caller).
        reconstructor: a FaceReconstructor (reconstruction.base).
        speech: a SpeechAnimator (speech.base) or None.
        live: True calls the tracker's live method (process_live, ns stamps),
            False its video method (process_video_frame, media ms).
        fusion: Fusion instance (holds the smoothing state).

    Thread: one processing thread at a time.
    """

    def __init__(self, tracker, reconstructor, speech=None, live: bool = False, fusion: Fusion | None = None):
        from avatar_app.reconstruction.hold import NoFaceHold

        self.tracker = tracker
        self.reconstructor = reconstructor
        self.speech = speech
        self.live = live
        self.fusion = fusion or Fusion()
        self.hold = NoFaceHold()
        self.last_landmarks = None
        #: seconds of audio after the frame time given to the speech animator (offline
        #: rendering only: its ``offline_lookahead_s``; live mode stays causal)
        self.speech_lookahead_s = 0.0

    def process(self, frame: Frame, audio_window: np.ndarray | None, vision: FaceParams | None = None) -> AvatarState:
        """Process one frame.

        Args:
            frame: the frame; its ``stamps`` receive the stage timings.
            audio_window: (N,) float32 16 kHz audio ending at the frame's time plus
                ``speech_lookahead_s``, or None.
            vision: precomputed FaceParams (demo mode) instead of tracking.

        Returns:
            The AvatarState for this frame.
        """
        t_s = frame.media_time_s
        face_found = False
        landmarks = None
        if vision is None and self.tracker is not None:
            with stage_timer(frame.stamps, "track"):
                if self.live:
                    landmarks = self.tracker.process_live(frame.image, frame.t_capture_ns)
                else:
                    landmarks = self.tracker.process_video_frame(frame.image, frame.media_time_s * 1000.0)
            self.last_landmarks = landmarks
            with stage_timer(frame.stamps, "reconstruct"):
                params = self.reconstructor.reconstruct(landmarks, t_s) if landmarks is not None else None
                face_found = params is not None
                vision = self.hold.update(params, t_s)
        elif vision is not None:
            face_found = True
        else:
            vision = self.hold.update(None, t_s)
        audio_w = np.zeros(NUM_BLENDSHAPES, np.float32)
        if self.speech is not None and audio_window is not None:
            with stage_timer(frame.stamps, "speech"):
                audio_w = np.asarray(self.speech.process(audio_window, t_s + self.speech_lookahead_s), np.float32)
        with stage_timer(frame.stamps, "fuse"):
            weights, rot, trans = self.fusion.fuse(vision, audio_w, face_found, t_s)
        return AvatarState(
            t_capture_ns=frame.t_capture_ns,
            media_time_s=t_s,
            weights=weights,
            rotation=rot,
            translation=trans,
            gaze=np.asarray(vision.gaze, np.float32),
            face_found=face_found,
            vision_weights=np.asarray(vision.blendshapes, np.float32),
            audio_weights=audio_w,
            stamps=dict(frame.stamps),
            frame_index=frame.index,
        )


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


def draw_overlay(rgb: np.ndarray, lines: list[str]) -> np.ndarray:
    """Draw latency text lines onto a copy of an (H, W, 3|4) uint8 image (top left)."""
    import cv2

    img = np.ascontiguousarray(rgb.copy())
    scale = max(img.shape[0] / 720.0, 0.5) * 0.6
    y = int(28 * scale / 0.6)
    for line in lines:
        colour = (255, 255, 255, 255)[: img.shape[2]]
        cv2.putText(img, line, (12, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0, 255)[: img.shape[2]], 3, cv2.LINE_AA)
        cv2.putText(img, line, (12, y), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, 1, cv2.LINE_AA)
        y += int(26 * scale / 0.6)
    return img


class _RenderWorker:
    """Render thread: owns the headless GL context, renders states in order.

    Rendered frames go to ``sink(rgb, state)`` on the same thread.
    """

    _STOP = object()

    def __init__(self, options: RenderOptions, sink: Callable[[np.ndarray, AvatarState], None], stats: LatencyStats,
                 avatar=None):
        self.options = options
        self.avatar = avatar
        self.sink = sink
        self.stats = stats
        self.q: queue.Queue = queue.Queue(maxsize=8)
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="render", daemon=True)
        self.thread.start()
        self._ready.wait()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        renderer = None
        try:
            from avatar_app.render.headless import HeadlessRenderer

            avatar = self.avatar
            w, h = self.options.size
            renderer = HeadlessRenderer(w, h, msaa=self.options.msaa, background=self.options.background, avatar=avatar)
        except BaseException as exc:  # reported to the caller by __init__
            self.error = exc
            if renderer is not None:
                renderer.close()
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                item = self.q.get()
                if item is self._STOP:
                    break
                state = item
                stamps = dict(state.stamps)
                with stage_timer(stamps, "render"):
                    rgb = renderer.render(state)
                self.stats.add_frame(stamps)
                if self.options.overlay:
                    rgb = draw_overlay(rgb, self.stats.summary().lines())
                self.sink(rgb, replace(state, stamps=stamps))
        except BaseException as exc:
            self.error = exc
            # re-raised on the calling thread, which reports it: the traceback only at debug level
            log.debug("render thread failed: %s", exc, exc_info=True)
        finally:
            renderer.close()

    def put(self, state: AvatarState) -> None:
        """Queue a state for rendering; re-raises the render thread's error instead of blocking."""
        while True:
            if self.error is not None:
                raise self.error
            try:
                self.q.put(state, timeout=0.2)
                return
            except queue.Full:
                continue

    def finish(self) -> None:
        """Render what is queued, stop the thread, re-raise its error if any."""
        while self.thread.is_alive():
            try:
                self.q.put(self._STOP, timeout=0.2)
                break
            except queue.Full:
                continue
        self.thread.join()
        if self.error is not None:
            raise self.error


def _default_reconstructor(on_fallback=None):
    """The face_recon engine (models/face_recon.onnx) if enabled and it loads, else the geometric
    solver; ``on_fallback(message)`` hears why when the engine was asked for but not usable."""
    from avatar_app.reconstruction.engine import create_face_reconstructor

    return create_face_reconstructor(on_fallback=on_fallback)


def _default_speech():
    """The learned speech engine (models/speech2face.onnx) if it loads, else the loudness solver."""
    from avatar_app.speech.engine_animator import create_speech_animator

    return create_speech_animator()


class _Writer:
    """Sink of the render thread: encodes frames by time and writes the sidecar.

    The clip and the sidecar are written to hidden part files beside the
    targets (:class:`~avatar_app.record.parts.OutputParts`); :meth:`commit`
    renames them over the targets, :meth:`discard` deletes them, so a render
    that fails leaves existing files as they were.

    The audio given to :meth:`set_audio` is muxed along with the video: before a
    frame shown at ``t`` the audio up to ``t + 1/fps`` goes into the file, so a
    render that stops early (interrupted, or failed) holds as much audio as
    video. :meth:`close` ends the audio track with the video: audio longer than
    the video is cut, shorter audio is padded with silence.
    """

    def __init__(self, output_path: Path, options: RenderOptions, fps: float, audio_rate: int | None):
        from avatar_app.record.factory import open_recorder
        from avatar_app.record.parts import OutputParts
        from avatar_app.record.sidecar import SidecarWriter

        w, h = options.size
        transparent = options.background == "transparent"
        suffix = output_path.suffix.lower()
        if transparent and suffix not in (".mov", ".webm"):
            raise InputError(
                f"A transparent background needs a format that keeps alpha: name the output "
                f"{output_path.with_suffix('.mov').name} (ProRes 4444) or "
                f"{output_path.with_suffix('.webm').name} (VP9), not {output_path.name}",
                output_path,
            )
        if not transparent and suffix in (".mov", ".webm"):
            raise InputError(
                f"{output_path.name}: .mov and .webm are for transparent clips (--background transparent); "
                "use .mp4 for an opaque background",
                output_path,
            )
        _make_output_folder(output_path)
        if output_path.is_dir():
            raise RecordingError(f"Cannot write {output_path}: it is a folder")
        self.output_path = output_path
        from avatar_app.record.formats import recording_format_for

        fmt = recording_format_for(output_path)  # the user's name is checked, not the part file's
        self.parts = OutputParts(output_path, (SIDECAR_SUFFIX,))
        self.recorder = self.sidecar = None
        try:
            self.recorder = open_recorder(self.parts.clip, w, h, fps, audio_sample_rate=audio_rate, fmt=fmt)
            self.sidecar = SidecarWriter(self.parts.part_for(sidecar_path_for(output_path)), fps=float(fps))
        except AvatarError as exc:
            if self.recorder is not None:
                self.recorder.close()
            self.parts.discard()
            raise self.translate(exc) from exc
        except BaseException:
            if self.recorder is not None:
                self.recorder.close()
            self.parts.discard()
            raise
        self.fps = float(fps)
        self.frames_out = 0
        self.last_time = 0.0
        self._audio: np.ndarray | None = None
        self._audio_t0 = 0.0
        self._audio_fed = 0

    def translate(self, exc: AvatarError) -> AvatarError:
        """An error of the recorder or the sidecar reworded for the targets, not the part files.

        A write failure (disk full ...) says that the existing output was left as it was.
        """
        from avatar_app.record.recorder import RecordingWriteError, io_reason

        if not isinstance(exc, RecordingError):
            return exc
        target = self.output_path
        reason = None
        if isinstance(exc, RecordingWriteError):
            reason = exc.reason
        elif isinstance(exc.__cause__, OSError):
            reason = io_reason(exc.__cause__)
        if reason is not None:
            reason = self.parts.rename_in(str(reason))
            kept = f"; the existing {target.name} was left as it was" if target.exists() else ""
            return RecordingError(f"writing {target} failed: {reason}. Nothing was written{kept}")
        return RecordingError(self.parts.rename_in(str(exc)))

    def commit(self) -> None:
        """Rename the finished part files over the clip and the sidecar.

        Raises:
            RecordingError: the rename failed (the part files are deleted).
        """
        self.parts.commit()

    def discard(self) -> None:
        """Delete the part files; existing outputs stay as they were. Idempotent."""
        self.parts.discard()

    def set_audio(self, samples: np.ndarray, start_s: float) -> None:
        """Audio to mux with the frames: (N,) float32 at the recorder's rate, first sample at ``start_s`` s."""
        self._audio = np.asarray(samples, np.float32)
        self._audio_t0 = float(start_s)
        self._audio_fed = 0

    def _feed_audio(self, until_s: float) -> None:
        """Write the audio up to media time ``until_s`` (seconds) that is not written yet."""
        if self._audio is None:
            return
        rate = self.recorder.audio_sample_rate
        n = len(self._audio)
        if math.isfinite(until_s):
            n = min(max(int(round((until_s - self._audio_t0) * rate)), 0), n)
        if n > self._audio_fed:
            self.recorder.write_audio(self._audio[self._audio_fed: n], self._audio_t0 + self._audio_fed / rate)
            self._audio_fed = n

    def _pad_audio(self, until_s: float) -> None:
        """Fill the audio track with silence up to media time ``until_s`` (seconds)."""
        rec = self.recorder
        if self._audio is None or rec.time_origin_s is None:
            return
        rate = rec.audio_sample_rate
        missing = int(round((until_s - rec.time_origin_s) * rate)) - rec.audio_samples_written
        if missing > 0:
            rec.write_audio(np.zeros(missing, np.float32), rec.time_origin_s + rec.audio_samples_written / rate)

    @property
    def video_end_s(self) -> float:
        """Media time at which the last written frame ends, seconds (0 before the first)."""
        return self.last_time + 1.0 / self.fps if self.frames_out else 0.0

    @property
    def audio_source_s(self) -> float:
        """Length of the audio given to :meth:`set_audio`, seconds (0 when none)."""
        if self._audio is None:
            return 0.0
        return len(self._audio) / self.recorder.audio_sample_rate

    @property
    def audio_written_s(self) -> float:
        """Seconds of audio in the clip so far, silence that fills gaps or pads the end included."""
        if self._audio is None:
            return 0.0
        return self.recorder.audio_samples_written / self.recorder.audio_sample_rate

    def __call__(self, rgb: np.ndarray, state: AvatarState) -> None:
        # audio first: the first write sets the file's time origin (as when all the
        # audio was written up front), then the frame it accompanies
        self._feed_audio(state.media_time_s + 1.0 / self.fps)
        self.recorder.write_video(rgb, state.media_time_s)
        self.frames_out += 1
        self.last_time = state.media_time_s

    def close(self, complete: bool = False) -> None:
        """Finish the part files: the audio ends with the video (cut or padded with silence).

        Args:
            complete: kept for callers; the audio is ended with the video either way.

        Raises:
            RecordingError: the file cannot be finished (reworded by :meth:`translate`).
        """
        try:
            try:
                if self.frames_out and not self.recorder.closed and self.recorder.error is None:
                    self._feed_audio(self.video_end_s)
                    self._pad_audio(self.video_end_s)
            finally:
                try:
                    self.recorder.close()
                finally:
                    self.sidecar.close()
        except AvatarError as exc:
            raise self.translate(exc) from exc


def render_file(
    input_path: str | Path,
    output_path: str | Path,
    options: RenderOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    reconstructor=None,
    speech=None,
    stop: threading.Event | None = None,
) -> RenderReport:
    """Render an avatar clip from a recording: every frame, in media time, deterministic.

    Args:
        input_path: a video file with a face (mp4, mpg, mov, mkv, webm ...).
        output_path: the MP4 to write; a ``.blendshapes.jsonl`` sidecar goes beside it.
        options: RenderOptions (size, fps, overlay, audio, avatar ...).
        progress: called as ``progress(frames_done, frames_total_estimate)``.
        reconstructor: FaceReconstructor to use (default: the geometric solver).
        speech: SpeechAnimator to use (default: the loudness solver).
        stop: when set (e.g. by a signal handler), the render stops before the next
            input frame and finishes the files: what was rendered is kept, the audio
            is cut to the video's length and ``report.interrupted`` is True.

    Returns:
        RenderReport with counts, durations and stage timings.

    Raises:
        InputError: the input or audio file is missing or unreadable (a silent track only warns).
        NoFaceError: no face in any frame.
        RecordingError: the output (or its folder, which is created when missing)
            cannot be written.

    On any error, existing files at the output paths are left as they were (the
    clip is written to a hidden part file first, see :class:`_Writer`).
    """
    from avatar_app.capture.audio_file import load_audio
    from avatar_app.capture.video_file import VideoFileSource
    from avatar_app.speech.silence import drop_silent_speech
    from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

    options = options or RenderOptions()
    input_path, output_path = Path(input_path), Path(output_path)
    if output_path.resolve() == input_path.resolve():
        raise InputError(f"Output {output_path} would overwrite the input", output_path)
    if options.audio_path is not None and Path(options.audio_path).resolve() in (
            output_path.resolve(), sidecar_path_for(output_path).resolve()):
        raise InputError(f"Output {output_path} would overwrite the --audio file", output_path)
    t0 = now_ns()
    report = RenderReport(output_path=output_path, sidecar_path=sidecar_path_for(output_path))
    with VideoFileSource(input_path) as src:
        info = src.info
        # --- audio: for the speech engine (16 kHz) and for the recording (native rate)
        rec_audio = speech_audio = None
        if options.use_audio:
            if options.audio_path is not None:
                rec_audio = load_audio(options.audio_path, sample_rate=48000)
                speech_audio = load_audio(options.audio_path, sample_rate=SPEECH_RATE)
                what = f"audio file {options.audio_path}"
            elif info.has_audio:
                rec_audio = src.read_audio()
                speech_audio = src.read_audio(SPEECH_RATE)
                what = f"audio track of {input_path}"
            if rec_audio is not None and drop_silent_speech(rec_audio.samples, what, report.warnings):
                speech_audio = None  # a silent track: the face drives the mouth (issue 17 item 4)
            if rec_audio is None:
                report.warnings.append(
                    f"{input_path} has no audio track: the output will be silent and the mouth "
                    "follows the video alone (add a voice with --audio FILE)")
        fps_out = float(options.fps or info.fps or 30.0)
        avatar = _load_avatar_option(options, report)
        speech = speech if speech is not None else (_default_speech() if speech_audio is not None else None)
        reconstructor = reconstructor if reconstructor is not None else _default_reconstructor(report.warnings.append)
        report.face_solver = (reconstructor.describe() if hasattr(reconstructor, "describe")
                              else "geometric solver")
        report.speech_backend = describe_speech(speech)
        stats = LatencyStats(window_s=5.0)
        writer = _Writer(output_path, options, fps_out, rec_audio.sample_rate if rec_audio is not None else None)
        try:
            ok = False
            try:
                if rec_audio is not None:
                    writer.set_audio(rec_audio.samples, max(float(rec_audio.media_time_s), 0.0))
                worker = _RenderWorker(options, writer, stats, avatar=avatar)
                tracker = FaceTracker(RunningMode.VIDEO)
                proc = FrameProcessor(tracker, reconstructor, speech, live=False, fusion=Fusion(options.fusion))
                proc.speech_lookahead_s = float(getattr(speech, "offline_lookahead_s", 0.0) or 0.0)
                speech_samples = speech_audio.samples if speech_audio is not None else None
                speech_offset = float(speech_audio.media_time_s) if speech_audio is not None else 0.0
                context_s = getattr(speech, "context_s", 0.1) if speech is not None else 0.0
                prev: AvatarState | None = None
                k_out = 0
                total = max(int(info.frame_count), 1)
                try:
                    for frame in src.frames():
                        if stop is not None and stop.is_set():
                            report.interrupted = True
                            break
                        window = None
                        if speech_samples is not None:
                            window = audio_window(speech_samples, SPEECH_RATE,
                                                  frame.media_time_s - speech_offset + proc.speech_lookahead_s, context_s)
                        state = proc.process(frame, window)
                        writer.sidecar.write(state)
                        report.frames_in += 1
                        report.faces_found += int(state.face_found)
                        if options.fps is None:
                            worker.put(state)
                        else:
                            if prev is not None:
                                k_out = _emit_resampled(worker, prev, state.media_time_s, fps_out, k_out)
                            prev = state
                        if progress is not None:
                            progress(report.frames_in, max(total, report.frames_in))
                    if prev is not None:
                        end_t = prev.media_time_s + 1.0 / (info.fps or fps_out)
                        k_out = _emit_resampled(worker, prev, end_t, fps_out, k_out)
                finally:
                    tracker.close()
                    worker.finish()
                ok = True
            finally:
                try:
                    writer.close(complete=ok and not report.interrupted)
                except AvatarError:
                    if ok:
                        raise
            if getattr(src, "truncated", False) and not report.interrupted:
                report.input_problem = (
                    f"{input_path} is truncated or corrupt: only {report.frames_in} of about "
                    f"{info.frame_count} frames could be decoded"
                )
            report.frames_out = writer.frames_out
            if writer.frames_out:
                report.duration_s = (writer.frames_out / fps_out) if options.fps else (writer.last_time + 1.0 / fps_out)
            report.audio_duration_s = writer.audio_written_s
            if rec_audio is not None and report.frames_out and not (report.interrupted or report.input_problem):
                _note_audio_length(report, writer.audio_source_s)
            report.wall_s = (now_ns() - t0) / 1e9
            report.stage_ms = stats.summary().stages
            _settle_outputs(writer, report, input_path)
        except BaseException as exc:
            writer.discard()
            _reraise_for_target(writer, exc)
    return report


def _note_audio_length(report: RenderReport, audio_s: float, tolerance_s: float = 0.1) -> None:
    """Warn when the audio given was cut to the video or padded with silence to its end.

    Args:
        report: the finished render (``duration_s`` = the video's length, s).
        audio_s: length of the audio given, s.
        tolerance_s: differences up to this many seconds pass without a warning.
    """
    video_s = report.duration_s
    if audio_s > video_s + tolerance_s:
        report.warnings.append(
            f"audio ({_s1(audio_s)}) is longer than the video ({_s1(video_s)}): cut to the video")
    elif audio_s < video_s - tolerance_s:
        report.warnings.append(
            f"audio ({_s1(audio_s)}) is shorter than the video ({_s1(video_s)}): "
            "padded with silence to the video's end")


def _s1(seconds: float) -> str:
    return f"{seconds:.1f} s"


def _settle_outputs(writer: _Writer, report: RenderReport, input_path: Path) -> None:
    """Rename the finished part files over the outputs, or delete them and raise.

    Kept: a complete render, an interrupted one with at least one frame, a
    truncated input's partial render (both written as ``<stem>.partial<suffix>`` when the
    output already exists, so a finished clip is never replaced by a partial one).
    Deleted (existing outputs untouched): no frame rendered, no frame decoded, no face found.

    Raises:
        InputError: no video frame could be decoded.
        NoFaceError: no face in any frame.
        RecordingError: the part files cannot be renamed.
    """
    if report.interrupted:
        _settle_stopped(writer, report)
        return
    if report.frames_in == 0:
        writer.discard()
        raise InputError(f"No video frame could be decoded from {input_path}", input_path)
    if report.faces_found == 0:
        writer.discard()
        raise NoFaceError(
            f"No face was found in any of the {report.frames_in} frames of {input_path}: "
            "nothing to animate (the face must be visible and well lit)."
        )
    if report.input_problem:
        _beside_existing(writer, report, "partial render")
    writer.commit()


def _settle_stopped(writer: _Writer, report: RenderReport) -> None:
    """Keep what a stopped render rendered (even before the first face was seen), beside an
    existing output; nothing when no frame was rendered."""
    if report.frames_out == 0:
        writer.discard()
        return
    _beside_existing(writer, report, "stopped render")
    writer.commit()


def _beside_existing(writer: _Writer, report: RenderReport, what: str) -> None:
    """Send a partial clip to ``<stem>.partial<suffix>`` where the output already exists.

    A stopped render or a damaged input's partial render does not replace a finished clip,
    nor an earlier partial one: where ``<stem>.partial<suffix>`` exists too, the next free
    ``<stem>.partial-2<suffix>``, ``-3``, ... is used.
    """
    if not (report.output_path.exists() or report.sidecar_path.exists()):
        return
    clip = report.output_path
    partial = clip.with_name(f"{clip.stem}.partial{clip.suffix}")
    k = 2
    while partial.exists() or sidecar_path_for(partial).exists():
        partial = clip.with_name(f"{clip.stem}.partial-{k}{clip.suffix}")
        k += 1
    writer.parts.retarget(partial)
    report.output_path = partial
    report.sidecar_path = sidecar_path_for(partial)
    report.warnings.append(f"{clip} already existed and was kept; the {what} is {partial.name}")


def _reraise_for_target(writer: _Writer, exc: BaseException) -> None:
    """Re-raise ``exc``, a recording error reworded to name the output instead of its part file."""
    if isinstance(exc, AvatarError):
        translated = writer.translate(exc)
        if translated is not exc:
            raise translated from exc
    raise exc


def _make_output_folder(output_path: Path) -> None:
    """Create the output's folder (and its parents) when missing, as the window does.

    Raises:
        RecordingError: the folder cannot be created (names the folder and why).
    """
    folder = output_path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((a for a in (folder, *folder.parents) if a.exists() and not a.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker is not None else (exc.strerror or exc)
        raise RecordingError(f"Cannot create the output folder {folder}: {why}") from exc


def _load_avatar_option(options: RenderOptions, report: RenderReport):
    """Load ``options.avatar_path`` (before any output is created); its warnings go into the report.

    Raises:
        InputError: the avatar file is missing or not a usable glTF/VRM.
    """
    if options.avatar_path is None:
        return None
    from avatar_app.avatar.loader import load_avatar

    avatar = load_avatar(options.avatar_path)
    report.warnings.extend(avatar.report.warnings)
    return avatar


def _emit_resampled(worker: _RenderWorker, state: AvatarState, t_next: float, fps_out: float, k_out: int) -> int:
    """Emit output frames k/fps_out in [state.t, t_next) showing ``state``; returns next k."""
    while k_out / fps_out < t_next - 1e-9:
        worker.put(replace(state, media_time_s=k_out / fps_out))
        k_out += 1
    return k_out


# --------------------------------------------------------------------------- demo
def scripted_face(t_s: float) -> FaceParams:
    """A scripted, lively face for the demo clip (no camera needed).

    Blinks every ~2.7 s (120 ms closing, 180 ms opening), slow head motion
    (yaw +-0.25 rad, pitch +-0.08 rad, roll +-0.05 rad), saccadic gaze and an
    occasional smile and brow raise.

    Args:
        t_s: time in seconds.

    Returns:
        FaceParams with (52,) float32 weights.
    """
    w = np.zeros(NUM_BLENDSHAPES, np.float32)
    phase = (t_s + 0.9) % 2.7  # one blink every 2.7 s
    blink = 0.0
    if phase < 0.12:
        blink = phase / 0.12
    elif phase < 0.30:
        blink = 1.0 - (phase - 0.12) / 0.18
    w[Blendshape.eyeBlinkLeft] = w[Blendshape.eyeBlinkRight] = blink
    smile = 0.35 * max(0.0, math.sin(2 * math.pi * t_s / 6.0))
    w[Blendshape.mouthSmileLeft] = w[Blendshape.mouthSmileRight] = smile
    w[Blendshape.browInnerUp] = 0.4 * max(0.0, math.sin(2 * math.pi * (t_s - 1.5) / 5.0)) ** 3
    yaw = 0.25 * math.sin(2 * math.pi * t_s / 7.0)
    pitch = 0.08 * math.sin(2 * math.pi * t_s / 4.3)
    roll = 0.05 * math.sin(2 * math.pi * t_s / 5.1)
    gaze_yaw = 0.25 * math.copysign(1.0, math.sin(2 * math.pi * t_s / 3.3)) * (abs(math.sin(2 * math.pi * t_s / 3.3)) > 0.6)
    gaze = np.array([gaze_yaw, 0.05], np.float32)
    return FaceParams(blendshapes=w, rotation=_euler_to_matrix(yaw, pitch, roll), gaze=gaze)


def _euler_to_matrix(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """Rotation R = Ry(yaw) @ Rx(pitch) @ Rz(roll), radians, (3, 3) float32."""
    cy, sy, cp, sp, cr, sr = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch), math.cos(roll), math.sin(roll)
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
    rz = np.array([[cr, -sr, 0], [sr, cr, 0], [0, 0, 1]])
    return (ry @ rx @ rz).astype(np.float32)


def demo_audio_path() -> Path:
    """The shipped demo speech (assets/demo/speech.*)."""
    from avatar_app.resources import resource_path

    for name in ("speech.ogg", "speech.m4a", "speech.wav"):
        p = resource_path(f"assets/demo/{name}")
        if p.exists():
            return p
    raise InputError("The demo speech asset is missing from this installation (assets/demo/)")


def render_demo(output_path: str | Path, options: RenderOptions | None = None, progress=None,
                stop: threading.Event | None = None) -> RenderReport:
    """Render the demo clip from data the package carries: shipped speech + scripted face.

    Args:
        output_path: MP4 to write (sidecar beside it).
        options: RenderOptions; ``fps`` defaults to 30.
        progress: ``progress(done, total)`` callback.
        stop: when set, stop before the next frame and keep what was rendered
            (audio cut to the video's length; ``report.interrupted`` is True).

    Returns:
        RenderReport.

    Raises:
        InputError: the demo asset is missing. RecordingError: the output cannot be written.
    """
    from avatar_app.capture.audio_file import load_audio

    options = options or RenderOptions()
    output_path = Path(output_path)
    fps = float(options.fps or 30.0)
    t0 = now_ns()
    audio_p = options.audio_path or demo_audio_path()
    rec_audio = load_audio(audio_p, sample_rate=48000)
    speech_audio = load_audio(audio_p, sample_rate=SPEECH_RATE)
    duration = len(speech_audio.samples) / SPEECH_RATE + 0.5
    # the scripted face says nothing about the mouth: the voice drives it alone
    options = replace(options, fusion=replace(options.fusion, mouth_covered=True))
    report0 = RenderReport(output_path=output_path, sidecar_path=sidecar_path_for(output_path))
    avatar = _load_avatar_option(options, report0)
    n = int(math.ceil(duration * fps))
    speech = _default_speech()
    report0.speech_backend = describe_speech(speech)
    stats = LatencyStats()
    report = report0
    writer = _Writer(output_path, options, fps, rec_audio.sample_rate)
    try:
        ok = False
        try:
            writer.set_audio(rec_audio.samples, 0.0)
            worker = _RenderWorker(options, writer, stats, avatar=avatar)
            proc = FrameProcessor(None, None, speech, fusion=Fusion(options.fusion))
            proc.speech_lookahead_s = float(getattr(speech, "offline_lookahead_s", 0.0) or 0.0)
            try:
                for i in range(n):
                    if stop is not None and stop.is_set():
                        report.interrupted = True
                        break
                    t = i / fps
                    frame = Frame(index=i, t_capture_ns=now_ns(), image=np.zeros((1, 1, 3), np.uint8), media_time_s=t)
                    window = audio_window(speech_audio.samples, SPEECH_RATE, t + proc.speech_lookahead_s, speech.context_s)
                    state = proc.process(frame, window, vision=scripted_face(t))
                    writer.sidecar.write(state)
                    worker.put(state)
                    report.frames_in += 1
                    report.faces_found += 1
                    if progress:
                        progress(i + 1, n)
            finally:
                worker.finish()
            ok = True
        finally:
            try:
                writer.close(complete=ok and not report.interrupted)
            except AvatarError:
                if ok:
                    raise
        report.frames_out = writer.frames_out
        report.duration_s = writer.frames_out / fps
        report.audio_duration_s = writer.audio_written_s
        report.wall_s = (now_ns() - t0) / 1e9
        report.stage_ms = stats.summary().stages
        if report.interrupted:
            _settle_stopped(writer, report)
        else:
            writer.commit()
    except BaseException as exc:
        writer.discard()
        _reraise_for_target(writer, exc)
    return report


# --------------------------------------------------------------------------- live
class LivePipeline:
    """Live processing: newest frame from a source, stages on one thread, newest state out.

    Args:
        source: a started-or-not capture source with ``start()``, ``stop()``,
            ``get_latest(timeout_s)``, ``dropped`` and optionally ``ring``
            (an AudioRing) and ``error``/``finished``.
        ring: an AudioRing for speech (microphone); defaults to ``source.ring``.
        reconstructor: FaceReconstructor (default geometric solver).
        speech: SpeechAnimator (default loudness solver); None disables speech.
        fusion_settings: shared, mutable FusionSettings.

    Attributes:
        stats: LatencyStats the overlay reads (camera-to-screen is added by the
            presenter through :meth:`presented`).
        error: the last error of the source or a stage, as a user message, or None.

    Thread: ``start``/``stop``/``latest_state`` from the GUI thread; stages on
    the "pipeline" thread; nothing here touches widgets.
    """

    def __init__(self, source, ring=None, reconstructor=None, speech="default", fusion_settings: FusionSettings | None = None):
        from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

        self.source = source
        self.ring = ring if ring is not None else getattr(source, "ring", None)
        self.fusion = Fusion(fusion_settings)
        if speech == "default":
            speech = _default_speech() if self.ring is not None else None
        self.processor = FrameProcessor(
            FaceTracker(RunningMode.LIVE), reconstructor or _default_reconstructor(), speech, live=True, fusion=self.fusion
        )
        self.stats = LatencyStats(window_s=5.0)
        self.error: str | None = None
        self.frames_processed = 0
        self._state: AvatarState | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_state: Callable[[AvatarState], None] | None = None
        self.last_frame: Frame | None = None
        self._post_process: Callable[[AvatarState], AvatarState] | None = None
        self._max_fps = 0.0

    # -- settings the UI may change while running (thread-safe) -------------------------
    def set_post_process(self, fn: Callable[[AvatarState], AvatarState] | None) -> None:
        """Install a step applied to every state on the processing thread before it is published.

        Its time is recorded as the stage ``"tune"``. An AvatarError it raises is
        reported in :attr:`error` and the untuned state is published.

        Args:
            fn: ``fn(state) -> state`` (e.g. the window's tracking tuner), or None.

        Thread: any; takes effect from the next frame.
        """
        with self._lock:
            self._post_process = fn

    @property
    def post_process(self) -> Callable[[AvatarState], AvatarState] | None:
        """The installed post-processing step, or None."""
        return self._post_process

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

    def start(self) -> None:
        """Start the source and the processing thread.

        Raises:
            CaptureError / InputError: the source cannot be opened.
        """
        self.source.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="pipeline", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop processing and the source; safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        try:
            self.source.stop()
        finally:
            tracker = self.processor.tracker
            if tracker is not None:
                tracker.close()

    @property
    def running(self) -> bool:
        """True while the processing thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def latest_state(self) -> AvatarState | None:
        """The newest AvatarState (immutable), or None before the first frame."""
        with self._lock:
            return self._state

    def presented(self, state: AvatarState, t_present_ns: int | None = None) -> None:
        """Tell the stats that ``state`` reached the screen (camera-to-screen latency).

        Args:
            state: the state drawn.
            t_present_ns: when it was presented (default now).
        """
        self.stats.dropped = int(getattr(self.source, "dropped", 0))
        self.stats.add_frame(state.stamps, state.t_capture_ns, t_present_ns)

    def _run(self) -> None:
        last_index = -1
        last_start_ns = 0
        while not self._stop.is_set():
            cap = self._max_fps
            if cap > 0 and last_start_ns:
                wait_s = (last_start_ns + 1e9 / cap - now_ns()) / 1e9
                if wait_s > 0 and self._stop.wait(wait_s):
                    break
            src_error = getattr(self.source, "error", None)
            if src_error is not None:
                self.error = str(src_error)
                log.warning("source stopped: %s", src_error)
                break
            frame = self.source.get_latest(0.05)
            if frame is None or frame.index == last_index:
                if getattr(self.source, "finished", False):
                    break
                continue
            last_index = frame.index
            last_start_ns = now_ns()
            frame.stamps["capture"] = (frame.t_capture_ns, now_ns())
            window = None
            speech = self.processor.speech
            if speech is not None and self.ring is not None:
                window = self.ring.read_window(frame.t_capture_ns, speech.context_s)
            try:
                state = self.processor.process(frame, window)
            except AvatarError as exc:
                self.error = str(exc)
                log.warning("frame %d failed: %s", frame.index, exc)
                continue
            post = self._post_process
            if post is not None:
                t0 = now_ns()
                try:
                    tuned = post(state)
                    stamps = dict(tuned.stamps)
                    stamps["tune"] = (t0, now_ns())
                    state = replace(tuned, stamps=stamps)
                except AvatarError as exc:
                    self.error = str(exc)
                    log.warning("post-processing of frame %d failed: %s", frame.index, exc)
            self.last_frame = frame
            with self._lock:
                self._state = state
            self.frames_processed += 1
            cb = self.on_state
            if cb is not None:
                cb(state)
