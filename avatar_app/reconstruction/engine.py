"""EngineReconstructor: the learned face_recon engine behind the FaceReconstructor contract.

Per frame:

1. the landmarks are aligned to the face model's template
   (:func:`avatar_app.reconstruction.normalise.align`): head-frame points and
   the coarse head pose ``R0, t0``;
2. the user's neutral face (head frame) is the explicit calibration
   (:meth:`EngineReconstructor.calibrate_neutral`) or, without one, the
   running region-wise estimate of
   :class:`~avatar_app.reconstruction.auto_neutral.NeutralEstimator` (every
   frame over the first seconds, then one sample per 0.25 s);
3. the engine (``models/face_recon.onnx`` through the engine layer: any
   backend and precision the :class:`~avatar_app.inference.EngineSlot`
   serves) maps ``landmarks`` = frame - neutral and ``neutral`` = neutral -
   template to 52 blendshapes, a pose refinement and identity coefficients;
4. head pose = ``R0 @ rotation_from_6d(rotation_6d)``, ``t0 + translation``;
   after an explicit calibration the rotation is given relative to the
   neutral's (the calibrated face counts as facing the camera, as in the
   geometric solver); without one it is relative to the rig's frontal frame;
5. identity: the engine's coefficients averaged over the frames of the
   warm-up, then followed slowly (exponential average, ``identity_tau_s``);
6. gaze (yaw, pitch) from the engine's eyeLook weights (the rig's eye
   rotation at weight 1: 30 degrees in/out/down, 25 up) or from the irises
   (:data:`GAZE_SOURCES`); evaluate.py measures both on held-out
   render-and-track data and the default is the better one.

No smoothing is applied: FaceParams carry the raw engine output (the
pipeline's fusion smooths).
"""
from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES, Blendshape
from avatar_app.core.errors import (
    AvatarError,
    InputError,
    ModelLoadError,
    TrackingError,
)
from avatar_app.core.landmarks import DEFAULT_HFOV_DEG
from avatar_app.core.types import FaceParams, Landmarks
from avatar_app.reconstruction import normalise as N
from avatar_app.reconstruction.auto_neutral import NeutralEstimator
from avatar_app.reconstruction.head_pose import HeadPoseFitter, NeutralFace

_log = logging.getLogger(__name__)

#: The shipped model, relative to the project root.
DEFAULT_MODEL = "models/face_recon.onnx"
GAZE_SOURCES = ("engine", "iris")
#: Eye rotation of the face model's eyeLook shapes at weight 1 (docs/face_model.md), radians.
GAZE_FULL_RAD = {"In": math.radians(30.0), "Out": math.radians(30.0),
                 "Up": math.radians(25.0), "Down": math.radians(30.0)}
#: Distance of the rig's iris centre from the eyeball's centre of rotation, metres (docs/face_model.md).
IRIS_RADIUS_M = 0.010


def default_model_path() -> Path:
    """Path of the shipped face_recon.onnx (it may not exist in a partial install)."""
    from avatar_app.resources import resource_path

    return resource_path(DEFAULT_MODEL)


@dataclass(frozen=True)
class EngineReconstructorConfig:
    """Constants of the EngineReconstructor (units in the names).

    Attributes:
        hfov_deg: assumed horizontal field of view of the camera.
        warmup_s: seconds of the automatic neutral's and the identity's warm-up.
        slow_interval_s: sampling interval of the automatic neutral after the warm-up.
        identity_tau_s: time constant of the identity's slow update after the warm-up.
        gaze_source: ``"engine"`` or ``"iris"``.
    """

    hfov_deg: float = DEFAULT_HFOV_DEG
    warmup_s: float = 5.0
    slow_interval_s: float = 0.25
    identity_tau_s: float = 20.0
    gaze_source: str = "engine"


