"""Whether a face is fit to be the neutral face of "Calibrate neutral face" (Ctrl+N).

The calibration takes whatever face is in view; a neutral captured with the eyes shut, the mouth
open or the head turned makes every later frame read wrongly (new-user trial: captured while
looking down with the eyes nearly closed, the avatar then showed mouthPucker +0.62 and browOuterUp
+0.39 on the same frames). The capture still happens (the user may mean it); these are the words
of a warning beside it.
"""
from __future__ import annotations

import math

import numpy as np

from avatar_app.core.rotations import euler_from_rotation
from avatar_app.core.types import Landmarks

#: An open eye is at least this wide (lid gap / eye width): the London neutral photos read
#: 0.25 +- 0.03 (docs/identity_neutral.md), so 0.17 is about 2.7 sd below.
EYE_OPEN_MIN = 0.17
#: Lips further apart than this (metres, inner-lip gap) are talking or open, not at rest.
LIPS_APART_MAX_M = 0.005
#: A head turned further than this from the camera (yaw or pitch, degrees) hides half of the face.
FACING_MAX_DEG = 20.0


def neutral_face_problems(landmarks: Landmarks) -> list[str]:
    """What makes ``landmarks`` a poor neutral face, in words ("your eyes look closed"); [] when none.

    Args:
        landmarks: one face (478 MediaPipe landmarks and the image size).

    Returns:
        Phrases in the order eyes, mouth, head pose.

    Raises:
        InputError: invalid landmarks (:func:`~avatar_app.reconstruction.normalise.align`).
    """
    from avatar_app.reconstruction import normalise as N
    from avatar_app.reconstruction.geometric import Feature, measure_features

    head, rotation, _ = N.align(np.asarray(landmarks.points), landmarks.image_size)
    f = measure_features(head[0].astype(np.float64))
    out = []
    if min(f[Feature.EYE_APERTURE_R], f[Feature.EYE_APERTURE_L]) < EYE_OPEN_MIN:
        out.append("your eyes look closed")
    if f[Feature.LIP_GAP] > LIPS_APART_MAX_M:
        out.append("your mouth looks open")
    yaw, pitch, _ = (math.degrees(a) for a in euler_from_rotation(rotation[0]))
    if max(abs(yaw), abs(pitch)) > FACING_MAX_DEG:
        out.append("you are not facing the camera")
    return out
