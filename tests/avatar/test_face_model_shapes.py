"""What each of the 52 blendshapes means on the face model, measured at landmarks.

One row per shape (the table in docs/face_model.md): the expected landmark
motion at weight 1, one assertion each. "Left"/"Right" are the subject's own
sides; model +x is the subject's left. Distances in millimetres.
"""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar import face_model_measure as ms
from avatar_app.avatar.face_model import load_face_model
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, mirror_index

MM = 1000.0

# Landmarks per side: (subject's left, subject's right).
SIDES = {
    "Left": dict(eye="left", other_eye="right", sx=1.0, iris=473, other_iris=468,
                 corner=291, other_corner=61, upper_lid=386, lower_lid=374,
                 brow_outer=300, brow_inner=336, other_brow=(70, 107),
                 lower_lip=402, other_lower_lip=178, lower_outer=405, other_lower_outer=181,
                 upper_lip=311, other_upper_lip=81, wing=358, other_wing=129, cheek=348),
    "Right": dict(eye="right", other_eye="left", sx=-1.0, iris=468, other_iris=473,
                  corner=61, other_corner=291, upper_lid=159, lower_lid=145,
                  brow_outer=70, brow_inner=107, other_brow=(300, 336),
                  lower_lip=178, other_lower_lip=402, lower_outer=181, other_lower_outer=405,
                  upper_lip=81, other_upper_lip=311, wing=129, other_wing=358, cheek=119),
}


@pytest.fixture(scope="module")
def model():
    return load_face_model()


class Pose:
    """Neutral and posed landmarks of one shape (mm), with helpers."""

    def __init__(self, model, name: str, base: dict[str, float] | None = None):
        w0 = np.zeros(52, np.float32)
        for k, v in (base or {}).items():
            w0[BLENDSHAPE_NAMES.index(k)] = v
        w1 = w0.copy()
        w1[BLENDSHAPE_NAMES.index(name)] += 1.0
        self.n = model.evaluate(w0).astype(np.float64) * MM
        self.p = model.evaluate(w1).astype(np.float64) * MM
        self.d = self.p - self.n

    def move(self, i: int) -> float:
        return float(np.linalg.norm(self.d[i]))


def _eye(side):
    s = SIDES[side]

    def blink(m):
        q = Pose(m, f"eyeBlink{side}")
        a0, a1 = ms.eye_aperture(q.n, s["eye"]), ms.eye_aperture(q.p, s["eye"])
        b0, b1 = ms.eye_aperture(q.n, s["other_eye"]), ms.eye_aperture(q.p, s["other_eye"])
        assert a1 < 0.2 * a0 and abs(b1 - b0) < 0.05 * b0, (a0, a1, b0, b1)

    def look_down(m):
        q = Pose(m, f"eyeLookDown{side}")
        assert q.d[s["iris"], 1] < -2.0 and q.move(s["other_iris"]) < 0.05, q.d[s["iris"]]

    def look_up(m):
        q = Pose(m, f"eyeLookUp{side}")
        assert q.d[s["iris"], 1] > 2.0 and q.move(s["other_iris"]) < 0.05, q.d[s["iris"]]

    def look_in(m):  # toward the nose: -x for the left eye, +x for the right
        q = Pose(m, f"eyeLookIn{side}")
        assert s["sx"] * q.d[s["iris"], 0] < -2.0 and q.move(s["other_iris"]) < 0.05, q.d[s["iris"]]

    def look_out(m):
        q = Pose(m, f"eyeLookOut{side}")
        assert s["sx"] * q.d[s["iris"], 0] > 2.0 and q.move(s["other_iris"]) < 0.05, q.d[s["iris"]]

    def squint(m):
        q = Pose(m, f"eyeSquint{side}")
        a0, a1 = ms.eye_aperture(q.n, s["eye"]), ms.eye_aperture(q.p, s["eye"])
        b0, b1 = ms.eye_aperture(q.n, s["other_eye"]), ms.eye_aperture(q.p, s["other_eye"])
        assert q.d[s["lower_lid"], 1] > 1.5 and 0.4 * a0 < a1 < 0.85 * a0 \
            and abs(b1 - b0) < 0.02 * b0, (q.d[s["lower_lid"]], a0, a1, b0, b1)

    def wide(m):
        q = Pose(m, f"eyeWide{side}")
        a0, a1 = ms.eye_aperture(q.n, s["eye"]), ms.eye_aperture(q.p, s["eye"])
        assert q.d[s["upper_lid"], 1] > 1.5 and a1 > 1.2 * a0, (q.d[s["upper_lid"]], a0, a1)

    return {f"eyeBlink{side}": blink, f"eyeLookDown{side}": look_down, f"eyeLookIn{side}": look_in,
            f"eyeLookOut{side}": look_out, f"eyeLookUp{side}": look_up,
            f"eyeSquint{side}": squint, f"eyeWide{side}": wide}


