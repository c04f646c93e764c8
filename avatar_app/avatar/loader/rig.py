"""Head, neck and eye bones of a user avatar, and the small skeleton the renderer poses.

The renderer turns only the neck, the head and the eyes (head pose and gaze), so
every node of the file is assigned to the nearest of those above it (or to a
static root). A skinned mesh is baked to its rest pose on load and then skinned
against this reduced skeleton: with the usual case of a rig at its bind pose this
is exact, and it keeps any rig (VRoid avatars have 100+ bones) within the
renderer's 64 joints.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from avatar_app.avatar.loader.scene import SceneGraph
from avatar_app.avatar.mesh import Joint, Skeleton

#: Roles, in skeleton order (parents first). Names are VRM 1.0 humanoid bone names.
ROLES = ("neck", "head", "leftEye", "rightEye")
_EXCLUDE = {"end", "top", "tip", "nub", "null", "target", "ctrl", "control", "ik", "fk", "lid", "lash",
            "lashes", "brow", "highlight", "socket", "hair", "accessory", "acc", "twist"}


def _tokens(name: str) -> list[str]:
    s = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return [t.rstrip("0123456789") for t in re.split(r"[^A-Za-z0-9]+", s.lower()) if t]


def _side(tokens: list[str]) -> str | None:
    if "l" in tokens or "left" in tokens:
        return "left"
    if "r" in tokens or "right" in tokens:
        return "right"
    return None


def find_by_name(scene: SceneGraph, skin_joints: set[int] | frozenset[int] = frozenset()) -> dict[str, int]:
    """Head, neck and eye nodes found by their names (used when the file has no VRM humanoid).

    Recognises e.g. "Head", "mixamorig:Head", "J_Bip_C_Head", "Bip01 Head",
    "DEF-head", "neck_01", "LeftEye", "eye.L", "J_Adj_L_FaceEye", "CC_Base_R_Eye";
    ignores helper bones ("HeadTop_End", "head_end", "eyelid_L", ...). Among
    several candidates, skin joints win over other nodes (a mesh object called
    "Head" beside the armature is not the bone), then the one nearest the root.

    Args:
        scene: the node hierarchy.
        skin_joints: nodes used as joints by any skin.

    Returns:
        role -> node index for the roles found (see :data:`ROLES`).
    """
    depth = {n: len(scene.ancestors(n)) for n in scene.order}
    cands: dict[str, list[int]] = {r: [] for r in ROLES}
    for n in scene.order:
        toks = _tokens(scene.names[n])
        if not toks or _EXCLUDE & set(toks):
            continue
        if "head" in toks and not {"eye", "neck"} & set(toks):
            cands["head"].append(n)
        elif "neck" in toks:
            cands["neck"].append(n)
        elif "eye" in toks or any(t.endswith("eye") for t in toks):
            side = _side(toks)
            if side is not None:
                cands["leftEye" if side == "left" else "rightEye"].append(n)
    found = {}
    for role in ROLES:
        if cands[role]:
            found[role] = min(cands[role], key=lambda n: (n not in skin_joints, depth[n], n))
    return found


def check_roles(scene: SceneGraph, roles: dict[str, int]) -> dict[str, int]:
    """Keep a consistent set: the neck above the head, the eyes below it.

    Returns:
        the roles that fit; eyes are dropped without a head, a neck that is not
        an ancestor of the head is dropped.
    """
    out = {r: n for r, n in roles.items() if r in ROLES and scene.in_scene[n]}
    head = out.get("head")
    if head is None:
        return {}
    above = set(scene.ancestors(head)[1:])
    if "neck" in out and out["neck"] not in above:
        del out["neck"]
    for eye in ("leftEye", "rightEye"):
        if eye in out and head not in scene.ancestors(out[eye])[1:]:
            del out[eye]
    if ("leftEye" in out) != ("rightEye" in out):
        out.pop("leftEye", None)
        out.pop("rightEye", None)
    return out


@dataclass
class ReducedRig:
    """The joints the renderer poses, and which of them each file node follows.

    Attributes:
        names: joint names, "root" first, then the roles present (see :data:`ROLES`).
        pivots: (R, 3) float64 model-space rest positions (rotation centres), metres.
        parents: (R,) parent joint indices (-1 for the root).
        group_of_node: (N,) int joint each file node follows (0 = static root).
        source_nodes: role -> file node index (for the report).
    """

    names: list[str]
    pivots: np.ndarray
    parents: list[int]
    group_of_node: np.ndarray
    source_nodes: dict[str, int]

    @property
    def size(self) -> int:
        """Number of joints R."""
        return len(self.names)

    def index(self, role: str) -> int | None:
        """Joint index of a role, None when absent."""
        return self.names.index(role) if role in self.names else None

    def skeleton(self, scale: float = 1.0) -> Skeleton:
        """The renderer's skeleton: pure translations, inverse binds so rest = identity.

        Args:
            scale: factor applied to the pivots (the loader's unit correction).
        """
        joints = []
        piv = self.pivots * scale
        for name, p, par in zip(self.names, piv, self.parents):
            local = np.eye(4, dtype=np.float32)
            local[:3, 3] = p - (piv[par] if par >= 0 else 0.0)
            inv = np.eye(4, dtype=np.float32)
            inv[:3, 3] = -p
            joints.append(Joint(name=name, parent=par, rest_local=local, inverse_bind=inv))
        return Skeleton(joints)


def reduce_rig(scene: SceneGraph, roles: dict[str, int]) -> ReducedRig:
    """Build the reduced rig for the roles found (see :func:`check_roles`)."""
    names = ["root"] + [r for r in ROLES if r in roles]
    node_to_joint = {roles[r]: i for i, r in enumerate(names) if r != "root"}
    n = len(scene.names)
    group = np.zeros(n, np.int64)
    for node in scene.order:  # parents first
        if node in node_to_joint:
            group[node] = node_to_joint[node]
        elif scene.parent[node] >= 0:
            group[node] = group[scene.parent[node]]
    parents = [-1]
    pivots = [np.zeros(3)]
    for r in names[1:]:
        node = roles[r]
        par = int(scene.parent[node])
        parents.append(int(group[par]) if par >= 0 else 0)
        pivots.append(scene.world[node][:3, 3].copy())
    return ReducedRig(names, np.array(pivots), parents, group, dict(roles))


def synthetic_head(lo: np.ndarray, hi: np.ndarray, n_nodes: int) -> ReducedRig:
    """A head joint for a bust with no bones: turning about the top of the neck.

    The pivot sits 40% up the bust's height and 30% in from its back (the top of
    the neck of a head-and-shoulders model facing +Z); see :func:`bust_weights`.
    """
    size = hi - lo
    pivot = np.array([(lo[0] + hi[0]) / 2, lo[1] + 0.40 * size[1], lo[2] + 0.30 * size[2]])
    return ReducedRig(["root", "head"], np.array([np.zeros(3), pivot]), [-1, 0],
                      np.zeros(n_nodes, np.int64), {})


def bust_weights(positions: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Head weight of each vertex of a boneless bust: 0 at the shoulders, 1 from the jaw up.

    The blend runs along a plane tilted forward (the jaw line is lower at the chin
    than at the nape) between 12% and 38% of the height, smoothstepped, so the neck
    twists smoothly while the shoulders stay.

    Args:
        positions: (V, 3) model-space vertices, metres.
        lo, hi: (3,) bounds of the whole bust.

    Returns:
        (V,) float32 in [0, 1].
    """
    size = np.maximum(hi - lo, 1e-9)
    rel_y = (positions[:, 1] - lo[1]) / size[1]
    rel_z = (positions[:, 2] - lo[2]) / size[2]
    s = rel_y + 0.25 * (rel_z - 0.5)
    t = np.clip((s - 0.12) / (0.38 - 0.12), 0.0, 1.0)
    return (t * t * (3.0 - 2.0 * t)).astype(np.float32)
