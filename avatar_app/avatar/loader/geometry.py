"""Mesh primitives of a glTF scene, baked into model space (glTF 2.0 "Meshes", "Skins").

Every mesh instance (a node with a mesh) becomes primitives in model space:
rigid instances through their node's world transform, skinned ones through
their skin at its rest pose (``sum_k w_k * world(joint_k) @ inverseBind_k``,
linear blend skinning as glTF 2.0 specifies). Morph target deltas go through the
same linear part. Each vertex also gets weights over the reduced rig's joints
(see :mod:`avatar_app.avatar.loader.rig`), from its skin joints or its node.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from avatar_app.avatar.loader.document import GltfDocument
from avatar_app.avatar.loader.scene import SceneGraph
from avatar_app.avatar.mapping import TargetInfo
from avatar_app.core.errors import InputError

logger = logging.getLogger(__name__)

_MODES = {0: "points", 1: "lines", 2: "line loops", 3: "line strips", 4: "triangles", 5: "triangle strips",
          6: "triangle fans"}


@dataclass
class BakedPrimitive:
    """One primitive instance in model space, before merging and material conversion.

    Attributes:
        name: "mesh name/primitive index".
        material: glTF material index, -1 for the default material.
        positions: (V, 3) float64 model space, metres (before unit correction).
        normals: (V, 3) float32 unit normals, or None (computed later).
        indices: (F*3,) uint32 counter-clockwise triangles.
        uvs: (V, 2) float32 or None.
        colors: (V, 4) float32 linear RGBA or None.
        morphs: target key -> (V, 3) float32 position deltas (model space).
        morph_normals: target key -> (V, 3) float32 normal deltas.
        group_weights: (V, R) float32 weights over the reduced rig's joints.
    """

    name: str
    material: int
    positions: np.ndarray
    normals: np.ndarray | None
    indices: np.ndarray
    uvs: np.ndarray | None = None
    colors: np.ndarray | None = None
    morphs: dict[str, np.ndarray] = field(default_factory=dict)
    morph_normals: dict[str, np.ndarray] = field(default_factory=dict)
    group_weights: np.ndarray | None = None


def target_infos(doc: GltfDocument) -> tuple[list[list[str]], list[TargetInfo]]:
    """Keys and names of every mesh's morph targets.

    Names come from ``mesh.extras.targetNames`` (glTF convention used by Blender,
    three.js, Babylon), else from the first primitive's ``extras.targetNames``
    (UniVRM). A named target's key is its name (targets of the same name in
    several meshes are driven together); an unnamed one gets "mesh<m>.target<k>".

    Returns:
        (keys[mesh][target], infos over all distinct keys in first-seen order).
    """
    keys: list[list[str]] = []
    infos: dict[str, TargetInfo] = {}
    for m, mesh in enumerate(doc.raw.get("meshes") or []):
        prims = mesh.get("primitives") or []
        count = max((len(p.get("targets") or []) for p in prims), default=0)
        names = (mesh.get("extras") or {}).get("targetNames")
        if not isinstance(names, list) and prims:
            names = (prims[0].get("extras") or {}).get("targetNames")
        names = names if isinstance(names, list) else []
        mlabel = f"mesh '{mesh['name']}'" if mesh.get("name") else f"mesh {m}"
        row, seen = [], set()
        for k in range(count):
            name = names[k] if k < len(names) and isinstance(names[k], str) and names[k].strip() else None
            if name is not None and name in seen:  # duplicate within a mesh: keep it apart
                key = f"{name}#{k}"
            else:
                key = name if name is not None else f"mesh{m}.target{k}"
            if name is not None:
                seen.add(name)
            row.append(key)
            infos.setdefault(key, TargetInfo(key, name, f"{mlabel} target {k}"))
        keys.append(row)
    return keys, list(infos.values())


def _triangles(mode: int, idx: np.ndarray) -> np.ndarray:
    if mode == 4:
        return idx[: idx.size - idx.size % 3]
    n = idx.size - 2
    if n <= 0:
        return np.zeros(0, idx.dtype)
    i = np.arange(n)
    if mode == 5:  # strip: alternate winding (glTF 2.0 "Meshes", TRIANGLE_STRIP)
        even = (i % 2) == 0
        a = np.where(even, idx[i], idx[i + 1])
        b = np.where(even, idx[i + 1], idx[i])
        tri = np.stack([a, b, idx[i + 2]], 1)
    else:  # fan
        tri = np.stack([np.full(n, idx[0]), idx[i + 1], idx[i + 2]], 1)
    keep = (tri[:, 0] != tri[:, 1]) & (tri[:, 1] != tri[:, 2]) & (tri[:, 0] != tri[:, 2])
    return tri[keep].reshape(-1)


def _inverse_transpose(m3: np.ndarray) -> np.ndarray:
    """Normal matrices of (..., 3, 3) linear maps (the map itself when singular)."""
    det = np.linalg.det(m3)
    ok = np.abs(det) > 1e-12
    out = np.array(m3, np.float64, copy=True)
    if np.all(ok):
        return np.swapaxes(np.linalg.inv(m3), -1, -2)
    if m3.ndim == 2:
        return out
    out[ok] = np.swapaxes(np.linalg.inv(m3[ok]), -1, -2)
    return out


class MeshBaker:
    """Reads the mesh instances of a scene into :class:`BakedPrimitive` objects.

    Args:
        doc: the document.
        scene: node world transforms.
        group_of_node: (N,) reduced-rig joint each node follows.
        num_groups: R, joints in the reduced rig.
        target_keys: keys[mesh][target] from :func:`target_infos`.
        texcoord_of_material: material index -> TEXCOORD set its base colour uses.
        notes: list that collects messages for the load report.
    """

    def __init__(self, doc: GltfDocument, scene: SceneGraph, group_of_node: np.ndarray, num_groups: int,
                 target_keys: list[list[str]], texcoord_of_material: dict[int, int], notes: list[str]):
        self.doc, self.scene = doc, scene
        self.group_of_node, self.R = group_of_node, num_groups
        self.target_keys = target_keys
        self.texcoord = texcoord_of_material
        self.notes = notes
        self._skipped_modes: dict[str, int] = {}

    def bake(self) -> list[BakedPrimitive]:
        """All triangle primitives of the scene.

        Raises:
            InputError: damaged data (index out of range, missing accessor, bad skin).
        """
        nodes = self.doc.gltf.nodes or []
        meshes = self.doc.raw.get("meshes") or []
        out: list[BakedPrimitive] = []
        for n in self.scene.order:
            m = nodes[n].mesh
            if m is None:
                continue
            if not 0 <= m < len(meshes):
                raise InputError(f"avatar file {self.doc.path}: node {n} uses mesh {m}, which does not exist",
                                 path=self.doc.path)
            skin = nodes[n].skin
            for k, prim in enumerate(meshes[m].get("primitives") or []):
                baked = self._primitive(n, m, k, prim, skin)
                if baked is not None:
                    out.append(baked)
        for what, count in self._skipped_modes.items():
            self.notes.append(f"{count} primitive(s) drawn as {what} were skipped (only triangles are rendered)")
        return out

    def _primitive(self, node: int, m: int, k: int, prim: dict, skin: int | None) -> BakedPrimitive | None:
        doc = self.doc
        mode = int(prim.get("mode", 4))
        if mode not in (4, 5, 6):
            what = _MODES.get(mode, f"mode {mode}")
            self._skipped_modes[what] = self._skipped_modes.get(what, 0) + 1
            return None
        attrs = prim.get("attributes") or {}
        where = f"mesh {m} primitive {k}"
        if "POSITION" not in attrs:
            raise InputError(f"avatar file {doc.path}: {where} has no POSITION attribute", path=doc.path)
        pos = doc.accessor(attrs["POSITION"]).astype(np.float64)
        if pos.shape[1] != 3:
            raise InputError(f"avatar file {doc.path}: {where} POSITION is not VEC3", path=doc.path)
        v = pos.shape[0]
        if "indices" in prim and prim["indices"] is not None:
            idx = doc.accessor(prim["indices"], as_float=False)[:, 0].astype(np.int64)
        else:
            idx = np.arange(v, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= v):
            raise InputError(f"avatar file {doc.path}: {where} has a vertex index {int(idx.max())} out of range "
                             f"for {v} vertices (damaged buffer)", path=doc.path)
        idx = _triangles(mode, idx)
        if idx.size == 0 or v == 0:
            return None
        nrm = doc.accessor(attrs["NORMAL"]).astype(np.float64) if "NORMAL" in attrs else None
        mat = prim.get("material")
        mat = int(mat) if isinstance(mat, int) else -1
        tc = f"TEXCOORD_{self.texcoord.get(mat, 0)}"
        uvs = doc.accessor(attrs[tc])[:, :2].astype(np.float32) if tc in attrs else None
        colors = None
        if "COLOR_0" in attrs:
            c = doc.accessor(attrs["COLOR_0"])
            colors = np.ones((v, 4), np.float32)
            colors[:, : c.shape[1]] = c[:, :4]
        for label, arr in (("NORMAL", nrm), (tc, uvs), ("COLOR_0", colors)):
            if arr is not None and arr.shape[0] != v:
                raise InputError(f"avatar file {doc.path}: {where} {label} has {arr.shape[0]} entries for {v} "
                                 "vertices", path=doc.path)
        morphs, morph_n = self._targets(m, prim, v, where, with_normals=nrm is not None)
        if skin is not None:
            mats, groups = self._skin_matrices(node, skin, attrs, v, where)
        else:
            mats = self.scene.world[node]
            groups = np.zeros((v, self.R), np.float32)
            groups[:, self.group_of_node[node]] = 1.0
        lin = mats[..., :3, :3]
        nmat = _inverse_transpose(lin)
        if mats.ndim == 2:
            pos_w = pos @ lin.T + mats[:3, 3]
            apply = lambda a: a @ lin.T  # noqa: E731
            apply_n = lambda a: a @ nmat.T  # noqa: E731
            if np.linalg.det(lin) < 0:  # mirrored instance: keep counter-clockwise front faces
                idx = idx.reshape(-1, 3)[:, [0, 2, 1]].reshape(-1)
        else:
            pos_w = np.einsum("vij,vj->vi", lin, pos) + mats[:, :3, 3]
            apply = lambda a: np.einsum("vij,vj->vi", lin, a)  # noqa: E731
            apply_n = lambda a: np.einsum("vij,vj->vi", nmat, a)  # noqa: E731
        normals = None
        if nrm is not None:
            nw = apply_n(nrm)
            length = np.linalg.norm(nw, axis=1, keepdims=True)
            inv_len = np.where(length > 1e-12, 1.0 / np.maximum(length, 1e-12), 0.0)
            normals = (nw * inv_len).astype(np.float32)
            bad = length[:, 0] <= 1e-12
            normals[bad] = (0.0, 1.0, 0.0)
            morph_n = {key: (apply_n(d) * inv_len).astype(np.float32) for key, d in morph_n.items()}
        morphs = {key: apply(d).astype(np.float32) for key, d in morphs.items()}
        mesh_name = (self.doc.raw["meshes"][m].get("name") or f"mesh{m}")
        return BakedPrimitive(
            name=f"{mesh_name}/{k}", material=mat, positions=pos_w, normals=normals,
            indices=idx.astype(np.uint32), uvs=uvs, colors=colors, morphs=morphs, morph_normals=morph_n,
            group_weights=groups,
        )

    def _targets(self, m: int, prim: dict, v: int, where: str, with_normals: bool
                 ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Morph deltas of a primitive, by target key: positions (V, 3) and normals (V, 3) float64, model space."""
        doc = self.doc
        morphs, morph_n = {}, {}
        keys = self.target_keys[m] if m < len(self.target_keys) else []
        for t, tgt in enumerate(prim.get("targets") or []):
            if t >= len(keys):
                break
            if "POSITION" in tgt:
                d = doc.accessor(tgt["POSITION"]).astype(np.float64)
                if d.shape != (v, 3):
                    raise InputError(f"avatar file {doc.path}: {where} morph target {t} has {d.shape[0]} deltas "
                                     f"for {v} vertices", path=doc.path)
                morphs[keys[t]] = d
            if "NORMAL" in tgt and with_normals:
                dn = doc.accessor(tgt["NORMAL"]).astype(np.float64)
                if dn.shape == (v, 3):
                    morph_n[keys[t]] = dn
                    morphs.setdefault(keys[t], np.zeros((v, 3)))
        return morphs, morph_n

    def _skin_matrices(self, node: int, skin_index: int, attrs: dict, v: int,
                       where: str) -> tuple[np.ndarray, np.ndarray]:
        """Per-vertex rest skinning matrices (V, 4, 4) and reduced-rig weights (V, R)."""
        doc = self.doc
        skins = doc.gltf.skins or []
        if not 0 <= skin_index < len(skins):
            raise InputError(f"avatar file {doc.path}: node {node} uses skin {skin_index}, which does not exist",
                             path=doc.path)
        skin = skins[skin_index]
        joints = list(skin.joints or [])
        nn = len(self.scene.names)
        if not joints or any(not 0 <= j < nn for j in joints):
            raise InputError(f"avatar file {doc.path}: skin {skin_index} lists joints that do not exist",
                             path=doc.path)
        if skin.inverseBindMatrices is not None:
            ibm = doc.accessor(skin.inverseBindMatrices).astype(np.float64)
            if ibm.shape != (len(joints), 16):
                raise InputError(f"avatar file {doc.path}: skin {skin_index} has {ibm.shape[0]} inverse bind "
                                 f"matrices for {len(joints)} joints", path=doc.path)
            ibm = ibm.reshape(-1, 4, 4).transpose(0, 2, 1)  # column-major storage
        else:
            ibm = np.tile(np.eye(4), (len(joints), 1, 1))
        s = self.scene.world[joints] @ ibm  # (J, 4, 4) rest skinning matrices
        jgroup = self.group_of_node[joints]
        sets = []
        i = 0
        while f"JOINTS_{i}" in attrs and f"WEIGHTS_{i}" in attrs:
            jj = doc.accessor(attrs[f"JOINTS_{i}"], as_float=False).astype(np.int64)
            ww = doc.accessor(attrs[f"WEIGHTS_{i}"]).astype(np.float64)
            if jj.shape != (v, 4) or ww.shape != (v, 4):
                raise InputError(f"avatar file {doc.path}: {where} JOINTS_{i}/WEIGHTS_{i} do not match its "
                                 f"{v} vertices", path=doc.path)
            sets.append((jj, ww))
            i += 1
        if not sets:  # skinned node without skin attributes: rigid on the node (glTF leaves it undefined)
            mats = np.broadcast_to(self.scene.world[node], (v, 4, 4)).copy()
            groups = np.zeros((v, self.R), np.float32)
            groups[:, self.group_of_node[node]] = 1.0
            return mats, groups
        jj = np.concatenate([a for a, _ in sets], 1)
        ww = np.concatenate([b for _, b in sets], 1)
        ww = np.where(ww > 0, ww, 0.0)
        if jj.max() >= len(joints):
            raise InputError(f"avatar file {doc.path}: {where} refers to joint {int(jj.max())} of skin "
                             f"{skin_index}, which has {len(joints)}", path=doc.path)
        total = ww.sum(1, keepdims=True)
        empty = total[:, 0] <= 1e-8
        ww = np.where(empty[:, None], np.eye(1, ww.shape[1])[0], ww / np.maximum(total, 1e-8))
        mats = np.zeros((v, 4, 4))
        groups = np.zeros((v, self.R), np.float64)
        rows = np.arange(v)
        for c in range(jj.shape[1]):
            w = ww[:, c]
            if not np.any(w):
                continue
            mats += w[:, None, None] * s[jj[:, c]]
            np.add.at(groups, (rows, jgroup[jj[:, c]]), w)
        return mats, groups.astype(np.float32)
