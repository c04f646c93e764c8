"""Tracking stage: MediaPipe face landmarks, face selection, head pose."""
from avatar_app.tracking.face_mesh import FaceTracker, RunningMode
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
    "FaceTracker", "RunningMode", "HeadPose", "NeutralFace",
    "estimate_head_pose", "euler_from_rotation", "make_neutral_face", "rigid_fit",
    "rotation_from_euler",
]
