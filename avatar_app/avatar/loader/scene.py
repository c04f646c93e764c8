"""Node hierarchy of a glTF scene: local and world transforms (glTF 2.0 "Nodes and Hierarchy")."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from avatar_app.avatar.loader.document import GltfDocument
from avatar_app.core.errors import InputError
from avatar_app.core.rotations import matrix_from_quat


def node_local(node) -> np.ndarray:
    """(4, 4) float64 local transform of a pygltflib node: ``matrix`` or T @ R @ S."""
    if node.matrix is not None and len(node.matrix) == 16:
        return np.asarray(node.matrix, np.float64).reshape(4, 4).T  # stored column-major
    m = np.eye(4)
    if node.rotation is not None and np.linalg.norm(np.asarray(node.rotation, np.float64)) > 1e-6:
        m[:3, :3] = matrix_from_quat(node.rotation)  # glTF order (x, y, z, w); a zero one is ignored
    if node.scale is not None:
        m[:3, :3] = m[:3, :3] * np.asarray(node.scale, np.float64)[None, :]
    if node.translation is not None:
        m[:3, 3] = node.translation
    return m


@dataclass
class SceneGraph:
    """World transforms of the nodes of the displayed scene.

    Attributes:
        parent: (N,) int parent node index, -1 for roots or nodes outside the scene.
        world: (N, 4, 4) float64 world transforms (including the root correction).
        in_scene: (N,) bool: node is reachable from the scene's roots.
        names: node names ("" when unnamed).
        order: nodes of the scene, parents before children.
    """

    parent: np.ndarray
    world: np.ndarray
    in_scene: np.ndarray
    names: list[str]
    order: list[int]

    def ancestors(self, node: int) -> list[int]:
        """``node`` and its ancestors, nearest first."""
        out = []
        while node >= 0:
            out.append(node)
            node = int(self.parent[node])
        return out


def build_scene(doc: GltfDocument, root_correction: np.ndarray | None = None) -> SceneGraph:
    """World transforms of the default scene's nodes.

    Args:
        doc: the glTF document.
        root_correction: (4, 4) transform applied above the scene roots (e.g. a
            180 degree turn for VRM 0.x, which faces -Z).

    Raises:
        InputError: a child index is out of range, a node has two parents or the
            hierarchy has a cycle.
    """
    g = doc.gltf
    nodes = g.nodes or []
    n = len(nodes)
    parent = np.full(n, -1, np.int64)
    for i, nd in enumerate(nodes):
        for c in nd.children or []:
            if not 0 <= c < n:
                raise InputError(f"avatar file {doc.path}: node {i} has a child {c} that does not exist",
                                 path=doc.path)
            if parent[c] >= 0 or c == i:
                raise InputError(f"avatar file {doc.path}: node {c} has more than one parent (not a tree)",
                                 path=doc.path)
            parent[c] = i
    if g.scenes:
        si = g.scene if g.scene is not None and 0 <= g.scene < len(g.scenes) else 0
        roots = list(g.scenes[si].nodes or [])
    else:
        roots = [i for i in range(n) if parent[i] < 0]
    for r in roots:
        if not 0 <= r < n:
            raise InputError(f"avatar file {doc.path}: the scene lists node {r}, which does not exist",
                             path=doc.path)
    corr = np.eye(4) if root_correction is None else np.asarray(root_correction, np.float64)
    world = np.tile(np.eye(4), (n, 1, 1))
    in_scene = np.zeros(n, bool)
    order: list[int] = []
    stack = [(r, corr) for r in reversed(roots)]
    while stack:
        i, above = stack.pop()
        if in_scene[i]:
            raise InputError(f"avatar file {doc.path}: the node hierarchy has a cycle at node {i}", path=doc.path)
        in_scene[i] = True
        order.append(i)
        world[i] = above @ node_local(nodes[i])
        for c in reversed(nodes[i].children or []):
            stack.append((c, world[i]))
    names = [nd.name or "" for nd in nodes]
    scene_parent = np.where(in_scene, parent, -1)
    return SceneGraph(parent=scene_parent, world=world, in_scene=in_scene, names=names, order=order)
