"""Comparison (b): render the default head with a face path's output and track the render with MediaPipe.

The avatar a viewer sees is the default head (:mod:`avatar_app.avatar.default_head`),
not the face model, so this measures the whole chain (transfer of the shapes
to the head, skinning, rendering) through the same tracker and the same
geometry (:mod:`avatar_app.evaluation.geometry`) as the input face. The head is
rendered frontal-lit at a fixed distance with the output's rotation and gaze.
"""
from __future__ import annotations

import numpy as np

from avatar_app.evaluation import geometry as G

#: Render size (square, pixels): the default head's face spans ~150 px, like a webcam face.
RENDER_SIZE = 384


def retracked_features(output, times: np.ndarray, frames: np.ndarray | None = None, size: int = RENDER_SIZE,
                       renderer=None) -> np.ndarray:
    """Geometry of the rendered default head, tracked by MediaPipe, for the chosen frames.

    Args:
        output: a :class:`~avatar_app.evaluation.fidelity.PathOutput`.
        times: (F,) frame times, seconds (increasing).
        frames: indices to render (default: every frame with an output).
        size: render width = height, pixels.
        renderer: a HeadlessRenderer to reuse (default: a new one, closed after).

    Returns:
        (F, len(FEATURES)) float64, NaN for frames not rendered or where MediaPipe
        found no face on the render.
    """
    import cv2

    from avatar_app.core.types import AvatarState
    from avatar_app.reconstruction import normalise as N
    from avatar_app.render.headless import HeadlessRenderer
    from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

    n = len(times)
    out = np.full((n, len(G.FEATURES)), np.nan)
    idx = np.flatnonzero(output.found) if frames is None else np.asarray(frames, np.intp)
    own = renderer is None
    renderer = renderer or HeadlessRenderer(size, size)
    pts, ok = [], []
    try:
        with FaceTracker(RunningMode.VIDEO) as tracker:
            for k, i in enumerate(idx):
                st = AvatarState(t_capture_ns=0, media_time_s=float(times[i]),
                                 weights=np.asarray(output.weights[i], np.float32),
                                 rotation=np.asarray(output.rotation[i], np.float32),
                                 translation=np.array([0.0, 0.0, -0.6], np.float32),
                                 gaze=np.zeros(2, np.float32) if output.gaze is None
                                 else np.asarray(output.gaze[i], np.float32))
                bgr = cv2.cvtColor(renderer.render(st), cv2.COLOR_RGB2BGR)
                lm = tracker.process_video_frame(bgr, 1000.0 * (k + 1) / 30.0)
                ok.append(lm is not None)
                pts.append(lm.points if lm is not None else np.zeros((478, 3), np.float32))
    finally:
        if own:
            renderer.close()
    ok = np.array(ok, bool)
    if ok.any():
        sel = idx[ok]
        head, rot, _ = N.align(np.array(pts)[ok], (renderer.width, renderer.height))
        out[sel] = G.face_features(head, rot)
    return out
