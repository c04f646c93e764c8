"""Clip recording: MP4 (H.264 + AAC) and alpha (ProRes 4444 / VP9) writers, the threaded
wrapper, drift-free sync on the audio clock, and blendshape tracks (JSON Lines, Live Link
Face CSV, glTF animation)."""
from avatar_app.record.alpha import AlphaClipRecorder
from avatar_app.record.async_recorder import AsyncRecorder
from avatar_app.record.factory import open_recorder
from avatar_app.record.formats import RecordingFormat, available_formats
from avatar_app.record.recorder import ClipRecorder
from avatar_app.record.sidecar import SidecarTrack, SidecarWriter, read_sidecar
from avatar_app.record.synced import SyncedRecorder

__all__ = [
    "AlphaClipRecorder", "AsyncRecorder", "ClipRecorder", "RecordingFormat", "SidecarTrack",
    "SidecarWriter", "SyncedRecorder", "available_formats", "open_recorder", "read_sidecar",
]
# Track export (Live Link Face CSV, glTF): avatar_app.record.tracks (not imported here, so
# ``python -m avatar_app.record.tracks`` runs cleanly).
