"""Avatars are framed at the face found from the humanoid bones, not at the vertices skinned to the
head (issue 21, item 6): the VRM test robot, the robot with long "hair" on its head bone, a VRM
without eye bones, eye and face meshes; the default head keeps its framing."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from avatar_app.avatar.loader import load_avatar
from avatar_app.avatar.mesh import AvatarMesh, Joint, MeshPrimitive, Skeleton

ROBOT_HEAD = np.array([0.0, 1.5625, 0.0])
ROBOT_EYES = np.array([[0.125, 1.75, 0.0], [-0.125, 1.75, 0.0]])


def _edit_glb(src, dst, edit) -> None:
    """Rewrite a .glb/.vrm's JSON chunk with ``edit(json_dict)`` (the binary chunk is kept)."""
    data = src.read_bytes()
    (n_json,) = struct.unpack_from("<I", data, 12)
    doc = json.loads(data[20:20 + n_json])
    edit(doc)
    text = json.dumps(doc).encode()
    text += b" " * (-len(text) % 4)
    rest = data[20 + n_json:]
    dst.write_bytes(struct.pack("<III", 0x46546C67, 2, 12 + 8 + len(text) + len(rest))
                    + struct.pack("<I", len(text)) + b"JSON" + text + rest)


def _frame_box(avatar) -> tuple[float, float, float, float]:
    """(left, right, bottom, top) of the view in metres, for a 16:9 frame."""
    c, h = np.asarray(avatar.view_center, np.float64), float(avatar.view_height_m)
    return c[0] - h * 8 / 9, c[0] + h * 8 / 9, c[1] - h / 2, c[1] + h / 2


def _assert_face_framed(avatar, head, eyes) -> None:
    left, right, bottom, top = _frame_box(avatar)
    h = top - bottom
    mid = eyes.mean(0)
    assert abs(mid[0] - (left + right) / 2) < 0.02 * h, "the eyes are not centred"
    assert 0.3 < (top - mid[1]) / h < 0.5, f"eyes at {(top - mid[1]) / h:.0%} from the top"
    assert bottom + 0.1 * h < head[1] < top, "the head bone is outside the frame"
    assert 0.08 < abs(eyes[0, 0] - eyes[1, 0]) / h < 0.4, f"the face is {abs(eyes[0, 0] - eyes[1, 0]) / h:.2f} wide"


@pytest.fixture(scope="module")
def robot_path(testdata):
    return testdata / "avatars" / "vrm1_debug_robot.vrm"


def test_robot_is_framed_at_its_eyes_and_head(robot_path):
    robot = load_avatar(robot_path)
    _assert_face_framed(robot, ROBOT_HEAD, ROBOT_EYES)


def test_long_hair_on_the_head_bone_does_not_move_the_framing(robot_path, tmp_path):
    """VRoid hair is skinned to the head and reaches the waist: the face must stay framed."""
    def add_hair(doc):
        head = doc["extensions"]["VRMC_vrm"]["humanoid"]["humanBones"]["head"]["node"]
        doc["nodes"].append({"name": "Hair", "mesh": 0, "translation": [-0.3, -1.0, -0.35], "scale": [2.4, 5.0, 1.0]})
        doc["nodes"][head].setdefault("children", []).append(len(doc["nodes"]) - 1)

    hairy = tmp_path / "hairy.vrm"
    _edit_glb(robot_path, hairy, add_hair)
    plain, long_hair = load_avatar(robot_path), load_avatar(hairy)
    assert long_hair.bounds()[0][1] < plain.bounds()[0][1] + 0.5  # the hair is there, on the head
    np.testing.assert_allclose(long_hair.view_center, plain.view_center, atol=1e-4)
    assert long_hair.view_height_m == pytest.approx(plain.view_height_m, rel=1e-4)
    _assert_face_framed(long_hair, ROBOT_HEAD, ROBOT_EYES)