def depth_scale(t_align: np.ndarray, t_engine: np.ndarray, lo: float = 0.5, hi: float = 2.0) -> float:
    """How much farther the engine places the head than the alignment does, along the viewing ray.

    The alignment's translation assumes the rig template's size; the engine's
    translation correction mostly rescales it for the user's head size, a per-user
    constant. Per frame that correction is noisy on real video (sd 2-4 cm in depth
    on the GRID clips, against 0.2 cm for the alignment), so the runtime estimates
    this scale like the identity (a mean over the warm-up, then a slow update) and
    applies it to each frame's alignment translation.

    Args:
        t_align: (3,) alignment translation, metres (camera frame).
        t_engine: (3,) the engine's translation of the same frame, metres.
        lo, hi: clip of the scale.

    Returns:
        ``dot(t_engine, t_align) / |t_align|^2`` clipped to ``[lo, hi]`` (1.0 when
        ``t_align`` is zero).
    """
    a = np.asarray(t_align, np.float64)
    d = float(a @ a)
    if d <= 0.0:
        return 1.0
    return float(np.clip(np.asarray(t_engine, np.float64) @ a / d, lo, hi))


def gaze_from_weights(w: np.ndarray) -> np.ndarray:
    """(yaw, pitch) radians of both eyes' mean from eyeLook weights (the rig's angles at weight 1).

    Args:
        w: (..., 52) weights.

    Returns:
        (..., 2) float32; +yaw toward the subject's left, +pitch up.
    """
    b = Blendshape
    w = np.asarray(w, np.float64)
    yaw_l = w[..., b.eyeLookOutLeft] * GAZE_FULL_RAD["Out"] - w[..., b.eyeLookInLeft] * GAZE_FULL_RAD["In"]
    yaw_r = w[..., b.eyeLookInRight] * GAZE_FULL_RAD["In"] - w[..., b.eyeLookOutRight] * GAZE_FULL_RAD["Out"]
    pitch = [w[..., b[f"eyeLookUp{s}"]] * GAZE_FULL_RAD["Up"] - w[..., b[f"eyeLookDown{s}"]] * GAZE_FULL_RAD["Down"]
             for s in ("Left", "Right")]
    return np.stack([0.5 * (yaw_l + yaw_r), 0.5 * (pitch[0] + pitch[1])], -1).astype(np.float32)


def gaze_from_irises(head: np.ndarray, neutral: np.ndarray) -> np.ndarray:
    """(yaw, pitch) radians from the iris centres' displacement relative to the eye corners.

    The iris centre turns on a sphere of :data:`IRIS_RADIUS_M` about the
    eyeball's centre; its displacement (relative to the midpoint of the eye
    corners, minus the same in the neutral face) gives the angle by arcsin.

    Args:
        head: (..., 478, 3) head-frame points of the frame, metres.
        neutral: (..., 478, 3) of the neutral.

    Returns:
        (..., 2) float32 mean of both eyes.
    """
    def offsets(p):
        p = np.asarray(p, np.float64)
        r = p[..., 468, :] - 0.5 * (p[..., 33, :] + p[..., 133, :])
        l_ = p[..., 473, :] - 0.5 * (p[..., 263, :] + p[..., 362, :])
        return 0.5 * (r + l_)

    d = (offsets(head) - offsets(neutral)) / IRIS_RADIUS_M
    ang = np.arcsin(np.clip(d[..., :2], -1.0, 1.0))
    return ang.astype(np.float32)


def head_frame(landmarks: Landmarks, hfov_deg: float = DEFAULT_HFOV_DEG):
    """The engine's pre-processing of one face: aligned to the rig's template.

    Args:
        landmarks: (478, 3) image-normalised points and the image size.
        hfov_deg: the camera's assumed horizontal field of view, degrees.

    Returns:
        ``(head, r0, t0)``: (478, 3) float32 head-frame points in metres, the coarse
        rotation (3, 3) and translation (3,) of :func:`~avatar_app.reconstruction.normalise.align`.

    Raises:
        InputError: invalid landmarks.
    """
    points, r0, t0, _ = _template_fitter(float(hfov_deg)).fit_arrays(landmarks)
    return points.astype(np.float32), r0, t0


@functools.lru_cache(maxsize=4)
def _template_fitter(hfov_deg: float) -> HeadPoseFitter:
    """:func:`~avatar_app.reconstruction.normalise.align` for one face, precomputed: the rig's
    template as the neutral of a :class:`~avatar_app.reconstruction.head_pose.HeadPoseFitter`.

    ``align`` is that fitter's two similarity fits batched (the same template points, weights and
    un-projection; tests/reconstruction/test_face_recon_engine.py holds them equal to 1e-6 m), and
    batched numpy costs ~0.4 ms a face where the fitter's unbatched 3x3 algebra costs ~0.1
    (benchmarks/peers.py: the engine path's largest part). Read-only, so shared across threads."""
    return HeadPoseFitter(NeutralFace(points_m=N.template()), hfov_deg)


