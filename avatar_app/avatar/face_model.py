"""The face model (training rig): MediaPipe face-mesh topology, 52 ARKit blendshapes, identity morphs.

A linear model of the 478 MediaPipe landmarks (468 mesh vertices in landmark
order plus 10 iris points) in metres::

    points = neutral + sum_b w_b * blendshapes[b] + sum_k a_k * identity[k]

with ``w`` the 52 ARKit weights (:data:`avatar_app.core.blendshapes.BLENDSHAPE_NAMES`
order, 0..1) and ``a`` identity (face-shape) coefficients (-1..1 spans a
plausible human range). The reconstruction engine (landmarks -> weights) and
the speech engine train on it; ``docs/face_model.md`` documents how it is
built and what every shape does.

Model frame (metres, right-handed): +x is the subject's own left, +y up, +z
out of the face toward a camera that faces it. Origin: midway between the
rim landmarks in front of the ears (234, 454).

Camera frame of :func:`project` (OpenGL / DESIGN.md convention): right-handed,
the camera at the origin looking down -Z, +Y up; a head in front of it has
negative z. ``p_cam = rotation @ p_model + translation``; rotation identity
with translation (0, 0, -0.6) is a frontal face 0.6 m away, its left (+x) on
the image's right, as in an unmirrored webcam image. Pixels follow MediaPipe
image coordinates: x right, y down, (0, 0) the top-left corner of the image,
so ``pixels / (width, height)`` are MediaPipe's normalised x, y.

The arrays live in ``assets/face_model.npz``, written by
``training/build_face_model.py``.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from avatar_app.core import landmarks as lmk
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES
from avatar_app.core.errors import InputError, ModelLoadError
from avatar_app.resources import resource_path

logger = logging.getLogger(__name__)

FACE_MODEL_ASSET = "assets/face_model.npz"
FORMAT_VERSION = 1
NUM_POINTS = lmk.NUM_LANDMARKS

#: Named landmark index sets of the rig (subject's own Left/Right): the sets of
#: :mod:`avatar_app.core.landmarks` by name.
LANDMARK_GROUPS: MappingProxyType = MappingProxyType({
    "left_eye_upper_lid": lmk.LEFT_EYE_UPPER_LID,
    "left_eye_lower_lid": lmk.LEFT_EYE_LOWER_LID,
    "right_eye_upper_lid": lmk.RIGHT_EYE_UPPER_LID,
    "right_eye_lower_lid": lmk.RIGHT_EYE_LOWER_LID,
    "left_eye_aperture_upper": lmk.LEFT_EYE_UPPER,
    "left_eye_aperture_lower": lmk.LEFT_EYE_LOWER,
    "right_eye_aperture_upper": lmk.RIGHT_EYE_UPPER,
    "right_eye_aperture_lower": lmk.RIGHT_EYE_LOWER,
    "left_iris": lmk.LEFT_IRIS,
    "right_iris": lmk.RIGHT_IRIS,
    "left_brow": lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER,
    "right_brow": lmk.RIGHT_BROW_UPPER + lmk.RIGHT_BROW_LOWER,
    "lip_outer_upper": lmk.LIP_OUTER_UPPER,
    "lip_outer_lower": lmk.LIP_OUTER_LOWER,
    "lip_inner_upper": lmk.LIP_INNER_UPPER,
    "lip_inner_lower": lmk.LIP_INNER_LOWER,
    "face_oval": lmk.FACE_OVAL,
    "stable": lmk.STABLE,
})


@dataclass(frozen=True, eq=False)
class FaceModel:
    """The linear face rig. Arrays are read-only.

    Attributes:
        neutral: (478, 3) float32 neutral landmark positions, metres, model frame.
        triangles: (852, 3) int32 mesh triangles over the first 468 points,
            wound counter-clockwise seen from the front (normals point out of the face).
        blendshapes: (52, 478, 3) float32 offsets in metres per unit weight,
            ARKit order (``BLENDSHAPE_NAMES``).
        identity: (K, 478, 3) float32 offsets in metres per unit coefficient.
        identity_names: K names, e.g. ``"face_width"``.
        mirror: (478,) int32 mirror partner of each point (``p[mirror] * (-1, 1, 1)``
            mirrors a shape across the midline).
    """

    neutral: np.ndarray
    triangles: np.ndarray
    blendshapes: np.ndarray
    identity: np.ndarray
    identity_names: tuple[str, ...]
    mirror: np.ndarray

    def __post_init__(self) -> None:
        k = len(self.identity_names)
        expect = {
            "neutral": (NUM_POINTS, 3), "blendshapes": (NUM_BLENDSHAPES, NUM_POINTS, 3),
            "identity": (k, NUM_POINTS, 3), "mirror": (NUM_POINTS,),
        }
        for name, shape in expect.items():
            arr = getattr(self, name)
            if arr.shape != shape:
                raise ModelLoadError(f"face model array {name!r} has shape {arr.shape}, expected {shape}")
        if self.triangles.ndim != 2 or self.triangles.shape[1] != 3:
            raise ModelLoadError(f"face model triangles have shape {self.triangles.shape}, expected (F, 3)")
        for name in ("neutral", "triangles", "blendshapes", "identity", "mirror"):
            getattr(self, name).setflags(write=False)

    @property
    def num_identity(self) -> int:
        """K, the number of identity morphs."""
        return len(self.identity_names)

    @property
    def blendshape_names(self) -> tuple[str, ...]:
        """The 52 ARKit names, in the order of :attr:`blendshapes`."""
        return BLENDSHAPE_NAMES

    @property
    def landmark_groups(self) -> MappingProxyType:
        """Named landmark index sets (see :data:`LANDMARK_GROUPS`)."""
        return LANDMARK_GROUPS

    def evaluate(self, weights: np.ndarray, identity: np.ndarray | None = None) -> np.ndarray:
        """Landmark positions for blendshape weights and identity coefficients (linear).

        Args:
            weights: (52,) or (B, 52) float blendshape weights, ARKit order,
                normally in [0, 1] (not clipped: the model is linear).
            identity: None (the neutral identity), (K,) or (B, K) float
                identity coefficients, -1..1 a plausible human range. With
                batched weights a (K,) vector applies to every row.

        Returns:
            (478, 3) float32 metres in the model frame, or (B, 478, 3) when
            ``weights`` or ``identity`` is batched.

        Raises:
            InputError: wrong shapes or non-finite values.
        """
        w = np.asarray(weights, dtype=np.float32)
        if w.ndim not in (1, 2) or w.shape[-1] != NUM_BLENDSHAPES:
            raise InputError(f"blendshape weights must have shape (52,) or (B, 52), got {w.shape}")
        a = None
        if identity is not None:
            a = np.asarray(identity, dtype=np.float32)
            if a.ndim not in (1, 2) or a.shape[-1] != self.num_identity:
                raise InputError(
                    f"identity coefficients must have shape ({self.num_identity},) or "
                    f"(B, {self.num_identity}), got {a.shape}")
            if a.ndim == 2 and w.ndim == 2 and len(a) != len(w):
                raise InputError(f"batch sizes differ: {len(w)} weight rows, {len(a)} identity rows")
        if not np.all(np.isfinite(w)) or (a is not None and not np.all(np.isfinite(a))):
            raise InputError("blendshape weights and identity coefficients must be finite")
        batched = w.ndim == 2 or (a is not None and a.ndim == 2)
        w2 = np.atleast_2d(w)
        out = w2 @ self.blendshapes.reshape(NUM_BLENDSHAPES, -1)
        if a is not None and self.num_identity:
            out = out + np.atleast_2d(a) @ self.identity.reshape(self.num_identity, -1)
        out = out.reshape(-1, NUM_POINTS, 3) + self.neutral
        return out if batched else out[0]

    def mirror_shape(self, points: np.ndarray) -> np.ndarray:
        """Mirror landmark positions or offsets across the face's midline (x -> -x, sides swapped).

        Args:
            points: (..., 478, 3) positions or offsets in the model frame.

        Returns:
            Array of the same shape and dtype.
        """
        p = np.asarray(points)
        return p[..., self.mirror, :] * np.array([-1, 1, 1], dtype=p.dtype)


def project(points: np.ndarray, rotation: np.ndarray, translation: np.ndarray,
            focal_px: float, image_size: tuple[int, int]) -> np.ndarray:
    """Pinhole projection of model-frame points to image pixels.

    ``p_cam = rotation @ p + translation`` (camera looking down -Z, +Y up,
    right-handed); ``u = W/2 + f x_cam / (-z_cam)``, ``v = H/2 - f y_cam / (-z_cam)``
    (x right, y down, as MediaPipe image coordinates; the principal point is
    the image centre, square pixels, no distortion).

    Args:
        points: (N, 3) or (B, N, 3) float, metres, model frame.
        rotation: (3, 3) or (B, 3, 3) float head rotation (model -> camera).
        translation: (3,) or (B, 3) float, metres; z < 0 places the head in front.
        focal_px: focal length in pixels (e.g. ``W / (2 tan(hfov / 2))``).
        image_size: (width, height) in pixels.

    Returns:
        (N, 2) or (B, N, 2) float32 pixel coordinates (B when any input is batched).

    Raises:
        InputError: bad shapes, a non-positive focal length or image size, or
            a point at or behind the camera plane.
    """
    cam, batched = _to_camera(points, rotation, translation)
    w, h = _check_camera(focal_px, image_size)
    depth = -cam[..., 2]
    if np.any(depth <= 1e-6):
        raise InputError("cannot project: some points are at or behind the camera (need z_cam < 0)")
    uv = np.empty(cam.shape[:-1] + (2,), np.float64)
    uv[..., 0] = 0.5 * w + focal_px * cam[..., 0] / depth
    uv[..., 1] = 0.5 * h - focal_px * cam[..., 1] / depth
    uv = uv.astype(np.float32)
    return uv if batched else uv[0]


def synthetic_landmarks(points: np.ndarray, rotation: np.ndarray, translation: np.ndarray,
                        focal_px: float, image_size: tuple[int, int]) -> np.ndarray:
    """MediaPipe-style normalised landmarks of model points seen by a pinhole camera.

    x, y are :func:`project`'s pixels divided by (width, height). z imitates
    MediaPipe's relative depth: depth difference to the model origin
    (``translation``) in metres, scaled by the pixels per metre at the
    origin's depth and divided by the width (smaller = closer to the camera),
    an approximation of MediaPipe's "depth with the head centre as origin, in
    the scale of x".

    Args:
        points: (N, 3) or (B, N, 3) float, metres, model frame.
        rotation: (3, 3) or (B, 3, 3).
        translation: (3,) or (B, 3), metres.
        focal_px: focal length, pixels.
        image_size: (width, height), pixels.

    Returns:
        (N, 3) or (B, N, 3) float32.

    Raises:
        InputError: as :func:`project`.
    """
    uv = project(points, rotation, translation, focal_px, image_size)
    cam, batched = _to_camera(points, rotation, translation)
    w, h = _check_camera(focal_px, image_size)
    t = np.asarray(translation, np.float64).reshape(-1, 1, 3)
    ref = -t[..., 2]
    z = (-cam[..., 2] - ref) * focal_px / ref / w
    uvb = uv if batched else uv[None]
    out = np.concatenate([uvb / np.array([w, h], np.float32), z[..., None].astype(np.float32)], -1)
    return out if batched else out[0]


def _to_camera(points, rotation, translation) -> tuple[np.ndarray, bool]:
    p = np.asarray(points, np.float64)
    r = np.asarray(rotation, np.float64)
    t = np.asarray(translation, np.float64)
    if p.ndim not in (2, 3) or p.shape[-1] != 3:
        raise InputError(f"points must have shape (N, 3) or (B, N, 3), got {p.shape}")
    if r.shape[-2:] != (3, 3) or r.ndim not in (2, 3):
        raise InputError(f"rotation must have shape (3, 3) or (B, 3, 3), got {r.shape}")
    if t.shape[-1:] != (3,) or t.ndim not in (1, 2):
        raise InputError(f"translation must have shape (3,) or (B, 3), got {t.shape}")
    batched = p.ndim == 3 or r.ndim == 3 or t.ndim == 2
    sizes = {len(x) for x, nd in ((p, 3), (r, 3), (t, 2)) if x.ndim == nd}
    if len(sizes) > 1:
        raise InputError(f"batch sizes differ between points, rotation and translation: {sorted(sizes)}")
    p3 = p if p.ndim == 3 else p[None]
    r3 = r if r.ndim == 3 else r[None]
    t3 = (t if t.ndim == 2 else t[None])[:, None, :]
    cam = np.einsum("bij,bnj->bni", r3, p3) + t3
    if not np.all(np.isfinite(cam)):
        raise InputError("points, rotation and translation must be finite")
    return cam, batched


def _check_camera(focal_px: float, image_size) -> tuple[float, float]:
    try:
        w, h = (float(s) for s in image_size)
    except (TypeError, ValueError) as exc:
        raise InputError(f"image_size must be (width, height), got {image_size!r}") from exc
    if not (w > 0 and h > 0 and float(focal_px) > 0):
        raise InputError(f"focal length and image size must be positive, got {focal_px}, {image_size}")
    return w, h


def save_face_model(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write face-model arrays to an ``.npz`` with fixed zip timestamps (byte-reproducible).

    Args:
        path: output file.
        arrays: name -> array; see :func:`load_face_model` for the keys.
    """
    import io
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


