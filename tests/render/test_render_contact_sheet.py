"""Contact sheet: every shape visibly changes both heads, on the side its name says."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from avatar_app.render.contact_sheet import (
    face_model_avatar,
    make_contact_sheet,
    render_tiles,
    with_eye_turn_morphs,
)
from avatar_app.avatar.default_head import build_default_head
from avatar_app.avatar.face_model import load_face_model
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.core.errors import InputError

#: Shapes whose change sits on one side of the face (jaw/mouth Left and Right shift the whole
#: mouth, so their change straddles the middle).
SIDED = [n for n in BLENDSHAPE_NAMES if n.endswith(("Left", "Right"))
         and not n.startswith(("jawLeft", "jawRight", "mouthLeft", "mouthRight"))]


@pytest.fixture(scope="module")
def tiles():
    return render_tiles(128, msaa=0)


def _changed(tile: np.ndarray, neutral: np.ndarray) -> np.ndarray:
    return np.abs(tile.astype(np.int16) - neutral.astype(np.int16)).max(axis=2) > 8


def test_face_model_avatar_carries_the_rig_shapes():
    model = load_face_model()
    mesh = face_model_avatar(model)
    mesh.validate()
    prim = mesh.primitives[0]
    assert set(prim.morph_targets) == set(BLENDSHAPE_NAMES)
    k = BLENDSHAPE_NAMES.index("jawOpen")
    np.testing.assert_allclose(prim.morph_targets["jawOpen"][:468], model.blendshapes[k, :468], atol=1e-7)
    np.testing.assert_allclose(prim.positions[:468], model.neutral[:468], atol=1e-7)
    wide = np.zeros(model.num_identity)
    wide[model.identity_names.index("face_width")] = 1.0
    shifted = face_model_avatar(model, identity=wide).primitives[0].positions[:468]
    np.testing.assert_allclose(shifted, model.evaluate(np.zeros(52), wide)[:468], atol=1e-6)


def test_eye_turn_morphs_turn_each_eye_its_own_way():
    head = build_default_head()
    turned = with_eye_turn_morphs(head)
    eye_l = next(p for p in turned.primitives if p.name == "eye_L")
    eye_r = next(p for p in turned.primitives if p.name == "eye_R")
    front_l = np.argmax(eye_l.positions[:, 2])
    front_r = np.argmax(eye_r.positions[:, 2])
    assert eye_l.morph_targets["eyeLookInLeft"][front_l, 0] < -0.003  # toward the nose (-X)
    assert eye_l.morph_targets["eyeLookOutLeft"][front_l, 0] > 0.003
    assert eye_r.morph_targets["eyeLookInRight"][front_r, 0] > 0.003
    assert eye_l.morph_targets["eyeLookUpLeft"][front_l, 1] > 0.003
    assert eye_r.morph_targets["eyeLookDownRight"][front_r, 1] < -0.003
    assert not any(n.endswith("Right") for n in eye_l.morph_targets)
    assert "eyeLookInLeft" not in next(p for p in head.primitives if p.name == "eye_L").morph_targets
    turned.validate()
    with pytest.raises(InputError, match="no gaze joints"):
        with_eye_turn_morphs(face_model_avatar())


def test_face_model_avatar_turns_with_the_head():
    mesh = face_model_avatar()
    assert mesh.head_joint == "head" and np.all(mesh.primitives[0].weights[:, 0] == 1.0)


@pytest.mark.gl
@pytest.mark.parametrize("head", [0, 1], ids=["face_model", "avatar"])
def test_every_shape_visibly_changes_the_head(tiles, head):
    shapes, _ = tiles
    neutral = shapes["neutral"][head]
    for name in BLENDSHAPE_NAMES:
        n_changed = int(_changed(shapes[name][head], neutral).sum())
        assert n_changed >= 8, f"{name} does not visibly change the {['face model', 'avatar'][head]}"


@pytest.mark.gl
@pytest.mark.parametrize("head", [0, 1], ids=["face_model", "avatar"])
def test_sided_shapes_change_their_own_side(tiles, head):
    """The heads face the viewer: a Left shape changes the image's right half."""
    shapes, _ = tiles
    neutral = shapes["neutral"][head]
    centre = neutral.shape[1] / 2.0
    for name in SIDED:
        ys, xs = np.nonzero(_changed(shapes[name][head], neutral))
        mean_x = xs.mean()
        if name.endswith("Left"):
            assert mean_x > centre + 3, f"{name}: change centred at x={mean_x:.0f} of {2 * centre:.0f}"
        else:
            assert mean_x < centre - 3, f"{name}: change centred at x={mean_x:.0f} of {2 * centre:.0f}"


@pytest.mark.gl
def test_identity_morphs_change_the_face_model_both_ways(tiles):
    _, identity = tiles
    assert list(identity) == list(load_face_model().identity_names)
    for name, (minus, plus) in identity.items():
        assert _changed(minus, plus).sum() >= 16, name


@pytest.mark.gl
def test_make_contact_sheet_writes_one_labelled_png(tmp_path):
    path = make_contact_sheet(tmp_path / "sub" / "sheet.png", size=64, columns=6, msaa=0)
    img = cv2.imread(str(path))
    assert img is not None
    pad, label = 4, 16
    assert img.shape[1] == 6 * (2 * 64 + pad) + 7 * pad
    rows = -(-53 // 6) + -(-15 // 6)
    assert img.shape[0] == 2 * label + rows * (64 + label + pad) + label + 2 * pad
    with pytest.raises(InputError, match="tile size"):
        make_contact_sheet(tmp_path / "x.png", size=10)
    with pytest.raises(InputError, match="columns"):
        make_contact_sheet(tmp_path / "x.png", columns=0)
