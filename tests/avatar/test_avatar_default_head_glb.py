"""glb_writer and glb_reader: glTF 2.0 layout, exact round trip, and agreement with the avatar loader."""
from __future__ import annotations

import numpy as np
import pygltflib
import pytest

from avatar_app.avatar import default_head as dh
from avatar_app.avatar.authoring.glb_writer import write_avatar_glb
from avatar_app.avatar.glb_reader import quantise_colors, read_avatar_glb
from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton, compute_normals
from avatar_app.core.errors import InputError, ModelLoadError
from avatar_app.resources import resource_path


def _tiny_mesh(skinned: bool = True) -> AvatarMesh:
    rng = np.random.default_rng(1)
    pos = np.array([[0, 0, 0], [0.1, 0, 0], [0, 0.1, 0], [0.1, 0.1, 0.02]], np.float32)
    idx = np.array([0, 1, 2, 1, 3, 2], np.uint32)
    tex = rng.integers(0, 256, (4, 8, 4), dtype=np.uint8)
    a = MeshPrimitive("face", pos, compute_normals(pos, idx), idx,
                      Material("face", (0.9, 0.8, 0.7, 1.0), roughness=0.4, specular=0.6, texture=tex,
                               alpha_mode="MASK", alpha_cutoff=0.3, double_sided=True,
                               interior_color=(0.1, 0.0, 0.2)),
                      uvs=rng.random((4, 2)).astype(np.float32),
                      colors=quantise_colors(rng.random((4, 4))))
    a.morph_targets = {"jawOpen": np.array([[0, 0, 0], [0, -0.01, 0], [0, 0, 0], [0, -0.02, 0.001]], np.float32),
                       "eyeBlinkLeft": np.tile(np.array([0.0, 0.0, 0.003], np.float32), (4, 1))}
    a.morph_normals = {"jawOpen": np.zeros((4, 3), np.float32)}
    b = MeshPrimitive("glass", pos + np.float32(0.05), compute_normals(pos, idx), idx,
                      Material("glass", (0.2, 0.3, 0.9, 0.4), alpha_mode="BLEND"),
                      colors=rng.random((4, 4)).astype(np.float32))  # not 8-bit: written as floats
    skel = None
    if skinned:
        rest1 = np.eye(4)
        rest1[:3, :3] = [[0, -1, 0], [1, 0, 0], [0, 0, 1]]  # a rotated child joint
        rest1[:3, 3] = [0.0, 0.05, 0.0]
        joints = [Joint("root", -1, np.eye(4), np.eye(4)), Joint("head", 0, rest1, np.linalg.inv(rest1))]
        skel = Skeleton(joints)
        for p in (a, b):
            p.joints = np.zeros((4, 4), np.uint16)
            p.joints[:, 1] = 1
            p.weights = np.zeros((4, 4), np.float32)
            p.weights[:, :2] = [0.25, 0.75]
    return AvatarMesh("tiny", [a, b], skel, blendshape_map={"jawOpen": {"jawOpen": 0.5}},
                      head_joint="head" if skinned else None, view_center=np.array([0, 0.05, 0], np.float32),
                      view_height_m=0.3)


@pytest.mark.parametrize("skinned", [True, False])
def test_round_trip_is_exact(tmp_path, skinned):
    src = _tiny_mesh(skinned)
    path = write_avatar_glb(src, tmp_path / "tiny.glb", {"note": "x"})
    back, settings = read_avatar_glb(path)
    assert settings["note"] == "x"
    assert [p.name for p in back.primitives] == ["face", "glass"]
    for a, b in zip(src.primitives, back.primitives):
        for field in ("positions", "normals", "indices", "uvs", "colors", "joints", "weights"):
            x, y = getattr(a, field), getattr(b, field)
            assert (x is None) == (y is None), field
            if x is not None:
                assert x.dtype == y.dtype and np.array_equal(x, y), f"{a.name}.{field}"
        assert a.material.name == b.material.name and a.material.alpha_mode == b.material.alpha_mode
        assert a.material == b.material if a.material.texture is None else np.array_equal(a.material.texture,
                                                                                            b.material.texture)
        assert list(a.morph_targets) == list(b.morph_targets)
        for n in a.morph_targets:
            assert np.array_equal(a.morph_targets[n], b.morph_targets[n])
            ref = a.morph_normals.get(n, np.zeros_like(a.morph_targets[n]))
            assert np.array_equal(ref, b.morph_normals[n])
    assert back.blendshape_map == src.blendshape_map and back.head_joint == src.head_joint
    np.testing.assert_allclose(back.view_center, src.view_center)
    if skinned:
        for ja, jb in zip(src.skeleton.joints, back.skeleton.joints):
            assert (ja.name, ja.parent) == (jb.name, jb.parent)
            np.testing.assert_allclose(jb.rest_local, ja.rest_local, atol=1e-12)
            np.testing.assert_allclose(jb.inverse_bind, ja.inverse_bind, atol=1e-7)