def _mouth_sided(side):
    s = SIDES[side]
    c, oc, sx = s["corner"], s["other_corner"], s["sx"]

    def smile(m):
        q = Pose(m, f"mouthSmile{side}")
        assert q.d[c, 1] > 5.0 and sx * q.d[c, 0] > 3.0 and q.move(oc) < 0.5, q.d[[c, oc]]

    def frown(m):
        q = Pose(m, f"mouthFrown{side}")
        assert q.d[c, 1] < -4.0 and q.move(oc) < 0.5, q.d[[c, oc]]

    def dimple(m):  # corner pulled back
        q = Pose(m, f"mouthDimple{side}")
        assert q.d[c, 2] < -3.0 and sx * q.d[c, 0] > 1.0 and q.move(oc) < 0.5, q.d[[c, oc]]

    def stretch(m):  # corner pulled out and down
        q = Pose(m, f"mouthStretch{side}")
        assert sx * q.d[c, 0] > 4.0 and q.d[c, 1] < -2.5 and q.move(oc) < 0.5, q.d[[c, oc]]

    def press(m):  # lower lip pressed up on that side, vermilion thinner
        q = Pose(m, f"mouthPress{side}")
        lo, li = s["lower_outer"], s["lower_lip"]
        h0 = q.n[li, 1] - q.n[lo, 1]
        h1 = q.p[li, 1] - q.p[lo, 1]
        assert q.d[lo, 1] > 1.0 and h1 < h0 - 1.0 and q.move(s["other_lower_outer"]) < 0.3, (h0, h1)

    def lower_down(m):
        q = Pose(m, f"mouthLowerDown{side}")
        assert q.d[s["lower_lip"], 1] < -3.5 and q.move(s["other_lower_lip"]) < 0.5 \
            and q.move(s["upper_lip"]) < 0.3, q.d[[s["lower_lip"], s["other_lower_lip"]]]

    def upper_up(m):
        q = Pose(m, f"mouthUpperUp{side}")
        assert q.d[s["upper_lip"], 1] > 3.0 and q.move(s["other_upper_lip"]) < 0.5 \
            and q.move(s["lower_lip"]) < 0.3, q.d[[s["upper_lip"], s["other_upper_lip"]]]

    def brow_down(m):
        q = Pose(m, f"browDown{side}")
        assert q.d[s["brow_outer"], 1] < -3.5 and q.d[s["brow_inner"], 1] < -2.5 \
            and max(q.move(i) for i in s["other_brow"]) < 0.3, q.d[[s["brow_outer"], s["brow_inner"]]]

    def brow_outer_up(m):
        q = Pose(m, f"browOuterUp{side}")
        assert q.d[s["brow_outer"], 1] > 4.0 and q.d[s["brow_inner"], 1] < 1.5 \
            and max(q.move(i) for i in s["other_brow"]) < 0.3, q.d[[s["brow_outer"], s["brow_inner"]]]

    def cheek_squint(m):  # cheek below the eye rises
        q = Pose(m, f"cheekSquint{side}")
        other = int(m.mirror[s["cheek"]])
        assert q.d[s["cheek"], 1] > 1.5 and q.move(other) < 0.3, q.d[s["cheek"]]

    def sneer(m):  # nose wing rises
        q = Pose(m, f"noseSneer{side}")
        assert q.d[s["wing"], 1] > 1.5 and q.move(s["other_wing"]) < 0.5, q.d[[s["wing"], s["other_wing"]]]

    def mouth_side(m):  # both lips move together toward that side
        q = Pose(m, f"mouth{side}")
        assert all(sx * q.d[i, 0] > 6.0 for i in (0, 13, 14, 17)) \
            and all(sx * q.d[i, 0] > 5.0 for i in (61, 291)), q.d[[0, 13, 14, 17, 61, 291]]

    def jaw_side(m):
        q = Pose(m, f"jaw{side}")
        assert sx * q.d[152, 0] > 5.0 and q.move(0) < 0.5, q.d[[152, 0]]

    return {f"mouthSmile{side}": smile, f"mouthFrown{side}": frown, f"mouthDimple{side}": dimple,
            f"mouthStretch{side}": stretch, f"mouthPress{side}": press,
            f"mouthLowerDown{side}": lower_down, f"mouthUpperUp{side}": upper_up,
            f"browDown{side}": brow_down, f"browOuterUp{side}": brow_outer_up,
            f"cheekSquint{side}": cheek_squint, f"noseSneer{side}": sneer,
            f"mouth{side}": mouth_side, f"jaw{side}": jaw_side}


