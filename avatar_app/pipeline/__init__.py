"""Wiring of the stages, offline (every frame, media time) and live (newest frame wins)."""
from avatar_app.pipeline.offline import (SIDECAR_SUFFIX, SPEECH_RATE, FrameProcessor, LivePipeline, RenderOptions,
                                         RenderReport, _default_reconstructor, _default_speech, audio_window,
                                         demo_audio_path, draw_overlay, render_demo, render_file, scripted_face,
                                         sidecar_path_for)

__all__ = ["SIDECAR_SUFFIX", "SPEECH_RATE", "FrameProcessor", "LivePipeline", "RenderOptions", "RenderReport",
           "_default_reconstructor", "_default_speech", "audio_window", "demo_audio_path", "draw_overlay",
           "render_demo", "render_file", "scripted_face", "sidecar_path_for"]
