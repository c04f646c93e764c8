"""NoFaceHold: hold ~300 ms, then ease to neutral over ~0.5 s; the no-face video path."""
from __future__ import annotations

import math

import av
import cv2
import numpy as np
import pytest

from avatar_app.core.blendshapes import NUM_BLENDSHAPES
from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.rotations import rotation_from_euler
from avatar_app.core.types import FaceParams
from avatar_app.reconstruction import GeometricSolver, HoldState, NoFaceHold
from avatar_app.reconstruction.hold import smoothstep
from avatar_app.tracking import FaceTracker, RunningMode


def rotation_angle(r: np.ndarray) -> float:
    return float(np.linalg.norm(cv2.Rodrigues(np.asarray(r, np.float64))[0]))


def face(weight: float = 0.8, yaw: float = 0.4) -> FaceParams:
    return FaceParams(
        blendshapes=np.full(NUM_BLENDSHAPES, weight, np.float32),
        rotation=rotation_from_euler(yaw, 0.0, 0.0).astype(np.float32),
        translation=np.array([0.1, 0.0, -0.5], np.float32),
        gaze=np.array([0.2, -0.1], np.float32),
    )


def test_state_machine_hold_ease_neutral_and_back():
    hold = NoFaceHold(hold_s=0.3, ease_s=0.5)
    assert hold.state is HoldState.NEUTRAL
    last = face()
    assert hold.update(last, 1.0) is last and hold.state is HoldState.TRACKING
    # Held for 300 ms after the last face.
    for t in (1.01, 1.15, 1.29):
        assert hold.update(None, t) is last and hold.state is HoldState.HOLDING
    quarter = hold.update(None, 1.3 + 0.125)
    assert hold.state is HoldState.EASING
    assert 0.4 < quarter.blendshapes[0] < 0.8  # on its way, not yet half way
    assert quarter.blendshapes[0] == pytest.approx(0.8 * (1 - smoothstep(0.25)))
    # Half way at 1.3 + 0.25 s (smoothstep(0.5) = 0.5).
    mid = hold.update(None, 1.55)
    assert hold.state is HoldState.EASING
    np.testing.assert_allclose(mid.blendshapes, 0.4, atol=1e-6)
    np.testing.assert_allclose(mid.gaze, [0.1, -0.05], atol=1e-6)
    assert rotation_angle(mid.rotation) == pytest.approx(0.2, abs=1e-5)
    np.testing.assert_array_equal(mid.translation, last.translation)  # the head stays put
    # Neutral from 1.8 s on.
    end = hold.update(None, 1.8)
    assert hold.state is HoldState.NEUTRAL
    assert np.all(end.blendshapes == 0) and np.all(end.gaze == 0)
    np.testing.assert_allclose(end.rotation, np.eye(3), atol=1e-6)
    assert hold.update(None, 5.0).blendshapes.max() == 0
    # The face returns: straight through.
    back = face(0.3)
    assert hold.update(back, 5.1) is back and hold.state is HoldState.TRACKING


def test_ease_is_smooth():
    hold = NoFaceHold(hold_s=0.3, ease_s=0.5)
    hold.update(face(1.0), 0.0)
    ts = np.arange(0.3, 0.81, 0.01)
    ws = np.array([hold.update(None, t).blendshapes[0] for t in ts])
    steps = -np.diff(ws)
    assert np.all(steps >= -1e-7)  # monotone
    assert steps.max() < 0.035  # no jump: max slope 1.5 / 0.5 s over 10 ms = 0.03
    assert steps[0] < 0.002 and steps[-1] < 0.002  # eases in and out


def test_never_seen_face_is_neutral_and_contract_errors():
    hold = NoFaceHold()
    p = hold.update(None, 0.0)
    assert p.blendshapes.shape == (52,) and p.blendshapes.max() == 0
    with pytest.raises(TrackingError, match="backwards"):
        hold.update(None, -1.0)
    with pytest.raises(InputError):
        hold.update(None, math.nan)
    with pytest.raises(InputError):
        NoFaceHold(hold_s=-0.1)
    hold.reset()
    hold.update(None, -1.0)  # time restarts after reset


def test_no_face_video_returns_none_and_eases_to_neutral(testdata):
    """A face for 0.4 s, then plain and noise frames: the tracker returns None and the
    solver path through NoFaceHold holds, then reaches neutral by 0.8 s."""
    rng = np.random.default_rng(0)
    frames = []
    with av.open(str(testdata / "video" / "grid_s1_bbaf2n.mp4")) as c:
        for i, fr in enumerate(c.decode(video=0)):
            if i >= 10:
                break
            frames.append(fr.to_ndarray(format="bgr24"))
    h, w = frames[0].shape[:2]
    for i in range(30):
        if i % 2:
            frames.append(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8))
        else:
            frames.append(np.full((h, w, 3), (30, 200, 60), np.uint8))
    solver, hold = GeometricSolver(), NoFaceHold(hold_s=0.3, ease_s=0.5)
    out, states, found = [], [], []
    with FaceTracker(RunningMode.VIDEO) as tracker:
        for i, img in enumerate(frames):
            t = i / 25.0
            lm = tracker.process_video_frame(img, t * 1e3)
            found.append(lm is not None)
            params = None if lm is None else solver.reconstruct(lm, t)
            out.append(hold.update(params, t))
            states.append(hold.state)
    assert all(found[:10]) and not any(found[10:])
    last_face = out[9]
    t_last = 9 / 25.0
    for i in range(10, 40):
        dt = i / 25.0 - t_last
        if dt < 0.3:
            assert states[i] is HoldState.HOLDING and out[i] is last_face
        elif dt >= 0.8 - 1e-9:
            assert states[i] is HoldState.NEUTRAL
            assert out[i].blendshapes.max() == 0
            np.testing.assert_allclose(out[i].rotation, np.eye(3), atol=1e-6)
        else:
            assert states[i] is HoldState.EASING
    # Blendshape energy decreases monotonically through the ease.
    energy = [float(o.blendshapes.sum()) for o in out[10:]]
    assert all(b <= a + 1e-6 for a, b in zip(energy, energy[1:]))
