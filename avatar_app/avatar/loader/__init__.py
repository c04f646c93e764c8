"""User avatars from glTF 2.0 (.glb/.gltf) and VRM 0.x/1.0 (.vrm) files.

:func:`load_avatar` turns a file into an :class:`~avatar_app.avatar.mesh.AvatarMesh`
the renderer draws: triangle meshes baked to model space (metres, +Y up, facing
+Z), morph targets driven from the 52 ARKit weights through
:mod:`avatar_app.avatar.mapping`, base-colour textures and alpha modes, and a
small skeleton (root, neck, head, eyes) so the head follows the head pose and
the eyes the gaze. What could not be mapped is returned in
:attr:`LoadedAvatar.report` and logged as one warning.

Thread: pure Python/numpy, no GL; call it on any thread (the window loads in the
background, then hands the mesh to the GUI thread's renderer).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from avatar_app.avatar.loader.document import GltfDocument
from avatar_app.avatar.loader.geometry import BakedPrimitive, MeshBaker, target_infos
from avatar_app.avatar.loader.materials import MaterialReader
from avatar_app.avatar.loader.rig import (ReducedRig, bust_weights, check_roles, find_by_name, reduce_rig,
                                          synthetic_head)
from avatar_app.avatar.loader.scene import build_scene
from avatar_app.avatar.loader.vrm import read_vrm
from avatar_app.avatar.mapping import ExpressionInfo, MappingResult, build_mapping
from avatar_app.avatar.mesh import INFLUENCES, AvatarMesh, MeshPrimitive, compute_normals
from avatar_app.core.errors import InputError
from avatar_app.core.rotations import rot_y

logger = logging.getLogger(__name__)

__all__ = ["LoadReport", "LoadedAvatar", "load_avatar", "AVATAR_SUFFIXES"]

#: File name endings the file dialogs offer (the loader itself reads the content, not the suffix).
AVATAR_SUFFIXES = (".glb", ".gltf", ".vrm")
#: Largest extent (metres) a model may have before it is taken to be in centimetres.
_CENTIMETRE_THRESHOLD_M = 50.0
#: Tallest model (metres) treated as a bust (head and shoulders) when it has no head bone.
_BUST_MAX_HEIGHT_M = 0.6
#: A bust is solid: every extent above this (a flat card or a single triangle is not).
_BUST_MIN_EXTENT_M = 0.03


@dataclass
class LoadReport:
    """How a file was read: for the CLI summary, the window's status line and logs.

    Attributes:
        path: the file.
        kind: "glTF 2.0", "VRM 0.x" or "VRM 1.0".
        warnings: messages for the user (the unmapped-shapes message is one entry);
            each was also logged with ``logging.warning``.
        notes: informational messages (unit correction, head pivot choice), logged at INFO.
        mapping: the blendshape mapping and what stayed unmapped.
        head: how the head joint was found: "VRM humanoid", "node names",
            "synthetic (bust)" or "none" (the avatar does not turn).
        bones: role ("neck", "head", "leftEye", "rightEye") -> node name in the file.
        unit_scale: factor applied to reach metres (1.0, or 0.01 for centimetres).
    """

    path: Path
    kind: str
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mapping: MappingResult = field(default_factory=MappingResult)
    head: str = "none"
    bones: dict[str, str] = field(default_factory=dict)
    unit_scale: float = 1.0

    @property
    def mapped_arkit(self) -> list[str]:
        """ARKit names that move something, in Apple's order."""
        missing = set(self.mapping.missing)
        from avatar_app.core.blendshapes import BLENDSHAPE_NAMES

        return [n for n in BLENDSHAPE_NAMES if n not in missing]


@dataclass
class LoadedAvatar(AvatarMesh):
    """An :class:`AvatarMesh` read from a file, with its :class:`LoadReport`.

    Attributes:
        report: what the loader did and what it could not map.
    """

    report: LoadReport | None = None