def test_a_vrm_without_eye_bones_is_framed_at_its_head_bone(robot_path, tmp_path):
    def drop_eyes(doc):
        bones = doc["extensions"]["VRMC_vrm"]["humanoid"]["humanBones"]
        bones.pop("leftEye"), bones.pop("rightEye")

    path = tmp_path / "no_eyes.vrm"
    _edit_glb(robot_path, path, drop_eyes)
    avatar = load_avatar(path)
    left, right, bottom, top = _frame_box(avatar)
    assert abs((left + right) / 2 - ROBOT_HEAD[0]) < 0.01
    assert bottom < ROBOT_HEAD[1] < (bottom + top) / 2 and top - bottom < 0.6  # a head, not the body


def _box(name: str, centre, size) -> MeshPrimitive:
    c, s = np.asarray(centre, np.float32), np.asarray(size, np.float32) / 2
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], np.float32) * s + c
    idx = np.array([0, 1, 3, 0, 3, 2, 4, 6, 7, 4, 7, 5, 0, 4, 5, 0, 5, 1, 2, 3, 7, 2, 7, 6, 0, 2, 6, 0, 6, 4,
                    1, 5, 7, 1, 7, 3], np.uint32)
    return MeshPrimitive(name=name, positions=corners, normals=corners - c, indices=idx)


def _skeleton(head) -> Skeleton:
    def joint(name, parent, at):
        local, inv = np.eye(4, dtype=np.float32), np.eye(4, dtype=np.float32)
        local[:3, 3], inv[:3, 3] = at, -np.asarray(at)
        return Joint(name=name, parent=parent, rest_local=local, inverse_bind=inv)

    return Skeleton([joint("root", -1, [0, 0, 0]), joint("head", 0, head)])


@pytest.mark.parametrize("eye_names", [("EyeballLeft", "EyeballRight"), ("Face_Eye.L", "Face_Eye.R")])
def test_eye_meshes_stand_in_for_eye_bones(eye_names):
    from avatar_app.avatar.loader.framing import frame_avatar

    head = np.array([0.0, 1.40, 0.0])
    eyes = np.array([[0.032, 1.48, 0.06], [-0.032, 1.48, 0.06]])
    prims = [_box("Hair", [0, 1.2, -0.1], [0.4, 0.9, 0.2]), _box("EyeLashes", [0, 1.52, 0.07], [0.1, 0.01, 0.01])]
    prims += [_box(n, e, [0.02, 0.02, 0.02]) for n, e in zip(eye_names, eyes)]
    mesh = AvatarMesh(name="t", primitives=prims, skeleton=_skeleton(head))
    centre, height, source = frame_avatar(mesh)
    assert source == "eye meshes"
    mesh.view_center, mesh.view_height_m = centre, height
    _assert_face_framed(mesh, head, eyes)


def test_a_face_mesh_is_used_when_no_eyes_are_known():
    from avatar_app.avatar.loader.framing import frame_avatar

    prims = [_box("Body", [0, 0.8, 0], [0.5, 1.6, 0.3]), _box("Face", [0, 1.5, 0.02], [0.16, 0.22, 0.18])]
    centre, height, source = frame_avatar(AvatarMesh(name="t", primitives=prims, skeleton=_skeleton([0, 1.4, 0])))
    assert source == "face mesh" and abs(centre[1] - 1.5) < 0.02 and 0.25 < height < 0.5


def test_the_default_heads_own_framing_is_what_the_rule_gives():
    """The constants come from the default head: its eyes and head bone give back its stored framing."""
    from avatar_app.avatar.default_head import build_default_head
    from avatar_app.avatar.loader.framing import face_framing

    head = build_default_head()
    sk = head.skeleton
    names = [j.name for j in sk.joints]
    eyes = [sk.joint_position(names.index(n)) for n in head.gaze_joints]
    centre, height = face_framing(sk.joint_position(names.index(head.head_joint)), *eyes)
    assert height == pytest.approx(head.view_height_m, rel=0.05)
    assert abs(centre[1] - head.view_center[1]) < 0.02 * height
