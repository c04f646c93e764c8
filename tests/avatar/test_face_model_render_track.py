"""Render-and-track sanity check: MediaPipe finds the rendered rig and sees a blink."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.face_model import load_face_model
from avatar_app.avatar.face_model_measure import eye_aperture
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES

pytestmark = pytest.mark.gl


def test_rendered_rig_is_tracked_and_blink_is_seen():
    import mediapipe as mp

    from training.render_track import FaceRenderer

    model = load_face_model()
    renderer = FaceRenderer((640, 480), 600.0)
    t = np.array([0.0, 0.0, -0.45])
    tracked = {}
    try:
        with mp.solutions.face_mesh.FaceMesh(static_image_mode=True, refine_landmarks=True,
                                             max_num_faces=1) as mesh:
            for name in ("neutral", "eyeBlinkLeft"):
                w = np.zeros(52, np.float32)
                if name != "neutral":
                    w[BLENDSHAPE_NAMES.index(name)] = 1.0
                img = renderer.render(model, model.evaluate(w), np.eye(3), t)
                res = mesh.process(img)
                assert res.multi_face_landmarks, f"{name}: no face tracked"
                lm = res.multi_face_landmarks[0].landmark
                tracked[name] = np.array([[q.x * 640, q.y * 480, 0.0] for q in lm])
    finally:
        renderer.close()
    left0, left1 = eye_aperture(tracked["neutral"], "left"), eye_aperture(tracked["eyeBlinkLeft"], "left")
    right0, right1 = eye_aperture(tracked["neutral"], "right"), eye_aperture(tracked["eyeBlinkLeft"], "right")
    assert left1 < 0.5 * left0 and abs(right1 - right0) < 0.2 * right0, (left0, left1, right0, right1)
