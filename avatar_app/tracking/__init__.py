"""Tracking stage: MediaPipe face landmarks, face selection, One Euro filter, head pose."""
from avatar_app.tracking.face_mesh import FaceTracker, RunningMode
from avatar_app.tracking.filters import OneEuroFilter
from avatar_app.tracking.head_pose import HeadPose, NeutralFace, estimate_head_pose, make_neutral_face

__all__ = [
    "FaceTracker", "RunningMode", "OneEuroFilter", "HeadPose", "NeutralFace",
    "estimate_head_pose", "make_neutral_face",
]
