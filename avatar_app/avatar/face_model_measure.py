"""Measurements on face-model landmarks (metres): eye apertures, lip gap, mouth width, ...

They work on one face (478, 3) or a batch (..., 478, 3) in the model frame
(or any frame with the same scale), so tests, the docs and training code share
one definition of each measurement.
"""
from __future__ import annotations

import numpy as np

from avatar_app.core import landmarks as lmk


def _pair_distance(points: np.ndarray, a, b) -> np.ndarray:
    p = np.asarray(points, np.float64)
    return np.linalg.norm(p[..., list(a), :] - p[..., list(b), :], axis=-1).mean(-1)


def eye_aperture(points: np.ndarray, side: str) -> np.ndarray:
    """Mean upper-to-lower eyelid distance over five lid pairs of one eye.

    Args:
        points: (..., 478, 3) positions.
        side: "left" or "right", the subject's own.

    Returns:
        (...) float64 metres.

    Raises:
        ValueError: ``side`` is neither.
    """
    if side == "left":
        return _pair_distance(points, lmk.LEFT_EYE_UPPER, lmk.LEFT_EYE_LOWER)
    if side == "right":
        return _pair_distance(points, lmk.RIGHT_EYE_UPPER, lmk.RIGHT_EYE_LOWER)
    raise ValueError(f"side must be 'left' or 'right', got {side!r}")


def lip_gap(points: np.ndarray) -> np.ndarray:
    """Mean distance between the inner upper and lower lip near the centre (13-14, 82-87, 312-317).

    Args:
        points: (..., 478, 3).

    Returns:
        (...) float64 metres.
    """
    return _pair_distance(points, lmk.LIP_GAP_UPPER, lmk.LIP_GAP_LOWER)


def mouth_width(points: np.ndarray) -> np.ndarray:
    """Corner-to-corner distance (landmarks 61 and 291), metres, shape (...)."""
    return _pair_distance(points, (61,), (291,))


def face_width(points: np.ndarray) -> np.ndarray:
    """Distance between the rim landmarks in front of the ears (234 and 454), metres."""
    return _pair_distance(points, (234,), (454,))


def interpupillary_distance(points: np.ndarray) -> np.ndarray:
    """Distance between the iris centres (468 and 473), metres."""
    return _pair_distance(points, (468,), (473,))
