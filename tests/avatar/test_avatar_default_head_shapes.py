"""What each of the default head's 52 morph targets means, measured at the face model's landmarks.

The landmarks are the transfer's own correspondence (``rig_landmark_vertices``):
the skin vertex that stands for MediaPipe landmark N. Left/Right are the avatar's
own sides (+X is its left). Millimetres; the rig's motions (docs/face_model.md)
arrive scaled by about 0.99.
"""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.authoring.default_head import rig_landmark_vertices
from avatar_app.avatar.default_head import build_default_head
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, mirror_index

LANDMARKS = (386, 374, 387, 373, 385, 380, 159, 145, 160, 144, 158, 153, 152, 13, 14, 0, 17, 61, 291,
             405, 181, 402, 178, 311, 81, 300, 336, 70, 107, 427, 207, 348, 119, 358, 129)


class Face:
    """Skin positions (mm) at landmarks, neutral or with one or more shapes applied."""

    def __init__(self, mesh):
        self.mesh = mesh
        self.skin = next(p for p in mesh.primitives if p.name == "skin")
        self.v = dict(zip(LANDMARKS, rig_landmark_vertices(LANDMARKS)))

    def prim(self, name):
        return next(p for p in self.mesh.primitives if p.name == name)

    def at(self, lm, *shapes):
        v = self.v[lm]
        p = self.skin.positions[v].astype(np.float64)
        for s in shapes:
            p = p + self.skin.morph_targets[s][v]
        return p * 1e3

    def d(self, shape, lm):
        return self.at(lm, shape) - self.at(lm)

    def moved(self, shape, lm):
        return float(np.linalg.norm(self.d(shape, lm)))

    def aperture(self, side, *shapes):
        pairs = ((386, 374), (387, 373), (385, 380)) if side == "L" else ((159, 145), (160, 144), (158, 153))
        return float(np.mean([self.at(a, *shapes)[1] - self.at(b, *shapes)[1] for a, b in pairs]))

    def gap(self, *shapes):
        return float(np.linalg.norm(self.at(13, *shapes) - self.at(14, *shapes)))

    def width(self, *shapes):
        return float(self.at(291, *shapes)[0] - self.at(61, *shapes)[0])

    def prim_dy(self, prim, shape):
        t = self.prim(prim).morph_targets.get(shape)
        return 0.0 if t is None else float(t[:, 1].mean() * 1e3)


@pytest.fixture(scope="module")
def face():
    return Face(build_default_head())


