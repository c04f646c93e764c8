"""Capture stage: camera, video file, microphone and audio file sources.

All live sources stamp on one process clock (:func:`avatar_app.core.clock.now_ns`,
``time.perf_counter_ns``). Video is handed over through a newest-wins
:class:`LatestSlot`; audio goes into a timestamped :class:`AudioRing`.

Live video sources (camera, live file, fake camera) share one interface,
:class:`~avatar_app.capture.base.LiveSource`: ``start()``, ``get_latest(timeout_s)``,
``stop()``, ``granted`` (width, height, fps), ``dropped``, ``running``, ``error``,
``finished``, ``ring``, and work as context managers (``with src:`` starts and stops).
"""
from avatar_app.capture.audio_file import load_audio
from avatar_app.capture.base import LiveSource
from avatar_app.capture.camera import CameraSource, list_cameras
from avatar_app.capture.fake import FakeCamera
from avatar_app.capture.live_file import LiveFileSource
from avatar_app.capture.mic import MicSource, StreamResampler, list_microphones
from avatar_app.capture.ring import AudioRing, LatestSlot
from avatar_app.capture.video_file import VideoFileSource, VideoInfo

__all__ = [
    "AudioRing", "LatestSlot",
    "VideoFileSource", "VideoInfo", "load_audio",
    "CameraSource", "list_cameras", "FakeCamera",
    "MicSource", "StreamResampler", "list_microphones",
    "LiveFileSource", "LiveSource",
]
