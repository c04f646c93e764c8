"""The VRM parts of a glTF file: humanoid bones and expressions (VRM 0.x and 1.0).

Sources: VRM 0.x specification (extension ``VRM``: ``humanoid.humanBones`` as a
list of {bone, node}, ``blendShapeMaster.blendShapeGroups`` with binds {mesh,
index, weight 0..100}); VRM 1.0 specification (extension ``VRMC_vrm``:
``humanoid.humanBones`` as {bone: {node}}, ``expressions.preset`` /
``expressions.custom`` with ``morphTargetBinds`` {node, index, weight 0..1}).
VRM 0.x models face -Z, VRM 1.0 models face +Z.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from avatar_app.avatar.loader.document import GltfDocument
from avatar_app.avatar.mapping import match_preset

logger = logging.getLogger(__name__)


@dataclass
class RawExpression:
    """A VRM expression as stored: binds refer to glTF meshes and target indices.

    Attributes:
        name: the expression's name ("aa", "Joy", "EyeBlinkLeft").
        preset: VRM 1.0 preset name or None for custom expressions.
        binds: (mesh index, target index, weight in [0, 1]).
        is_binary: VRM's isBinary flag (on/off at 0.5); not honoured, weights stay linear.
    """

    name: str
    preset: str | None
    binds: list[tuple[int, int, float]] = field(default_factory=list)
    is_binary: bool = False


@dataclass
class VrmInfo:
    """What the loader uses from a VRM file.

    Attributes:
        version: "0.x" or "1.0".
        bones: humanoid bone name (VRM 1.0 spelling: head, neck, leftEye, ...) -> node index.
        expressions: the expressions in file order.
        look_at_type: "bone" or "expression" (VRM 0.x "BlendShape"), None if absent.
        title: the model's name from the meta block.
    """

    version: str
    bones: dict[str, int]
    expressions: list[RawExpression]
    look_at_type: str | None
    title: str | None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def read_vrm(doc: GltfDocument) -> VrmInfo | None:
    """The VRM block of a document, or None for plain glTF.

    Malformed entries (a bind without a node, a bone index out of range) are
    skipped with a log message rather than refusing the whole avatar.
    """
    ext = doc.extensions
    if isinstance(ext.get("VRMC_vrm"), dict):
        return _read_vrm1(doc, ext["VRMC_vrm"])
    if isinstance(ext.get("VRM"), dict):
        return _read_vrm0(doc, ext["VRM"])
    return None


def _read_vrm1(doc: GltfDocument, v: dict) -> VrmInfo:
    nodes = doc.gltf.nodes or []
    bones = {}
    for name, b in ((v.get("humanoid") or {}).get("humanBones") or {}).items():
        node = _int(b.get("node")) if isinstance(b, dict) else None
        if node is not None and 0 <= node < len(nodes):
            bones[name] = node
    exprs = []
    ex = v.get("expressions") or {}
    for group, is_preset in (("preset", True), ("custom", False)):
        for name, e in (ex.get(group) or {}).items():
            if not isinstance(e, dict):
                continue
            binds = []
            for b in e.get("morphTargetBinds") or []:
                node, idx = _int(b.get("node")), _int(b.get("index"))
                if node is None or idx is None or not 0 <= node < len(nodes) or nodes[node].mesh is None:
                    logger.info("%s: expression '%s' binds node %r without a mesh; skipped", doc.label, name, node)
                    continue
                binds.append((nodes[node].mesh, idx, float(b.get("weight", 1.0))))
            preset = (match_preset(name) or name) if is_preset else None
            exprs.append(RawExpression(name, preset, binds, bool(e.get("isBinary", False))))
    look = (v.get("lookAt") or {}).get("type")
    meta = v.get("meta") or {}
    return VrmInfo("1.0", bones, exprs, look if isinstance(look, str) else None, meta.get("name"))


def _read_vrm0(doc: GltfDocument, v: dict) -> VrmInfo:
    nodes = doc.gltf.nodes or []
    meshes = doc.gltf.meshes or []
    bones = {}
    for b in (v.get("humanoid") or {}).get("humanBones") or []:
        if not isinstance(b, dict):
            continue
        node = _int(b.get("node"))
        if isinstance(b.get("bone"), str) and node is not None and 0 <= node < len(nodes):
            bones[b["bone"]] = node
    exprs = []
    for grp in (v.get("blendShapeMaster") or {}).get("blendShapeGroups") or []:
        if not isinstance(grp, dict):
            continue
        name = str(grp.get("name") or grp.get("presetName") or "")
        preset_name = str(grp.get("presetName") or "unknown").lower()
        preset = match_preset(preset_name) if preset_name != "unknown" else None
        binds = []
        for b in grp.get("binds") or []:
            mesh, idx = _int(b.get("mesh")), _int(b.get("index"))
            if mesh is None or idx is None or not 0 <= mesh < len(meshes):
                logger.info("%s: blend shape group '%s' binds mesh %r, which does not exist; skipped",
                            doc.label, name, mesh)
                continue
            binds.append((mesh, idx, float(b.get("weight", 100.0)) / 100.0))
        exprs.append(RawExpression(name, preset, binds, bool(grp.get("isBinary", False))))
    look = (v.get("firstPerson") or {}).get("lookAtTypeName")
    look = {"Bone": "bone", "BlendShape": "expression"}.get(look) if isinstance(look, str) else None
    meta = v.get("meta") or {}
    return VrmInfo("0.x", bones, exprs, look, meta.get("title"))
