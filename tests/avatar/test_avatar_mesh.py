"""Avatar data structures: validation, blendshape mapping, skinning maths, normals."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton, compute_normals
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape
from avatar_app.core.errors import InputError


def _quad(name: str = "quad", **kw) -> MeshPrimitive:
    pos = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32)
    idx = np.array([0, 1, 2, 0, 2, 3], np.uint32)
    nrm = np.tile(np.array([0, 0, 1], np.float32), (4, 1))
    return MeshPrimitive(name, pos, nrm, idx, **kw)


def _translation(t) -> np.ndarray:
    m = np.eye(4)
    m[:3, 3] = t
    return m


def test_valid_primitive_passes_and_counts():
    p = _quad(morph_targets={"jawOpen": np.zeros((4, 3), np.float32)})
    p.validate()
    assert p.num_vertices == 4 and p.num_triangles == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(normals=np.zeros((3, 3), np.float32)), "normals must be"),
        (dict(indices=np.array([0, 1, 9], np.uint32)), "out of range"),
        (dict(indices=np.array([0, 1, 2, 3], np.uint32)), "indices must be"),
        (dict(positions=np.full((4, 3), np.nan, np.float32)), "NaN"),
        (dict(morph_targets={"x": np.zeros((4, 2), np.float32)}), "morph target 'x'"),
        (dict(morph_normals={"y": np.zeros((4, 3), np.float32)}), "unknown morph target 'y'"),
        (dict(joints=np.zeros((4, 4), np.uint16)), "given together"),
    ],
)
def test_invalid_primitive_is_rejected_with_a_clear_message(change, message):
    p = _quad()
    for k, v in change.items():
        setattr(p, k, v)
    with pytest.raises(InputError, match=message):
        p.validate()


def test_material_rejects_bad_alpha_mode_and_texture():
    with pytest.raises(InputError, match="alpha_mode"):
        Material(alpha_mode="CUTOUT").validate()
    with pytest.raises(InputError, match="texture"):
        Material(texture=np.zeros((4, 4, 3), np.uint8)).validate()


def test_skin_weights_need_a_skeleton_and_valid_indices():
    p = _quad(joints=np.zeros((4, 4), np.uint16), weights=np.tile([1, 0, 0, 0], (4, 1)).astype(np.float32))
    with pytest.raises(InputError, match="no skeleton"):
        p.validate(0)
    p.joints[0, 0] = 3
    with pytest.raises(InputError, match="joint index 3"):
        p.validate(2)


def test_mapping_matrix_defaults_to_same_name_and_accepts_custom_tables():
    p = _quad(morph_targets={"jawOpen": np.zeros((4, 3), np.float32), "Fcl_EYE_Close": np.zeros((4, 3), np.float32)})
    mesh = AvatarMesh("m", [p])
    m = mesh.mapping_matrix()
    assert m.shape == (52, 2)
    assert m[Blendshape.jawOpen, 0] == 1.0 and m.sum() == 1.0  # only the ARKit-named target is mapped
    mesh.blendshape_map = {"eyeBlinkLeft": {"Fcl_EYE_Close": 0.5}, "eyeBlinkRight": {"Fcl_EYE_Close": 0.5}}
    m = mesh.mapping_matrix()
    w = np.zeros(52, np.float32)
    w[[Blendshape.eyeBlinkLeft, Blendshape.eyeBlinkRight]] = 1.0
    assert np.allclose(w @ m, [0.0, 1.0])
    mesh.blendshape_map = {"notAShape": {"jawOpen": 1.0}}
    with pytest.raises(InputError, match="unknown ARKit shape 'notAShape'"):
        mesh.mapping_matrix()
    mesh.blendshape_map = {"jawOpen": {"missing": 1.0}}
    with pytest.raises(InputError, match="missing target 'missing'"):
        mesh.mapping_matrix()
    assert len(BLENDSHAPE_NAMES) == 52


def _skeleton() -> Skeleton:
    root = Joint("root", -1, _translation([0, 1, 0]), np.linalg.inv(_translation([0, 1, 0])))
    head = Joint("head", 0, _translation([0, 0.5, 0]), np.linalg.inv(_translation([0, 1.5, 0])))
    return Skeleton([root, head])


def test_skin_matrices_are_identity_at_rest_and_rotate_about_the_joint():
    skel = _skeleton()
    skel.validate()
    assert np.allclose(skel.skin_matrices(), np.eye(4), atol=1e-6)
    a = 0.7
    rot = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    m = skel.skin_matrices({1: rot})
    pivot = np.array([0, 1.5, 0, 1.0])
    assert np.allclose(m[1] @ pivot, pivot, atol=1e-6)  # the joint itself stays put
    front = np.array([0, 1.5, 1.0, 1.0])
    assert np.allclose((m[1] @ front)[:3], [np.sin(a), 1.5, np.cos(a)], atol=1e-6)
    assert np.allclose(m[0], np.eye(4), atol=1e-6)  # the parent is untouched


def test_child_joint_follows_its_parent():
    skel = _skeleton()
    rot = np.array([[0.0, -1, 0], [1, 0, 0], [0, 0, 1]])  # 90 deg about Z at the root (0, 1, 0)
    m = skel.skin_matrices({0: rot})
    head_pivot = np.array([0, 1.5, 0, 1.0])
    assert np.allclose((m[1] @ head_pivot)[:3], [-0.5, 1.0, 0.0], atol=1e-6)


def test_skeleton_rejects_bad_hierarchy():
    bad = Skeleton([Joint("a", 0, np.eye(4), np.eye(4))])
    with pytest.raises(InputError, match="parent"):
        bad.validate()
    with pytest.raises(InputError, match="no joint named 'x'"):
        _skeleton().index("x")


def test_compute_normals_of_a_sphere_point_outward_and_weld_seams():
    n_r, n_s = 12, 16
    a = np.linspace(0, np.pi, n_r)
    b = np.linspace(0, 2 * np.pi, n_s + 1)  # duplicated seam column
    A, B = np.meshgrid(a, b, indexing="ij")
    pos = np.stack([np.sin(A) * np.cos(B), np.cos(A), np.sin(A) * np.sin(B)], -1).reshape(-1, 3)
    idx = []
    for r in range(n_r - 1):
        for c in range(n_s):
            i0, i2 = r * (n_s + 1) + c, (r + 1) * (n_s + 1) + c
            i1, i3 = i0 + 1, i2 + 1
            idx += [i0, i1, i2, i1, i3, i2]
    n = compute_normals(pos, np.array(idx, np.uint32))
    assert n.dtype == np.float32
    assert np.allclose(np.linalg.norm(n, axis=1), 1.0, atol=1e-5)
    cos = np.abs(np.einsum("ij,ij->i", n, pos / np.linalg.norm(pos, axis=1, keepdims=True)))
    assert cos.min() > 0.97
    seam = np.arange(n_r) * (n_s + 1)
    assert np.allclose(n[seam], n[seam + n_s], atol=1e-6)  # welded duplicate vertices agree
