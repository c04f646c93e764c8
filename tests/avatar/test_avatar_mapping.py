"""Blendshape name mapping: ARKit spellings, VRM presets driven from ARKit, the unmapped warning."""
from __future__ import annotations

import pytest

from avatar_app.avatar.mapping import (PRESET_FROM_ARKIT, VRM_PRESETS, ExpressionInfo, TargetInfo, build_mapping,
                                       match_arkit, match_preset)
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES


@pytest.mark.parametrize("name, expected", [
    ("jawOpen", "jawOpen"),
    ("JAWOPEN", "jawOpen"),
    ("blendShape1.eyeBlinkLeft", "eyeBlinkLeft"),
    ("blendShape2.eyeBlink_R", "eyeBlinkRight"),
    ("A25_mouthSmileLeft", "mouthSmileLeft"),
    ("ARKit_noseSneerRight", "noseSneerRight"),
    ("Face|mouthPucker", "mouthPucker"),
    ("Head_jawOpen", "jawOpen"),
    ("mouth_smile_left", "mouthSmileLeft"),
    ("EyeBlink.L", "eyeBlinkLeft"),
    ("eyeLookIn_R", "eyeLookInRight"),
    ("EyeWideLeft", "eyeWideLeft"),   # Perfect Sync capitalisation
    ("TongueOut", "tongueOut"),
])
def test_arkit_spellings(name, expected):
    assert match_arkit(name) == [(expected, 1.0)]


@pytest.mark.parametrize("name", ["browInnerUp_L", "BrowInnerUp_R", "cheekPuff_Left", "cheekPuff.R"])
def test_halves_of_two_sided_shapes_follow_the_whole(name):
    arkit = match_arkit(name)
    assert len(arkit) == 1 and arkit[0][0] in ("browInnerUp", "cheekPuff")


@pytest.mark.parametrize("name", ["Body", "head", "eye_L", "Left", "Fcl_MTH_A", "mouth", "", None, "smile"])
def test_non_arkit_names(name):
    assert match_arkit(name) == []


@pytest.mark.parametrize("name, preset", [
    ("aa", "aa"), ("A", "aa"), ("Joy", "happy"), ("Sorrow", "sad"), ("fun", "relaxed"),
    ("Blink_L", "blinkLeft"), ("BLINKRIGHT", "blinkRight"), ("Fcl_EYE_Close_R", "blinkRight"),
    ("Fcl_MTH_O", "oh"), ("vrc.v_ih", "ih"), ("LookUp", "lookUp"), ("surprised", "surprised"),
])
def test_preset_spellings(name, preset):
    assert match_preset(name) == preset


def test_preset_table_uses_real_names():
    for preset, row in PRESET_FROM_ARKIT.items():
        assert preset in VRM_PRESETS
        assert set(row) <= set(BLENDSHAPE_NAMES)
        assert any(f > 0 for f in row.values())


def _targets(*names):
    return [TargetInfo(n or f"mesh0.target{i}", n, f"mesh 0 target {i}") for i, n in enumerate(names)]


def test_direct_arkit_targets_and_missing_listed():
    res = build_mapping(_targets("eyeBlinkLeft", "blendShape1.jawOpen", "Extra"))
    assert res.blendshape_map["eyeBlinkLeft"] == {"eyeBlinkLeft": 1.0}
    assert res.blendshape_map["jawOpen"] == {"blendShape1.jawOpen": 1.0}
    assert "tongueOut" in res.missing and "jawOpen" not in res.missing
    assert len(res.missing) == 50
    assert res.unmapped_targets == ["Extra"]
    msg = res.warning("'x.glb'")
    assert "Extra" in msg and "tongueOut" in msg and "2 of 52" in msg


def test_everything_mapped_gives_no_warning():
    res = build_mapping(_targets(*BLENDSHAPE_NAMES))
    assert res.missing == [] and res.unmapped_targets == []
    assert res.warning("'x'") is None


