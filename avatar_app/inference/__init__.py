"""Inference engines: ONNX Runtime and TensorRT backends, precision, cache, verification, swapping.

Importing this package imports no optional backend (tensorrt, tensorrt_rtx,
cuda-python, onnxruntime-gpu) and not even onnxruntime or onnx: they load when
an engine is built or opened.

Typical use::

    from avatar_app.inference import EngineManager, EngineSlot

    slot = EngineSlot(EngineManager(), "models/face_recon.onnx")
    result = slot.open()                 # fastest verified engine, else ORT CPU FP32
    print(result.runner.describe(), result.explain())
    out = slot.infer({"landmarks": x})   # x: (B, 478, 3) float32
    slot.request("tensorrt_rtx", "fp16") # built + verified in the background, then swapped
"""
from __future__ import annotations

# first: ONNX Runtime reads its telemetry opt-out when it is imported (ort_env)
from avatar_app.inference import ort_env  # noqa: F401  (isort: skip)
from avatar_app.inference.backends import (DEFAULT_PREFERENCE, Backend, BackendStatus,
                                           backend_names, backend_statuses, candidate_plan,
                                           get_backend, register_backend, unregister_backend)
from avatar_app.inference.base import DEFAULT_TOLERANCES, BaseRunner, Precision, TensorSpec
from avatar_app.inference.cache import CacheEntry, CacheKey, EngineCache, Manifest
from avatar_app.inference.calibration import MIN_USER_SAMPLES, CalibrationStore
from avatar_app.inference.isolation import ChildCrashError, live_child_duty, run_isolated
from avatar_app.inference.manager import Attempt, EngineManager, OpenResult
from avatar_app.inference.modelinfo import ModelInfo
from avatar_app.inference.swap import EngineSlot
from avatar_app.inference.verify import VerificationResult

__all__ = [
    "DEFAULT_PREFERENCE", "DEFAULT_TOLERANCES", "MIN_USER_SAMPLES",
    "Attempt", "Backend", "BackendStatus", "BaseRunner", "CacheEntry", "CacheKey",
    "CalibrationStore", "ChildCrashError", "EngineCache", "EngineManager", "EngineSlot",
    "Manifest", "ModelInfo", "OpenResult", "Precision", "TensorSpec", "VerificationResult",
    "backend_names", "backend_statuses", "candidate_plan", "get_backend", "register_backend",
    "live_child_duty", "run_isolated", "unregister_backend",
]
