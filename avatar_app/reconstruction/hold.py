"""NoFaceHold: what the avatar does when the tracker loses the face.

A small state machine on timestamps: while the face is tracked its parameters
pass through; when it is lost the last parameters are held for ``hold_s``
(a blink of occlusion, a hand in front of the face, a dropped detection),
then eased to the neutral face over ``ease_s`` with a smoothstep curve
(``3a^2 - 2a^3``: zero slope at both ends, so there is no visible jerk), then
the neutral face is kept until the face returns. The head stays where it was
last seen (translation is held); rotation eases to facing the camera along
the shortest arc.
"""
from __future__ import annotations

import enum
import math

import numpy as np

from avatar_app.core.blendshapes import NUM_BLENDSHAPES
from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.rotations import axis_angle_fraction
from avatar_app.core.types import FaceParams


class HoldState(enum.Enum):
    """Where NoFaceHold is."""

    TRACKING = "tracking"  # the face is visible; parameters pass through
    HOLDING = "holding"  # lost for less than hold_s: the last parameters
    EASING = "easing"  # between hold_s and hold_s + ease_s: blending to neutral
    NEUTRAL = "neutral"  # lost for longer (or never seen): the neutral face


def smoothstep(a: float) -> float:
    """``3a^2 - 2a^3`` for ``a`` clipped to [0, 1]."""
    a = min(1.0, max(0.0, a))
    return a * a * (3.0 - 2.0 * a)


class NoFaceHold:
    """Hold, then ease to neutral, when the face is lost.

    Args:
        hold_s: seconds the last parameters are held after the last face.
        ease_s: seconds of the ease to neutral that follows.

    Raises:
        InputError: negative durations.
    """

    def __init__(self, hold_s: float = 0.3, ease_s: float = 0.5) -> None:
        if hold_s < 0 or ease_s < 0 or not (math.isfinite(hold_s) and math.isfinite(ease_s)):
            raise InputError(f"hold_s and ease_s must be finite and >= 0, got {hold_s}, {ease_s}")
        self.hold_s = float(hold_s)
        self.ease_s = float(ease_s)
        self.reset()

    def reset(self) -> None:
        """Forget the last face; the next lost frame gives the neutral face."""
        self._last: FaceParams | None = None
        self._t_last_face_s: float | None = None
        self._t_s: float | None = None
        self._state = HoldState.NEUTRAL

    @property
    def state(self) -> HoldState:
        """The state after the last update."""
        return self._state

    def update(self, params: FaceParams | None, t_s: float) -> FaceParams:
        """Parameters to show for one frame.

        Args:
            params: this frame's FaceParams, or None when no face was found.
            t_s: the frame's time in seconds (non-decreasing).

        Returns:
            ``params`` when given; otherwise the held, easing or neutral FaceParams.

        Raises:
            InputError: ``t_s`` is not finite.
            TrackingError: ``t_s`` went backwards.
        """
        t = float(t_s)
        if not math.isfinite(t):
            raise InputError(f"time must be finite, got {t_s}")
        if self._t_s is not None and t < self._t_s:
            raise TrackingError(f"time went backwards: {t} s after {self._t_s} s")
        self._t_s = t
        if params is not None:
            self._last = params
            self._t_last_face_s = t
            self._state = HoldState.TRACKING
            return params
        if self._last is None:
            self._state = HoldState.NEUTRAL
            return FaceParams(blendshapes=np.zeros(NUM_BLENDSHAPES, np.float32))
        lost_for = t - self._t_last_face_s
        if lost_for < self.hold_s:
            self._state = HoldState.HOLDING
            return self._last
        a = 1.0 if self.ease_s == 0 else smoothstep((lost_for - self.hold_s) / self.ease_s)
        self._state = HoldState.NEUTRAL if a >= 1.0 else HoldState.EASING
        last = self._last
        keep = 1.0 - a
        return FaceParams(
            blendshapes=(np.asarray(last.blendshapes, np.float32) * keep).astype(np.float32),
            rotation=axis_angle_fraction(last.rotation, keep).astype(np.float32),
            translation=np.asarray(last.translation, np.float32).copy(),
            gaze=(np.asarray(last.gaze, np.float32) * keep).astype(np.float32),
            identity=np.asarray(last.identity, np.float32).copy(),
        )
