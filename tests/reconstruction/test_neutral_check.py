"""Calibrate neutral face warns when the captured face is not at rest (new-user trial)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from avatar_app.evaluation.landmarks import track_video
from avatar_app.reconstruction.neutral_check import neutral_face_problems


def test_a_relaxed_face_passes_and_closed_eyes_or_a_turned_head_are_named(testdata):
    clip = track_video(testdata / "video" / "expressive" / "lp_d9.mp4")
    assert neutral_face_problems(clip.landmarks(0)) == []
    # 11.7 s into lp_d9: looking down, the eyes nearly shut (lid gap 8-14 % of the eye width)
    assert neutral_face_problems(clip.landmarks(292)) == ["your eyes look closed"]
    grid = track_video(testdata / "video" / "grid_s1_bbaf2n.mp4")
    gaps = [neutral_face_problems(grid.landmarks(i)) for i in range(len(grid))]
    assert ["your mouth looks open"] in gaps  # a word's open mouth
    assert gaps[0] == []


def test_a_face_turned_away_is_named(testdata):
    lm = track_video(testdata / "video" / "expressive" / "lp_d9.mp4").landmarks(0)
    p = np.asarray(lm.points, np.float64).copy()
    c = p[:, :2].mean(0)
    a = np.radians(35.0)  # a yaw: x shrinks towards the centre, depth grows across the face
    x, z = p[:, 0] - c[0], p[:, 2]
    p[:, 0] = c[0] + x * np.cos(a) - z * np.sin(a)
    p[:, 2] = x * np.sin(a) + z * np.cos(a)
    assert "you are not facing the camera" in neutral_face_problems(replace(lm, points=p.astype(np.float32)))