def _read_own_glb(path: Path, doc: GltfDocument) -> LoadedAvatar | None:
    """A .glb written by avatar_app's own writer (the default head) is read back exactly.

    Its ``scenes[0].extras.avatar_app`` holds the gaze joints, head/neck joints,
    framing and blendshape map, which the generic path would have to guess (and
    would guess wrong for the eye-turn lid morphs).
    """
    from dataclasses import fields

    from avatar_app.avatar.glb_reader import GENERATOR, read_avatar_glb

    asset = getattr(doc.gltf, "asset", None)
    if getattr(asset, "generator", None) != GENERATOR:
        return None
    mesh, _ = read_avatar_glb(path)
    loaded = LoadedAvatar(**{f.name: getattr(mesh, f.name) for f in fields(mesh)},
                          report=LoadReport(path=path, kind="glTF 2.0"))
    loaded.report.head = "avatar_app extras"
    loaded.validate()
    return loaded


def load_avatar(path: str | Path) -> LoadedAvatar:
    """Load a glTF 2.0 or VRM avatar.

    The format is recognised from the content (binary glTF header or JSON), not
    the suffix; .vrm files are binary glTF with the ``VRM`` (0.x) or ``VRMC_vrm``
    (1.0) extension.

    Args:
        path: a .glb, .gltf (embedded or external buffers/images) or .vrm file.

    Returns:
        the avatar, validated, in metres, +Y up, facing +Z; ``report`` says what
        was mapped and lists warnings (also logged).

    Raises:
        InputError: the file is missing or unreadable, not glTF 2.0, damaged
            (buffers, accessors, indices), requires an unsupported extension, or
            holds no triangles.
    """
    path = Path(path)
    doc = GltfDocument(path)
    own = _read_own_glb(path, doc)
    if own is not None:
        return own
    vrm = read_vrm(doc)
    kind = f"VRM {vrm.version}" if vrm else "glTF 2.0"
    report = LoadReport(path=path, kind=kind)
    corr = None
    if vrm is not None and vrm.version == "0.x":  # VRM 0.x faces -Z: turn it to face +Z
        corr = np.eye(4)
        corr[:3, :3] = rot_y(math.pi)
    scene = build_scene(doc, corr)

    rig = _find_rig(doc, scene, vrm, report)

    keys, infos = target_infos(doc)
    materials = MaterialReader(doc, report.warnings)
    group_of_node = rig.group_of_node if rig else np.zeros(len(scene.names), np.int64)
    baked = MeshBaker(doc, scene, group_of_node, rig.size if rig else 1, keys, materials.texcoords(),
                      report.warnings).bake()
    if not baked:
        raise InputError(f"avatar file {path} holds no triangle meshes to draw", path=path)

    lo, hi = _read_units(baked, report)
    rig, unit = _bust_rig(rig, baked, lo, hi, len(scene.names), report)

    expressions = _expressions(vrm, keys)
    has_eyes = rig is not None and rig.index("leftEye") is not None
    mapping = build_mapping(infos, expressions, gaze_by_bones=has_eyes)
    eye_morphs = any(a.startswith("eyeLook") for a in mapping.direct)
    report.mapping = mapping
    driven = mapping.driven_targets
    for b in baked:
        b.morph_normals = {k: d for k, d in b.morph_normals.items() if k in driven}
        b.morphs = {k: d for k, d in b.morphs.items() if k in driven}

    prims = _merge(baked, materials, rig is not None)
    skeleton = rig.skeleton(unit) if rig is not None else None
    name = (vrm.title if vrm and isinstance(vrm.title, str) and vrm.title.strip() else path.stem)
    mesh = LoadedAvatar(
        name=name,
        primitives=prims,
        skeleton=skeleton,
        blendshape_map={a: row for a, row in mapping.blendshape_map.items() if row},
        head_joint="head" if rig is not None else None,
        neck_joint="neck" if rig is not None and rig.index("neck") is not None else None,
        gaze_joints=("leftEye", "rightEye") if has_eyes and not eye_morphs else None,
        report=report,
    )
    mesh.view_center, mesh.view_height_m = _framing(mesh, rig)
    mesh.validate()
    _log_report(path, mesh, mapping)
    return mesh


