"""Offline rendering: every frame of a video, in media time, deterministically.

``render_file`` runs in four phases: open (paths, the video, the avatar) ->
audio (the track for speech and for the clip; a silent one drives nothing) -> loop
(decode -> track -> reconstruct -> fuse -> tune on the calling thread, speech
while the frame is tracked, :mod:`~avatar_app.pipeline.processor`, :class:`OfflineRun`)
-> finish (settle the outputs, the report). Rendering runs on a
:class:`~avatar_app.render.thread.RenderThread` with the ordered policy (it owns
the EGL context) and encoding in the recorder's threads, so the three
overlap on a multi-core machine while the order of frames and the results stay
deterministic. The stages come from :func:`~avatar_app.pipeline.stages.build_stages`
and the post-processing chain is the studio's (``RenderOptions.settings``), so
``render --settings`` reproduces what the studio shows.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from avatar_app.core.clock import now_ns
from avatar_app.core.errors import AvatarError, InputError
from avatar_app.core.latency import LatencyStats
from avatar_app.core.types import AvatarState
from avatar_app.fusion.chain import ChainSettings
from avatar_app.pipeline.processor import FrameProcessor, audio_window
from avatar_app.pipeline.stages import StageChoice, Stages, build_stages
from avatar_app.speech.base import describe_speech
from avatar_app.pipeline.writer import (  # noqa: F401
    SIDECAR_SUFFIX,
    ClipWriter,
    check_output_name,
    note_audio_length,
    reraise_for_target,
    settle_outputs,
    settle_stopped,
    sidecar_path_for,
)

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
        avatar_from_settings: ``avatar_path`` came from a settings file (``render --settings``), not
            ``--avatar``: one that cannot be loaded is a warning and the default head, as the file's
            other invalid values are (``--avatar``'s is an error).
        lighting: the lighting preset (render.renderer.LIGHTING_PRESETS).
        settings: the post-processing chain's settings (fusion, tuning, expressions):
            a fresh studio's by default, or the studio's own settings file
            (:func:`avatar_app.pipeline.settings.load_settings_file`, ``render --settings``).
        tracker: ``auto``, ``onnx`` or ``mediapipe`` (``render --tracker``; tracking.select).
        tracker_backend / tracker_precision: the ONNX tracker's engine (the settings file's
            Tracking row; None or "auto": the fastest verified engine).
        face: the face path, one of :data:`~avatar_app.pipeline.stages.FACE_PATHS` (``render --face``,
            else the settings file's): ``solver``, ``engine`` (the solver when the model cannot
            load) or ``default`` (:data:`~avatar_app.pipeline.stages.FACE_ENGINE_BY_DEFAULT`).
    """

    size: tuple[int, int] = (1280, 720)
    fps: float | None = None
    overlay: bool = False
    msaa: int = 0
    background: tuple[int, int, int] | str = (0, 177, 64)
    audio_path: Path | None = None
    use_audio: bool = True
    avatar_path: Path | None = None
    avatar_from_settings: bool = False
    lighting: str = "studio"
    settings: ChainSettings = field(default_factory=ChainSettings)
    tracker: str = "auto"
    tracker_backend: str | None = None
    tracker_precision: str | None = None
    face: str = "default"


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
        face_path: which face path drove the avatar and why, one line
            (:meth:`~avatar_app.pipeline.stages.FacePath.summary`: ``"learned face engine"``,
            ``"geometric solver (chosen)"``, the solver standing in for an engine that could not load
            and why).
        tracker: the face tracker that ran (``render --tracker``): its ``describe()``
            (``ONNX tracker: face_detection.onnx on ort_cpu (fp32) ...``), ``"MediaPipe face mesh"``,
            or "" when none ran.
        faces_in_view: the most faces the tracker's detector saw at once (its ``faces_found``,
            counted at each detector run); above 1, the summary says which face was followed
            (the largest one when tracking starts, see :mod:`avatar_app.tracking.face_mesh`).
            0 when unknown (no tracker, a remote render).
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
    face_path: str = ""
    speech_backend: str = ""
    tracker: str = ""
    faces_in_view: int = 0

    @property
    def fps(self) -> float:
        """Input frames processed per wall-clock second."""
        return self.frames_in / self.wall_s if self.wall_s > 0 else 0.0


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



