"""Wiring of the stages: the stage factory, the per-frame processor, live and offline modes, the studio session.

    stages.py     build_stages(choice): the one engine-or-solver policy
    processor.py  FrameProcessor: track (speech meanwhile) -> reconstruct -> fuse -> tune, one frame
    live.py       LivePipeline: newest frame wins, stages on the "pipeline" thread
    offline.py    render_file: every frame in media time (open -> audio -> loop -> finish)
    writer.py     the clip and sidecar part files of an offline render
    demo.py       render_demo: shipped speech and a scripted face
    settings.py   the studio's settings model (validated areas, schema version, settings file)
    engines.py    EngineController: the studio's engine slots, probing and swaps
    outputs.py    VMC, virtual camera and calibration samples of the live stream
    recording.py  a live recording: clip, audio and blendshape track from the rendered frames
    session.py    StudioSession: sources, live pipeline, engines, outputs, settings (no Qt)

Names used elsewhere are re-exported here; submodules import lazily heavy stages.
"""
from avatar_app.pipeline.demo import demo_audio_path, render_demo, scripted_face
from avatar_app.pipeline.live import LivePipeline
from avatar_app.pipeline.offline import (
           SPEECH_RATE,
           RenderOptions,
           RenderReport,
           draw_overlay,
           render_file,
)
from avatar_app.pipeline.processor import FrameProcessor, audio_window
from avatar_app.pipeline.stages import StageChoice, Stages, build_stages
from avatar_app.pipeline.writer import SIDECAR_SUFFIX, sidecar_path_for

__all__ = ["SIDECAR_SUFFIX", "SPEECH_RATE", "FrameProcessor", "LivePipeline", "RenderOptions", "RenderReport",
           "StageChoice", "Stages", "audio_window", "build_stages", "demo_audio_path", "draw_overlay",
           "render_demo", "render_file", "scripted_face", "sidecar_path_for"]
