"""Write an :class:`~avatar_app.avatar.mesh.AvatarMesh` to binary glTF 2.0 (.glb), and read such files back.

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

Writing is deterministic (same mesh, same bytes). :func:`read_avatar_glb` is the
exact inverse for files written here (arrays come back bit for bit); user
avatars in general are read by the loader module.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np

from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton
from avatar_app.core.errors import InputError, ModelLoadError, RecordingError

logger = logging.getLogger(__name__)

GENERATOR = "avatar_app glb_writer"
EXTRAS_KEY = "avatar_app"
_FLOAT, _UBYTE, _USHORT, _UINT = 5126, 5121, 5123, 5125
_ARRAY_BUFFER, _ELEMENT_ARRAY_BUFFER = 34962, 34963
_TYPES = {1: "SCALAR", 2: "VEC2", 3: "VEC3", 4: "VEC4", 16: "MAT4"}
_NCOMP = {v: k for k, v in _TYPES.items()}
_DTYPES = {_FLOAT: np.float32, _USHORT: np.uint16, _UINT: np.uint32, _UBYTE: np.uint8}


def _unorm8(q: np.ndarray) -> np.ndarray:
    """float32 values of normalised unsigned bytes (glTF: c = q / 255)."""
    return q.astype(np.float32) / np.float32(255.0)


def quantise_colors(colors: np.ndarray) -> np.ndarray:
    """Round colours in [0, 1] to 8 bits, so that they are written as 4 bytes a vertex.

    Args:
        colors: (V, C) float colours in [0, 1].

    Returns:
        (V, C) float32 values ``round(255 c) / 255``, exactly what a reader of the
        file gets back.
    """
    return _unorm8(np.round(np.clip(np.asarray(colors, np.float64), 0.0, 1.0) * 255.0).astype(np.uint8))


class _Blob:
    """Binary chunk builder: 4-byte aligned buffer views."""

    def __init__(self, gltf):
        self.g = gltf
        self.parts: list[bytes] = []
        self.size = 0

    def view(self, data: bytes, target: int | None = None) -> int:
        import pygltflib

        pad = (-self.size) % 4
        if pad:
            self.parts.append(b"\0" * pad)
            self.size += pad
        self.g.bufferViews.append(pygltflib.BufferView(buffer=0, byteOffset=self.size, byteLength=len(data),
                                                       target=target))
        self.parts.append(data)
        self.size += len(data)
        return len(self.g.bufferViews) - 1

    def accessor(self, arr: np.ndarray, component: int, target: int | None = None, minmax: bool = False) -> int:
        import pygltflib

        a = np.ascontiguousarray(arr, _DTYPES[component])
        ncomp = 1 if a.ndim == 1 else a.shape[1]
        acc = pygltflib.Accessor(bufferView=self.view(a.tobytes(), target), componentType=component,
                                 count=int(a.shape[0]), type=_TYPES[ncomp])
        if minmax:
            acc.min = [float(v) for v in np.atleast_1d(a.min(axis=0))]
            acc.max = [float(v) for v in np.atleast_1d(a.max(axis=0))]
        self.g.accessors.append(acc)
        return len(self.g.accessors) - 1

    def sparse(self, delta: np.ndarray, minmax: bool) -> int:
        """A VEC3 float accessor of ``len(delta)`` elements, zeros except the non-zero rows."""
        import pygltflib

        d = np.ascontiguousarray(delta, np.float32)
        rows = np.flatnonzero(np.any(d != 0.0, axis=1))
        acc = pygltflib.Accessor(componentType=_FLOAT, count=int(len(d)), type="VEC3")
        if rows.size:
            comp = _USHORT if len(d) <= 65536 else _UINT
            acc.sparse = pygltflib.Sparse(
                count=int(rows.size),
                indices=pygltflib.AccessorSparseIndices(
                    bufferView=self.view(rows.astype(_DTYPES[comp]).tobytes()), componentType=comp),
                values=pygltflib.AccessorSparseValues(bufferView=self.view(d[rows].tobytes())))
        if minmax:
            acc.min = [float(v) for v in d.min(axis=0)]
            acc.max = [float(v) for v in d.max(axis=0)]
        self.g.accessors.append(acc)
        return len(self.g.accessors) - 1


def _trs(m: np.ndarray) -> tuple[list[float] | None, list[float] | None, list[float] | None]:
    """Translation, rotation quaternion (x, y, z, w) and scale of an affine 4x4 (None = identity)."""
    m = np.asarray(m, np.float64)
    t = m[:3, 3]
    a = m[:3, :3]
    s = np.linalg.norm(a, axis=0)
    r = a / s
    if np.linalg.det(r) < 0:
        s[0], r[:, 0] = -s[0], -r[:, 0]
    # quaternion from rotation matrix (Shepperd's method)
    tr = np.trace(r)
    if tr > 0:
        k = math.sqrt(tr + 1.0) * 2
        q = [(r[2, 1] - r[1, 2]) / k, (r[0, 2] - r[2, 0]) / k, (r[1, 0] - r[0, 1]) / k, 0.25 * k]
    else:
        i = int(np.argmax(np.diag(r)))
        j, kk = (i + 1) % 3, (i + 2) % 3
        k = math.sqrt(1.0 + r[i, i] - r[j, j] - r[kk, kk]) * 2
        q = [0.0] * 4
        q[i] = 0.25 * k
        q[j] = (r[j, i] + r[i, j]) / k
        q[kk] = (r[kk, i] + r[i, kk]) / k
        q[3] = (r[kk, j] - r[j, kk]) / k
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
    g.buffers.append(pygltflib.Buffer())
    blob = _Blob(g)
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
                                      inverseBindMatrices=blob.accessor(ibm, _FLOAT),
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
            POSITION=blob.accessor(p.positions, _FLOAT, _ARRAY_BUFFER, minmax=True),
            NORMAL=blob.accessor(p.normals, _FLOAT, _ARRAY_BUFFER))
        if p.colors is not None:
            q = np.round(p.colors.astype(np.float64) * 255.0)
            if np.array_equal(_unorm8(q.astype(np.uint8)), p.colors):  # 8-bit colours: 4 bytes a vertex
                attrs.COLOR_0 = blob.accessor(q.astype(np.uint8), _UBYTE, _ARRAY_BUFFER)
                g.accessors[attrs.COLOR_0].normalized = True
            else:
                attrs.COLOR_0 = blob.accessor(p.colors, _FLOAT, _ARRAY_BUFFER)
        if p.uvs is not None:
            attrs.TEXCOORD_0 = blob.accessor(p.uvs, _FLOAT, _ARRAY_BUFFER)
        if p.joints is not None:
            attrs.JOINTS_0 = blob.accessor(p.joints, _USHORT, _ARRAY_BUFFER)
            attrs.WEIGHTS_0 = blob.accessor(p.weights, _FLOAT, _ARRAY_BUFFER)
        names = list(p.morph_targets)
        targets = []
        for name in names:
            ta = pygltflib.Attributes(POSITION=blob.sparse(p.morph_targets[name], minmax=True))
            dn = p.morph_normals.get(name)
            ta.NORMAL = blob.sparse(dn if dn is not None else np.zeros((nv, 3), np.float32), minmax=False)
            targets.append(ta)
        idx_comp = _USHORT if nv <= 65535 else _UINT
        prim = pygltflib.Primitive(attributes=attrs, indices=blob.accessor(p.indices, idx_comp, _ELEMENT_ARRAY_BUFFER),
                                   material=len(g.materials) - 1, targets=targets or None)
        g.meshes.append(pygltflib.Mesh(name=p.name, primitives=[prim],
                                       weights=[0.0] * len(names) if names else None,
                                       extras={"targetNames": names} if names else {}))
        g.nodes.append(pygltflib.Node(name=p.name, mesh=len(g.meshes) - 1, skin=skin_index if p.joints is not None else None))
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
    data = b"".join(blob.parts)
    data += b"\0" * ((-len(data)) % 4)
    g.buffers[0].byteLength = len(data)
    g.set_binary_blob(data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        g.save_binary(str(path))
    except OSError as exc:
        raise RecordingError(f"cannot write the avatar file {path}: {exc.strerror or exc}") from exc
    logger.info("wrote %s: %d primitives, %d vertices, %.2f MB", path, len(mesh.primitives), mesh.num_vertices,
                path.stat().st_size / 1e6)
    return path


def _add_texture(g, blob: _Blob, texture: np.ndarray) -> int:
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


# ----------------------------------------------------------------------------- reading
def _parse_glb(data: bytes) -> tuple[dict, bytes]:
    """(JSON dict, binary chunk) of a GLB container (glTF 2.0 section 4.4)."""
    import struct

    if len(data) < 20:
        raise ValueError("file too short")
    magic, version, length = struct.unpack_from("<III", data, 0)
    if magic != 0x46546C67 or version != 2:
        raise ValueError("not a glTF 2.0 binary file")
    offset, doc, blob = 12, None, b""
    while offset + 8 <= min(length, len(data)):
        size, kind = struct.unpack_from("<II", data, offset)
        chunk = data[offset + 8: offset + 8 + size]
        if kind == 0x4E4F534A:
            doc = json.loads(chunk.decode("utf-8"))
        elif kind == 0x004E4942:
            blob = chunk
        offset += 8 + size
    if doc is None:
        raise ValueError("no JSON chunk")
    return doc, blob


def read_avatar_glb(path: str | Path) -> tuple[AvatarMesh, dict]:
    """Read a ``.glb`` written by :func:`write_avatar_glb` (about 50 ms for the default head).

    Args:
        path: the file.

    Returns:
        (the avatar, the ``scenes[0].extras.avatar_app`` settings dict, including any
        caller extras such as ``builder_version``).

    Raises:
        ModelLoadError: the file is missing, unreadable, or not written by this module.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"avatar file not found: {path}")
    try:
        doc, blob = _parse_glb(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path} is not a readable .glb file: {exc}") from exc
    if doc.get("asset", {}).get("generator") != GENERATOR or not doc.get("scenes"):
        raise ModelLoadError(f"{path} was not written by avatar_app's glb writer")
    try:
        settings = dict(doc["scenes"][0]["extras"][EXTRAS_KEY])
        return _read(doc, blob, settings), settings
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"{path} is damaged: {exc!r}") from exc


