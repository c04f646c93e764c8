"""Which face tracker to run: MediaPipe's own graphs or the landmark engines (``--tracker onnx|mediapipe``).

``auto`` (the default) picks the ONNX tracker when an NVIDIA GPU backend of the
engine layer can run here, MediaPipe otherwise: on a CPU, MediaPipe's XNNPACK
path is faster than ONNX Runtime's on these models (benchmarks/landmarks_cpu.py
measures both in one run; see ``ONNX_FASTER_ON_CPU``).
"""
from __future__ import annotations

import logging

from avatar_app.core.errors import InputError
from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

logger = logging.getLogger(__name__)

TRACKERS = ("auto", "onnx", "mediapipe")
GPU_BACKENDS = ("tensorrt", "tensorrt_rtx", "ort_tensorrt", "ort_cuda")
"""Engine-layer backends that run on an NVIDIA GPU."""
ONNX_FASTER_ON_CPU = False
"""Whether the ONNX tracker measured at least as fast as MediaPipe on a CPU
(benchmarks/results/landmarks_cpu.json); True would make it the CPU default too."""


def gpu_backend() -> str | None:
    """The first engine-layer GPU backend that can run here, or None."""
    from avatar_app.inference.backends import backend_statuses

    for st in backend_statuses(GPU_BACKENDS):
        if st.name in GPU_BACKENDS and st.can_run:
            return st.name
    return None


def auto_tracker(gpu: str | None) -> str:
    """What ``auto`` resolves to given the first runnable GPU backend (None: no GPU backend runs here)."""
    return "onnx" if ONNX_FASTER_ON_CPU or gpu is not None else "mediapipe"


def tracker_kind(tracker: object | None) -> str:
    """``"onnx"`` for an :class:`~avatar_app.tracking.onnx_tracker.OnnxFaceTracker`, ``"mediapipe"`` for
    MediaPipe's :class:`FaceTracker`, ``""`` for None (the kind of a running tracker, not of a choice)."""
    if tracker is None:
        return ""
    from avatar_app.tracking.onnx_tracker import OnnxFaceTracker

    return "onnx" if isinstance(tracker, OnnxFaceTracker) else "mediapipe"


def resolve_tracker(name: str = "auto") -> str:
    """``"onnx"`` or ``"mediapipe"`` for a ``--tracker`` value.

    Raises:
        InputError: an unknown name.
    """
    name = str(name).strip().lower()
    if name not in TRACKERS:
        raise InputError(f"unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")
    if name != "auto":
        return name
    return auto_tracker(None if ONNX_FASTER_ON_CPU else gpu_backend())


def make_tracker(name: str = "auto", mode: RunningMode = RunningMode.VIDEO, **kwargs) -> FaceTracker:
    """A face tracker of the chosen kind.

    Args:
        name: ``auto``, ``onnx`` or ``mediapipe``.
        mode: the running mode.
        **kwargs: passed to the tracker (FaceTracker's options; ``backend``/``precision``
            and ``manager`` for the ONNX tracker).

    Raises:
        InputError: an unknown name or option.
        ModelLoadError: the ONNX tracker's models are missing or do not load.
    """
    kind = resolve_tracker(name)
    if kind == "mediapipe":
        kwargs.pop("backend", None), kwargs.pop("precision", None), kwargs.pop("manager", None)
        return FaceTracker(mode, **kwargs)
    from avatar_app.tracking.onnx_tracker import OnnxFaceTracker

    tracker = OnnxFaceTracker(mode, **kwargs)
    logger.info("%s", tracker.describe())
    return tracker
