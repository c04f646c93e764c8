"""Tracking stage: MediaPipe face landmarks and face selection."""
from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

__all__ = ["FaceTracker", "RunningMode"]
