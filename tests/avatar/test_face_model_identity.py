"""Identity (face-shape) morphs change the measurement they are named after (millimetres at +1)."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar import face_model_measure as ms
from avatar_app.avatar.face_model import load_face_model

MM = 1000.0


@pytest.fixture(scope="module")
def model():
    return load_face_model()


def dist(p, a, b) -> float:
    return float(np.linalg.norm(p[a] - p[b]))


# name -> (measurement in mm, lower bound of its change at +1, upper bound)
MEASURES = {
    "face_width": (lambda p: dist(p, 234, 454), 6.0, 14.0),
    "face_length": (lambda p: dist(p, 10, 152), 6.0, 12.0),
    "jaw_width": (lambda p: dist(p, 172, 397), 5.0, 10.0),
    "chin": (lambda p: p[152, 2] - p[2, 2], 2.5, 6.0),
    "cheekbones": (lambda p: p[346, 0] - p[117, 0], 2.0, 8.0),
    "nose_length": (lambda p: dist(p, 168, 4), 2.0, 6.0),
    "nose_width": (lambda p: dist(p, 129, 358), 2.5, 5.0),
    "eye_size": (lambda p: ms.eye_aperture(p, "left") + ms.eye_aperture(p, "right"), 1.0, 4.0),
    "eye_spacing": (lambda p: ms.interpupillary_distance(p), 5.0, 7.0),
    "mouth_width": (lambda p: ms.mouth_width(p), 5.0, 9.0),
    "lip_fullness": (lambda p: (p[0, 1] - p[13, 1]) + (p[14, 1] - p[17, 1]), 2.5, 6.0),
    "brow_height": (lambda p: 0.5 * (p[105, 1] + p[334, 1]) - 0.5 * (p[159, 1] + p[386, 1]), 2.5, 5.0),
    "nose_bridge": (lambda p: p[6, 2] - 0.5 * (p[133, 2] + p[362, 2]), 2.0, 4.0),
    "face_depth": (lambda p: p[4, 2] - p[454, 2], 3.0, 5.0),
    "eye_tilt": (lambda p: (p[263, 1] - p[362, 1]) + (p[33, 1] - p[133, 1]), 1.5, 6.0),
}


def test_at_least_twelve_named_morphs(model):
    required = {"face_width", "face_length", "jaw_width", "chin", "cheekbones", "nose_length",
                "nose_width", "eye_size", "eye_spacing", "mouth_width", "lip_fullness", "brow_height"}
    assert model.identity.shape[0] >= 12 and required <= set(model.identity_names)


@pytest.mark.parametrize("name", list(MEASURES))
def test_identity_changes_its_measurement(model, name):
    fn, lo, hi = MEASURES[name]
    k = model.identity_names.index(name)
    a = np.zeros(model.num_identity, np.float32)
    p0 = model.evaluate(np.zeros(52), a).astype(np.float64) * MM
    a[k] = 1.0
    p1 = model.evaluate(np.zeros(52), a).astype(np.float64) * MM
    a[k] = -1.0
    pm = model.evaluate(np.zeros(52), a).astype(np.float64) * MM
    up, down = fn(p1) - fn(p0), fn(p0) - fn(pm)
    assert lo < up < hi and lo < down < hi, (up, down)


def test_every_morph_is_covered():
    model = load_face_model()
    assert set(model.identity_names) == set(MEASURES)


def test_identity_morphs_are_symmetric(model):
    np.testing.assert_allclose(model.mirror_shape(model.identity), model.identity, atol=1e-7)


def test_iris_keeps_its_size(model):
    """Irises are ~11.8 mm wide in every adult; no identity morph changes their radius."""
    for k in range(model.num_identity):
        for sign in (1.0, -1.0):
            a = np.zeros(model.num_identity, np.float32)
            a[k] = sign
            p = model.evaluate(np.zeros(52), a)
            r = np.linalg.norm(p[469:473] - p[468], axis=1)
            assert np.allclose(r, r[0], atol=2e-4) and 0.0055 < r[0] < 0.0065, model.identity_names[k]
