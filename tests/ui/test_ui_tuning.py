"""The post-processing chain (fusion.tuning, fusion.expressions) and the settings model, without Qt."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from avatar_app.core.blendshapes import Blendshape
from avatar_app.core.errors import InputError
from avatar_app.core.types import AvatarState
from avatar_app.fusion.tuning import (
    AvatarTuner,
    ExpressionLayer,
    TuningSettings,
    format_mix,
    parse_mix,
)

DT_NS = 33_333_333


def _yaw(r):
    return math.atan2(r[0, 2], r[2, 2])


def _rot(yaw=0.0, roll=0.0):
    from avatar_app.core.rotations import rotation_from_euler

    return rotation_from_euler(yaw, 0.1, roll).astype(np.float32)


def _states(n, t0=1, **kw):
    base = AvatarState.neutral()
    for i in range(n):
        yield replace(base, t_capture_ns=int(t0 * 1e9) + i * DT_NS, media_time_s=t0 + i * DT_NS / 1e9, **kw)


def _no_smoothing(**kw) -> TuningSettings:
    s = TuningSettings(**kw)
    s.smoothing = {r: 0.0 for r in s.smoothing}
    return s


def test_remap_and_sensitivity():
    s = _no_smoothing(mirror=False)
    s.sensitivity[Blendshape.jawOpen] = 2.0
    s.remap_min[Blendshape.mouthSmileLeft], s.remap_max[Blendshape.mouthSmileLeft] = 0.2, 0.6
    w = np.zeros(52, np.float32)
    w[Blendshape.jawOpen], w[Blendshape.mouthSmileLeft], w[Blendshape.browInnerUp] = 0.3, 0.4, 0.7
    out = AvatarTuner.remap(w, s)
    assert out[Blendshape.jawOpen] == pytest.approx(0.6)
    assert out[Blendshape.mouthSmileLeft] == pytest.approx(0.5)
    assert out[Blendshape.browInnerUp] == pytest.approx(0.7)
    w[Blendshape.mouthSmileLeft] = 0.1
    assert AvatarTuner.remap(w, s)[Blendshape.mouthSmileLeft] == 0.0


def test_link_eyes_takes_the_mean():
    w = np.zeros(52, np.float32)
    w[Blendshape.eyeBlinkLeft], w[Blendshape.eyeBlinkRight] = 1.0, 0.2
    out = AvatarTuner.link_eyes(w)
    assert out[Blendshape.eyeBlinkLeft] == out[Blendshape.eyeBlinkRight] == pytest.approx(0.6)


def test_mirror_swaps_sides_and_negates_yaw_roll_but_not_pitch():
    w = np.zeros(52, np.float32)
    w[Blendshape.mouthSmileLeft], w[Blendshape.eyeBlinkRight], w[Blendshape.jawOpen] = 0.8, 0.5, 0.3
    st = replace(AvatarState.neutral(), weights=w, rotation=_rot(0.3, 0.1),
                 translation=np.array([0.05, 0.01, -0.6], np.float32), gaze=np.array([0.2, 0.1], np.float32))
    m = AvatarTuner.mirror(st)
    assert m.weights[Blendshape.mouthSmileRight] == pytest.approx(0.8) and m.weights[Blendshape.mouthSmileLeft] == 0
    assert m.weights[Blendshape.eyeBlinkLeft] == pytest.approx(0.5)
    assert m.weights[Blendshape.jawOpen] == pytest.approx(0.3)
    assert _yaw(m.rotation) == pytest.approx(-0.3, abs=1e-5)
    assert np.allclose(m.rotation, _rot(-0.3, -0.1), atol=1e-5)  # yaw and roll negated, pitch kept
    assert m.translation[0] == pytest.approx(-0.05)
    assert m.gaze[0] == pytest.approx(-0.2) and m.gaze[1] == pytest.approx(0.1)
    assert np.allclose(AvatarTuner.mirror(m).rotation, st.rotation, atol=1e-6)


def test_smoothing_reduces_jitter_per_region():
    rng = np.random.default_rng(0)
    s = _no_smoothing(mirror=False)
    s.smoothing["mouth"] = 0.8
    tuner = AvatarTuner(s)
    raw, out_mouth, out_brow = [], [], []
    for st in _states(120, face_found=True):
        w = np.zeros(52, np.float32)
        w[Blendshape.jawOpen] = w[Blendshape.browInnerUp] = 0.5 + 0.2 * rng.standard_normal()
        o = tuner(replace(st, weights=np.clip(w, 0, 1)))
        raw.append(w[Blendshape.jawOpen])
        out_mouth.append(o.weights[Blendshape.jawOpen])
        out_brow.append(o.weights[Blendshape.browInnerUp])
    assert np.std(out_mouth[20:]) < 0.5 * np.std(raw[20:])
    assert np.std(out_brow[20:]) == pytest.approx(np.std(np.clip(raw, 0, 1)[20:]), rel=0.05)  # brows unsmoothed


def test_auto_blink_and_idle_motion_only_while_face_lost():
    s = _no_smoothing(mirror=False)
    tuner = AvatarTuner(s)
    found = [tuner(st) for st in _states(60, face_found=True)]
    assert max(o.weights[Blendshape.eyeBlinkLeft] for o in found) == 0
    assert all(abs(_yaw(o.rotation)) < 1e-6 for o in found)
    lost = [tuner(st) for st in _states(300, t0=3, face_found=False)]  # 10 s without a face
    blinks = np.array([o.weights[Blendshape.eyeBlinkLeft] for o in lost])
    assert blinks.max() == pytest.approx(1.0, abs=0.2) and (np.diff((blinks > 0.5).astype(int)) == 1).sum() >= 2
    yaws = np.array([_yaw(o.rotation) for o in lost])
    assert 0.01 < np.ptp(yaws) < 0.25
    s.auto_blink = s.idle_motion = False
    tuner.set_settings(s)
    off = [tuner(st) for st in _states(120, t0=20, face_found=False)]
    assert max(o.weights[Blendshape.eyeBlinkLeft] for o in off) == 0
    assert np.ptp([_yaw(o.rotation) for o in off[40:]]) < 1e-6


def test_expressions_fade_in_and_out_over_tracking():
    layer = ExpressionLayer(attack_s=0.1, release_s=0.2)
    w = np.zeros(52, np.float32)
    w[Blendshape.eyeBlinkLeft] = 0.7
    layer.set_active("happy", True)
    out = [layer.apply(w, 1.0 + i * 0.02) for i in range(10)]
    assert out[0][Blendshape.mouthSmileLeft] == 0.0
    assert out[-1][Blendshape.mouthSmileLeft] == pytest.approx(0.9)
    assert out[-1][Blendshape.eyeBlinkLeft] == pytest.approx(0.7)  # tracking goes on underneath
    layer.set_active("happy", False)
    fading = [layer.apply(w, 1.2 + i * 0.02) for i in range(1, 15)]
    assert 0 < fading[3][Blendshape.mouthSmileLeft] < 0.9 and fading[-1][Blendshape.mouthSmileLeft] == 0
    assert layer.amounts() == {}


def test_custom_mix_parsing():
    assert parse_mix("jawOpen=0.6, TONGUEOUT=1") == {"jawOpen": 0.6, "tongueOut": 1.0}
    assert parse_mix(format_mix({"jawOpen": 0.25})) == {"jawOpen": 0.25}
    with pytest.raises(InputError, match="not an ARKit blendshape"):
        parse_mix("jawOpn=1")
    with pytest.raises(InputError, match="between 0 and 1"):
        parse_mix("jawOpen=2")
    with pytest.raises(InputError, match="name=weight"):
        parse_mix("jawOpen")


def test_invalid_tuning_settings_are_refused():
    s = TuningSettings()
    s.remap_min[Blendshape.jawOpen] = 0.9
    s.remap_max[Blendshape.jawOpen] = 0.5
    with pytest.raises(InputError, match="remap max must exceed min.*jawOpen"):
        AvatarTuner(s)
    with pytest.raises(InputError, match="smoothing of eyes"):
        TuningSettings(smoothing={"eyes": 3.0}).validate()


def test_settings_json_round_trip_and_damaged_values(qapp, tmp_path):
    from PySide6.QtCore import QSettings

    from avatar_app.pipeline import settings as store

    qs = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    t = TuningSettings(link_eyes=True, mirror=False)
    t.smoothing["head"] = 0.9
    t.sensitivity[Blendshape.jawOpen] = 1.5
    t.remap_min[Blendshape.eyeBlinkLeft], t.remap_max[Blendshape.eyeBlinkLeft] = 0.1, 0.8
    store.save_tuning(qs, t)
    back = store.load_tuning(qs)
    assert back.link_eyes and not back.mirror and back.smoothing["head"] == 0.9
    assert np.allclose(back.sensitivity, t.sensitivity) and np.allclose(back.remap_max, t.remap_max)
    a = store.AvatarSettings(background=[10, 20, 30], lighting="soft", msaa=4)
    store.save_area(qs, a)
    assert store.load_area(qs, store.AvatarSettings) == a
    # damaged values fall back to defaults field by field, never stop the app
    qs.setValue("studio/AvatarSettings", json.dumps({"schema": 1, "background": [999, 0], "lighting": "disco",
                                                     "msaa": 4}))
    a2 = store.load_area(qs, store.AvatarSettings)
    assert a2.background == [0, 177, 64] and a2.lighting == "studio" and a2.msaa == 4
    qs.setValue("studio/OutputSettings", "{not json")
    assert store.load_area(qs, store.OutputSettings) == store.OutputSettings()
    qs.setValue("studio/TuningSettings", json.dumps({"sensitivity": {"jawOpen": -3, "nope": 1}, "mirror": "yes"}))
    t2 = store.load_tuning(qs)
    assert t2.sensitivity[Blendshape.jawOpen] == 1.0 and t2.mirror is True