def jaw_forward(m):
    q = Pose(m, "jawForward")
    assert q.d[152, 2] > 5.0 and q.d[14, 2] > 5.0 and q.move(0) < 0.5, q.d[[152, 14, 0]]


def jaw_open(m):  # lips part, chin drops 20-35 mm, upper lip stays
    q = Pose(m, "jawOpen")
    gap = (ms.lip_gap(q.p) - ms.lip_gap(q.n)) * 1.0
    assert gap > 15.0 and -35.0 < q.d[152, 1] < -20.0 and q.move(0) < 1.0, (gap, q.d[152])


def mouth_close(m):  # with the jaw open, the lips close again
    q = Pose(m, "mouthClose", base={"jawOpen": 1.0})
    assert ms.lip_gap(q.p) < 0.15 * ms.lip_gap(q.n) and q.p[152, 1] < q.n[152, 1] + 1.0 \
        and ms.lip_gap(q.n) > 15.0, (ms.lip_gap(q.n), ms.lip_gap(q.p))


def mouth_funnel(m):  # narrower, open, forward
    q = Pose(m, "mouthFunnel")
    assert ms.mouth_width(q.p) < ms.mouth_width(q.n) - 6.0 and ms.lip_gap(q.p) > 3.0 \
        and min(q.d[0, 2], q.d[17, 2]) > 3.0, (ms.mouth_width(q.p), ms.lip_gap(q.p))


def mouth_pucker(m):  # much narrower, closed, forward
    q = Pose(m, "mouthPucker")
    assert ms.mouth_width(q.p) < ms.mouth_width(q.n) - 10.0 and ms.lip_gap(q.p) < 1.0 \
        and min(q.d[0, 2], q.d[17, 2]) > 3.0, (ms.mouth_width(q.p), ms.lip_gap(q.p))


def mouth_roll_lower(m):  # lower vermilion rolls in: thinner, border goes back
    q = Pose(m, "mouthRollLower")
    h0, h1 = q.n[14, 1] - q.n[17, 1], q.p[14, 1] - q.p[17, 1]
    assert h1 < 0.65 * h0 and q.d[17, 2] < -2.0 and q.move(0) < 0.3, (h0, h1, q.d[17])


def mouth_roll_upper(m):
    q = Pose(m, "mouthRollUpper")
    h0, h1 = q.n[0, 1] - q.n[13, 1], q.p[0, 1] - q.p[13, 1]
    assert h1 < 0.65 * h0 and q.d[0, 2] < -2.0 and q.move(17) < 0.3, (h0, h1, q.d[0])


def mouth_shrug_lower(m):  # lower lip out and up
    q = Pose(m, "mouthShrugLower")
    assert q.d[17, 2] > 2.0 and q.d[17, 1] > 1.5, q.d[17]


def mouth_shrug_upper(m):  # upper lip out and up
    q = Pose(m, "mouthShrugUpper")
    assert q.d[0, 2] > 2.0 and q.d[0, 1] > 1.5 and q.move(17) < 0.5, q.d[[0, 17]]


def brow_inner_up(m):  # inner ends rise far more than the outer ends
    q = Pose(m, "browInnerUp")
    assert min(q.d[336, 1], q.d[107, 1]) > 5.0 and max(q.d[300, 1], q.d[70, 1]) < 2.0, q.d[[336, 107, 300, 70]]


