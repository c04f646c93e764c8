"""The FaceReconstructor protocol: landmarks in, face parameters out."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from avatar_app.core.types import FaceParams, Landmarks


@runtime_checkable
class FaceReconstructor(Protocol):
    """Turns one face's landmarks per frame into FaceParams.

    Implementations keep per-user state (the neutral face and the running
    normalisation), so frames must arrive in time order and one instance
    serves one user. Offline and live use call the same methods with media
    time or process-clock seconds respectively.

    Thread: one instance per processing thread.
    """

    def reset(self) -> None:
        """Forget the user: the neutral face, the running calibration and filters."""
        ...

    def calibrate_neutral(self, landmarks: Landmarks) -> None:
        """Take these landmarks as the user's neutral face (relaxed, eyes open,
        mouth closed, looking at the screen); the head pose is measured from it.

        Args:
            landmarks: one face, (478, 3) points.

        Raises:
            InputError: the landmarks are invalid.
        """
        ...

    def reconstruct(self, landmarks: Landmarks, t_s: float) -> FaceParams:
        """Face parameters of one frame.

        Args:
            landmarks: the tracked face, (478, 3) image-normalised points.
            t_s: the frame's time in seconds (media time offline, process clock
                live); must increase from call to call.

        Returns:
            FaceParams: blendshapes (52,) float32 in [0, 1] in ARKit order,
            rotation (3, 3), translation (3,) metres, gaze (yaw, pitch) radians,
            identity (K,).

        Raises:
            InputError: the landmarks are invalid.
            TrackingError: ``t_s`` does not increase.
        """
        ...