def _find_rig(doc: GltfDocument, scene, vrm, report: LoadReport) -> ReducedRig | None:
    """The head rig from the VRM humanoid bones, else from node names; None without a head bone."""
    if vrm is not None and "head" in vrm.bones:
        roles = check_roles(scene, {r: n for r, n in vrm.bones.items()})
        report.head = "VRM humanoid"
    else:
        skin_joints = {j for sk in doc.gltf.skins or [] for j in sk.joints or []}
        roles = check_roles(scene, find_by_name(scene, skin_joints))
        report.head = "node names" if roles else "none"
    report.bones = {r: scene.names[n] or f"node {n}" for r, n in roles.items()}
    return reduce_rig(scene, roles) if roles else None


def _read_units(baked: list[BakedPrimitive], report: LoadReport) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of the baked primitives in metres; a model too large for metres is read as centimetres."""
    lo, hi = _bounds(baked)
    if float(np.max(hi - lo)) > _CENTIMETRE_THRESHOLD_M:
        report.unit_scale = 0.01
        report.notes.append(f"model is {float(np.max(hi - lo)):.0f} units across: read as centimetres")
        for b in baked:
            b.positions *= 0.01
            b.morphs = {k: d * np.float32(0.01) for k, d in b.morphs.items()}
        lo, hi = lo * 0.01, hi * 0.01
    return lo, hi


def _bust_rig(rig: ReducedRig | None, baked: list[BakedPrimitive], lo: np.ndarray, hi: np.ndarray, num_nodes: int,
              report: LoadReport) -> tuple[ReducedRig | None, float]:
    """A synthetic neck pivot for a bust without a head bone; returns (rig, unit scale of its joints)."""
    size = hi - lo
    if rig is None and size[1] <= _BUST_MAX_HEIGHT_M and float(size.min()) > _BUST_MIN_EXTENT_M:
        rig = synthetic_head(lo, hi, num_nodes)
        report.head = "synthetic (bust)"
        report.notes.append("no head bone: the bust turns about a pivot at the top of its neck, "
                            "shoulders blended to stay still")
        for b in baked:
            w = bust_weights(b.positions, lo, hi)
            b.group_weights = np.stack([1.0 - w, w], 1).astype(np.float32)
        return rig, 1.0  # synthetic pivots are made from already scaled bounds
    if rig is None:
        report.notes.append("no head bone found: the avatar does not turn with the head")
    return rig, report.unit_scale


def _log_report(path: Path, mesh: LoadedAvatar, mapping: MappingResult) -> None:
    report = mesh.report
    shapes = mapping.warning(f"'{path.name}'")
    if shapes:
        report.warnings.insert(0, shapes)
    for w in report.warnings:
        logger.warning("%s", w)
    for n in report.notes:
        logger.info("%s: %s", path.name, n)
    logger.info("loaded %s (%s): %d primitives, %d vertices, %d triangles, %d driven morph targets, head: %s",
                path.name, report.kind, len(mesh.primitives), mesh.num_vertices, mesh.num_triangles,
                len(mesh.target_names), report.head)


def _bounds(baked: list[BakedPrimitive]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.min([b.positions.min(0) for b in baked], 0)
    hi = np.max([b.positions.max(0) for b in baked], 0)
    return lo, hi


def _expressions(vrm, keys: list[list[str]]) -> list[ExpressionInfo]:
    out = []
    if vrm is None:
        return out
    for ex in vrm.expressions:
        binds: dict[str, float] = {}
        for mesh, idx, w in ex.binds:
            if mesh < len(keys) and 0 <= idx < len(keys[mesh]) and w > 0:
                key = keys[mesh][idx]
                binds[key] = max(binds.get(key, 0.0), min(float(w), 1.0))
        out.append(ExpressionInfo(ex.name, ex.preset, binds))
    return out


def _merge(baked: list[BakedPrimitive], materials: MaterialReader, skinned: bool) -> list[MeshPrimitive]:
    """Concatenate primitives that share a material, attribute set and morph targets (fewer draw calls)."""
    groups: dict[tuple, list[BakedPrimitive]] = {}
    for b in baked:
        if b.normals is None:
            b.normals = compute_normals(b.positions, b.indices, weld=False)
        key = (b.material, b.uvs is not None, b.colors is not None, tuple(sorted(b.morphs)),
               tuple(sorted(b.morph_normals)))
        groups.setdefault(key, []).append(b)
    out = []
    for (mat, has_uv, has_col, tkeys, nkeys), items in groups.items():
        offsets = np.cumsum([0] + [len(b.positions) for b in items])
        gw = np.concatenate([b.group_weights for b in items])
        joints = weights = None
        if skinned:
            joints, weights = _top_influences(gw)
        names = sorted({b.name.split("/")[0] for b in items})
        material = materials.material(mat)
        out.append(MeshPrimitive(
            name=material.name if len(names) > 1 else f"{names[0]}:{material.name}",
            positions=np.concatenate([b.positions for b in items]).astype(np.float32),
            normals=np.concatenate([b.normals for b in items]).astype(np.float32),
            indices=np.concatenate([b.indices + np.uint32(o) for b, o in zip(items, offsets)]).astype(np.uint32),
            material=material,
            uvs=np.concatenate([b.uvs for b in items]).astype(np.float32) if has_uv else None,
            colors=np.concatenate([b.colors for b in items]).astype(np.float32) if has_col else None,
            morph_targets={k: np.concatenate([b.morphs[k] for b in items]).astype(np.float32) for k in tkeys},
            morph_normals={k: np.concatenate([b.morph_normals[k] for b in items]).astype(np.float32)
                           for k in nkeys},
            joints=joints,
            weights=weights,
        ))
    return out


def _top_influences(group_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(V, R) weights -> the 4 largest as (V, 4) uint16 joints and (V, 4) float32 weights summing to 1."""
    v, r = group_weights.shape
    if r < INFLUENCES:
        group_weights = np.concatenate([group_weights, np.zeros((v, INFLUENCES - r), np.float32)], 1)
    order = np.argsort(-group_weights, axis=1, kind="stable")[:, :INFLUENCES]
    w = np.take_along_axis(group_weights, order, 1).astype(np.float32)
    total = w.sum(1, keepdims=True)
    w = np.where(total > 1e-8, w / np.maximum(total, 1e-8), np.eye(1, INFLUENCES, dtype=np.float32)[0])
    j = np.where(w > 0, order, 0).astype(np.uint16)
    if r < INFLUENCES:
        j = np.minimum(j, r - 1).astype(np.uint16)
    return j, w.astype(np.float32)


def _framing(mesh: AvatarMesh, rig: ReducedRig | None) -> tuple[np.ndarray | None, float | None]:
    """Camera centre and height: the face, found from the bones (loader/framing.py), else the bounds."""
    if rig is None or mesh.skeleton is None or rig.names == ["root", "head"] and not rig.source_nodes:
        lo, hi = mesh.bounds()
        size = hi - lo
        # The renderer fits the height; keep the width inside a 4:3 frame too.
        return ((lo + hi) / 2).astype(np.float32), 1.15 * float(max(size[1], 0.75 * size[0], 1e-3))
    from avatar_app.avatar.loader.framing import frame_avatar

    centre, height, source = frame_avatar(mesh)
    logger.info("%s: framed at its face, found from its %s", mesh.name, source)
    return centre, height