class _Output:
    """The output side of an offline render: the writer (clip + sidecar), the render thread, the stats.

    Frames submitted with :meth:`put` are rendered in order on the render thread
    (:attr:`RenderPolicy.ORDERED`), get the latency overlay when asked for, and go
    to the writer on that thread.
    """

    def __init__(self, output_path: Path, options: RenderOptions, fps: float, audio_rate: int | None, avatar):
        self.options = options
        self.avatar = avatar
        self.stats = LatencyStats(window_s=5.0)
        self.writer = ClipWriter(output_path, options, fps, audio_rate)
        self.thread = None

    def start(self) -> None:
        """Start the render thread (its context and avatar are ready when this returns).

        Raises:
            AvatarError: OpenGL or the avatar could not be set up; InputError: a bad size.
        """
        from avatar_app.render.thread import RenderPolicy, RenderThread

        o = self.options
        self.thread = RenderThread(RenderPolicy.ORDERED, self._on_frame, size=o.size, background=o.background,
                                   lighting=o.lighting, msaa=o.msaa, avatar=self.avatar).start(wait=True)

    def _on_frame(self, frame) -> None:
        self.stats.add_frame(frame.state.stamps)
        rgb = frame.image
        if self.options.overlay:
            rgb = draw_overlay(rgb, self.stats.summary().lines())
        self.writer(rgb, frame.state)

    def put(self, state: AvatarState) -> None:
        """Queue a state for rendering (blocks while 8 wait); re-raises the render thread's error."""
        self.thread.submit(state)

    def finish(self) -> None:
        """Render what is queued and stop the render thread (re-raises its error)."""
        if self.thread is not None:
            self.thread.finish()


def run_render(output_path: Path, options: RenderOptions, fps: float, audio, avatar, report: RenderReport,
               loop: Callable[[_Output], None], finish: Callable[[_Output], None],
               settle: Callable[[ClipWriter, RenderReport], None] | None) -> None:
    """Drive one offline render: open the outputs, run ``loop``, finish and settle them.

    Args:
        output_path: the clip to write.
        options: the render's options.
        fps: output frame rate, Hz.
        audio: ``(samples (N,) float32, start_s, rate_hz)`` muxed with the video, or None.
        avatar: the AvatarMesh (None: the default head).
        report: the RenderReport filled by the callbacks.
        loop: ``loop(out)`` submits the states (``out.put``) and writes the sidecar.
        finish: ``finish(out)`` fills the report once the files are closed.
        settle: ``settle(writer, report)`` keeps or discards the part files (default:
            keep what a stopped render rendered, else commit).

    Raises:
        AvatarError: what failed (recording errors name the output, not its part file);
        the part files are deleted then and existing outputs stay as they were.
        RecordingError: another render is writing the same output now (nothing is written).
    """
    from avatar_app.record.parts import TargetLock

    # A second render to the same output is refused here, before anything is written; the
    # sidecar's name is locked too, as take.mov and take.webm share take.blendshapes.jsonl.
    locks = [TargetLock(output_path), TargetLock(sidecar_path_for(output_path))]
    try:
        for lock in locks:
            lock.acquire()
        _run_render_locked(output_path, options, fps, audio, avatar, report, loop, finish, settle)
    finally:
        for lock in reversed(locks):
            lock.release()


def _run_render_locked(output_path: Path, options: RenderOptions, fps: float, audio, avatar, report: RenderReport,
                       loop: Callable[[_Output], None], finish: Callable[[_Output], None],
                       settle: Callable[[ClipWriter, RenderReport], None] | None) -> None:
    """:func:`run_render` once the output's :class:`~avatar_app.record.parts.TargetLock` is held."""
    out = _Output(output_path, options, fps, audio[2] if audio is not None else None, avatar)
    writer = out.writer
    try:
        ok = False
        try:
            if audio is not None:
                writer.set_audio(audio[0], audio[1])
            try:
                out.start()
                loop(out)
            finally:
                out.finish()
            ok = True
        finally:
            try:
                writer.close(complete=ok and not report.interrupted)
            except AvatarError:
                if ok:
                    raise
        finish(out)
        report.stage_ms = out.stats.summary().stages
        if settle is not None:
            settle(writer, report)
        elif report.interrupted:
            settle_stopped(writer, report)
        else:
            writer.commit()
    except BaseException as exc:
        writer.discard()
        reraise_for_target(writer, exc)