# One row per shape: (shape, check(face) -> bool, what it means). The Right rows mirror the Left ones.
TABLE = [
    ("eyeBlinkLeft", lambda f: f.aperture("L", "eyeBlinkLeft") < 0.15 * f.aperture("L")
     and abs(f.aperture("R", "eyeBlinkLeft") - f.aperture("R")) < 0.02 * f.aperture("R"),
     "left lids close (aperture < 15 %), right eye unchanged"),
    ("eyeLookDownLeft", lambda f: f.d("eyeLookDownLeft", 386)[1] < -2.0 and f.moved("eyeLookDownLeft", 159) < 0.1,
     "left upper lid follows the gaze down"),
    ("eyeLookInLeft", lambda f: 0.05 < max(np.abs(f.skin.morph_targets["eyeLookInLeft"]).max() * 1e3, 0) < 2.0,
     "small lid follow only: the gaze joint turns the eye"),
    ("eyeLookOutLeft", lambda f: 0.05 < np.abs(f.skin.morph_targets["eyeLookOutLeft"]).max() * 1e3 < 2.0,
     "small lid follow only: the gaze joint turns the eye"),
    ("eyeLookUpLeft",
     lambda f: f.d("eyeLookUpLeft", 386)[1] > 1.0 and f.aperture("L", "eyeLookUpLeft") > f.aperture("L"),
     "left upper lid lifts with the gaze"),
    ("eyeSquintLeft", lambda f: 0.4 < f.aperture("L", "eyeSquintLeft") / f.aperture("L") < 0.85
     and f.d("eyeSquintLeft", 374)[1] > 2.0,
     "left lower lid rises, aperture 40-85 %"),
    ("eyeWideLeft",
     lambda f: f.aperture("L", "eyeWideLeft") > 1.15 * f.aperture("L") and f.d("eyeWideLeft", 386)[1] > 2.0,
     "left upper lid up, aperture > 115 %"),
    ("jawForward", lambda f: f.d("jawForward", 152)[2] > 5.0 and f.moved("jawForward", 0) < 0.5
     and f.prim_dy("teeth_lower", "jawForward") < 0.0,
     "chin forward, upper lip still"),
    ("jawLeft", lambda f: f.d("jawLeft", 152)[0] > 5.0 and f.moved("jawLeft", 0) < 0.5,
     "chin to the avatar's left (+X)"),
    ("jawOpen", lambda f: f.d("jawOpen", 152)[1] < -15.0 and f.gap("jawOpen") > 15.0 and f.moved("jawOpen", 0) < 1.0
     and f.prim_dy("teeth_lower", "jawOpen") < -15.0 and "jawOpen" not in f.prim("teeth_upper").morph_targets,
     "jaw drops: chin and lower teeth down, lips part, upper lip still"),
    ("mouthClose", lambda f: f.gap("jawOpen", "mouthClose") < 0.15 * f.gap("jawOpen")
     and f.d("mouthClose", 152)[1] > -1.0,
     "with jawOpen the lips meet; the chin stays"),
    ("mouthFunnel", lambda f: f.width("mouthFunnel") < f.width() - 4.0 and f.gap("mouthFunnel") > 2.0
     and f.d("mouthFunnel", 0)[2] > 2.0 and f.d("mouthFunnel", 17)[2] > 2.0,
     "lips forward and parted, mouth narrower"),
    ("mouthPucker", lambda f: f.width("mouthPucker") < f.width() - 8.0 and f.gap("mouthPucker") < 1.5
     and f.d("mouthPucker", 0)[2] > 2.0,
     "closed lips forward, mouth much narrower"),
    ("mouthLeft", lambda f: all(f.d("mouthLeft", lm)[0] > 4.0 for lm in (0, 13, 14, 17)),
     "both lips to the avatar's left (+X)"),
    ("mouthSmileLeft", lambda f: f.d("mouthSmileLeft", 291)[1] > 4.0 and f.d("mouthSmileLeft", 291)[0] > 2.0
     and f.moved("mouthSmileLeft", 61) < 0.5,
     "left corner up and out"),
    ("mouthFrownLeft", lambda f: f.d("mouthFrownLeft", 291)[1] < -3.0 and f.moved("mouthFrownLeft", 61) < 0.5,
     "left corner down"),
    ("mouthDimpleLeft", lambda f: f.d("mouthDimpleLeft", 291)[2] < -2.0 and f.d("mouthDimpleLeft", 291)[0] > 0.5
     and f.moved("mouthDimpleLeft", 61) < 0.5,
     "left corner back and out"),
    ("mouthStretchLeft", lambda f: f.d("mouthStretchLeft", 291)[0] > 3.0 and f.d("mouthStretchLeft", 291)[1] < -1.5
     and f.moved("mouthStretchLeft", 61) < 0.5,
     "left corner out and down"),
    ("mouthRollLower", lambda f: np.linalg.norm(f.at(14, "mouthRollLower") - f.at(17, "mouthRollLower"))
     < 0.85 * np.linalg.norm(f.at(14) - f.at(17)) and f.d("mouthRollLower", 17)[2] < -2.0
     and f.moved("mouthRollLower", 0) < 0.3,
     "lower lip rolls in"),
    ("mouthRollUpper", lambda f: np.linalg.norm(f.at(13, "mouthRollUpper") - f.at(0, "mouthRollUpper"))
     < 0.85 * np.linalg.norm(f.at(13) - f.at(0)) and f.d("mouthRollUpper", 0)[2] < -2.0
     and f.moved("mouthRollUpper", 17) < 0.3,
     "upper lip rolls in"),
    ("mouthShrugLower", lambda f: f.d("mouthShrugLower", 17)[1] > 1.0 and f.d("mouthShrugLower", 17)[2] > 1.0,
     "lower lip up and out"),
    ("mouthShrugUpper", lambda f: f.d("mouthShrugUpper", 0)[1] > 1.0 and f.d("mouthShrugUpper", 0)[2] > 1.0
     and f.moved("mouthShrugUpper", 17) < 0.5,
     "upper lip up and out"),
    ("mouthPressLeft", lambda f: f.d("mouthPressLeft", 405)[1] > 1.0 and f.moved("mouthPressLeft", 181) < 0.3,
     "left lower lip pressed up"),
    ("mouthLowerDownLeft",
     lambda f: f.d("mouthLowerDownLeft", 402)[1] < -3.0 and f.moved("mouthLowerDownLeft", 178) < 0.5
     and f.moved("mouthLowerDownLeft", 311) < 0.3,
     "left half of the lower lip down"),
    ("mouthUpperUpLeft", lambda f: f.d("mouthUpperUpLeft", 311)[1] > 2.5 and f.moved("mouthUpperUpLeft", 81) < 0.5
     and f.moved("mouthUpperUpLeft", 402) < 0.3,
     "left half of the upper lip up"),
    ("browDownLeft", lambda f: f.d("browDownLeft", 300)[1] < -3.0 and f.d("browDownLeft", 336)[1] < -2.0
     and f.moved("browDownLeft", 70) < 0.3 and f.prim_dy("brow_L", "browDownLeft") < -2.5
     and abs(f.prim_dy("brow_R", "browDownLeft")) < 0.1,
     "left brow (and its hair) down"),
    ("browInnerUp", lambda f: f.d("browInnerUp", 336)[1] > 5.0 and f.d("browInnerUp", 107)[1] > 5.0
     and f.d("browInnerUp", 300)[1] < 2.0 and f.prim_dy("brow_L", "browInnerUp") > 1.5,
     "inner brow ends up"),
    ("browOuterUpLeft", lambda f: f.d("browOuterUpLeft", 300)[1] > 4.0 and f.d("browOuterUpLeft", 336)[1] < 1.5
     and f.moved("browOuterUpLeft", 70) < 0.3,
     "outer left brow up"),
    ("cheekPuff", lambda f: f.d("cheekPuff", 427)[0] > 1.5 and f.d("cheekPuff", 207)[0] < -1.5
     and f.d("cheekPuff", 427)[2] > 1.0,
     "both cheeks out"),
    ("cheekSquintLeft", lambda f: f.d("cheekSquintLeft", 348)[1] > 1.5 and f.moved("cheekSquintLeft", 119) < 0.3,
     "left cheek up"),
    ("noseSneerLeft", lambda f: f.d("noseSneerLeft", 358)[1] > 1.5 and f.moved("noseSneerLeft", 129) < 0.5,
     "left nose wing up"),
    ("tongueOut", lambda f: _tongue_reach(f) > 8.0 and f.prim_dy("teeth_lower", "tongueOut") < 0.0,
     "the tongue tip leaves the mouth, ahead of the lips"),
]


