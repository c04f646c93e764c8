"""Frozen values that flow between stages, the process clock and the errors."""
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES, Blendshape
from avatar_app.core.clock import now_ns, stage_timer
from avatar_app.core.errors import (
    AvatarError,
    BackendUnavailableError,
    CaptureError,
    EngineBuildError,
    InputError,
    ModelLoadError,
    NoFaceError,
    RecordingError,
    TrackingError,
)
from avatar_app.core.types import AudioChunk, AvatarState, FaceParams, Frame, Landmarks

__all__ = [
    "BLENDSHAPE_NAMES", "NUM_BLENDSHAPES", "Blendshape", "now_ns", "stage_timer",
    "AvatarError", "BackendUnavailableError", "CaptureError", "EngineBuildError", "InputError",
    "ModelLoadError", "NoFaceError", "RecordingError", "TrackingError",
    "AudioChunk", "AvatarState", "FaceParams", "Frame", "Landmarks",
]
