"""The demo clip: the shipped speech drives the mouth, a scripted face the rest (no camera needed)."""
from __future__ import annotations

import math
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES, Blendshape
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import InputError
from avatar_app.core.rotations import rotation_from_euler
from avatar_app.core.types import FaceParams, Frame
from avatar_app.pipeline.offline import (
    SPEECH_RATE,
    RenderOptions,
    RenderReport,
    load_avatar_option,
    make_offline_processor,
    run_render,
    sidecar_path_for,
)
from avatar_app.pipeline.processor import audio_window
from avatar_app.pipeline.stages import StageChoice, build_stages
from avatar_app.speech.base import describe_speech


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
    glance = math.sin(2 * math.pi * t_s / 3.3)
    gaze_yaw = 0.25 * math.copysign(1.0, glance) * (abs(glance) > 0.6)
    gaze = np.array([gaze_yaw, 0.05], np.float32)
    return FaceParams(blendshapes=w, rotation=rotation_from_euler(yaw, pitch, roll).astype(np.float32), gaze=gaze)


def demo_audio_path() -> Path:
    """The shipped demo speech (assets/demo/speech.*).

    Raises:
        InputError: the asset is missing from this installation.
    """
    from avatar_app.resources import resource_path

    for name in ("speech.ogg", "speech.m4a", "speech.wav"):
        p = resource_path(f"assets/demo/{name}")
        if p.exists():
            return p
    raise InputError("The demo speech asset is missing from this installation (assets/demo/)")


def render_demo(output_path: str | Path, options: RenderOptions | None = None, progress=None,
                stop: threading.Event | None = None) -> RenderReport:
    """Render the demo clip from data the package carries: shipped speech + scripted face.

    The stages come from :func:`~avatar_app.pipeline.stages.build_stages` (no tracker;
    the shipped speech engine, else the loudness solver) and the post-processing chain
    is the studio's (``options.settings``), with the mouth marked covered: the scripted
    face says nothing about the mouth, so the voice drives it alone.

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
    chain = replace(options.settings, fusion=replace(options.settings.fusion, mouth_covered=True))
    report = RenderReport(output_path=output_path, sidecar_path=sidecar_path_for(output_path))
    avatar = load_avatar_option(options, report)
    n = int(math.ceil(duration * fps))
    stages = build_stages(StageChoice(track=False, chain=chain))
    proc = make_offline_processor(stages)
    speech = stages.speech
    report.speech_backend = describe_speech(speech)

    def frames(out):
        for i in range(n):
            if stop is not None and stop.is_set():
                report.interrupted = True
                break
            t = i / fps
            frame = Frame(index=i, t_capture_ns=now_ns(), image=np.zeros((1, 1, 3), np.uint8), media_time_s=t)
            window = audio_window(speech_audio.samples, SPEECH_RATE, t + proc.speech_lookahead_s, speech.context_s)
            state = proc.process(frame, window, vision=scripted_face(t))
            out.writer.sidecar.write(state)
            out.put(state)
            report.frames_in += 1
            report.faces_found += 1
            if progress:
                progress(i + 1, n)

    def finish(out):
        report.frames_out = out.writer.frames_out
        report.duration_s = out.writer.frames_out / fps
        report.audio_duration_s = out.writer.audio_written_s
        report.wall_s = (now_ns() - t0) / 1e9

    run_render(output_path, options, fps, (rec_audio.samples, 0.0, rec_audio.sample_rate), avatar, report,
               frames, finish, settle=None)
    stages.close()
    return report
