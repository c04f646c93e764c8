"""Write an :class:`~avatar_app.avatar.mesh.AvatarMesh` to binary glTF 2.0 (.glb).

The file follows the glTF 2.0 specification (Khronos) so that any loader
(Blender, three.js, :mod:`avatar_app.avatar.loader`) reads it:

- **Nodes**: the skeleton's joints (``root`` -> ``neck`` -> ``head`` -> ``eye_L``,
  ``eye_R`` for the default head) with their rest transforms as TRS, and one node
  per primitive, named after it, holding a mesh of that name with one primitive
  and the skin. Scene roots: the skeleton root, then the mesh nodes.
- **Skin**: ``joints`` in :class:`~avatar_app.avatar.mesh.Skeleton` order,
  ``inverseBindMatrices`` (MAT4, column-major), ``skeleton`` = the root joint;
  vertices carry ``JOINTS_0`` (UNSIGNED_SHORT) and ``WEIGHTS_0`` (FLOAT).
- **Attributes**: ``POSITION`` (with min/max), ``NORMAL``, ``COLOR_0`` (VEC4,
  linear; normalised UNSIGNED_BYTE when the colours are 8-bit exact, see
  :func:`quantise_colors`, else FLOAT), ``TEXCOORD_0``; triangle ``indices`` (UNSIGNED_SHORT when they fit, else
  UNSIGNED_INT).
- **Morph targets**: per mesh, ``POSITION`` and ``NORMAL`` deltas as *sparse
  accessors* (glTF 2.0 section 3.6.2.3: no buffer view, so the base is zeros, plus the
  moved vertices' indices and values); names in ``mesh.extras.targetNames`` (the
  convention Blender and three.js use), ``mesh.weights`` all zero. A mesh lists only
  the targets that move its primitive.
- **Materials**: ``pbrMetallicRoughness`` (``baseColorFactor``, ``roughnessFactor``,
  ``metallicFactor`` 0, optional ``baseColorTexture`` as an embedded PNG),
  ``alphaMode``/``alphaCutoff``/``doubleSided``, ``KHR_materials_specular``
  (``specularFactor``), and ``extras.interior_color`` (back-face colour of a
  double-sided material, an avatar_app extension).
- **Avatar settings** in ``scenes[0].extras.avatar_app``: ``head_joint``,
  ``neck_joint``, ``neck_share``, ``gaze_joints``, ``view_center``,
  ``view_height_m``, ``blendshape_map`` and any extras the caller adds (the
  default head's builder version).

Writing is deterministic (same mesh, same bytes). :func:`avatar_app.avatar.glb_reader.read_avatar_glb`
(run time) is the exact inverse for files written here (arrays come back bit for
bit); user avatars in general are read by the loader module. Buffers are packed by
:class:`~avatar_app.avatar.authoring.gltf_buffer.GltfBuffer`.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from avatar_app.avatar.authoring.gltf_buffer import (ARRAY_BUFFER, ELEMENT_ARRAY_BUFFER, FLOAT, UNSIGNED_BYTE,
                                                     UNSIGNED_INT, UNSIGNED_SHORT, GltfBuffer)
from avatar_app.avatar.glb_reader import EXTRAS_KEY, GENERATOR, unorm8
from avatar_app.avatar.mesh import AvatarMesh
from avatar_app.core.errors import InputError, RecordingError
from avatar_app.core.rotations import quat_from_matrix

logger = logging.getLogger(__name__)


def _trs(m: np.ndarray) -> tuple[list[float] | None, list[float] | None, list[float] | None]:
    """Translation, rotation quaternion (x, y, z, w) and scale of an affine 4x4 (None = identity)."""
    m = np.asarray(m, np.float64)
    t = m[:3, 3]
    a = m[:3, :3]
    s = np.linalg.norm(a, axis=0)
    r = a / s
    if np.linalg.det(r) < 0:
        s[0], r[:, 0] = -s[0], -r[:, 0]
    q = quat_from_matrix(r)
    translation = None if np.allclose(t, 0.0, atol=0) else [float(v) for v in t]
    rotation = None if np.allclose(q, [0, 0, 0, 1], atol=0) else [float(v) for v in q]
    scale = None if np.allclose(s, 1.0, atol=0) else [float(v) for v in s]
    return translation, rotation, scale


def write_avatar_glb(mesh: AvatarMesh, path: str | Path, extras: dict | None = None) -> Path:
    """Write an avatar to a ``.glb`` file.

    Args:
        mesh: the avatar (validated first). Joint rest transforms must be affine
            without shear (translation, rotation, scale).
        path: output file; its folder is created.
        extras: JSON-serialisable values stored with the avatar settings in
            ``scenes[0].extras.avatar_app`` (e.g. ``{"builder_version": 2}``).

    Returns:
        ``path`` as a :class:`Path`.

    Raises:
        InputError: the mesh is invalid or ``path`` does not end in ``.glb``.
        RecordingError: the file cannot be written.
    """
    import pygltflib

    path = Path(path)
    if path.suffix.lower() != ".glb":
        raise InputError(f"avatar files are written as .glb; got {path.name}")
    mesh.validate()
    g = pygltflib.GLTF2(asset=pygltflib.Asset(version="2.0", generator=GENERATOR))
    blob = GltfBuffer(g)
    scene_nodes: list[int] = []

    skin_index = None
    skel = mesh.skeleton
    if skel is not None:
        first = len(g.nodes)
        for j in skel.joints:
            t, r, s = _trs(j.rest_local)
            g.nodes.append(pygltflib.Node(name=j.name, translation=t, rotation=r, scale=s))
        for i, j in enumerate(skel.joints):
            if j.parent < 0:
                scene_nodes.append(first + i)
            else:
                g.nodes[first + j.parent].children.append(first + i)
        ibm = np.stack([np.asarray(j.inverse_bind, np.float32).T.reshape(16) for j in skel.joints])
        g.skins.append(pygltflib.Skin(name="skeleton", joints=list(range(first, first + len(skel))),
                                      inverseBindMatrices=blob.accessor(ibm, FLOAT),
                                      skeleton=first + next(i for i, j in enumerate(skel.joints) if j.parent < 0)))
        skin_index = 0

    uses_specular = False
    for p in mesh.primitives:
        m = p.material
        mat = pygltflib.Material(
            name=m.name, doubleSided=bool(m.double_sided), alphaMode=m.alpha_mode,
            alphaCutoff=float(m.alpha_cutoff) if m.alpha_mode == "MASK" else None,
            pbrMetallicRoughness=pygltflib.PbrMetallicRoughness(
                baseColorFactor=[float(c) for c in m.base_color], metallicFactor=0.0,
                roughnessFactor=float(m.roughness)),
            extensions={"KHR_materials_specular": {"specularFactor": float(m.specular)}},
            extras={"interior_color": [float(c) for c in m.interior_color]})
        uses_specular = True
        if m.texture is not None:
            mat.pbrMetallicRoughness.baseColorTexture = pygltflib.TextureInfo(index=_add_texture(g, blob, m.texture))
        g.materials.append(mat)
        nv = p.num_vertices
        attrs = pygltflib.Attributes(
            POSITION=blob.accessor(p.positions, FLOAT, ARRAY_BUFFER, minmax=True),
            NORMAL=blob.accessor(p.normals, FLOAT, ARRAY_BUFFER))
        if p.colors is not None:
            q = np.round(p.colors.astype(np.float64) * 255.0)
            if np.array_equal(unorm8(q.astype(np.uint8)), p.colors):  # 8-bit colours: 4 bytes a vertex
                attrs.COLOR_0 = blob.accessor(q.astype(np.uint8), UNSIGNED_BYTE, ARRAY_BUFFER)
                g.accessors[attrs.COLOR_0].normalized = True
            else:
                attrs.COLOR_0 = blob.accessor(p.colors, FLOAT, ARRAY_BUFFER)
        if p.uvs is not None:
            attrs.TEXCOORD_0 = blob.accessor(p.uvs, FLOAT, ARRAY_BUFFER)
        if p.joints is not None:
            attrs.JOINTS_0 = blob.accessor(p.joints, UNSIGNED_SHORT, ARRAY_BUFFER)
            attrs.WEIGHTS_0 = blob.accessor(p.weights, FLOAT, ARRAY_BUFFER)
        names = list(p.morph_targets)
        targets = []
        for name in names:
            ta = pygltflib.Attributes(POSITION=blob.sparse(p.morph_targets[name]))
            dn = p.morph_normals.get(name)
            ta.NORMAL = blob.sparse(dn if dn is not None else np.zeros((nv, 3), np.float32), minmax=False)
            targets.append(ta)
        idx_comp = UNSIGNED_SHORT if nv <= 65535 else UNSIGNED_INT
        prim = pygltflib.Primitive(attributes=attrs, indices=blob.accessor(p.indices, idx_comp, ELEMENT_ARRAY_BUFFER),
                                   material=len(g.materials) - 1, targets=targets or None)
        g.meshes.append(pygltflib.Mesh(name=p.name, primitives=[prim],
                                       weights=[0.0] * len(names) if names else None,
                                       extras={"targetNames": names} if names else {}))
        g.nodes.append(pygltflib.Node(name=p.name, mesh=len(g.meshes) - 1,
                                      skin=skin_index if p.joints is not None else None))
        scene_nodes.append(len(g.nodes) - 1)

    settings = {
        "head_joint": mesh.head_joint, "neck_joint": mesh.neck_joint, "neck_share": float(mesh.neck_share),
        "gaze_joints": list(mesh.gaze_joints) if mesh.gaze_joints else None,
        "view_center": None if mesh.view_center is None else [float(v) for v in mesh.view_center],
        "view_height_m": None if mesh.view_height_m is None else float(mesh.view_height_m),
        "blendshape_map": {k: {t: float(f) for t, f in v.items()} for k, v in mesh.blendshape_map.items()},
        "name": mesh.name,
    }
    settings.update(extras or {})
    g.scenes.append(pygltflib.Scene(name=mesh.name, nodes=scene_nodes, extras={EXTRAS_KEY: settings}))
    g.scene = 0
    if uses_specular:
        g.extensionsUsed = ["KHR_materials_specular"]
    blob.finish()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        g.save_binary(str(path))
    except OSError as exc:
        raise RecordingError(f"cannot write the avatar file {path}: {exc.strerror or exc}") from exc
    logger.info("wrote %s: %d primitives, %d vertices, %.2f MB", path, len(mesh.primitives), mesh.num_vertices,
                path.stat().st_size / 1e6)
    return path


def _add_texture(g, blob: GltfBuffer, texture: np.ndarray) -> int:
    import cv2
    import pygltflib

    ok, png = cv2.imencode(".png", np.ascontiguousarray(texture[:, :, [2, 1, 0, 3]]))
    if not ok:
        raise InputError("cannot encode a material texture as PNG")
    g.images.append(pygltflib.Image(bufferView=blob.view(png.tobytes()), mimeType="image/png"))
    if not g.samplers:
        g.samplers.append(pygltflib.Sampler(magFilter=9729, minFilter=9987, wrapS=10497, wrapT=10497))
    g.textures.append(pygltflib.Texture(source=len(g.images) - 1, sampler=0))
    return len(g.textures) - 1