def cheek_puff(m):  # both cheeks out (|x| grows) and forward
    q = Pose(m, "cheekPuff")
    assert q.d[427, 0] > 2.0 and q.d[207, 0] < -2.0 and q.d[427, 2] > 1.0, q.d[[427, 207]]


def tongue_out(m):  # no tongue landmark: the lower lip moves a little, nothing else
    q = Pose(m, "tongueOut")
    above = q.n[:, 1] > q.n[2, 1]
    assert 1.0 < q.move(14) < 4.0 and np.abs(q.d[above]).max() < 0.1, q.d[14]


TABLE = {"jawForward": jaw_forward, "jawOpen": jaw_open, "mouthClose": mouth_close,
         "mouthFunnel": mouth_funnel, "mouthPucker": mouth_pucker,
         "mouthRollLower": mouth_roll_lower, "mouthRollUpper": mouth_roll_upper,
         "mouthShrugLower": mouth_shrug_lower, "mouthShrugUpper": mouth_shrug_upper,
         "browInnerUp": brow_inner_up, "cheekPuff": cheek_puff, "tongueOut": tongue_out}
for _side in ("Left", "Right"):
    TABLE.update(_eye(_side))
    TABLE.update(_mouth_sided(_side))


def test_table_covers_all_52():
    assert sorted(TABLE) == sorted(BLENDSHAPE_NAMES)


@pytest.mark.parametrize("name", BLENDSHAPE_NAMES)
def test_shape_meaning(model, name):
    TABLE[name](model)


@pytest.mark.parametrize("name", BLENDSHAPE_NAMES)
def test_shape_is_local_and_human_sized(model, name):
    """Every shape moves something, nothing more than 40 mm, and only eyeLook moves an iris."""
    d = np.linalg.norm(model.blendshapes[BLENDSHAPE_NAMES.index(name)], axis=1) * MM
    iris_moves = d[468:].max() > 1e-6
    assert 1.0 < d.max() < 40.0 and iris_moves == name.startswith("eyeLook"), (d.max(), iris_moves)


def test_left_right_shapes_are_exact_mirrors(model):
    flip = np.array([-1.0, 1.0, 1.0], np.float32)
    mirrored = model.blendshapes[:, model.mirror, :] * flip
    idx = mirror_index()
    np.testing.assert_allclose(mirrored[idx], model.blendshapes, atol=1e-7)


def test_neutral_is_symmetric(model):
    np.testing.assert_allclose(model.mirror_shape(model.neutral), model.neutral, atol=1e-7)


def test_left_shapes_act_on_the_subjects_left(model):
    """Sided Left shapes move the subject's left half (x > 0) more than the right half.

    jawLeft and mouthLeft move a whole structure toward the left; the table checks them.
    """
    for i, name in enumerate(BLENDSHAPE_NAMES):
        if not name.endswith("Left") or name in ("jawLeft", "mouthLeft"):
            continue
        d = np.linalg.norm(model.blendshapes[i], axis=1)
        x = model.neutral[:, 0]
        assert d[x > 0].sum() > 1.5 * d[x < 0].sum(), name


def test_no_large_triangle_flips(model):
    """At weight 1 no triangle larger than 2 mm^2 turns over (tiny ones at the mouth corners may).

    mouthClose is posed on top of jawOpen, the only way ARKit uses it.
    """
    t = model.triangles

    def normals(v):
        return np.cross(v[t[:, 1]] - v[t[:, 0]], v[t[:, 2]] - v[t[:, 0]])
    n0 = normals(model.neutral.astype(np.float64))
    big = 0.5 * np.linalg.norm(n0, axis=1) > 2e-6
    for i, name in enumerate(BLENDSHAPE_NAMES):
        w = np.zeros(52, np.float32)
        w[i] = 1.0
        if name == "mouthClose":
            w[BLENDSHAPE_NAMES.index("jawOpen")] = 1.0
        n1 = normals(model.evaluate(w).astype(np.float64))
        flipped = ((n0 * n1).sum(1) < 0) & big
        assert not flipped.any(), (name, t[flipped])
