"""Fusion of vision and audio mouth weights (issue 6, item 6)."""
from __future__ import annotations

import numpy as np

from avatar_app.core.blendshapes import Blendshape as B
from avatar_app.core.types import FaceParams
from avatar_app.fusion import AUDIO_TRUST, Fusion, FusionSettings, fuse_mouth


def _w(**kw) -> np.ndarray:
    w = np.zeros(52, np.float32)
    for k, v in kw.items():
        w[B[k]] = v
    return w


def _speech_audio() -> np.ndarray:
    return _w(jawOpen=0.4, mouthPucker=0.6, mouthFunnel=0.3, mouthClose=0.1)


def test_mix_zero_is_vision_only():
    v = _w(jawOpen=0.3, mouthSmileLeft=0.5, eyeBlinkLeft=1.0)
    out = fuse_mouth(v, _speech_audio(), True, FusionSettings(audio_mix=0.0))
    np.testing.assert_array_equal(out, v)


def test_audio_refines_per_blendshape_with_the_mix():
    v = _w(jawOpen=0.3, mouthSmileLeft=0.5, mouthLeft=0.2)
    a = _speech_audio()
    half = fuse_mouth(v, a, True, FusionSettings(audio_mix=0.5))
    full = fuse_mouth(v, a, True, FusionSettings(audio_mix=1.0))
    i = B.mouthPucker
    assert abs(full[i] - a[i]) < abs(half[i] - a[i]) < abs(v[i] - a[i])
    # how far the lips are apart is vision's while the mouth is in view (issue 17 item 4)
    for name in ("jawOpen", "mouthFunnel", "mouthClose"):
        assert full[B[name]] == v[B[name]], name
    # audio knows nothing about sideways motion: vision keeps it
    assert full[B.mouthLeft] == v[B.mouthLeft]
    assert AUDIO_TRUST[B.mouthLeft] == 0 and AUDIO_TRUST[B.mouthClose] == 1
    assert not AUDIO_TRUST[: B.jawForward].any()  # eyes untouched
    assert full[B.eyeBlinkLeft] == v[B.eyeBlinkLeft]


def test_silent_audio_does_not_close_an_open_mouth():
    v = _w(jawOpen=0.5, mouthFunnel=0.2)
    out = fuse_mouth(v, np.zeros(52, np.float32), True, FusionSettings(audio_mix=1.0))
    np.testing.assert_array_equal(out, v)


def test_mouth_seen_closed_suppresses_other_voices():
    v = _w(jawOpen=0.01)
    out = fuse_mouth(v, _speech_audio(), True, FusionSettings(audio_mix=1.0))
    np.testing.assert_array_equal(out, v)
    v_open = _w(jawOpen=0.3)
    out = fuse_mouth(v_open, _speech_audio(), True, FusionSettings(audio_mix=1.0))
    assert out[B.mouthPucker] > 0.3


def test_face_lost_or_mouth_covered_audio_drives_alone():
    v = _w(jawOpen=0.02, mouthSmileLeft=0.4, eyeBlinkRight=0.7)
    a = _speech_audio()
    for found, covered in ((False, False), (True, True)):
        out = fuse_mouth(v, a, found, FusionSettings(audio_mix=0.2, mouth_covered=covered))
        assert out[B.jawOpen] == a[B.jawOpen] and out[B.mouthPucker] == a[B.mouthPucker]
        assert out[B.mouthSmileLeft] == 0.0  # the whole mouth follows audio
        assert out[B.eyeBlinkRight] == v[B.eyeBlinkRight]


def test_fusion_class_keeps_its_api():
    f = Fusion(FusionSettings(smoothing=False, audio_mix=1.0))
    vis = FaceParams(blendshapes=_w(jawOpen=0.3), rotation=np.eye(3, dtype=np.float32),
                     translation=np.array([0, 0, -0.5], np.float32), gaze=np.zeros(2, np.float32),
                     identity=np.zeros(0, np.float32))
    w, r, t = f.fuse(vis, _speech_audio(), True, 0.0)
    assert w.shape == (52,) and r.shape == (3, 3) and t.shape == (3,)
    assert w[B.mouthPucker] > 0.3