def _accessor(doc: dict, blob: bytes, index: int) -> np.ndarray:
    acc = doc["accessors"][index]
    ncomp = _NCOMP[acc["type"]]
    dtype = _DTYPES[acc["componentType"]]
    count = acc["count"]

    def view(bv_index: int, offset: int, n_items: int, n: int, dt) -> np.ndarray:
        bv = doc["bufferViews"][bv_index]
        start = bv.get("byteOffset", 0) + offset
        nbytes = n_items * n * np.dtype(dt).itemsize
        if start + nbytes > len(blob) or nbytes > bv["byteLength"]:
            raise ValueError(f"accessor {index} reads past its buffer view")
        return np.frombuffer(blob, dt, n_items * n, start).reshape(n_items, n)

    if "bufferView" in acc:
        out = view(acc["bufferView"], acc.get("byteOffset", 0), count, ncomp, dtype).copy()
    else:
        out = np.zeros((count, ncomp), dtype)
    sp = acc.get("sparse")
    if sp is not None:
        ind, val = sp["indices"], sp["values"]
        idx = view(ind["bufferView"], ind.get("byteOffset", 0), sp["count"], 1, _DTYPES[ind["componentType"]])[:, 0]
        if idx.size and int(idx.max()) >= count:
            raise ValueError(f"accessor {index}: sparse index out of range")
        out[idx.astype(np.int64)] = view(val["bufferView"], val.get("byteOffset", 0), sp["count"], ncomp, dtype)
    return out