def make_offline_processor(stages: Stages) -> FrameProcessor:
    """A FrameProcessor over ``stages`` in video mode, with the speech animator's offline look-ahead."""
    proc = FrameProcessor(stages.tracker, stages.reconstructor, stages.speech, live=False, chain=stages.chain)
    proc.speech_lookahead_s = float(getattr(stages.speech, "offline_lookahead_s", 0.0) or 0.0)
    return proc


class OfflineRun:
    """Every frame of a video through a FrameProcessor, in media time (the processing half of a render).

    Iterating yields one AvatarState per decoded frame, in order. Used by
    :func:`render_file` and by the studio's offline mode
    (:meth:`avatar_app.pipeline.session.StudioSession.run_offline`), so both give the
    same states from the same frames and settings.

    Args:
        src: an open VideoFileSource.
        proc: the FrameProcessor (:func:`make_offline_processor`).
        speech_audio: the 16 kHz AudioChunk for speech, or None.
        stop: when set, iteration ends before the next frame (:attr:`interrupted` is True).

    Attributes:
        interrupted: the iteration ended because ``stop`` was set.
    """

    def __init__(self, src, proc: FrameProcessor, speech_audio=None, stop: threading.Event | None = None):
        self.src, self.proc, self.stop = src, proc, stop
        self.samples = speech_audio.samples if speech_audio is not None else None
        self.offset_s = float(speech_audio.media_time_s) if speech_audio is not None else 0.0
        speech = proc.speech
        self.context_s = getattr(speech, "context_s", 0.1) if speech is not None else 0.0
        self.interrupted = False

    def __iter__(self) -> Iterator[AvatarState]:
        try:
            for frame in self.src.frames():
                if self.stop is not None and self.stop.is_set():
                    self.interrupted = True
                    return
                window = None
                if self.samples is not None:
                    window = audio_window(self.samples, SPEECH_RATE,
                                          frame.media_time_s - self.offset_s + self.proc.speech_lookahead_s,
                                          self.context_s)
                yield self.proc.process(frame, window)
        finally:
            self.proc.close()  # its speech thread (a later frame would start it again)


def offline_states(path: Path, settings: ChainSettings | None = None,
                   on_state: Callable[[AvatarState], None] | None = None,
                   stop: threading.Event | None = None,
                   tracker: tuple[str, str | None, str | None] = ("auto", None, None),
                   face: str = "default") -> list[AvatarState]:
    """The states :func:`render_file` renders, without rendering: every frame of ``path`` in media time.

    The video's own audio track drives speech, as in ``render`` without ``--audio``.

    Args:
        path: the video.
        settings: the post-processing chain's settings (default: a fresh studio's).
        on_state: called with each state, in order.
        stop: ends the run before the next frame when set.
        tracker: ``(kind, backend, precision)`` of the face tracker, as RenderOptions'
            ``tracker``, ``tracker_backend`` and ``tracker_precision``.
        face: the face path, as RenderOptions' ``face``.

    Returns:
        One AvatarState per decoded frame.

    Raises:
        InputError: the file cannot be read, or its audio is silent.
    """
    from avatar_app.capture.video_file import VideoFileSource

    options = RenderOptions(settings=settings or ChainSettings())
    out: list[AvatarState] = []
    with VideoFileSource(path) as src:
        _, speech_audio = open_audio(src, Path(path), options, RenderReport(Path(path), sidecar_path_for(path)))
        kind, backend, precision = tracker
        stages = build_stages(StageChoice(live=False, audio=speech_audio is not None, chain=options.settings,
                                          tracker=kind, tracker_backend=backend, tracker_precision=precision,
                                          face=face))
        try:
            for state in OfflineRun(src, make_offline_processor(stages), speech_audio, stop):
                out.append(state)
                if on_state is not None:
                    on_state(state)
        finally:
            stages.close()
    return out


