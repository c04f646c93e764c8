"""Stability of a face path on a still face: the jitter MediaPipe's landmarks carry into the output."""
from __future__ import annotations

import numpy as np


def still_jitter_sd(reconstructor, image: np.ndarray, tracker, copies: int = 200, seed: int = 0) -> np.ndarray:
    """Per-blendshape standard deviation over re-encoded copies of one still.

    Each copy is shifted by up to 1 px (sub-pixel, uniform) and JPEG-encoded at quality
    85-95; the path is calibrated on the original and reads every copy.

    Args:
        reconstructor: a FaceReconstructor.
        image: (H, W, 3) uint8 BGR still with one face.
        tracker: an IMAGE-mode FaceTracker.
        copies: number of re-encoded copies.
        seed: random seed of the shifts and qualities.

    Returns:
        (52,) float64 standard deviations of the raw output.

    Raises:
        NoFaceError: MediaPipe finds no face in the still or in a copy.
    """
    import cv2

    from avatar_app.core.errors import NoFaceError

    base = tracker.process_image(image)
    if base is None:
        raise NoFaceError("no face in the still")
    reconstructor.reset()
    reconstructor.calibrate_neutral(base)
    rng = np.random.default_rng(seed)
    h, w = image.shape[:2]
    outs = []
    for i in range(copies):
        dx, dy = rng.uniform(-1, 1, 2)
        shifted = cv2.warpAffine(image, np.float32([[1, 0, dx], [0, 1, dy]]), (w, h),
                                 borderMode=cv2.BORDER_REPLICATE)
        _, enc = cv2.imencode(".jpg", shifted, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(85, 96))])
        lm = tracker.process_image(cv2.imdecode(enc, cv2.IMREAD_COLOR))
        if lm is None:
            raise NoFaceError(f"no face in re-encoded copy {i}")
        outs.append(reconstructor.reconstruct(lm, 1.0 + i).blendshapes)
    return np.std(np.array(outs, np.float64), axis=0)
