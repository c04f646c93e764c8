"""The procedural default head: structure, sides, morph behaviour, rig (no OpenGL needed)."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.authoring import head_skin as geo
from avatar_app.avatar.default_head import build_default_head
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES



@pytest.fixture(scope="module")
def head():
    return build_default_head()


def _prim(mesh, name):
    return next(p for p in mesh.primitives if p.name == name)


def _signed_volume(prim) -> float:
    p = prim.positions.astype(np.float64)
    t = prim.indices.reshape(-1, 3)
    return float(np.einsum("ij,ij->i", p[t[:, 0]], np.cross(p[t[:, 1]], p[t[:, 2]])).sum() / 6.0)


def test_head_is_complete_and_valid(head):
    head.validate()
    names = {p.name for p in head.primitives}
    for part in ("skin", "hair", "eye_L", "eye_R", "brow_L", "brow_R", "ear_L", "ear_R",
                 "teeth_upper", "teeth_lower", "tongue", "mouth", "interior", "torso"):
        assert part in names
    assert head.target_names == BLENDSHAPE_NAMES  # all 52, in Apple's order
    assert head.gaze_joints == ("eye_L", "eye_R") and head.head_joint == "head"
    # resolution for 1080p within the budget that keeps software rendering real-time
    assert 20_000 <= head.num_vertices <= 30_000 and head.num_triangles < 60_000
    assert _prim(head, "skin").num_vertices >= 12_000


def test_every_arkit_target_is_driven_by_its_own_name(head):
    m = head.mapping_matrix()
    for j, name in enumerate(head.target_names):
        assert m[BLENDSHAPE_NAMES.index(name), j] == 1.0
        assert m[:, j].sum() == 1.0


def test_geometry_is_finite_with_unit_normals_and_weights(head):
    for p in head.primitives:
        assert np.all(np.isfinite(p.positions))
        assert np.allclose(np.linalg.norm(p.normals, axis=1), 1.0, atol=1e-4), p.name
        assert np.allclose(p.weights.sum(axis=1), 1.0, atol=1e-5), p.name
        for d in p.morph_targets.values():
            assert np.all(np.isfinite(d))


@pytest.mark.parametrize("name, outward", [("skin", True), ("eye_L", True), ("tongue", True),
                                           ("torso", True), ("mouth", False), ("interior", False)])
def test_closed_parts_face_the_right_way(head, name, outward):
    vol = _signed_volume(_prim(head, name))
    assert (vol > 0) == outward


def test_skin_is_mirror_symmetric(head):
    pos = _prim(head, "skin").positions.astype(np.float64)
    key = {tuple(k) for k in np.round(pos * 1e5).astype(np.int64)}
    mirrored = np.round(pos * [-1, 1, 1] * 1e5).astype(np.int64)
    missing = sum(tuple(k) not in key for k in mirrored)
    assert missing < 0.01 * len(pos)


@pytest.mark.parametrize("target, side", [("eyeBlinkLeft", 1), ("eyeBlinkRight", -1), ("mouthSmileLeft", 1),
                                          ("mouthSmileRight", -1), ("browDownLeft", 1), ("eyeWideRight", -1)])
def test_left_and_right_are_the_avatars_own_sides(head, target, side):
    """Avatar's left is +X (it faces +Z): a Left target moves +X vertices."""
    skin = _prim(head, "skin")
    d = np.linalg.norm(skin.morph_targets[target], axis=1)
    x = skin.positions[:, 0] * side
    assert d[x > 0.005].sum() > 20 * d[x < -0.005].sum()


def test_jaw_open_drops_the_chin_and_lower_teeth_only(head):
    skin = _prim(head, "skin")
    p, d = skin.positions, skin.morph_targets["jawOpen"]
    chin = np.argmin(np.where(p[:, 2] > 0.04, p[:, 1], np.inf))
    assert d[chin, 1] < -0.008  # chin goes down by centimetres
    forehead = (p[:, 1] > 0.03) & (p[:, 2] > 0.05)
    assert np.abs(d[forehead]).max() < 1e-6
    assert "jawOpen" in _prim(head, "teeth_lower").morph_targets
    assert "jawOpen" not in _prim(head, "teeth_upper").morph_targets