def open_audio(src, input_path: Path, options: RenderOptions, report: RenderReport):
    """The audio phase: the track for the clip (native rate) and for speech (16 kHz).

    Args:
        src: the open VideoFileSource.
        input_path: the video (for messages).
        options: ``use_audio`` and ``audio_path`` decide which track.
        report: gets a warning when the video has no audio track, and ``input_problem`` when the
            ``--audio`` file is truncated or corrupt (the render keeps the part that decoded and
            exits 2, as for a truncated video; a video's own track sets ``src.truncated``).

    Returns:
        ``(rec_audio, speech_audio)`` AudioChunks, both None without audio; ``speech_audio``
        is None for a silent track (the clip keeps it, the face drives the mouth, a warning).

    Raises:
        InputError: the audio cannot be read.
    """
    from avatar_app.capture.audio_file import load_audio
    from avatar_app.speech.silence import drop_silent_speech

    rec_audio = speech_audio = None
    if not options.use_audio:
        return None, None
    if options.audio_path is not None:
        rec_audio = load_audio(options.audio_path, sample_rate=48000)
        speech_audio = load_audio(options.audio_path, sample_rate=SPEECH_RATE, warn=False)  # warned once
        what = f"audio file {options.audio_path}"
        if rec_audio.problem:
            report.input_problem = (
                f"the {what} is truncated or corrupt ({rec_audio.problem}): only its first "
                f"{rec_audio.samples.shape[0] / rec_audio.sample_rate:.1f} s could be decoded, the rest "
                "of the clip is silent")
    elif src.info.has_audio:
        rec_audio = src.read_audio()
        speech_audio = src.read_audio(SPEECH_RATE)
        what = f"audio track of {input_path}"
    if rec_audio is not None and drop_silent_speech(rec_audio.samples, what, report.warnings):
        speech_audio = None  # a silent track: the face drives the mouth (issue 17 item 4)
    if rec_audio is None:
        report.warnings.append(
            f"{input_path} has no audio track: the output will be silent and the mouth "
            "follows the video alone (add a voice with --audio FILE)")
    return rec_audio, speech_audio


def _check_paths(input_path, output_path, options: RenderOptions) -> tuple[Path, Path]:
    """The open phase's checks: the output must overwrite neither the input nor the --audio file.

    Raises:
        InputError: it would.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    if output_path.resolve() == input_path.resolve():
        raise InputError(f"Output {output_path} would overwrite the input", output_path)
    if options.audio_path is not None and Path(options.audio_path).resolve() in (
            output_path.resolve(), sidecar_path_for(output_path).resolve()):
        raise InputError(f"Output {output_path} would overwrite the --audio file", output_path)
    return input_path, output_path


def describe_tracker(tracker: object | None) -> str:
    """The face tracker, for reports: its ``describe()`` (``"MediaPipe face mesh"``, ``"ONNX tracker: …"``),
    else its class name; "" for None."""
    if tracker is None:
        return ""
    describe = getattr(tracker, "describe", None)
    return describe() if callable(describe) else type(tracker).__name__


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
        reconstructor: FaceReconstructor to use (default: :func:`~avatar_app.pipeline.stages.build_stages`'s,
            ``options.face``'s path: the geometric solver or the learned face engine).
        speech: SpeechAnimator to use (default: build_stages' choice, the learned speech engine
            when it loads, else the loudness solver).
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
    clip is written to a hidden part file first, see :class:`ClipWriter`).
    """
    from avatar_app.capture.video_file import VideoFileSource

    options = options or RenderOptions()
    input_path, output_path = _check_paths(input_path, output_path, options)
    t0 = now_ns()
    report = RenderReport(output_path=output_path, sidecar_path=sidecar_path_for(output_path))
    with VideoFileSource(input_path) as src:
        info = src.info
        rec_audio, speech_audio = open_audio(src, input_path, options, report)
        fps_out = float(options.fps or info.fps or 30.0)
        avatar = load_avatar_option(options, report)
        check_output_name(output_path, options)  # a wrong -o is refused before the stages are built
        stages = build_stages(StageChoice(live=False, audio=speech_audio is not None, chain=options.settings,
                                          on_fallback=report.warnings.append, tracker=options.tracker,
                                          face=options.face,
                                          tracker_backend=options.tracker_backend,
                                          tracker_precision=options.tracker_precision),
                              reconstructor=reconstructor, speech=speech)
        report.face_solver = stages.face_solver
        report.face_path = stages.face_path.summary()
        report.speech_backend = describe_speech(stages.speech)
        report.tracker = describe_tracker(stages.tracker)
        audio = None
        if rec_audio is not None:
            audio = (rec_audio.samples, max(float(rec_audio.media_time_s), 0.0), rec_audio.sample_rate)
        run = OfflineRun(src, make_offline_processor(stages), speech_audio, stop)

        def loop(out: _Output) -> None:
            try:
                _render_loop(run, out, options, report, fps_out, info, progress, stages.tracker)
            finally:
                stages.close()

        def finish(out: _Output) -> None:
            _finish_report(report, out.writer, src, input_path, options, fps_out, info,
                           rec_audio is not None, t0)

        run_render(output_path, options, fps_out, audio, avatar, report, loop, finish,
                   settle=lambda writer, rep: settle_outputs(writer, rep, input_path))
    return report


