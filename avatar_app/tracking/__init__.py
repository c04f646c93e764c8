"""Tracking stage: MediaPipe face landmarks, face selection, One Euro filter, head pose."""
from avatar_app.tracking.face_mesh import FaceTracker, RunningMode
from avatar_app.tracking.filters import OneEuroFilter
from avatar_app.tracking.head_pose import (
    HeadPose,
    NeutralFace,
    estimate_head_pose,
    euler_from_rotation,
    make_neutral_face,
    rigid_fit,
    rotation_from_euler,
)

__all__ = [
    "FaceTracker", "RunningMode", "OneEuroFilter", "HeadPose", "NeutralFace",
    "estimate_head_pose", "euler_from_rotation", "make_neutral_face", "rigid_fit",
    "rotation_from_euler",
]
