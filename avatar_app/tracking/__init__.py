"""Tracking stage: MediaPipe face landmarks, face selection, One Euro filter."""
from avatar_app.tracking.face_mesh import FaceTracker, RunningMode
from avatar_app.tracking.filters import OneEuroFilter

__all__ = ["FaceTracker", "RunningMode", "OneEuroFilter"]
