"""glTF/VRM loader: the test avatars, synthetic files for each feature, and bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from avatar_app.avatar.loader import LoadedAvatar, load_avatar
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.core.errors import InputError
from avatar_app.core.rotations import matrix_from_quat

# ---------------------------------------------------------------------------- a tiny glTF writer
from tests.gltf_helpers import GltfBuilder, box, quad  # noqa: F401


@pytest.fixture(scope="module")
def ict(testdata) -> LoadedAvatar:
    return load_avatar(testdata / "avatars" / "ict_facekit_arkit51.glb")


@pytest.fixture(scope="module")
def robot(testdata) -> LoadedAvatar:
    return load_avatar(testdata / "avatars" / "vrm1_debug_robot.vrm")


def test_ict_maps_51_arkit_shapes_and_reports_tongue_out(ict):
    rep = ict.report
    assert rep.kind == "glTF 2.0"
    assert rep.mapping.missing == ["tongueOut"]
    assert len(rep.mapped_arkit) == 51
    assert len(rep.warnings) == 1 and "tongueOut" in rep.warnings[0] and "51 of 52" in rep.warnings[0]
    m = ict.mapping_matrix()
    names = ict.target_names
    assert len(names) == 51
    for i, arkit in enumerate(BLENDSHAPE_NAMES):
        row = m[i]
        if arkit == "tongueOut":
            assert not row.any()
        else:  # each ARKit weight drives exactly its own target, factor 1
            assert row[names.index(arkit)] == 1.0 and np.count_nonzero(row) == 1


def test_ict_geometry_in_metres_facing_plus_z(ict):
    lo, hi = ict.bounds()
    assert 0.25 < hi[1] - lo[1] < 0.45  # a head and neck, metres
    skin = ict.primitives[0]
    nose = skin.positions[np.argmax(skin.positions[:, 2])]
    assert nose[2] > 0.1 and abs(nose[0]) < 0.01  # the nose tip is the frontmost point, on the mid-line
    assert ict.head_joint == "head" and ict.report.head == "synthetic (bust)"


def _outward_fraction(mesh) -> float:
    """Fraction of triangles whose winding normal agrees with the vertex normals."""
    agree = total = 0
    for p in mesh.primitives:
        tri = p.indices.reshape(-1, 3).astype(np.int64)
        a, b, c = (p.positions[tri[:, k]] for k in range(3))
        fn = np.cross(b - a, c - a)
        vn = p.normals[tri].sum(1)
        ok = np.linalg.norm(fn, axis=1) > 1e-12
        agree += int(np.sum(np.einsum("ij,ij->i", fn, vn)[ok] > 0))
        total += int(ok.sum())
    return agree / total


def test_ict_and_robot_windings_agree_with_normals(ict, robot):
    assert _outward_fraction(ict) > 0.98
    assert _outward_fraction(robot) > 0.98


def test_ict_head_turns_and_shoulders_stay(ict):
    skel = ict.skeleton
    nod = matrix_from_quat([np.sin(0.15), 0, 0, np.cos(0.15)])  # 0.3 rad about +X
    mats = skel.skin_matrices({skel.index("head"): nod}).copy()
    skin = ict.primitives[0]
    posed = np.einsum("vk,vkij->vij", skin.weights, mats[skin.joints.astype(int)])
    moved = np.linalg.norm(np.einsum("vij,vj->vi", posed[:, :3, :3], skin.positions) + posed[:, :3, 3]
                           - skin.positions, axis=1)
    lo, hi = ict.bounds()
    top = skin.positions[:, 1] > hi[1] - 0.05
    bottom = skin.positions[:, 1] < lo[1] + 0.02
    assert moved[top].min() > 0.01 and moved[bottom].max() < 1e-4


def test_robot_vrm1_humanoid_head_neck_eyes(robot):
    rep = robot.report
    assert rep.kind == "VRM 1.0" and rep.head == "VRM humanoid"
    assert rep.bones == {"neck": "neck", "head": "head", "leftEye": "eye.L", "rightEye": "eye.R"}
    assert [j.name for j in robot.skeleton.joints] == ["root", "neck", "head", "leftEye", "rightEye"]
    assert robot.head_joint == "head" and robot.neck_joint == "neck"
    assert robot.gaze_joints == ("leftEye", "rightEye")
    np.testing.assert_allclose(robot.skeleton.joint_position(2), [0, 1.5625, 0], atol=1e-5)
    assert len(rep.warnings) == 1 and "18 VRM expression(s) bind no morph target" in rep.warnings[0]
    assert robot.view_center[1] > 1.4  # framed on the head, not the whole body


def test_robot_head_vertices_follow_the_head_joint(robot):
    skel = robot.skeleton
    head = skel.index("head")
    # Two turns with different axes: a point on one turn's axis still moves in the other.
    poses = [skel.skin_matrices({head: matrix_from_quat(q)}).copy()
             for q in ([0, np.sin(0.3), 0, np.cos(0.3)], [np.sin(0.3), 0, 0, np.cos(0.3)])]
    for p in robot.primitives:
        moved = 0.0
        for mats in poses:
            posed = np.einsum("vk,vkij->vij", p.weights, mats[p.joints.astype(int)])
            out = np.einsum("vij,vj->vi", posed[:, :3, :3], p.positions) + posed[:, :3, 3]
            moved = np.maximum(moved, np.linalg.norm(out - p.positions, axis=1))
        on_head = (p.weights * np.isin(p.joints, [head, 3, 4])).sum(1) > 0.99
        assert on_head.any() and (~on_head).any()
        assert moved[~on_head].max() < 1e-5          # body, arms, legs stay
        far = np.linalg.norm(p.positions - skel.joint_position(head), axis=1) > 0.05
        assert moved[on_head & far].min() > 1e-3      # the head turns


def test_simple_morph_unnamed_targets_one_warning(testdata, caplog):
    with caplog.at_level("WARNING", logger="avatar_app.avatar.loader"):
        a = load_avatar(testdata / "avatars" / "khronos_SimpleMorph_embedded.gltf")
    assert len(a.report.warnings) == 1
    msg = a.report.warnings[0]
    assert "2 morph target(s) have no name" in msg
    assert a.report.mapping.unnamed_targets == ["mesh 0 target 0", "mesh 0 target 1"]
    assert not a.mapping_matrix().any() and a.target_names == ()  # never bound silently
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [msg]


# ---------------------------------------------------------------------------- synthetic files
def test_embedded_external_and_glb_load_the_same(tmp_path):
    def build():
        b = GltfBuilder()
        p, i = quad()
        b.node(mesh=b.mesh(p, i, targets=[np.tile([0, 0.01, 0], (4, 1))], names=["jawOpen"]))
        return b

    (tmp_path / "ext").mkdir()
    paths = [build().write_glb(tmp_path / "a.glb"), build().write_gltf(tmp_path / "b.gltf"),
             build().write_gltf(tmp_path / "ext" / "c.gltf", external=True)]
    meshes = [load_avatar(p) for p in paths]
    for m in meshes[1:]:
        np.testing.assert_array_equal(m.primitives[0].positions, meshes[0].primitives[0].positions)
        np.testing.assert_array_equal(m.primitives[0].morph_targets["jawOpen"],
                                      meshes[0].primitives[0].morph_targets["jawOpen"])
    assert meshes[0].blendshape_map["jawOpen"] == {"jawOpen": 1.0}


def test_node_transforms_baked(tmp_path):
    b = GltfBuilder()
    p, i = quad()
    m = b.mesh(p, i)
    child = b.node(root=False, mesh=m, translation=[0.0, 0.5, 0.0], scale=[2.0, 2.0, 2.0])
    b.node(children=[child], translation=[0.1, 0.0, 0.0])
    a = load_avatar(b.write_glb(tmp_path / "t.glb"))
    np.testing.assert_allclose(a.primitives[0].positions, p * 2 + [0.1, 0.5, 0.0], atol=1e-6)


def test_mirrored_node_keeps_front_faces(tmp_path):
    b = GltfBuilder()
    p, i = box([-0.1, 0, -0.1], [0.1, 0.2, 0.1])
    b.node(mesh=b.mesh(p, i), scale=[-1.0, 1.0, 1.0])
    a = load_avatar(b.write_glb(tmp_path / "m.glb"))
    assert _outward_fraction(a) == 1.0


@pytest.mark.parametrize("mode", [5, 6])
def test_strips_and_fans_become_triangles(tmp_path, mode):
    b = GltfBuilder()
    if mode == 5:
        p = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 2, 0]], np.float32)
    else:
        p = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [-1, 1, 0]], np.float32)
    b.node(mesh=b.mesh(p * 0.1, mode=mode))
    a = load_avatar(b.write_glb(tmp_path / "s.glb"))
    prim = a.primitives[0]
    assert prim.num_triangles == 3
    tri = prim.indices.reshape(-1, 3)
    fn = np.cross(prim.positions[tri[:, 1]] - prim.positions[tri[:, 0]],
                  prim.positions[tri[:, 2]] - prim.positions[tri[:, 0]])
    assert np.all(fn[:, 2] > 0)  # all counter-clockwise seen from +Z


def test_lines_only_refused_clearly(tmp_path):
    b = GltfBuilder()
    b.node(mesh=b.mesh(np.zeros((2, 3), np.float32), mode=1))
    with pytest.raises(InputError, match="holds no triangle meshes"):
        load_avatar(b.write_glb(tmp_path / "lines.glb"))


def _skinned_file(tmp_path, vrm0: bool = False, names=("mixamorig:Hips", "mixamorig:Neck", "mixamorig:Head")):
    """A body box and a head box skinned to hips/neck/head; the rest pose differs from the bind pose."""
    b = GltfBuilder()
    body, bi = box([-0.15, 1.0, -0.1], [0.15, 1.5, 0.1])
    head, hi = box([-0.1, 1.6, -0.1], [0.1, 1.85, 0.1])
    pos = np.concatenate([body, head])
    idx = np.concatenate([bi, hi + 8])
    joints = np.zeros((16, 4), np.uint16)
    joints[8:, 0] = 2
    weights = np.zeros((16, 4), np.float32)
    weights[:, 0] = 1.0
    mesh = b.mesh(pos, idx, joints=joints, weights=weights, name="Body")
    bind = [np.array([0, 1.0, 0]), np.array([0, 1.5, 0]), np.array([0, 1.6, 0])]
    ibm = np.stack([np.eye(4, dtype=np.float32)] * 3)
    for k, t in enumerate(bind):
        ibm[k, :3, 3] = -t
    ibm_acc = b.accessor(ibm.transpose(0, 2, 1).reshape(3, 16).astype(np.float32), "MAT4")
    head_node = b.node(root=False, name=names[2], translation=[0.0, 0.1, 0.0])
    neck = b.node(root=False, name=names[1], translation=[0.0, 0.5, 0.0], children=[head_node])
    hips = b.node(name=names[0], translation=[0.0, 1.0, 0.0], children=[neck])
    b.doc["skins"] = [{"joints": [hips, neck, head_node], "inverseBindMatrices": ibm_acc}]
    b.node(mesh=mesh, skin=0)
    if vrm0:
        b.doc["extensionsUsed"] = ["VRM"]
        b.doc["extensions"] = {"VRM": {
            "humanoid": {"humanBones": [{"bone": "hips", "node": hips}, {"bone": "neck", "node": neck},
                                        {"bone": "head", "node": head_node}]},
            "meta": {"title": "Box Person"}}}
    return b, pos, (hips, neck, head_node)


def test_skinned_rest_pose_baked_and_head_found_by_name(tmp_path):
    b, pos, (hips, neck, head) = _skinned_file(tmp_path)
    # Rest pose != bind pose: the head node is raised by 0.05 m and turned 90 degrees about +Y.
    b.doc["nodes"][head]["translation"] = [0.0, 0.15, 0.0]
    b.doc["nodes"][head]["rotation"] = [0.0, np.sin(np.pi / 4), 0.0, np.cos(np.pi / 4)]
    a = load_avatar(b.write_glb(tmp_path / "skinned.glb"))
    assert a.report.head == "node names"
    assert a.report.bones == {"neck": "mixamorig:Neck", "head": "mixamorig:Head"}
    prim = a.primitives[0]
    np.testing.assert_allclose(prim.positions[:8], pos[:8], atol=1e-6)  # body: bind = rest
    r = matrix_from_quat([0.0, np.sin(np.pi / 4), 0.0, np.cos(np.pi / 4)])
    expected = (pos[8:] - [0, 1.6, 0]) @ r.T + [0, 1.65, 0]
    np.testing.assert_allclose(prim.positions[8:], expected, atol=1e-5)
    np.testing.assert_allclose(a.skeleton.joint_position(a.skeleton.index("head")), [0, 1.65, 0], atol=1e-6)
    assert np.all(a.skeleton.skin_matrices() - np.eye(4) < 1e-6)  # rest = identity after baking
    head_j = a.skeleton.index("head")
    assert np.all(prim.joints[8:, 0] == head_j) and np.all(prim.joints[:8, 0] == 0)


def test_vrm0_turned_to_face_plus_z(tmp_path):
    b, pos, _ = _skinned_file(tmp_path, vrm0=True, names=("a", "b", "c"))
    a = load_avatar(b.write_glb(tmp_path / "old.vrm"))
    assert a.report.kind == "VRM 0.x" and a.report.head == "VRM humanoid" and a.name == "Box Person"
    np.testing.assert_allclose(a.primitives[0].positions, pos * [-1, 1, -1], atol=1e-6)  # 180 deg about +Y


def test_centimetre_models_scaled_to_metres(tmp_path):
    b = GltfBuilder()
    p, i = box([-10, 0, -10], [10, 170, 10])
    b.node(mesh=b.mesh(p, i))
    a = load_avatar(b.write_glb(tmp_path / "cm.glb"))
    lo, hi = a.bounds()
    assert a.report.unit_scale == 0.01 and hi[1] == pytest.approx(1.7)


def test_texture_and_alpha_modes_read(tmp_path):
    b = GltfBuilder()
    img = np.zeros((4, 8, 4), np.uint8)
    img[..., 0] = 200
    img[..., 3] = 255
    tex = b.texture(img)
    m0 = b.material(name="skin", pbrMetallicRoughness={"baseColorTexture": {"index": tex},
                                                       "baseColorFactor": [1, 0.5, 0.5, 1], "roughnessFactor": 0.4})
    m1 = b.material(name="lace", alphaMode="MASK", alphaCutoff=0.3, doubleSided=True)
    m2 = b.material(name="glass", alphaMode="BLEND")
    p, i = quad()
    uv = np.array([[0, 1], [1, 1], [1, 0], [0, 0]], np.float32)
    for m, z in ((m0, 0.0), (m1, 0.01), (m2, 0.02)):
        b.node(mesh=b.mesh(p + [0, 0, z], i, uvs=uv, material=m))
    a = load_avatar(b.write_glb(tmp_path / "mat.glb"))
    mats = {p.material.name: p.material for p in a.primitives}
    assert mats["skin"].texture.shape == (4, 8, 4) and mats["skin"].texture[0, 0, 0] == 200
    assert mats["skin"].base_color == (1.0, 0.5, 0.5, 1.0) and mats["skin"].roughness == pytest.approx(0.4)
    assert mats["lace"].alpha_mode == "MASK" and mats["lace"].alpha_cutoff == pytest.approx(0.3)
    assert mats["lace"].double_sided and mats["lace"].interior_color is None
    assert mats["glass"].alpha_mode == "BLEND"


def test_broken_texture_warns_and_loads(tmp_path):
    b = GltfBuilder()
    b.doc["images"] = [{"bufferView": b._view(b"not a png at all"), "mimeType": "image/png"}]
    b.doc["textures"] = [{"source": 0}]
    m = b.material(name="skin", pbrMetallicRoughness={"baseColorTexture": {"index": 0}})
    p, i = quad()
    b.node(mesh=b.mesh(p, i, uvs=np.zeros((4, 2), np.float32), material=m))
    a = load_avatar(b.write_glb(tmp_path / "badtex.glb"))
    assert a.primitives[0].material.texture is None
    assert any("cannot be decoded" in w for w in a.report.warnings)


def test_vrm1_expressions_drive_presets(tmp_path):
    b = GltfBuilder()
    p, i = quad()
    up = np.tile([0, 0.01, 0], (4, 1)).astype(np.float32)
    face = b.node(mesh=b.mesh(p, i, targets=[up, up * 2], names=["Fcl_MTH_A", "Fcl_EYE_Close"]))
    b.doc["extensionsUsed"] = ["VRMC_vrm"]
    b.doc["extensions"] = {"VRMC_vrm": {"specVersion": "1.0", "humanoid": {"humanBones": {}}, "expressions": {
        "preset": {"aa": {"morphTargetBinds": [{"node": face, "index": 0, "weight": 1.0}]},
                   "blink": {"morphTargetBinds": [{"node": face, "index": 1, "weight": 0.5}]}}}}}
    a = load_avatar(b.write_glb(tmp_path / "e.vrm"))
    assert a.report.kind == "VRM 1.0"
    assert a.blendshape_map["jawOpen"] == {"Fcl_MTH_A": 1.0}
    assert a.blendshape_map["eyeBlinkLeft"] == {"Fcl_EYE_Close": pytest.approx(0.25)}
    assert set(a.report.mapping.presets) == {"aa", "blink"}


# ---------------------------------------------------------------------------- bad input
def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_avatar(tmp_path / "nope.glb")


def test_not_a_gltf(tmp_path):
    f = tmp_path / "photo.glb"
    f.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    with pytest.raises(InputError, match="is not a glTF file"):
        load_avatar(f)
    g = tmp_path / "other.gltf"
    g.write_text('{"hello": 1}')
    with pytest.raises(InputError, match="not a glTF file"):
        load_avatar(g)


def test_gltf_1_refused(tmp_path):
    f = tmp_path / "old.gltf"
    f.write_text('{"asset": {"version": "1.0"}}')
    with pytest.raises(InputError, match="only glTF 2.0"):
        load_avatar(f)


def _simple(tmp_path) -> GltfBuilder:
    b = GltfBuilder()
    p, i = quad()
    b.node(mesh=b.mesh(p, i))
    return b


def test_truncated_glb(tmp_path):
    f = _simple(tmp_path).write_glb(tmp_path / "t.glb")
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 20])
    with pytest.raises(InputError, match="truncated"):
        load_avatar(f)


def test_buffer_shorter_than_declared(tmp_path):
    b = _simple(tmp_path)
    f = b.write_gltf(tmp_path / "short.gltf")
    doc = json.loads(f.read_text())
    doc["buffers"][0]["byteLength"] += 400
    f.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="buffer 0 holds .* declares"):
        load_avatar(f)


def test_accessor_outside_its_buffer(tmp_path):
    b = _simple(tmp_path)
    b.doc["accessors"][0]["count"] = 1000
    with pytest.raises(InputError, match="damaged buffer"):
        load_avatar(b.write_glb(tmp_path / "acc.glb"))


def test_index_out_of_range(tmp_path):
    b = GltfBuilder()
    p, _ = quad()
    b.node(mesh=b.mesh(p, np.array([0, 1, 7], np.uint16)))
    with pytest.raises(InputError, match="out of range"):
        load_avatar(b.write_glb(tmp_path / "idx.glb"))


def test_missing_external_buffer(tmp_path):
    f = _simple(tmp_path).write_gltf(tmp_path / "ext.gltf", external=True)
    (tmp_path / "data.bin").unlink()
    with pytest.raises(InputError, match="data.bin"):
        load_avatar(f)


def test_required_unsupported_extension(tmp_path):
    b = _simple(tmp_path)
    b.doc["extensionsUsed"] = b.doc["extensionsRequired"] = ["KHR_draco_mesh_compression"]
    with pytest.raises(InputError, match="requires glTF extension.*KHR_draco_mesh_compression.*Draco"):
        load_avatar(b.write_glb(tmp_path / "draco.glb"))


def test_damaged_json(tmp_path):
    f = tmp_path / "bad.gltf"
    f.write_text('{"asset": {"version": "2.0"}, "meshes": [')
    with pytest.raises(InputError, match="JSON is damaged"):
        load_avatar(f)


def test_node_cycle(tmp_path):
    b = _simple(tmp_path)
    b.node(root=False, children=[2])
    b.node(root=False, children=[1])
    b.doc["scenes"][0]["nodes"].append(1)
    with pytest.raises(InputError, match="more than one parent|cycle"):
        load_avatar(b.write_glb(tmp_path / "cycle.glb"))


def test_head_bone_preferred_over_a_mesh_called_head(tmp_path):
    b, _, (hips, neck, head) = _skinned_file(tmp_path, names=("Hips", "Neck", "Head"))
    p, i = box([-0.05, 1.9, -0.05], [0.05, 2.0, 0.05])
    b.node(mesh=b.mesh(p, i), name="Head")  # a rigid mesh object at the root, named like the bone
    a = load_avatar(b.write_glb(tmp_path / "two_heads.glb"))
    np.testing.assert_allclose(a.skeleton.joint_position(a.skeleton.index("head")), [0, 1.6, 0], atol=1e-6)


def test_vrm0_blend_shape_groups_and_perfect_sync(tmp_path):
    b = GltfBuilder()
    p, i = box([-0.1, 0, -0.1], [0.1, 0.25, 0.1])
    d = np.tile([0, 0.01, 0], (8, 1)).astype(np.float32)
    b.node(mesh=b.mesh(p, i, targets=[d, d, d], names=["MTH_A", "EyeBlinkLeft", "Other"]))
    b.doc["extensionsUsed"] = ["VRM"]
    b.doc["extensions"] = {"VRM": {"blendShapeMaster": {"blendShapeGroups": [
        {"name": "A", "presetName": "a", "binds": [{"mesh": 0, "index": 0, "weight": 100}]},
        {"name": "EyeBlinkLeft", "presetName": "unknown", "binds": [{"mesh": 0, "index": 1, "weight": 50}]},
        {"name": "Joy", "presetName": "joy", "binds": []},
    ]}}}
    a = load_avatar(b.write_glb(tmp_path / "ps.vrm"))
    assert a.report.kind == "VRM 0.x"
    assert a.blendshape_map["jawOpen"] == {"MTH_A": 1.0}
    assert a.blendshape_map["eyeBlinkLeft"] == {"EyeBlinkLeft": 0.5}  # the group's bind weight, 50/100
    assert a.report.mapping.direct["eyeBlinkLeft"] == ["expression 'EyeBlinkLeft'"]
    warning = a.report.warnings[0]
    assert "Other" in warning and "Joy" in warning
    assert "Other" not in a.target_names  # undriven targets are dropped


def test_own_default_head_glb_keeps_gaze_joints_and_all_shapes():
    """The default head's glb read through load_avatar keeps its eye joints (eyes turn with gaze)."""
    from avatar_app.avatar.loader import load_avatar
    from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
    from avatar_app.resources import resource_path

    a = load_avatar(resource_path("assets/default_head.glb"))
    assert a.gaze_joints is not None and a.head_joint == "head"
    assert set(BLENDSHAPE_NAMES) <= set(a.blendshape_map)
    assert not a.report.warnings