def test_unnamed_targets_are_never_bound():
    res = build_mapping(_targets(None, None))
    assert res.blendshape_map == {}
    assert res.unnamed_targets == ["mesh 0 target 0", "mesh 0 target 1"]
    msg = res.warning("'t.gltf'")
    assert "no name" in msg and "none of the 52" in msg


def test_presets_driven_from_arkit_when_arkit_shapes_are_missing():
    exprs = [ExpressionInfo("aa", "aa", {"Fcl_MTH_A": 1.0}),
             ExpressionInfo("blinkLeft", "blinkLeft", {"Fcl_EYE_Close_L": 1.0}),
             ExpressionInfo("happy", "happy", {"Fcl_ALL_Joy": 0.8})]
    res = build_mapping(_targets("Fcl_MTH_A", "Fcl_EYE_Close_L", "Fcl_ALL_Joy"), exprs)
    m = res.blendshape_map
    assert m["jawOpen"] == {"Fcl_MTH_A": 1.0}
    assert m["mouthFunnel"] == {"Fcl_MTH_A": -0.5}  # "oh" must not open "aa" as well
    assert m["eyeBlinkLeft"] == {"Fcl_EYE_Close_L": 1.0}
    assert m["mouthSmileLeft"] == {"Fcl_ALL_Joy": pytest.approx(0.4)}
    assert set(res.presets) == {"aa", "blinkLeft", "happy"}
    assert res.unmapped_targets == []


def test_presets_not_driven_when_the_arkit_shape_exists():
    exprs = [ExpressionInfo("blinkLeft", "blinkLeft", {"Fcl_EYE_Close_L": 1.0})]
    res = build_mapping(_targets("eyeBlinkLeft", "Fcl_EYE_Close_L"), exprs)
    assert res.blendshape_map["eyeBlinkLeft"] == {"eyeBlinkLeft": 1.0}  # never both
    assert "blinkLeft" not in res.presets
    assert res.unused_expressions == ["blinkLeft"]
    assert "Fcl_EYE_Close_L" in res.unmapped_targets


def test_blink_left_right_take_precedence_over_blink():
    exprs = [ExpressionInfo("blink", "blink", {"both": 1.0}), ExpressionInfo("blinkLeft", "blinkLeft", {"l": 1.0}),
             ExpressionInfo("blinkRight", "blinkRight", {"r": 1.0})]
    res = build_mapping(_targets("both", "l", "r"), exprs)
    assert res.blendshape_map["eyeBlinkLeft"] == {"l": 1.0}
    assert res.blendshape_map["eyeBlinkRight"] == {"r": 1.0}
    assert "blink" not in res.presets


def test_look_presets_left_to_eye_bones():
    exprs = [ExpressionInfo("lookLeft", "lookLeft", {"L": 1.0})]
    assert "lookLeft" in build_mapping(_targets("L"), exprs).presets
    assert "lookLeft" not in build_mapping(_targets("L"), exprs, gaze_by_bones=True).presets


def test_perfect_sync_expressions_preferred_over_raw_targets():
    exprs = [ExpressionInfo("EyeBlinkLeft", None, {"Face.eyeBlinkLeft": 1.0, "Lash.eyeBlinkLeft": 1.0})]
    res = build_mapping(_targets("Face.eyeBlinkLeft", "Lash.eyeBlinkLeft"), exprs)
    assert res.blendshape_map["eyeBlinkLeft"] == {"Face.eyeBlinkLeft": 1.0, "Lash.eyeBlinkLeft": 1.0}
    assert res.direct["eyeBlinkLeft"] == ["expression 'EyeBlinkLeft'"]


def test_empty_expressions_reported():
    res = build_mapping([], [ExpressionInfo("aa", "aa", {}), ExpressionInfo("happy", "happy", {})])
    assert res.empty_expressions == ["aa", "happy"]
    assert "bind no morph target" in res.warning("'r.vrm'")