def _tongue_reach(f: Face) -> float:
    """How far (mm) the tongue tip ends in front of the lower lip."""
    t = f.prim("tongue")
    tip = (t.positions + t.morph_targets["tongueOut"])[:, 2].max() * 1e3
    return float(tip - f.at(17, "tongueOut")[2])


def _mirror_name(name: str) -> str:
    return BLENDSHAPE_NAMES[mirror_index()[BLENDSHAPE_NAMES.index(name)]]


def _mirror_check(check):
    """The same check on the mirrored face: swap sides of landmarks, shapes and x."""
    from avatar_app.avatar.face_model import load_face_model

    mirror = load_face_model().mirror

    class Mirrored(Face):
        def __init__(self, f):
            self.__dict__.update(f.__dict__)

        def at(self, lm, *shapes):
            return Face.at(self, int(mirror[lm]), *[_mirror_name(s) for s in shapes]) * [-1, 1, 1]

        def aperture(self, side, *shapes):
            return Face.aperture(self, "R" if side == "L" else "L", *[_mirror_name(s) for s in shapes])

        def width(self, *shapes):
            return Face.width(self, *[_mirror_name(s) for s in shapes])

        def prim_dy(self, prim, shape):
            swap = {"brow_L": "brow_R", "brow_R": "brow_L"}
            return Face.prim_dy(self, swap.get(prim, prim), _mirror_name(shape))

    return lambda f: check(Mirrored(f))


def _rows():
    rows = []
    for name, check, meaning in TABLE:
        rows.append((name, check, meaning))
        twin = _mirror_name(name)
        if twin != name:
            rows.append((twin, _mirror_check(check), meaning.replace("left", "right").replace("+X", "-X")))
    return rows


ROWS = _rows()


def test_table_covers_all_52_shapes():
    assert sorted(r[0] for r in ROWS) == sorted(BLENDSHAPE_NAMES)


@pytest.mark.parametrize("name, check, meaning", ROWS, ids=[r[0] for r in ROWS])
def test_shape_means_what_its_name_says(face, name, check, meaning):
    assert check(face), f"{name}: expected {meaning}"


def _skin_twin(skin) -> np.ndarray:
    """Mirror partner of every skin vertex (the skin is a grid whose first row is one pole)."""
    p = skin.positions
    cols = int(np.count_nonzero(np.linalg.norm(p - p[0], axis=1) < 1e-7))
    idx = np.arange(len(p))
    twin = idx // cols * cols + (cols - idx % cols) % cols
    np.testing.assert_allclose(p[twin] * [-1, 1, 1], p, atol=1e-6)  # a true mirror map
    return twin


@pytest.mark.parametrize("name", [n for n in BLENDSHAPE_NAMES if n.endswith("Left")])
def test_left_shapes_act_on_the_avatars_left_and_right_ones_mirror_them(face, name):
    skin = face.skin
    x = skin.positions[:, 0]
    d = np.linalg.norm(skin.morph_targets[name], axis=1)
    if not name.startswith(("jaw", "mouthLeft")):  # those move the whole jaw / mouth sideways
        assert d[x > 0.004].sum() > 10 * d[x < -0.004].sum()
    twin = _skin_twin(skin)
    right = skin.morph_targets[name[:-4] + "Right"]
    np.testing.assert_allclose(right[twin] * [-1, 1, 1], skin.morph_targets[name], atol=1e-7)


@pytest.mark.parametrize("name", [n for n in BLENDSHAPE_NAMES if not n.endswith(("Left", "Right"))])
def test_unsided_shapes_are_symmetric(face, name):
    d = face.skin.morph_targets[name]
    np.testing.assert_allclose(d[_skin_twin(face.skin)] * [-1, 1, 1], d, atol=1e-7)


def test_every_target_moves_visibly_and_sanely(face):
    for p in face.mesh.primitives:
        for name, d in p.morph_targets.items():
            assert np.abs(d).max() < 0.045, f"{p.name}/{name} moves more than 45 mm"
    for name in BLENDSHAPE_NAMES:
        moved = max(np.abs(p.morph_targets[name]).max() for p in face.mesh.primitives if name in p.morph_targets)
        assert moved > 0.3e-3, f"{name} moves nothing visible"