def face_model_from_arrays(arrays, source: str = "arrays") -> FaceModel:
    """Build a :class:`FaceModel` from the arrays of a face-model file.

    Args:
        arrays: mapping with keys ``version``, ``neutral``, ``triangles``,
            ``blendshapes``, ``blendshape_names``, ``identity``,
            ``identity_names``, ``mirror``.
        source: what to name in error messages (the file).

    Returns:
        The model.

    Raises:
        ModelLoadError: a key is missing, the version or the blendshape names differ.
    """
    try:
        version = int(arrays["version"])
        names = tuple(str(n) for n in arrays["blendshape_names"])
        model = FaceModel(
            neutral=np.asarray(arrays["neutral"], np.float32),
            triangles=np.asarray(arrays["triangles"], np.int32),
            blendshapes=np.asarray(arrays["blendshapes"], np.float32),
            identity=np.asarray(arrays["identity"], np.float32),
            identity_names=tuple(str(n) for n in arrays["identity_names"]),
            mirror=np.asarray(arrays["mirror"], np.int32),
        )
    except KeyError as exc:
        raise ModelLoadError(f"face model {source} lacks the array {exc}") from exc
    if version != FORMAT_VERSION:
        raise ModelLoadError(f"face model {source} has format version {version}, expected {FORMAT_VERSION}")
    if names != BLENDSHAPE_NAMES:
        raise ModelLoadError(f"face model {source} has blendshapes in another order than ARKit's 52")
    return model


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> FaceModel:
    if not path.is_file():
        raise ModelLoadError(
            f"face model not found at {path}; build it with `python training/build_face_model.py`")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"face model {path} cannot be read: {exc}") from exc
    model = face_model_from_arrays(arrays, str(path))
    logger.debug("loaded face model %s: %d identity morphs", path, model.num_identity)
    return model


def load_face_model(path: str | Path | None = None) -> FaceModel:
    """Load the face model (cached: the same file returns the same object).

    Args:
        path: an ``.npz`` written by ``training/build_face_model.py``; default
            the shipped ``assets/face_model.npz`` (found by
            :func:`avatar_app.resources.resource_path`).

    Returns:
        The :class:`FaceModel`.

    Raises:
        ModelLoadError: the file is missing, unreadable or not a face model.
    """
    p = resource_path(FACE_MODEL_ASSET) if path is None else Path(path)
    return _load(p.resolve())
