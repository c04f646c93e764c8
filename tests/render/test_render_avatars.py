"""Rendering user avatars: the test avatars framed, lit and animated; textures and alpha; the CLI."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from avatar_app.avatar.loader import load_avatar
from avatar_app.core.blendshapes import Blendshape
from avatar_app.core.rotations import rot_x, rot_y
from avatar_app.core.types import AvatarState
from tests.gltf_helpers import GltfBuilder, quad
from tests.helpers import run_main

pytestmark = pytest.mark.gl

W, H = 640, 360
BG = (0, 177, 64)


def state(yaw: float = 0.0, pitch: float = 0.0, **weights) -> AvatarState:
    w = np.zeros(52, np.float32)
    for k, v in weights.items():
        w[Blendshape[k]] = v
    rot = rot_y(yaw) @ rot_x(pitch)
    return dataclasses.replace(AvatarState.neutral(), weights=w, rotation=rot.astype(np.float32))


def render(avatar, states, background=BG, size=(W, H)):
    from avatar_app.render.headless import HeadlessRenderer

    with HeadlessRenderer(*size, avatar=avatar, background=background) as r:
        frames = [r.render(s).copy() for s in states]
        view, proj = r.renderer.camera(*size)

    def project(points, width, height):
        """(N, 3) model-space rest positions -> (N, 2) pixels (x right, y down)."""
        p = np.c_[np.asarray(points, np.float64).reshape(-1, 3), np.ones(len(points))]
        clip = p @ (proj @ view).T
        ndc = clip[:, :2] / clip[:, 3:4]
        return np.c_[(ndc[:, 0] + 1.0) * 0.5 * width, (1.0 - ndc[:, 1]) * 0.5 * height]

    return frames, project


def avatar_mask(img, background=BG):
    return np.abs(img.astype(int) - background).sum(2) > 40


def check_visible_framed_lit(img, min_cover=0.05, max_cover=0.8):
    mask = avatar_mask(img)
    cover = mask.mean()
    assert min_cover < cover < max_cover, f"avatar covers {cover:.1%} of the frame"
    ys, xs = np.nonzero(mask)
    assert abs(xs.mean() - W / 2) < 0.15 * W and abs(ys.mean() - H / 2) < 0.25 * H, "avatar not centred"
    lum = img[mask].mean()
    assert 60 < lum < 250, f"avatar pixels have mean level {lum:.0f} (black or blown out)"


@pytest.fixture(scope="module")
def ict(testdata):
    return load_avatar(testdata / "avatars" / "ict_facekit_arkit51.glb")


@pytest.fixture(scope="module")
def robot(testdata):
    return load_avatar(testdata / "avatars" / "vrm1_debug_robot.vrm")


def test_ict_renders_and_its_shapes_move_the_right_side(ict):
    frames, project = render(ict, [state(), state(jawOpen=1.0), state(eyeBlinkLeft=1.0), state(tongueOut=1.0)])
    neutral, jaw, blink, tongue = frames
    check_visible_framed_lit(neutral, 0.1, 0.6)
    assert np.array_equal(tongue, neutral)  # tongueOut has no target: nothing moves
    changed = np.abs(jaw.astype(int) - neutral).sum(2) > 30
    mouth = project(np.array([[0.0, -0.06, 0.1]]), W, H)[0]
    ys, xs = np.nonzero(changed)
    assert changed.sum() > 300 and abs(np.median(ys) - mouth[1]) < 40
    diff = np.abs(blink.astype(int) - neutral).sum(2) > 30
    # The avatar's left (+X) is on the image's right (camera facing the avatar).
    assert diff[:, W // 2:].sum() > 5 * max(diff[:, : W // 2].sum(), 1)


def test_ict_head_turns_shoulders_stay(ict):
    (a, b), project = render(ict, [state(), state(yaw=0.4)])
    changed = np.abs(a.astype(int) - b).sum(2) > 30
    lo, hi = ict.bounds()
    y_top = project(np.array([[0, hi[1] - 0.05, 0.0]]), W, H)[0, 1]
    y_low = project(np.array([[0, lo[1] + 0.03, 0.0]]), W, H)[0, 1]
    assert changed[int(y_top) - 10:int(y_top) + 10].sum() > 200   # the skull moves
    assert changed[int(y_low):].sum() == 0                         # the shoulders do not


def test_robot_head_turns_with_head_pose_body_stays(robot):
    (a, b), project = render(robot, [state(), state(yaw=0.5)])
    check_visible_framed_lit(a, 0.03, 0.8)
    changed = np.abs(a.astype(int) - b).sum(2) > 30
    assert changed.sum() > 500, "the head did not move"
    # Everything that turns lies within reach of the neck pivot; outside it nothing may change.
    skel = robot.skeleton
    neck = skel.joint_position(skel.index("neck"))
    reach = 0.0
    for p in robot.primitives:
        moving = p.weights[:, 0] * (p.joints[:, 0] == 0) < 0.999
        if moving.any():
            reach = max(reach, float(np.linalg.norm(p.positions[moving] - neck, axis=1).max()))
    pts = project(neck + reach * np.vstack([np.eye(3), -np.eye(3)]), W, H)
    x0, y0 = np.floor(pts.min(0)).astype(int) - 4
    x1, y1 = np.ceil(pts.max(0)).astype(int) + 4
    outside = np.ones((H, W), bool)
    outside[max(y0, 0):max(y1, 0), max(x0, 0):max(x1, 0)] = False
    assert (avatar_mask(a) & outside).sum() > 200, "no body visible outside the head region"
    assert not (changed & outside).any(), "the body moved with the head"


def test_simple_morph_renders(testdata):
    a = load_avatar(testdata / "avatars" / "khronos_SimpleMorph_embedded.gltf")
    (img,), _ = render(a, [state()])
    check_visible_framed_lit(img, 0.1, 0.8)


def _quad_file(tmp_path, material: dict, texture: np.ndarray | None = None, facing_back=False):
    b = GltfBuilder()
    if texture is not None:
        material.setdefault("pbrMetallicRoughness", {})["baseColorTexture"] = {"index": b.texture(texture)}
    m = b.material(**material)
    p, i = quad(size=0.1, y0=-0.1)
    if facing_back:
        i = i.reshape(-1, 3)[:, ::-1].reshape(-1)
    uv = np.array([[0, 1], [1, 1], [1, 0], [0, 0]], np.float32)
    b.node(mesh=b.mesh(p, i, uvs=uv, material=m))
    # A second, opaque grey card behind, so blending has something to show.
    back = b.material(name="wall", pbrMetallicRoughness={"baseColorFactor": [0.5, 0.5, 0.5, 1]})
    p2, i2 = quad(z=-0.05, size=0.12, y0=-0.12)
    b.node(mesh=b.mesh(p2, i2, material=back))
    return load_avatar(b.write_glb(tmp_path / "q.glb"))


def test_texture_drawn(tmp_path):
    tex = np.zeros((8, 8, 4), np.uint8)
    tex[:, :4] = (255, 0, 0, 255)   # left half red
    tex[:, 4:] = (0, 0, 255, 255)   # right half blue
    a = _quad_file(tmp_path, {"name": "t", "pbrMetallicRoughness": {"roughnessFactor": 1.0}}, tex)
    (img,), project = render(a, [state()], background=(0, 0, 0))
    left = project(np.array([[-0.05, 0.0, 0.0]]), W, H)[0].astype(int)
    right = project(np.array([[0.05, 0.0, 0.0]]), W, H)[0].astype(int)
    lr, lg, lb = img[left[1], left[0]].astype(int)
    rr, rg, rb = img[right[1], right[0]].astype(int)
    assert lr > 100 and lr > 3 * max(lg, lb)
    assert rb > 100 and rb > 3 * max(rr, rg)


def test_alpha_mask_and_blend(tmp_path):
    tex = np.full((8, 8, 4), 255, np.uint8)
    tex[:, :4, 3] = 0          # left half transparent
    tex[:, 4:, 3] = 128        # right half half-transparent
    masked = _quad_file(tmp_path, {"name": "m", "alphaMode": "MASK", "alphaCutoff": 0.6}, tex)
    blended = _quad_file(tmp_path, {"name": "b", "alphaMode": "BLEND"}, tex)
    (m_img,), project = render(masked, [state()], background=(0, 0, 0))
    (b_img,), _ = render(blended, [state()], background=(0, 0, 0))
    (wall,), _ = render(_quad_file(tmp_path, {"name": "w", "alphaMode": "MASK", "alphaCutoff": 1.0}, tex),
                        [state()], background=(0, 0, 0))  # everything cut: only the wall behind
    right = project(np.array([[0.05, 0.0, 0.0]]), W, H)[0].astype(int)
    left = project(np.array([[-0.05, 0.0, 0.0]]), W, H)[0].astype(int)
    px = lambda img, p: img[p[1], p[0]].astype(int)  # noqa: E731
    # MASK: alpha 0 and 0.5 are both under the 0.6 cutoff: the wall shows through.
    assert np.abs(px(m_img, left) - px(wall, left)).max() <= 2
    assert np.abs(px(m_img, right) - px(wall, right)).max() <= 2
    # BLEND: alpha 0 shows the wall; alpha 0.5 lies between the wall and opaque white.
    assert np.abs(px(b_img, left) - px(wall, left)).max() <= 2
    assert px(b_img, right).mean() > px(wall, right).mean() + 20


def test_double_sided_back_faces_lit_not_interior(tmp_path):
    a = _quad_file(tmp_path, {"name": "cloth", "doubleSided": True,
                              "pbrMetallicRoughness": {"baseColorFactor": [0.9, 0.9, 0.2, 1]}}, facing_back=True)
    single = _quad_file(tmp_path, {"name": "cloth", "pbrMetallicRoughness": {"baseColorFactor": [0.9, 0.9, 0.2, 1]}},
                        facing_back=True)
    (img,), project = render(a, [state()], background=(0, 0, 0))
    (culled,), _ = render(single, [state()], background=(0, 0, 0))
    c = project(np.array([[0.0, 0.0, 0.0]]), W, H)[0].astype(int)
    r, g, b = img[c[1], c[0]].astype(int)
    assert r > 80 and g > 80 and b < 0.7 * r        # the material's yellow, dimmed
    cr, cg, cb = culled[c[1], c[0]].astype(int)
    assert cr > 60 and abs(cr - cb) < 15  # one-sided: culled, the grey wall shows


# ---------------------------------------------------------------------------- the CLI, end to end
def _cli_render(testdata, tmp_path, avatar: str):
    out = tmp_path / f"{avatar.split('.')[0]}.mp4"
    # in-process: the renders and their messages are tested here, the subprocess in tests/cli
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"),
                              "-o", str(out), "--avatar", str(testdata / "avatars" / avatar), "--size", "640x360")
    assert proc.returncode == 0, proc.stderr[-2000:]
    import av

    with av.open(str(out)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert len(frames) >= 70 and frames[0].shape == (360, 640, 3)
    return proc, frames


def test_cli_renders_ict_and_reports_tongue_out(testdata, tmp_path):
    proc, frames = _cli_render(testdata, tmp_path, "ict_facekit_arkit51.glb")
    check_visible_framed_lit(frames[40], 0.1, 0.6)
    # Driven by the speaker: the mouth moves during "bin blue at f two now".
    stack = np.stack(frames[::5]).astype(np.float32)
    assert stack.std(0).max() > 20
    assert "tongueOut" in proc.stderr, "the unmapped-shape warning must reach the user"


def test_cli_renders_robot(testdata, tmp_path):
    _, frames = _cli_render(testdata, tmp_path, "vrm1_debug_robot.vrm")
    check_visible_framed_lit(frames[40], 0.03, 0.8)


def test_cli_renders_simple_morph_with_one_warning(testdata, tmp_path):
    proc, frames = _cli_render(testdata, tmp_path, "khronos_SimpleMorph_embedded.gltf")
    check_visible_framed_lit(frames[40], 0.1, 0.8)
    assert proc.stderr.count("have no name") == 1, proc.stderr[-2000:]
