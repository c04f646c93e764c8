"""The 52 ARKit blendshapes in Apple's documentation order.

Source: Apple Developer Documentation, ``ARFaceAnchor.BlendShapeLocation``
(grouped as the page lists them: left eye, right eye, jaw, mouth, brows,
cheeks, nose, tongue). Left/Right are the subject's own sides.
"""
from __future__ import annotations

import enum

BLENDSHAPE_NAMES: tuple[str, ...] = (
    "eyeBlinkLeft", "eyeLookDownLeft", "eyeLookInLeft", "eyeLookOutLeft", "eyeLookUpLeft",
    "eyeSquintLeft", "eyeWideLeft",
    "eyeBlinkRight", "eyeLookDownRight", "eyeLookInRight", "eyeLookOutRight", "eyeLookUpRight",
    "eyeSquintRight", "eyeWideRight",
    "jawForward", "jawLeft", "jawRight", "jawOpen",
    "mouthClose", "mouthFunnel", "mouthPucker", "mouthLeft", "mouthRight",
    "mouthSmileLeft", "mouthSmileRight", "mouthFrownLeft", "mouthFrownRight",
    "mouthDimpleLeft", "mouthDimpleRight", "mouthStretchLeft", "mouthStretchRight",
    "mouthRollLower", "mouthRollUpper", "mouthShrugLower", "mouthShrugUpper",
    "mouthPressLeft", "mouthPressRight", "mouthLowerDownLeft", "mouthLowerDownRight",
    "mouthUpperUpLeft", "mouthUpperUpRight",
    "browDownLeft", "browDownRight", "browInnerUp", "browOuterUpLeft", "browOuterUpRight",
    "cheekPuff", "cheekSquintLeft", "cheekSquintRight",
    "noseSneerLeft", "noseSneerRight",
    "tongueOut",
)
NUM_BLENDSHAPES = len(BLENDSHAPE_NAMES)
assert NUM_BLENDSHAPES == 52

Blendshape = enum.IntEnum("Blendshape", {n: i for i, n in enumerate(BLENDSHAPE_NAMES)})
Blendshape.__doc__ = "Index of each ARKit blendshape in weight vectors of shape (52,)."

#: Blendshapes that speech may drive (mouth, jaw, cheeks, tongue).
MOUTH_BLENDSHAPES: tuple[str, ...] = tuple(
    n for n in BLENDSHAPE_NAMES if n.startswith(("jaw", "mouth", "cheek", "tongue"))
)


def mirror_index() -> list[int]:
    """Index map that swaps every Left/Right pair (a horizontal mirror).

    Returns:
        list of 52 ints: ``w_mirrored = w[mirror_index()]``. Also swaps
        eyeLookIn/Out sides, jawLeft/Right and mouthLeft/Right.
    """
    idx = []
    for n in BLENDSHAPE_NAMES:
        if n.endswith("Left"):
            m = n[:-4] + "Right"
        elif n.endswith("Right"):
            m = n[:-5] + "Left"
        else:
            m = n
        idx.append(BLENDSHAPE_NAMES.index(m))
    return idx