def test_file_is_plain_gltf_with_sparse_named_targets(tmp_path):
    path = write_avatar_glb(_tiny_mesh(), tmp_path / "tiny.glb")
    g = pygltflib.GLTF2().load(str(path))
    assert g.asset.version == "2.0"
    face = next(m for m in g.meshes if m.name == "face")
    assert face.extras["targetNames"] == ["jawOpen", "eyeBlinkLeft"]
    assert len(face.weights) == 2
    target = face.primitives[0].targets[0]
    acc = g.accessors[target["POSITION"]]
    assert acc.bufferView is None and acc.sparse.count == 2  # only the moved vertices are stored
    assert acc.min is not None and acc.max is not None
    skin = g.skins[0]
    assert [g.nodes[j].name for j in skin.joints] == ["root", "head"]
    assert g.nodes[skin.joints[0]].children == [skin.joints[1]]
    assert all(n.skin == 0 for n in g.nodes if n.mesh is not None)
    mat = g.materials[0]
    assert mat.alphaMode == "MASK" and mat.doubleSided and mat.pbrMetallicRoughness.baseColorTexture is not None
    assert "KHR_materials_specular" in g.extensionsUsed


def test_bad_input_and_foreign_files(tmp_path):
    with pytest.raises(InputError, match=r"\.glb"):
        write_avatar_glb(_tiny_mesh(), tmp_path / "tiny.gltf")
    with pytest.raises(ModelLoadError, match="not found"):
        read_avatar_glb(tmp_path / "none.glb")
    junk = tmp_path / "junk.glb"
    junk.write_bytes(b"not a gltf at all, really")
    with pytest.raises(ModelLoadError, match="not a readable"):
        read_avatar_glb(junk)
    other = tmp_path / "other.glb"
    g = pygltflib.GLTF2(asset=pygltflib.Asset(version="2.0", generator="someone else"))
    g.save_binary(str(other))
    with pytest.raises(ModelLoadError, match="not written by"):
        read_avatar_glb(other)


def test_the_avatar_loader_reads_the_default_head_as_written():
    """The loader (glTF 2.0 for user avatars) gets the same arrays back from assets/default_head.glb."""
    from avatar_app.avatar.loader import load_avatar

    path = resource_path(dh.DEFAULT_HEAD_ASSET)
    ours, _ = read_avatar_glb(path)
    theirs = load_avatar(path)
    assert not theirs.report.warnings
    assert len(theirs.primitives) == len(ours.primitives)
    assert set(theirs.target_names) == set(ours.target_names)
    for a, b in zip(ours.primitives, theirs.primitives):
        np.testing.assert_allclose(b.positions, a.positions, atol=1e-6, err_msg=a.name)
        np.testing.assert_allclose(b.normals, a.normals, atol=1e-5, err_msg=a.name)
        assert np.array_equal(b.indices, a.indices), a.name
        if a.colors is not None:
            np.testing.assert_allclose(b.colors, a.colors, atol=1e-6)
        assert set(b.morph_targets) == set(a.morph_targets), a.name
        for n in a.morph_targets:
            np.testing.assert_allclose(b.morph_targets[n], a.morph_targets[n], atol=1e-6, err_msg=f"{a.name}/{n}")
        # the same joints influence each vertex (our own glb is read back exactly, names included)
        names_a = np.array([j.name for j in ours.skeleton.joints])
        names_b = np.array([j.name for j in theirs.skeleton.joints])
        used_a = {(v, names_a[j]) for v, row in enumerate(a.joints) for j, w in zip(row, a.weights[v]) if w > 0}
        used_b = {(v, names_b[j]) for v, row in enumerate(b.joints) for j, w in zip(row, b.weights[v]) if w > 0}
        assert used_a == used_b, a.name
    # the head and neck joints sit where the builder put them
    for name in ("neck", "head"):
        ja = ours.skeleton.joint_position(ours.skeleton.index(name))
        jb = theirs.skeleton.joint_position(theirs.skeleton.index(name))
        np.testing.assert_allclose(jb, ja, atol=1e-6)
