"""Read back an avatar ``.glb`` written by :mod:`avatar_app.avatar.authoring.glb_writer`.

The run-time half of the app's own avatar format (the layout is described in the
writer's module docstring): the default head's asset is read here at start-up
(about 50 ms), and the avatar loader hands files written by the app to
:func:`read_avatar_glb`. Arrays come back bit for bit.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton
from avatar_app.core.errors import InputError, ModelLoadError
from avatar_app.core.rotations import matrix_from_quat

#: ``asset.generator`` of the files written by the app's glb writer.
GENERATOR = "avatar_app glb_writer"
#: Key of the avatar settings in ``scenes[0].extras``.
EXTRAS_KEY = "avatar_app"
_NCOMP = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}
_DTYPES = {5126: np.float32, 5123: np.uint16, 5125: np.uint32, 5121: np.uint8}


def unorm8(q: np.ndarray) -> np.ndarray:
    """float32 values of normalised unsigned bytes (glTF: c = q / 255).

    Args:
        q: uint8 array.

    Returns:
        float32 array of the same shape, in [0, 1].
    """
    return q.astype(np.float32) / np.float32(255.0)


def quantise_colors(colors: np.ndarray) -> np.ndarray:
    """Round colours in [0, 1] to 8 bits, so that they are written as 4 bytes a vertex.

    Args:
        colors: (V, C) float colours in [0, 1].

    Returns:
        (V, C) float32 values ``round(255 c) / 255``, exactly what a reader of the
        file gets back.
    """
    return unorm8(np.round(np.clip(np.asarray(colors, np.float64), 0.0, 1.0) * 255.0).astype(np.uint8))


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
    """Read a ``.glb`` written by :func:`~avatar_app.avatar.authoring.glb_writer.write_avatar_glb` (~50 ms).

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
    rot = matrix_from_quat(node.get("rotation", (0.0, 0.0, 0.0, 1.0)))
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
            name=mat.get("name", "material"),
            base_color=tuple(float(c) for c in pbr.get("baseColorFactor", (1, 1, 1, 1))),
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
                return unorm8(raw)
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
