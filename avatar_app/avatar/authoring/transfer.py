"""Deformation transfer: the face model's blendshapes carried onto another head's face surface.

The face model (:mod:`avatar_app.avatar.face_model`) is a human face in
MediaPipe topology; an avatar is any triangle mesh with a face. A shape is
transferred through corresponding surface points, a simplified form of
deformation transfer (Sumner and Popovic, "Deformation Transfer for Triangle
Meshes", SIGGRAPH 2004) that needs no triangle-to-triangle correspondence:

1. **Correspondence.** A few landmarks are placed on the avatar by the code
   that builds it (eye corners and lid contours, lip contours, nose, chin,
   brows, ...: ``anchors``). The rig's neutral is aligned to them with a
   similarity transform (Umeyama, IEEE TPAMI 1991) and then bent onto them
   with a 3-D thin-plate spline (kernel ``|r|``, the biharmonic Green's function
   in 3-D; Bookstein, IEEE TPAMI 1989). Every rig landmark lands near the
   avatar's face; it is attached to the nearest avatar vertex of its region
   (upper and lower lips stay apart), or to an explicitly given vertex
   (contours). Points that land far from any allowed vertex are left out.
2. **Offsets.** A rig offset ``d`` becomes ``s R d`` on the avatar, with ``s``
   and ``R`` the similarity's scale and rotation: offsets are scaled by the ratio
   of the two faces' sizes and turned with the alignment. (The warp's local
   Jacobians would follow the stylised proportions more closely, but they vary
   too fast across small features such as the lips, whose neighbouring points
   must move together.)
3. **Propagation.** The attached vertices are handles; every other vertex of
   the avatar's surface gets the smooth field that minimises the squared
   graph Laplacian (biharmonic interpolation, Botsch and Sorkine, IEEE TVCG
   2008), with inverse-edge-length weights. The graph follows the mesh's
   edges, so surfaces that touch but are not connected (lips, eyelids) move
   independently. Vertices farther than ``free_radius_m`` along the surface from
   every handle are held at zero, which bounds the support.

The result is linear in the rig offsets, so a weight means the same motion on
both heads, up to the change of size.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components, dijkstra
from scipy.sparse.linalg import splu

from avatar_app.core.errors import InputError
from avatar_app.core.rotations import rigid_fit

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- alignment
def _pair(src, dst) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(src, np.float64)
    b = np.asarray(dst, np.float64)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != 3 or len(a) < 3:
        raise InputError(f"point sets must both be (N >= 3, 3), got {a.shape} and {b.shape}")
    return a, b


class ThinPlateWarp:
    """3-D thin-plate spline that maps ``src`` anchors onto ``dst`` anchors.

    ``f(x) = A x + b + sum_i w_i |x - src_i|`` (kernel ``|r|``, Bookstein 1989),
    with a ridge ``regularisation`` (metres) on the kernel diagonal that trades
    exact interpolation for smoothness.

    Args:
        src, dst: (N, 3) float anchors, metres, N >= 4 and not coplanar.
        regularisation: >= 0, added to the kernel's diagonal.

    Raises:
        InputError: bad shapes or a singular system (coplanar anchors).
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, regularisation: float = 0.0):
        a, b = _pair(src, dst)
        n = len(a)
        k = np.linalg.norm(a[:, None] - a[None], axis=-1) + regularisation * np.eye(n)
        p = np.c_[np.ones(n), a]
        m = np.zeros((n + 4, n + 4))
        m[:n, :n], m[:n, n:], m[n:, :n] = k, p, p.T
        rhs = np.zeros((n + 4, 3))
        rhs[:n] = b
        try:
            sol = np.linalg.solve(m, rhs)
        except np.linalg.LinAlgError as exc:
            raise InputError("thin-plate warp: anchors are degenerate (coplanar or repeated)") from exc
        self._src, self._w, self._affine = a, sol[:n], sol[n:]

    def __call__(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) float64 warped points."""
        q = np.asarray(points, np.float64).reshape(-1, 3)
        k = np.linalg.norm(q[:, None] - self._src[None], axis=-1)
        return k @ self._w + np.c_[np.ones(len(q)), q] @ self._affine

    def jacobian(self, points: np.ndarray, step: float = 1e-4) -> np.ndarray:
        """(N, 3, 3) float64 Jacobians ``d f / d x`` by central differences (``step`` metres)."""
        q = np.asarray(points, np.float64).reshape(-1, 3)
        jac = np.empty((len(q), 3, 3))
        for k in range(3):
            e = np.zeros(3)
            e[k] = step
            jac[:, :, k] = (self(q + e) - self(q - e)) / (2 * step)
        return jac


# ----------------------------------------------------------------------------- mesh graph
def weld_nodes(positions: np.ndarray, indices: np.ndarray, tol_m: float = 1e-7) -> tuple[np.ndarray, int]:
    """Merge vertices joined by an edge shorter than ``tol_m`` (seams, poles, folded rows).

    Only vertices that share an edge are merged: coincident vertices that are
    not connected (two lips that touch) stay apart.

    Args:
        positions: (V, 3) float vertex positions.
        indices: (F*3,) int triangle list.
        tol_m: edge length below which the two ends are one node.

    Returns:
        ((V,) int64 node of every vertex, number of nodes).
    """
    p = np.asarray(positions, np.float64)
    e = _edges(indices)
    short = np.linalg.norm(p[e[:, 0]] - p[e[:, 1]], axis=1) < tol_m
    v = len(p)
    g = sp.coo_matrix((np.ones(short.sum()), (e[short, 0], e[short, 1])), shape=(v, v))
    n, labels = connected_components(g, directed=False)
    return labels.astype(np.int64), int(n)


def _edges(indices: np.ndarray) -> np.ndarray:
    t = np.asarray(indices, np.int64).reshape(-1, 3)
    e = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    e.sort(axis=1)
    return np.unique(e, axis=0)


class SurfaceInterpolator:
    """Biharmonic interpolation of handle values over a triangle mesh's edge graph.

    Minimises ``|L u|^2`` summed over all nodes (L the random-walk graph Laplacian
    with inverse edge length weights, on welded nodes) with ``u`` fixed at the handle nodes and
    zero at nodes farther than ``free_radius_m`` (shortest path along edges) from
    every handle. Including the handles' own Laplacians keeps the field smooth
    through isolated handles (no dimple at each one); the price is that a linear
    field is reproduced only approximately (within a few per cent of its range
    near free borders). The system is factorised once; :meth:`__call__` solves for
    any number of value columns.

    Args:
        positions: (V, 3) float rest positions, metres.
        indices: (F*3,) int triangle list.
        handles: (H,) int vertex indices (handles on one welded node must agree:
            their values are averaged).
        zero: (Z,) int vertices held at zero as well (their node must not hold a handle).
        free_radius_m: support radius around the handles.

    Raises:
        InputError: no handles, or an index out of range.
    """

    def __init__(self, positions: np.ndarray, indices: np.ndarray, handles: np.ndarray,
                 zero: np.ndarray | Sequence[int] = (), free_radius_m: float = 0.03):
        p = np.asarray(positions, np.float64)
        v = len(p)
        handles = np.asarray(handles, np.int64)
        zero = np.asarray(zero, np.int64)
        if handles.size == 0:
            raise InputError("surface interpolation needs at least one handle")
        for arr, label in ((handles, "handle"), (zero, "zero")):
            if arr.size and (arr.min() < 0 or arr.max() >= v):
                raise InputError(f"{label} vertex index out of range for {v} vertices")
        node, n = weld_nodes(p, indices)
        self._node = node
        e = _edges(indices)
        a, b = node[e[:, 0]], node[e[:, 1]]
        keep = a != b
        a, b = a[keep], b[keep]
        length = np.linalg.norm(p[e[keep, 0]] - p[e[keep, 1]], axis=1)
        w = 1.0 / np.maximum(length, 1e-5)
        adj = sp.coo_matrix((np.r_[w, w], (np.r_[a, b], np.r_[b, a])), shape=(n, n)).tocsr()
        adj.sum_duplicates()
        deg = np.asarray(adj.sum(axis=1)).ravel()
        deg[deg == 0] = 1.0
        lap = sp.identity(n, format="csr") - sp.diags(1.0 / deg) @ adj
        # support: nodes within free_radius_m of a handle along edges
        dist_graph = sp.coo_matrix((np.r_[length, length], (np.r_[a, b], np.r_[b, a])), shape=(n, n)).tocsr()
        h_nodes = np.unique(node[handles])
        dist = dijkstra(dist_graph, directed=False, indices=h_nodes, min_only=True)
        fixed = np.zeros(n, bool)
        fixed[h_nodes] = True
        zero_nodes = np.unique(node[zero]) if zero.size else np.zeros(0, np.int64)
        if np.intersect1d(zero_nodes, h_nodes).size:
            raise InputError("a vertex is both a handle and held at zero")
        fixed[zero_nodes] = True
        fixed |= ~(dist <= free_radius_m)
        free = np.flatnonzero(~fixed)
        self._free = free
        self._h_nodes = h_nodes
        self._handle_node = node[handles]
        self._n = n
        q = (lap.T @ lap).tocsc()
        self._q_fh = q[free][:, h_nodes]
        self._lu = splu(q[free][:, free].tocsc()) if free.size else None
        logger.debug("surface interpolator: %d nodes, %d handles, %d free", n, h_nodes.size, free.size)

    @property
    def node_of_vertex(self) -> np.ndarray:
        """(V,) int64 welded node of every vertex."""
        return self._node

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """Interpolate.

        Args:
            values: (H, K) float values at the handles (in the order given at
                construction), any K (e.g. 3 for offsets, 3 S for S shapes).

        Returns:
            (V, K) float64 values at every vertex.

        Raises:
            InputError: wrong number of rows.
        """
        vals = np.asarray(values, np.float64)
        if vals.ndim == 1:
            vals = vals[:, None]
        if len(vals) != len(self._handle_node):
            raise InputError(f"expected {len(self._handle_node)} handle values, got {len(vals)}")
        k = vals.shape[1]
        # average handles that share a node
        pos = np.searchsorted(self._h_nodes, self._handle_node)
        acc = np.zeros((len(self._h_nodes), k))
        np.add.at(acc, pos, vals)
        acc /= np.bincount(pos, minlength=len(self._h_nodes))[:, None]
        u = np.zeros((self._n, k))
        u[self._h_nodes] = acc
        if self._lu is not None:
            u[self._free] = self._lu.solve(-(self._q_fh @ acc))
        return u[self._node]


# ----------------------------------------------------------------------------- correspondence
@dataclass(frozen=True)
class Correspondence:
    """Rig landmarks attached to avatar vertices (handles), with the offset maps.

    Attributes:
        landmarks: (K,) int rig landmark indices (0..467) that drive the handles.
        jacobians: (K, 3, 3) float64 maps of rig offsets to avatar offsets (all
            ``scale * rotation`` here; kept per landmark for other schemes).
        vertices: (H,) int avatar handle vertices.
        mix: (H, K) float64 weights: a handle's offset is ``sum_k mix[h, k] J_k d_k``
            (one landmark per handle, or an interpolation along a contour).
        scale: similarity scale rig -> avatar (avatar metres per rig metre).
        rotation: (3, 3) similarity rotation rig -> avatar.
        residual_m: (H,) distance from each handle's warped landmark position to its
            vertex, metres (0 for contour handles).
    """

    landmarks: np.ndarray
    jacobians: np.ndarray
    vertices: np.ndarray
    mix: np.ndarray
    scale: float
    rotation: np.ndarray
    residual_m: np.ndarray

    def map_offsets(self, offsets: np.ndarray) -> np.ndarray:
        """Rig offsets mapped onto the handles, in the avatar frame.

        Args:
            offsets: (S, N, 3) or (N, 3) float rig offsets (metres), model frame.

        Returns:
            (S, H, 3) or (H, 3) float64 avatar offsets at :attr:`vertices`.
        """
        d = np.asarray(offsets, np.float64)
        single = d.ndim == 2
        d = d[None] if single else d
        mapped = np.einsum("kij,skj->ski", self.jacobians, d[:, self.landmarks])
        out = np.einsum("hk,skc->shc", self.mix, mapped)
        return out[0] if single else out


def contour_weights(landmark_params: np.ndarray, vertex_params: np.ndarray) -> np.ndarray:
    """Linear interpolation weights along a contour.

    Args:
        landmark_params: (n,) increasing parameters of the contour's landmarks.
        vertex_params: (m,) parameters of vertices along the same contour (clamped
            to the landmarks' range).

    Returns:
        (m, n) float64 rows of weights summing to 1 (at most two non-zero).
    """
    lp = np.asarray(landmark_params, np.float64)
    vp = np.clip(np.asarray(vertex_params, np.float64), lp[0], lp[-1])
    w = np.zeros((len(vp), len(lp)))
    j = np.clip(np.searchsorted(lp, vp) - 1, 0, len(lp) - 2)
    t = (vp - lp[j]) / np.maximum(lp[j + 1] - lp[j], 1e-12)
    w[np.arange(len(vp)), j] = 1.0 - t
    w[np.arange(len(vp)), j + 1] = t
    return w


def fit_correspondence(
    rig_points: np.ndarray,
    avatar_positions: np.ndarray,
    anchors: dict[int, np.ndarray],
    attached: dict[int, int],
    regions: Sequence[tuple[np.ndarray, np.ndarray]],
    contours: Sequence[tuple[Sequence[int], np.ndarray, np.ndarray]] = (),
    max_distance_m: float = 0.006,
    regularisation: float = 0.0,
) -> Correspondence:
    """Attach rig landmarks to avatar vertices.

    Args:
        rig_points: (N, 3) float rig neutral (468 mesh points first), metres.
        avatar_positions: (V, 3) float avatar vertex positions, metres.
        anchors: rig landmark -> (3,) avatar point: the warp's anchors (at least 4,
            not coplanar), placed on the avatar by construction.
        attached: rig landmark -> avatar vertex, fixed attachments; kept whatever
            the warp says.
        regions: (rig landmarks (R,), allowed avatar vertices (A,)) pairs: every
            other rig landmark of a region attaches to the nearest allowed vertex
            of its warped position, when nearer than ``max_distance_m``.
        contours: (rig landmarks (n,), avatar vertices (m,), weights (m, n) from
            :func:`contour_weights`): every vertex of an avatar contour (an open
            edge such as where the lips meet) becomes a handle, interpolated
            between the rig contour's landmarks.
        max_distance_m: farthest attachment.
        regularisation: thin-plate smoothing (see :class:`ThinPlateWarp`).

    Returns:
        The :class:`Correspondence`.

    Raises:
        InputError: too few anchors, a vertex attached twice, or inconsistent contours.
    """
    from scipy.spatial import cKDTree

    rig = np.asarray(rig_points, np.float64)
    av = np.asarray(avatar_positions, np.float64)
    if len(anchors) < 4:
        raise InputError(f"the warp needs at least 4 anchors, got {len(anchors)}")
    ids = np.array(sorted(anchors))
    dst = np.array([anchors[i] for i in ids], np.float64)
    rot, trans, scale = rigid_fit(rig[ids], dst, with_scale=True)
    sim = rig @ rot.T * scale + trans
    warp = ThinPlateWarp(sim[ids], dst, regularisation)
    warped = warp(sim)
    single: list[tuple[int, int]] = [(int(i), int(v)) for i, v in attached.items()]
    taken = set(attached)
    for rig_ids, allowed in regions:
        allowed = np.asarray(allowed, np.int64)
        todo = np.array([i for i in np.asarray(rig_ids, np.int64) if i not in taken], np.int64)
        if todo.size == 0 or allowed.size == 0:
            continue
        dist, near = cKDTree(av[allowed]).query(warped[todo])
        ok = dist < max_distance_m
        single += list(zip(todo[ok].tolist(), allowed[near[ok]].tolist()))
        taken.update(todo.tolist())
    lm_set = sorted({i for i, _ in single} | {int(i) for c in contours for i in c[0]})
    col = {i: k for k, i in enumerate(lm_set)}
    rows_v: list[int] = []
    rows_w: list[np.ndarray] = []
    residual: list[float] = []
    for i, v in single:
        w = np.zeros(len(lm_set))
        w[col[i]] = 1.0
        rows_v.append(v)
        rows_w.append(w)
        residual.append(float(np.linalg.norm(warped[i] - av[v])))
    for lms, verts, weights in contours:
        weights = np.asarray(weights, np.float64)
        if weights.shape != (len(verts), len(lms)):
            raise InputError(f"contour weights must be ({len(verts)}, {len(lms)}), got {weights.shape}")
        for v, wrow in zip(verts, weights):
            w = np.zeros(len(lm_set))
            for i, a in zip(lms, wrow):
                w[col[int(i)]] += a
            rows_v.append(int(v))
            rows_w.append(w)
            residual.append(0.0)
    vertices = np.array(rows_v, np.int64)
    if len(np.unique(vertices)) != len(vertices):
        # several landmarks on one vertex: average them
        uniq, inv = np.unique(vertices, return_inverse=True)
        mix = np.zeros((len(uniq), len(lm_set)))
        np.add.at(mix, inv, np.array(rows_w))
        mix /= np.bincount(inv)[:, None]
        res = np.bincount(inv, weights=residual) / np.bincount(inv)
        vertices = uniq
    else:
        mix = np.array(rows_w)
        res = np.array(residual)
    lm_a = np.array(lm_set, np.int64)
    # One map for all offsets: the similarity's scale and rotation. (The warp's local
    # Jacobians vary a lot between a stylised and a human face, e.g. across the lips,
    # and would move neighbouring points by different amounts: the lips would fold.)
    jac = np.broadcast_to(scale * rot, (len(lm_a), 3, 3)).copy()
    logger.debug("correspondence: %d landmarks on %d handles, scale %.3f, mean residual %.2f mm",
                 len(lm_a), len(vertices), scale, res.mean() * 1e3)
    return Correspondence(lm_a, jac, vertices, mix, float(scale), rot, res)