def engine_feeds(landmarks: Landmarks, neutral: Landmarks,
                 hfov_deg: float = DEFAULT_HFOV_DEG) -> dict[str, np.ndarray]:
    """The face_recon inputs of one frame with an explicit neutral face, as :class:`EngineReconstructor`
    computes them (:func:`head_frame` of both, then
    :func:`~avatar_app.reconstruction.normalise.network_inputs`): INT8 calibration samples are
    recorded with this, so they match real inference inputs.

    Returns:
        ``{"landmarks": (1, 478, 3), "neutral": (1, 478, 3)}`` float32.

    Raises:
        InputError: invalid landmarks.
    """
    head = head_frame(landmarks, hfov_deg)[0]
    ref = head_frame(neutral, hfov_deg)[0]
    return N.network_inputs(head[None], ref[None])


class EngineReconstructor:
    """A :class:`~avatar_app.reconstruction.base.FaceReconstructor` running the face_recon engine.

    Args:
        model_path: face_recon ONNX (default :func:`default_model_path`).
        manager: an :class:`~avatar_app.inference.EngineManager` (default: a new one
            with the user's engine cache).
        backend, precision: the user's engine choice (None: fastest verified, else
            ONNX Runtime CPU FP32).
        slot: an already opened :class:`~avatar_app.inference.EngineSlot` to use
            instead (its settings panel may swap engines between frames).
        config: constants (:class:`EngineReconstructorConfig`).

    Attributes:
        slot: the engine slot (``slot.active.describe()`` names the backend).
        last_raw: dict of the last engine outputs (batch 1 removed), or None.
        last_pose0: (R0, t0) of the last frame's alignment, or None.

    Raises:
        ModelLoadError: the model is missing, no engine can load it, or it is not a working
            face_recon model (other tensors, non-finite outputs).
        InputError: a bad config value.

    Thread: one instance per processing thread; calls must come in time order.
    """

    def __init__(self, model_path: str | Path | None = None, *, manager=None, backend: str | None = None,
                 precision: str | None = None, slot=None,
                 config: EngineReconstructorConfig | None = None) -> None:
        from avatar_app.inference import EngineManager, EngineSlot

        self.config = config or EngineReconstructorConfig()
        if self.config.gaze_source not in GAZE_SOURCES:
            raise InputError(f"gaze_source must be one of {GAZE_SOURCES}, got {self.config.gaze_source!r}")
        if slot is None:
            path = Path(model_path) if model_path is not None else default_model_path()
            if not path.is_file():
                raise ModelLoadError(f"face reconstruction model not found: {path}")
            slot = EngineSlot(manager or EngineManager(), path)
            slot.open(backend, precision)
        self.slot = slot
        meta = slot.manager.model_info(slot.model_path).metadata
        version = meta.get("avatar_app.normalisation_version")
        if version is not None and int(version) != N.NORMALISATION_VERSION:
            raise ModelLoadError(
                f"{slot.model_path.name} was trained with input normalisation v{version}; this "
                f"version of the app normalises as v{N.NORMALISATION_VERSION}: retrain or update the model")
        try:
            self._check_model()
        except ModelLoadError:
            slot.close()
            raise
        self._auto = NeutralEstimator(self.config.warmup_s, self.config.slow_interval_s)
        self.reset()

    #: The face_recon contract (models/face_recon.md): input and output tensor names.
    MODEL_INPUTS = ("landmarks", "neutral")
    MODEL_OUTPUTS = ("blendshapes", "rotation_6d", "translation", "identity")

    def _check_model(self) -> None:
        """Refuse a file that is not a working face_recon model before the first frame.

        Checks the tensor names against :data:`MODEL_INPUTS` / :data:`MODEL_OUTPUTS` and runs
        the rig's own neutral face (both feeds 0) once: the outputs must be finite.

        Raises:
            ModelLoadError: another model's file, or weights that give NaN or infinity.
        """
        info = self.slot.manager.model_info(self.slot.model_path)
        ins, outs = [t.name for t in info.inputs], [t.name for t in info.outputs]
        name = self.slot.model_path.name
        if sorted(ins) != sorted(self.MODEL_INPUTS) or not set(self.MODEL_OUTPUTS) <= set(outs):
            raise ModelLoadError(
                f"{name} is not a face reconstruction model: it takes {ins} and gives {outs}; a "
                f"face_recon model takes {list(self.MODEL_INPUTS)} and gives {list(self.MODEL_OUTPUTS)}")
        rest = N.template()
        try:
            self._infer(rest, rest)
        except AvatarError as exc:
            raise ModelLoadError(f"{name} does not work on the rig's own neutral face: {exc}") from exc

    # -- FaceReconstructor --------------------------------------------------
    def reset(self) -> None:
        """Forget the user: neutral (explicit or automatic), identity, last time."""
        self._explicit: np.ndarray | None = None
        self._explicit_rot: np.ndarray | None = None
        self._level_rot: np.ndarray | None = None
        self._auto.reset()
        self._last_t: float | None = None
        self._t_first: float | None = None
        self._identity: np.ndarray | None = None
        self._identity_n = 0
        self._identity_t: float | None = None
        self._depth_scale = 1.0
        self._depth_scale_n = 0
        self._depth_scale_t: float | None = None
        self.last_raw: dict[str, np.ndarray] | None = None
        self.last_pose0: tuple[np.ndarray, np.ndarray] | None = None

    def calibrate_neutral(self, landmarks: Landmarks) -> None:
        """Take these landmarks as the user's neutral face (treated as facing the camera).

        Args:
            landmarks: (478, 3) points of a relaxed face, eyes open, mouth closed.

        Raises:
            InputError: invalid landmarks.
        """
        head, r0, t0 = head_frame(landmarks, self.config.hfov_deg)
        self._explicit = head
        out = self._infer(head, head)
        self._explicit_rot, trans = N.compose_pose(r0, t0, out["rotation_6d"], out["translation"])
        self._identity = np.asarray(out["identity"], np.float32)
        self._identity_n = 1
        self._depth_scale, self._depth_scale_n = depth_scale(t0, trans), 1

    @property
    def is_calibrated(self) -> bool:
        """Whether an explicit neutral was given (else the running estimate is used)."""
        return self._explicit is not None

    @property
    def neutral_head(self) -> np.ndarray | None:
        """(478, 3) float32 neutral face in use (head frame, metres), or None before any frame."""
        return self._explicit if self._explicit is not None else self._auto.value

    @property
    def identity(self) -> np.ndarray:
        """(K,) float32 current identity estimate (K = 0 before any frame)."""
        return np.zeros(0, np.float32) if self._identity is None else self._identity.copy()

    def describe(self) -> str:
        """Which engine serves: ``face_recon.onnx on ort_cpu (fp32)``."""
        return self.slot.active.describe()

    def close(self) -> None:
        """Close the engine slot."""
        self.slot.close()

    def reconstruct(self, landmarks: Landmarks, t_s: float) -> FaceParams:
        """Blendshapes, head pose, gaze and identity of one frame.

        Args:
            landmarks: (478, 3) image-normalised points of the tracked face.
            t_s: frame time, seconds; strictly increasing across calls.

        Returns:
            FaceParams (blendshapes (52,) float32 in [0, 1], tongueOut 0;
            rotation (3, 3); translation (3,) metres; gaze (yaw, pitch)
            radians; identity (K,)).

        Raises:
            InputError: invalid landmarks or time.
            TrackingError: ``t_s`` does not increase.
            AvatarError: the engine failed or returned non-finite values.
        """
        t = float(t_s)
        if not math.isfinite(t):
            raise InputError(f"frame time must be finite, got {t_s}")
        if self._last_t is not None and not t > self._last_t:
            raise TrackingError(f"frame times must strictly increase: got {t} s after {self._last_t} s")
        self._last_t = t
        if self._t_first is None:
            self._t_first = t
        head, r0, t0 = head_frame(landmarks, self.config.hfov_deg)
        if self._explicit is None:
            self._auto.update(head, t)
        neutral = self.neutral_head
        out = self._infer(head, neutral)
        rot, trans = N.compose_pose(r0, t0, out["rotation_6d"], out["translation"])
        if self._explicit_rot is not None:
            rot = rot @ self._explicit_rot.T
        else:
            rot = rot @ self._first_pitch(rot).T
        self.last_pose0 = (r0, t0)
        self._update_identity(np.asarray(out["identity"], np.float32), t)
        self._update_depth_scale(depth_scale(t0, trans), t)
        trans = t0 * self._depth_scale
        w = np.clip(np.asarray(out["blendshapes"], np.float32), 0.0, 1.0)
        if self.config.gaze_source == "engine":
            gaze = gaze_from_weights(w)
        else:
            gaze = gaze_from_irises(head, neutral)
        return FaceParams(blendshapes=w, rotation=rot.astype(np.float32), translation=trans.astype(np.float32),
                          gaze=np.asarray(gaze, np.float32), identity=self.identity)

    # -- internals -----------------------------------------------------------
    def _first_pitch(self, rot: np.ndarray) -> np.ndarray:
        """The pitch of the first frame without calibration, as a rotation (3, 3) float64, that the head
        pose is read relative to, as the geometric solver's automatic neutral does (the first frame,
        levelled in yaw and roll: ``make_neutral_face(level_yaw_roll=True)``).

        The engine's pitch is relative to the rig template's frontal frame, and a face whose shape
        differs from the template's reads tilted by a fixed amount (new-user trial: lp_d18 +12.4
        degrees, openmpf -15.8, grid_s1 +7.8 against the solver, every frame; yaw and roll agree within
        1.5 degrees), so the avatar looked down at the camera for the whole clip."""
        if self._level_rot is None:
            from avatar_app.core.rotations import euler_from_rotation, rotation_from_euler

            _, pitch, _ = euler_from_rotation(rot)
            self._level_rot = rotation_from_euler(0.0, pitch, 0.0)
        return self._level_rot

    def _infer(self, head: np.ndarray, neutral: np.ndarray) -> dict[str, np.ndarray]:
        feeds = N.network_inputs(head[None], neutral[None])
        out = self.slot.infer(feeds)
        res = {k: np.asarray(v)[0] for k, v in out.items()}
        for k, v in res.items():
            if not np.all(np.isfinite(v)):
                raise AvatarError(f"the face reconstruction engine returned non-finite values in {k!r}")
        if res["blendshapes"].shape != (NUM_BLENDSHAPES,):
            raise AvatarError(f"the face reconstruction engine returned blendshapes of shape "
                              f"{res['blendshapes'].shape}, expected ({NUM_BLENDSHAPES},)")
        self.last_raw = res
        return res

    def _update_identity(self, ident: np.ndarray, t: float) -> None:
        self._identity, self._identity_n = self._slow_mean(self._identity, self._identity_n, ident, t,
                                                           self._identity_t)
        self._identity_t = t

    def _update_depth_scale(self, scale: float, t: float) -> None:
        """The user's depth scale follows the identity's schedule (see :func:`depth_scale`)."""
        value = None if self._depth_scale_n == 0 else np.array([self._depth_scale])
        value, self._depth_scale_n = self._slow_mean(value, self._depth_scale_n, np.array([scale]), t,
                                                     self._depth_scale_t)
        self._depth_scale, self._depth_scale_t = float(value[0]), t

    def _slow_mean(self, value: np.ndarray | None, n: int, x: np.ndarray, t: float,
                   t_prev: float | None) -> tuple[np.ndarray, int]:
        """Running mean over the warm-up, then an exponential follow-up (``identity_tau_s``).

        Args:
            value: the current estimate (None before the first sample); n: samples in it.
            x: the new sample; t: its time, seconds; t_prev: the previous update's time.

        Returns:
            ``(new estimate, new n)``.
        """
        if value is None:
            return x.copy(), 1
        if t - self._t_first < self.config.warmup_s:
            return value + (x - value) / (n + 1), n + 1
        dt = t - t_prev if t_prev is not None else 0.0
        return value + (1.0 - math.exp(-max(dt, 0.0) / self.config.identity_tau_s)) * (x - value), n
