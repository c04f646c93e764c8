"""Small typed values passed between stages (dataclasses of numpy arrays).

Conventions (DESIGN.md, "Contracts"):
- time: ``t_*_ns`` are ``time.perf_counter_ns()`` of this process; ``media_time_s``
  is the position in a file in seconds.
- images are BGR uint8 (OpenCV order), shape (H, W, 3).
- audio is mono float32 in [-1, 1].
- blendshape weights are float32 (52,) in [0, 1], ARKit order (core.blendshapes).
- head rotation is a 3x3 float32 matrix, right-handed, camera looking down -Z
  (OpenGL camera space); translation float32 (3,) in metres.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES

#: Per-stage timings of one frame: stage name -> ``(start_ns, end_ns)`` on the process clock.
#: A separate, mutable record made per processed frame (``stage_timer`` fills it); the
#: Frame itself stays frozen. The "capture" stage is ``(t_capture_ns, t_delivered_ns)``.
StageStamps = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Frame:
    """One video frame (immutable: several threads may hold it).

    Attributes:
        index: 0-based frame number within its source.
        t_capture_ns: capture time on the process clock (live) or the time the
            frame was decoded (offline).
        image: (H, W, 3) uint8 BGR (not copied: do not write into it).
        media_time_s: presentation time in the file, seconds; for live sources the
            time since the source started.
        t_delivered_ns: when the source handed the frame on (its newest-frame slot),
            process clock; 0 when not known (file decoding).
    """

    index: int
    t_capture_ns: int
    image: np.ndarray
    media_time_s: float = 0.0
    t_delivered_ns: int = 0

    def capture_stamps(self) -> StageStamps:
        """A new stamp record holding the "capture" stage ``(t_capture_ns, t_delivered_ns)`` (empty when
        the delivery time is not known)."""
        return {"capture": (self.t_capture_ns, self.t_delivered_ns)} if self.t_delivered_ns else {}


@dataclass(frozen=True)
class AudioChunk:
    """A block of mono audio.

    Attributes:
        samples: (N,) float32 in [-1, 1].
        sample_rate: Hz.
        t_start_ns: process-clock time of the first sample (live) .
        media_time_s: media time of the first sample, seconds.
        problem: a whole file's track only: what is wrong with the file it was decoded from
            (corrupt or truncated: the samples are the part that decoded), "" when it decoded whole.
    """

    samples: np.ndarray
    sample_rate: int
    t_start_ns: int = 0
    media_time_s: float = 0.0
    problem: str = ""


@dataclass(frozen=True)
class Landmarks:
    """MediaPipe face-mesh landmarks of one face.

    Attributes:
        points: (478, 3) float32. x, y image-normalised in [0, 1] (x right, y down);
            z is MediaPipe's relative depth in the same scale as x.
        image_size: (width, height) in pixels of the image they were found in.
        t_ns: timestamp of the frame.
    """

    points: np.ndarray
    image_size: tuple[int, int]
    t_ns: int = 0

    def pixels(self) -> np.ndarray:
        """(478, 3) float32 with x, y, z multiplied by the image width/height (pixels)."""
        w, h = self.image_size
        return self.points * np.array([w, h, w], dtype=np.float32)


def neutral_weights() -> np.ndarray:
    """(52,) float32 zeros: the neutral expression."""
    return np.zeros(NUM_BLENDSHAPES, dtype=np.float32)


@dataclass(frozen=True)
class FaceParams:
    """Output of a FaceReconstructor for one frame.

    Attributes:
        blendshapes: (52,) float32 in [0, 1], ARKit order.
        rotation: (3, 3) float32 head rotation in camera space (right-handed, -Z forward).
        translation: (3,) float32 head position in metres, camera space.
        gaze: (2,) float32 (yaw, pitch) of the eyes relative to the head, radians;
            positive yaw = toward the subject's left, positive pitch = up.
        identity: (K,) float32 face-shape coefficients (K may be 0).
    """

    blendshapes: np.ndarray
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3, dtype=np.float32))
    translation: np.ndarray = field(default_factory=lambda: np.array([0, 0, -0.6], np.float32))
    gaze: np.ndarray = field(default_factory=lambda: np.zeros(2, np.float32))
    identity: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


@dataclass(frozen=True)
class AvatarState:
    """Everything the renderer and the recorder need for one output frame.

    Attributes:
        t_capture_ns: capture time of the frame this state comes from.
        media_time_s: media time of that frame, seconds.
        weights: (52,) float32 final blendshape weights in [0, 1].
        rotation: (3, 3) float32 head rotation (camera space).
        translation: (3,) float32 metres.
        gaze: (2,) float32 radians (yaw, pitch) relative to the head.
        face_found: whether the tracker saw a face in this frame.
        vision_weights: (52,) float32 vision-only weights (before fusion).
        audio_weights: (52,) float32 audio-only weights.
        stamps: per-stage ``(start_ns, end_ns)`` of the frame.
        frame_index: index of the source frame.
    """

    t_capture_ns: int
    media_time_s: float
    weights: np.ndarray
    rotation: np.ndarray
    translation: np.ndarray
    gaze: np.ndarray
    face_found: bool = False
    vision_weights: np.ndarray = field(default_factory=neutral_weights)
    audio_weights: np.ndarray = field(default_factory=neutral_weights)
    stamps: dict[str, tuple[int, int]] = field(default_factory=dict)
    frame_index: int = 0

    @staticmethod
    def neutral(t_capture_ns: int = 0, media_time_s: float = 0.0) -> "AvatarState":
        """A neutral state: zero weights, identity rotation, head 0.6 m in front."""
        return AvatarState(
            t_capture_ns=t_capture_ns,
            media_time_s=media_time_s,
            weights=neutral_weights(),
            rotation=np.eye(3, dtype=np.float32),
            translation=np.array([0.0, 0.0, -0.6], np.float32),
            gaze=np.zeros(2, np.float32),
        )


_STATE_FIELDS = frozenset(AvatarState.__dataclass_fields__)


def state_with(state: AvatarState, **changes) -> AvatarState:
    """``dataclasses.replace(state, **changes)`` for the per-frame path, without its cost.

    The new state's fields are ``state``'s with ``changes`` put in (no copies: the same
    objects, as ``replace`` gives). AvatarState has no ``__post_init__`` and no
    ``init=False`` field, so the result equals ``replace``'s; ``replace`` goes through
    ``fields()`` and the generated ``__init__`` (~8 us on the 2-core test machine), this
    copies one ``__dict__`` (~1 us).

    Args:
        state: the AvatarState to start from (not changed).
        **changes: field name -> new value.

    Returns:
        A new AvatarState.

    Raises:
        TypeError: a name that is not an AvatarState field.
    """
    if not _STATE_FIELDS.issuperset(changes):
        raise TypeError(f"not AvatarState fields: {sorted(set(changes) - _STATE_FIELDS)}")
    new = object.__new__(AvatarState)
    d = new.__dict__
    d.update(state.__dict__)
    d.update(changes)
    return new


def make_state(t_capture_ns: int, media_time_s: float, weights: np.ndarray, rotation: np.ndarray,
               translation: np.ndarray, gaze: np.ndarray, face_found: bool, vision_weights: np.ndarray,
               audio_weights: np.ndarray, stamps: dict[str, tuple[int, int]], frame_index: int) -> AvatarState:
    """``AvatarState(...)`` with every field given, for the per-frame path (see :class:`AvatarState`).

    The frozen dataclass's generated ``__init__`` sets each of the 11 fields through
    ``object.__setattr__``; this fills the instance's ``__dict__`` at once (the same object:
    AvatarState has no ``__post_init__``). Arguments as the class's attributes (not copied).
    """
    new = object.__new__(AvatarState)
    new.__dict__.update(t_capture_ns=t_capture_ns, media_time_s=media_time_s, weights=weights, rotation=rotation,
                        translation=translation, gaze=gaze, face_found=face_found, vision_weights=vision_weights,
                        audio_weights=audio_weights, stamps=stamps, frame_index=frame_index)
    return new
