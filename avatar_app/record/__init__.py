"""Clip recording: MP4 (H.264 + AAC) writer, its threaded wrapper, and the blendshape track."""
from avatar_app.record.async_recorder import AsyncRecorder
from avatar_app.record.recorder import ClipRecorder
from avatar_app.record.sidecar import SidecarTrack, SidecarWriter, read_sidecar

__all__ = ["AsyncRecorder", "ClipRecorder", "SidecarTrack", "SidecarWriter", "read_sidecar"]
