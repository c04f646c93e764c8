"""Topology of the face model: MediaPipe face-mesh triangles, mirror map, named landmark sets.

The face model uses MediaPipe's face-mesh topology: 468 mesh vertices in
landmark order plus the 10 iris points (468-472 the subject's right iris,
473-477 the left; centre first, then +x, +y, -x, -y of the model frame).

Triangles come from ``FACEMESH_TESSELATION`` in
``mediapipe/python/solutions/face_mesh_connections.py`` (Apache-2.0). That
module lists each triangle as three consecutive connections ``(a, b), (b, c),
(c, a)``; the frozenset it builds loses the order, so
:func:`tessellation_triangles` reads the literal list from the module source
and keeps each triple, which also gives a consistent winding. The result is
checked: every triple closes, the mesh is edge-manifold and consistently
oriented.

The named landmarks and index sets of that topology are
:mod:`avatar_app.core.landmarks`.
"""
from __future__ import annotations

import ast
import inspect
from collections import Counter

import numpy as np

from avatar_app.core import landmarks as lmk
from avatar_app.core.errors import ModelLoadError

def tessellation_triangles() -> np.ndarray:
    """Triangles of MediaPipe's face mesh, read from ``FACEMESH_TESSELATION``.

    Returns:
        (852, 3) int32 vertex indices into the 468 mesh landmarks, wound
        consistently (the order MediaPipe lists them).

    Raises:
        ModelLoadError: mediapipe is not installed, or its list no longer
            forms closed, consistently wound triangles.
    """
    try:
        from mediapipe.python.solutions import face_mesh_connections as fmc
    except ImportError as exc:  # build-time dependency only
        raise ModelLoadError(f"mediapipe is needed to build the face model: {exc}") from exc
    tree = ast.parse(inspect.getsource(fmc))
    pairs = None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "FACEMESH_TESSELATION"):
            pairs = ast.literal_eval(node.value.args[0])
    if pairs is None or len(pairs) % 3:
        raise ModelLoadError("mediapipe's FACEMESH_TESSELATION is not a list of triangle edges")
    tris = []
    for i in range(0, len(pairs), 3):
        (a, b), (b2, c), (c2, a2) = pairs[i:i + 3]
        if not (b == b2 and c == c2 and a == a2):
            raise ModelLoadError(f"FACEMESH_TESSELATION entry {i} does not close a triangle")
        tris.append((a, b, c))
    out = np.asarray(tris, dtype=np.int32)
    directed = Counter()
    for a, b, c in out:
        for e in ((a, b), (b, c), (c, a)):
            directed[e] += 1
    if max(directed.values()) > 1:
        raise ModelLoadError("FACEMESH_TESSELATION triangles are not consistently wound")
    return out


def edges(triangles: np.ndarray) -> np.ndarray:
    """Unique undirected edges of a triangle list.

    Args:
        triangles: (F, 3) int vertex indices.

    Returns:
        (E, 2) int32, each row sorted (i < j), rows sorted.
    """
    e = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    e = np.sort(e, axis=1)
    return np.unique(e, axis=0).astype(np.int32)


def boundary_loops(triangles: np.ndarray) -> list[list[int]]:
    """Closed boundary loops of the mesh (outer rim, the two eye holes, the mouth hole).

    Args:
        triangles: (F, 3) int, consistently wound.

    Returns:
        Loops of vertex indices, longest first; each loop follows the boundary
        edges in their triangle winding order.
    """
    directed = {(int(a), int(b)) for t in triangles for a, b in ((t[0], t[1]), (t[1], t[2]), (t[2], t[0]))}
    nxt = {b: a for a, b in directed if (b, a) not in directed}  # reversed boundary edges
    loops, seen = [], set()
    for start in sorted(nxt):
        if start in seen:
            continue
        loop, v = [], start
        while v not in seen:
            seen.add(v)
            loop.append(v)
            v = nxt[v]
        loops.append(loop)
    return sorted(loops, key=len, reverse=True)


def mirror_map(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Landmark index of each point's mirror partner across the face's midline.

    Found by optimal assignment (Hungarian algorithm, scipy) between the mesh
    and its x-mirrored copy in a frontal frame, then checked: the map must be
    an involution and keep at least 99% of the mesh edges (MediaPipe's own
    tessellation is not exactly symmetric: 6 of its 1322 edges have no mirror
    edge). Iris points map by :data:`avatar_app.core.landmarks.IRIS_MIRROR`.

    Args:
        points: (478, 3) float positions in a frame whose x axis is normal to
            the face's plane of symmetry and whose origin lies on it (roughly
            is enough: pairs are a few millimetres apart after mirroring).
        triangles: (F, 3) int mesh triangles.

    Returns:
        (478,) int32 permutation: ``points[m] * (-1, 1, 1)`` approximates ``points``.

    Raises:
        ModelLoadError: the assignment is not a clean mirror symmetry.
    """
    from scipy.optimize import linear_sum_assignment

    p = np.asarray(points, np.float64)[:lmk.NUM_MESH]
    q = p * np.array([-1.0, 1.0, 1.0])
    cost = np.linalg.norm(p[:, None, :] - q[None, :, :], axis=2)
    _, m = linear_sum_assignment(cost)
    if not np.array_equal(m[m], np.arange(lmk.NUM_MESH)):
        raise ModelLoadError("the face mesh's mirror assignment is not an involution")
    e = {tuple(r) for r in edges(triangles)}
    kept = sum((min(m[a], m[b]), max(m[a], m[b])) in e for a, b in e)
    if kept < 0.99 * len(e):
        raise ModelLoadError(f"mirror map keeps only {kept} of {len(e)} mesh edges")
    full = np.arange(lmk.NUM_LANDMARKS, dtype=np.int32)
    full[:lmk.NUM_MESH] = m
    for a, b in lmk.IRIS_MIRROR.items():
        full[a], full[b] = b, a
    return full
