"""Smooth fields on the face mesh: geodesic distances, biharmonic interpolation, normals.

Used by the face-model builder to turn a few prescribed landmark motions
("handles") into smooth per-vertex offsets. A handle's motion spreads over the
mesh by biharmonic interpolation: minimise ``sum_v (L u)_v^2`` over the free
vertices with the handle values and zeros elsewhere held fixed, where ``L`` is
the graph Laplacian with inverse-edge-length weights (Botsch and Sorkine, "On
Linear Variational Surface Deformation Methods", IEEE TVCG 2008, section 3).
Distances along the surface are shortest paths on the edge graph (Dijkstra),
so motion never jumps across the mouth or eye openings: the upper and lower
lips are far apart along the surface even when they touch.

All positions are (N, 3) float64 metres; N is 468 (the mesh without irises).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np


def smoothstep(x: np.ndarray | float, lo: float, hi: float) -> np.ndarray:
    """Cubic Hermite step: 0 for ``x <= lo``, 1 for ``x >= hi``, C1 in between.

    Args:
        x: values (any shape).
        lo, hi: the ramp's ends (``lo > hi`` gives a falling step).

    Returns:
        float64 array of the shape of ``x``.
    """
    t = np.clip((np.asarray(x, np.float64) - lo) / (hi - lo), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


class MeshFields:
    """Graph operators of one triangle mesh at its rest positions.

    Args:
        vertices: (N, 3) float64 rest positions, metres.
        edge_list: (E, 2) int undirected edges.
        triangles: (F, 3) int triangles (for normals).
    """

    def __init__(self, vertices: np.ndarray, edge_list: np.ndarray, triangles: np.ndarray):
        from scipy.sparse import coo_matrix

        self.v = np.asarray(vertices, np.float64)
        self.n = len(self.v)
        self.triangles = np.asarray(triangles)
        e = np.asarray(edge_list)
        length = np.linalg.norm(self.v[e[:, 0]] - self.v[e[:, 1]], axis=1)
        self.graph = coo_matrix(
            (np.concatenate([length, length]), (np.concatenate([e[:, 0], e[:, 1]]),
                                                np.concatenate([e[:, 1], e[:, 0]]))),
            shape=(self.n, self.n),
        ).tocsr()
        w = np.zeros((self.n, self.n))
        inv = 1.0 / np.maximum(length, 1e-9)
        w[e[:, 0], e[:, 1]] = inv
        w[e[:, 1], e[:, 0]] = inv
        lap = np.diag(w.sum(1)) - w
        lap /= np.maximum(w.sum(1), 1e-12)[:, None]  # normalised rows: sum of neighbours' pull
        self.bilaplacian = lap.T @ lap

    def geodesic(self, sources: Iterable[int]) -> np.ndarray:
        """Shortest distance along mesh edges from the nearest source vertex.

        Args:
            sources: vertex indices.

        Returns:
            (N,) float64 metres (inf where unreachable).
        """
        from scipy.sparse.csgraph import dijkstra

        src = np.unique(np.fromiter(sources, dtype=np.int64))
        return np.asarray(dijkstra(self.graph, indices=src, min_only=True), np.float64)

    def normals(self, vertices: np.ndarray | None = None) -> np.ndarray:
        """Area-weighted unit vertex normals (pointing out of the face for the model's winding).

        Args:
            vertices: (N, 3) positions; default the rest positions.

        Returns:
            (N, 3) float64 unit vectors.
        """
        v = self.v if vertices is None else np.asarray(vertices, np.float64)
        t = self.triangles
        fn = np.cross(v[t[:, 1]] - v[t[:, 0]], v[t[:, 2]] - v[t[:, 0]])
        out = np.zeros_like(v)
        for k in range(3):
            np.add.at(out, t[:, k], fn)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def interpolate(
        self,
        handles: Mapping[int, np.ndarray] | tuple[np.ndarray, np.ndarray],
        radius: float,
        pinned: Iterable[int] = (),
    ) -> np.ndarray:
        """Spread prescribed vertex values smoothly over a neighbourhood.

        Vertices farther than ``radius`` (along the surface) from every handle,
        and the ``pinned`` ones, are held at zero; the handles hold their
        values; the rest solve the biharmonic equation.

        Args:
            handles: ``{vertex: value}`` or ``(indices (H,), values (H, k))``;
                values are scalars or k-vectors (e.g. 3-D offsets in metres).
            radius: support radius, metres along the surface.
            pinned: vertices held at zero even inside the support (e.g. the
                upper lip while the lower lip moves).

        Returns:
            (N, k) float64 field ((N, 1) for scalar handles).
        """
        if isinstance(handles, Mapping):
            idx = np.fromiter(handles.keys(), dtype=np.int64)
            val = np.array([np.atleast_1d(np.asarray(x, np.float64)) for x in handles.values()])
        else:
            idx = np.asarray(handles[0], np.int64)
            val = np.asarray(handles[1], np.float64).reshape(len(idx), -1)
        out = np.zeros((self.n, val.shape[1]))
        out[idx] = val
        d = self.geodesic(idx)
        fixed = d > radius
        fixed[list(pinned)] = True
        fixed[idx] = True
        free = ~fixed
        if free.any():
            q = self.bilaplacian
            rhs = -q[np.ix_(free, fixed)] @ out[fixed]
            out[free] = np.linalg.solve(q[np.ix_(free, free)], rhs)
        return out