def _node_matrix(node: dict) -> np.ndarray:
    if "matrix" in node:
        return np.asarray(node["matrix"], np.float64).reshape(4, 4).T
    m = np.eye(4)
    x, y, z, w = node.get("rotation", (0.0, 0.0, 0.0, 1.0))
    rot = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                    [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                    [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
    m[:3, :3] = rot * np.asarray(node.get("scale", (1.0, 1.0, 1.0)))[None, :]
    m[:3, 3] = node.get("translation", (0.0, 0.0, 0.0))
    return m


def _read(doc: dict, blob: bytes, settings: dict) -> AvatarMesh:
    nodes = doc["nodes"]
    skeleton = None
    if doc.get("skins"):
        skin = doc["skins"][0]
        ibm = _accessor(doc, blob, skin["inverseBindMatrices"]).reshape(-1, 4, 4).transpose(0, 2, 1)
        parent_of = {c: i for i, n in enumerate(nodes) for c in n.get("children", [])}
        pos_in_skin = {node: k for k, node in enumerate(skin["joints"])}
        joints = [Joint(nodes[node]["name"], pos_in_skin.get(parent_of.get(node, -1), -1), _node_matrix(nodes[node]),
                        ibm[k].astype(np.float64))
                  for k, node in enumerate(skin["joints"])]
        skeleton = Skeleton(joints)
    prims = []
    for node in nodes:
        if "mesh" not in node:
            continue
        gm = doc["meshes"][node["mesh"]]
        gp = gm["primitives"][0]
        a = gp["attributes"]
        mat = doc["materials"][gp["material"]]
        pbr = mat.get("pbrMetallicRoughness", {})
        spec = mat.get("extensions", {}).get("KHR_materials_specular", {}).get("specularFactor", 0.3)
        tex = pbr.get("baseColorTexture")
        material = Material(
            name=mat.get("name", "material"), base_color=tuple(float(c) for c in pbr.get("baseColorFactor", (1, 1, 1, 1))),
            roughness=float(pbr.get("roughnessFactor", 1.0)), specular=float(spec),
            texture=None if tex is None else _read_texture(doc, blob, tex["index"]),
            alpha_mode=mat.get("alphaMode", "OPAQUE"), alpha_cutoff=float(mat.get("alphaCutoff", 0.5)),
            double_sided=bool(mat.get("doubleSided", False)),
            interior_color=tuple(float(c) for c in mat.get("extras", {}).get("interior_color", (0.05, 0.012, 0.012))))

        def attr(key: str, dtype):
            if key not in a:
                return None
            raw = _accessor(doc, blob, a[key])
            if raw.dtype == np.uint8 and dtype == np.float32:  # normalised unsigned bytes
                return _unorm8(raw)
            return raw.astype(dtype)

        prim = MeshPrimitive(
            name=gm["name"], positions=attr("POSITION", np.float32), normals=attr("NORMAL", np.float32),
            indices=_accessor(doc, blob, gp["indices"])[:, 0].astype(np.uint32), material=material,
            uvs=attr("TEXCOORD_0", np.float32), colors=attr("COLOR_0", np.float32),
            joints=attr("JOINTS_0", np.uint16), weights=attr("WEIGHTS_0", np.float32))
        for name, t in zip(gm.get("extras", {}).get("targetNames", []), gp.get("targets", [])):
            prim.morph_targets[name] = _accessor(doc, blob, t["POSITION"])
            if "NORMAL" in t:
                prim.morph_normals[name] = _accessor(doc, blob, t["NORMAL"])
        prims.append(prim)
    vc = settings.get("view_center")
    mesh = AvatarMesh(
        name=settings.get("name", "avatar"), primitives=prims, skeleton=skeleton,
        blendshape_map={k: dict(v) for k, v in settings.get("blendshape_map", {}).items()},
        head_joint=settings.get("head_joint"), neck_joint=settings.get("neck_joint"),
        neck_share=float(settings.get("neck_share", 0.35)),
        gaze_joints=tuple(settings["gaze_joints"]) if settings.get("gaze_joints") else None,
        view_center=None if vc is None else np.asarray(vc, np.float32),
        view_height_m=settings.get("view_height_m"))
    try:
        mesh.validate()
    except InputError as exc:
        raise ValueError(str(exc)) from exc
    return mesh


def _read_texture(doc: dict, blob: bytes, index: int) -> np.ndarray:
    import cv2

    img = doc["images"][doc["textures"][index]["source"]]
    bv = doc["bufferViews"][img["bufferView"]]
    data = np.frombuffer(blob, np.uint8, bv["byteLength"], bv.get("byteOffset", 0))
    bgra = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if bgra is None or bgra.ndim != 3 or bgra.shape[2] != 4:
        raise ValueError(f"texture {index} is not an RGBA PNG")
    return np.ascontiguousarray(bgra[:, :, [2, 1, 0, 3]])
