"""Reconstruction stage: landmarks -> FaceParams (blendshapes, head pose, gaze)."""
from avatar_app.reconstruction.auto_neutral import NeutralEstimator
from avatar_app.reconstruction.base import FaceReconstructor
from avatar_app.reconstruction.calibration import RunningPercentiles
from avatar_app.reconstruction.engine import (
    EngineReconstructor,
    EngineReconstructorConfig,
)
from avatar_app.reconstruction.geometric import GeometricSolver, GeometricSolverConfig
from avatar_app.reconstruction.hold import HoldState, NoFaceHold

__all__ = [
    "FaceReconstructor", "RunningPercentiles", "GeometricSolver", "GeometricSolverConfig",
    "HoldState", "NoFaceHold", "EngineReconstructor", "EngineReconstructorConfig",
    "NeutralEstimator",
]
