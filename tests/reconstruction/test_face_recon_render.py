"""The render-and-track renderer: the iris turns with the rig's gaze and the lids cover it; the photo
texture follows the mesh."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from avatar_app.avatar.face_model import load_face_model, project
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES

pytestmark = pytest.mark.gl

SIZE = (640, 480)
FOCAL = 0.5 * SIZE[0] / np.tan(np.radians(30))
T = np.array([0.0, 0.0, -0.133 * FOCAL / 260])  # face ~260 px wide


@pytest.fixture(scope="module")
def scene():
    from training.face_recon.render import SubjectLook, VariedFaceRenderer

    model = load_face_model()
    renderer = VariedFaceRenderer(model, SIZE)
    look = SubjectLook(np.random.default_rng(0))
    look.iris = np.array([0.05, 0.05, 0.05])  # dark iris: easy to segment from sclera and skin
    look.light = np.array([0.0, 0.0, 1.0])
    look.photo = False  # flat skin: only the iris and pupil are dark
    rest = model.evaluate(np.zeros(52))
    yield model, renderer, look, rest
    renderer.close()


def _render(scene, **weights):
    model, renderer, look, rest = scene
    w = np.zeros(52)
    for k, v in weights.items():
        w[BLENDSHAPE_NAMES.index(k)] = v
    pts = model.evaluate(w)
    return renderer.render(pts, np.eye(3), T, FOCAL, look, rest_points=rest), pts


def _dark_centroid(img, pts, iris_index):
    """Centroid (x, y) pixels of the dark (iris and pupil) pixels around one eye."""
    uv = project(pts[iris_index:iris_index + 1], np.eye(3), T, FOCAL, SIZE)[0]
    x0, y0 = int(uv[0]), int(uv[1])
    win = img[y0 - 25:y0 + 26, x0 - 35:x0 + 36].astype(float)
    dark = win.sum(2) < 120
    assert dark.sum() > 30, "no iris visible"
    ys, xs = np.nonzero(dark)
    return np.array([xs.mean() + x0 - 35, ys.mean() + y0 - 25]), int(dark.sum())


def test_iris_follows_vertical_and_horizontal_gaze(scene):
    rest_img, rest_pts = _render(scene)
    c0, n0 = _dark_centroid(rest_img, rest_pts, 473)
    up_img, _ = _render(scene, eyeLookUpLeft=1.0, eyeLookUpRight=1.0)
    down_img, _ = _render(scene, eyeLookDownLeft=1.0, eyeLookDownRight=1.0)
    out_img, _ = _render(scene, eyeLookOutLeft=1.0, eyeLookInRight=1.0)
    cu, nu = _dark_centroid(up_img, rest_pts, 473)
    cd, _ = _dark_centroid(down_img, rest_pts, 473)
    co, _ = _dark_centroid(out_img, rest_pts, 473)
    # image y grows downwards; the horizontal direction is taken from the rig's own iris point
    assert cu[1] < c0[1] - 2 and cd[1] > c0[1] + 2, (c0, cu, cd)
    w = np.zeros(52)
    w[BLENDSHAPE_NAMES.index("eyeLookOutLeft")] = 1.0
    moved = project(scene[0].evaluate(w)[473:474], np.eye(3), T, FOCAL, SIZE)[0]
    rig_dx = moved[0] - project(rest_pts[473:474], np.eye(3), T, FOCAL, SIZE)[0][0]
    assert np.sign(co[0] - c0[0]) == np.sign(rig_dx) and abs(co[0] - c0[0]) > 2, (c0, co, rig_dx)
    # looking up puts part of the iris under the upper lid: fewer dark pixels show
    assert nu < n0


def test_closed_lid_hides_the_iris(scene):
    img, pts = _render(scene, eyeBlinkLeft=1.0)
    uv = project(pts[473:474], np.eye(3), T, FOCAL, SIZE)[0]
    x0, y0 = int(uv[0]), int(uv[1])
    win = img[y0 - 6:y0 + 7, x0 - 6:x0 + 7].astype(float)
    open_img, _ = _render(scene)
    open_win = open_img[y0 - 6:y0 + 7, x0 - 6:x0 + 7].astype(float)
    assert (open_win.sum(2) < 120).mean() > 0.5  # open: the pupil and iris fill the centre
    assert (win.sum(2) < 120).mean() < 0.2  # closed: skin and lash line only


def test_photo_texture_follows_the_mesh(scene):
    """A textured face carries the photo's detail (flat shading has none inside a region), stays
    tinted to the subject's skin tone, and moves with the mesh: a blink closes the textured lid."""
    model, renderer, look, rest = scene
    flat, pts = _render(scene)
    uv = project(pts[[50, 280]], np.eye(3), T, FOCAL, SIZE)  # cheek points
    look.photo = True
    try:
        photo, _ = _render(scene)
        dark_look = copy.copy(look)
        dark_look.skin = np.array([0.32, 0.21, 0.15])
        dark = renderer.render(pts, np.eye(3), T, FOCAL, dark_look, rest_points=rest)
        blink, _ = _render(scene, eyeBlinkLeft=1.0)
    finally:
        look.photo = False
    for u, v in uv.astype(int):
        flat_patch = flat[v - 8:v + 9, u - 8:u + 9].astype(float)
        photo_patch = photo[v - 8:v + 9, u - 8:u + 9].astype(float)
        assert photo_patch.std(axis=(0, 1)).mean() > flat_patch.std(axis=(0, 1)).mean() + 0.5
        assert dark[v - 8:v + 9, u - 8:u + 9].mean() < 0.7 * photo_patch.mean()
    c = project(pts[473:474], np.eye(3), T, FOCAL, SIZE)[0].astype(int)
    assert (photo[c[1] - 3:c[1] + 4, c[0] - 3:c[0] + 4].sum(2) < 120).mean() > 0.5  # open: pupil
    assert (blink[c[1] - 3:c[1] + 4, c[0] - 3:c[0] + 4].sum(2) < 120).mean() < 0.2  # closed: lid