def test_mouth_close_cancels_most_of_jaw_open_at_the_lips(head):
    skin = _prim(head, "skin")
    p = skin.positions
    lower_lip = (np.abs(p[:, 0]) < 0.008) & (np.abs(p[:, 1] - geo.MOUTH_Y) < 0.006) & (p[:, 2] > 0.07)
    lower_lip &= skin.morph_targets["jawOpen"][:, 1] < -0.003
    both = skin.morph_targets["jawOpen"] + skin.morph_targets["mouthClose"]
    assert lower_lip.sum() > 5
    assert np.abs(both[lower_lip, 1]).mean() < 0.5 * np.abs(skin.morph_targets["jawOpen"][lower_lip, 1]).mean()


@pytest.mark.parametrize("side, target", [(1.0, "eyeBlinkLeft"), (-1.0, "eyeBlinkRight")])
def test_blinking_lids_stay_outside_the_eyeball(head, side, target):
    """Lid surface vertices stay outside the eyeball at every blink weight (no poke-through).

    Morphs blend linearly, so a lid edge sweeping over the eyeball cuts a chord; the lid
    shell's gap must cover that sag. (Lid folds, tucked under the eyeball on purpose, lie
    closer than 0.8 x LID_GAP and are left out.)
    """
    skin = _prim(head, "skin")
    centre = geo.EYE_C * [side, 1, 1]
    p = skin.positions.astype(np.float64)
    r0 = np.linalg.norm(p - centre, axis=1)
    near = (r0 < geo.EYE_R + 0.004) & (r0 >= geo.EYE_R + 0.8 * geo.LID_GAP)
    assert near.sum() > 50
    d = skin.morph_targets[target].astype(np.float64)
    for w in (0.25, 0.5, 0.75, 1.0):
        r = np.linalg.norm(p[near] + w * d[near] - centre, axis=1)
        assert r.min() > geo.EYE_R + 0.0001, f"lid enters the eyeball at weight {w}"


def test_blink_closes_the_lid_gap(head):
    """At full blink the upper and lower lid edges meet: the opening above the eye centre is covered."""
    skin = _prim(head, "skin")
    p = skin.positions.astype(np.float64)
    closed = p + skin.morph_targets["eyeBlinkLeft"]
    centre = geo.EYE_C
    def covering(q):
        rel = q - centre
        front = rel[:, 2] > 0.8 * geo.EYE_R
        return np.count_nonzero(front & (np.hypot(rel[:, 0], rel[:, 1]) < 0.004))
    assert covering(p) == 0
    assert covering(closed) >= 3


def test_rig_pivots(head):
    skel = head.skeleton
    head_pos = skel.joint_position(skel.index("head"))
    neck_pos = skel.joint_position(skel.index("neck"))
    assert head_pos[1] < geo.MOUTH_Y and neck_pos[1] < head_pos[1]  # head pivots at the neck
    eye = skel.joint_position(skel.index("eye_L"))
    assert np.allclose(eye, geo.EYE_C)
    skin = _prim(head, "skin")
    low = skin.positions[:, 1] < geo.NECK_BASE[1] - 0.01
    assert np.all(skin.weights[low, 0] < 1e-6)  # neck base does not follow the head
    face = (skin.positions[:, 2] > 0.06) & (skin.positions[:, 1] > -0.05)
    assert np.allclose(skin.weights[face, 0], 1.0)
    assert skin.joints[0, 0] == skel.index("head")


def test_cached_copies_are_independent(head):
    a, b = build_default_head(), build_default_head()
    assert a is not b
    a.primitives[0].positions[:] = 0.0  # a caller editing its copy ...
    assert np.abs(build_default_head().primitives[0].positions).max() > 0.05  # ... leaves the cache alone