def _render_loop(run: OfflineRun, out: _Output, options: RenderOptions, report: RenderReport, fps_out: float,
                 info, progress, tracker=None) -> None:
    """The loop phase: every state into the sidecar and to the render thread (resampled to ``options.fps``).

    ``tracker``: the face tracker, whose ``faces_found`` (faces in view) feeds ``report.faces_in_view``."""
    prev: AvatarState | None = None
    k_out = 0
    total = max(int(info.frame_count), 1)
    for state in run:
        out.writer.sidecar.write(state)
        report.frames_in += 1
        report.faces_found += int(state.face_found)
        report.faces_in_view = max(report.faces_in_view, int(getattr(tracker, "faces_found", 0) or 0))
        if options.fps is None:
            out.put(state)
        else:
            if prev is not None:
                k_out = _emit_resampled(out, prev, state.media_time_s, fps_out, k_out)
            prev = state
        if progress is not None:
            progress(report.frames_in, max(total, report.frames_in))
    report.interrupted = run.interrupted
    if prev is not None:
        end_t = prev.media_time_s + 1.0 / (info.fps or fps_out)
        k_out = _emit_resampled(out, prev, end_t, fps_out, k_out)


def _finish_report(report: RenderReport, writer: ClipWriter, src, input_path: Path, options: RenderOptions,
                   fps_out: float, info, had_audio: bool, t0: int) -> None:
    """The finish phase: counts, durations and warnings of the closed clip."""
    if getattr(src, "truncated", False) and not report.interrupted:
        if info.frame_count > report.frames_in or not getattr(src, "problem", ""):
            report.input_problem = (
                f"{input_path} is truncated or corrupt: only {report.frames_in} of about "
                f"{info.frame_count} frames could be decoded"
            )
        else:  # the header's length comes from the cut file itself (MPEG-PS): say what is cut
            report.input_problem = f"{input_path} is truncated or corrupt: {src.problem}"
    report.frames_out = writer.frames_out
    if writer.frames_out:
        report.duration_s = (writer.frames_out / fps_out) if options.fps else (writer.last_time + 1.0 / fps_out)
    report.audio_duration_s = writer.audio_written_s
    if had_audio and report.frames_out and not (report.interrupted or report.input_problem):
        note_audio_length(report, writer.audio_source_s)
    report.wall_s = (now_ns() - t0) / 1e9


def load_avatar_option(options: RenderOptions, report: RenderReport):
    """Load ``options.avatar_path`` (before any output is created); its warnings go into the report.

    Raises:
        InputError: the avatar file is missing or not a usable glTF/VRM.
    """
    if options.avatar_path is None:
        return None
    from avatar_app.avatar.loader import load_avatar

    try:
        avatar = load_avatar(options.avatar_path)
    except InputError as exc:
        if not options.avatar_from_settings:
            raise
        report.warnings.append(f"the settings file's avatar.path: {exc}; using the default head")
        return None
    report.warnings.extend(avatar.report.warnings)
    return avatar


def _emit_resampled(worker: _Output, state: AvatarState, t_next: float, fps_out: float, k_out: int) -> int:
    """Emit output frames k/fps_out in [state.t, t_next) showing ``state``; returns next k."""
    while k_out / fps_out < t_next - 1e-9:
        worker.put(replace(state, media_time_s=k_out / fps_out))
        k_out += 1
    return k_out
