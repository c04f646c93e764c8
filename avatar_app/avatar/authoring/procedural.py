"""Small numpy helpers for building meshes by code: signed distance fields, ray casting, grids.

Signed distance functions follow Inigo Quilez, "distance functions"
(iquilezles.org/articles/distfunctions) and "smooth minimum"
(iquilezles.org/articles/smin, polynomial version). All functions take points
as (N, 3) float64 arrays in metres and return (N,) distances (negative inside).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

Sdf = Callable[[np.ndarray], np.ndarray]


def sd_ellipsoid(p: np.ndarray, center, radii) -> np.ndarray:
    """Approximate distance to an axis-aligned ellipsoid (Quilez's k0 (k0 - 1) / k1 bound)."""
    r = np.asarray(radii, np.float64)
    q = (p - np.asarray(center)) / r
    k0 = np.sqrt(np.einsum("ij,ij->i", q, q))
    q /= r
    k1 = np.sqrt(np.einsum("ij,ij->i", q, q))
    return k0 * (k0 - 1.0) / np.maximum(k1, 1e-12)


def sd_capsule(p: np.ndarray, a, b, radius: float) -> np.ndarray:
    """Exact distance to a capsule (segment a-b swept by a sphere)."""
    a = np.asarray(a, np.float64)
    ba = np.asarray(b, np.float64) - a
    pa = p - a
    h = np.clip(pa @ ba / (ba @ ba), 0.0, 1.0)
    q = pa - h[:, None] * ba
    return np.sqrt(np.einsum("ij,ij->i", q, q)) - radius


def sd_round_cone(p: np.ndarray, a, b, ra: float, rb: float) -> np.ndarray:
    """Distance to a cone with spherical ends of radii ``ra`` at ``a`` and ``rb`` at ``b`` (Quilez)."""
    a = np.asarray(a, np.float64)
    ba = np.asarray(b, np.float64) - a
    l2 = ba @ ba
    rr = ra - rb
    a2 = l2 - rr * rr
    il2 = 1.0 / l2
    pa = p - a
    y = pa @ ba
    z = y - l2
    xv = pa * l2 - y[:, None] * ba
    x2 = np.einsum("ij,ij->i", xv, xv)
    y2 = y * y * l2
    z2 = z * z * l2
    k = np.sign(rr) * rr * rr * x2
    out = (np.sqrt(x2 * a2 * il2) + y * rr) * il2 - ra
    end_b = np.sign(z) * a2 * z2 > k
    end_a = np.sign(y) * a2 * y2 < k
    out = np.where(end_b, np.sqrt(x2 + z2) * il2 - rb, out)
    out = np.where(end_a & ~end_b, np.sqrt(x2 + y2) * il2 - ra, out)
    return out


def smin(a: np.ndarray, b: np.ndarray, k: float) -> np.ndarray:
    """Polynomial smooth minimum (union) with blend radius ``k`` metres (Quilez)."""
    h = np.clip(0.5 + 0.5 * (b - a) / k, 0.0, 1.0)
    return b * (1.0 - h) + a * h - k * h * (1.0 - h)


def smax(a: np.ndarray, b: np.ndarray, k: float) -> np.ndarray:
    """Smooth maximum (intersection / subtraction with ``-b``)."""
    return -smin(-a, -b, k)


def smoothstep(e0: float, e1: float, x: np.ndarray) -> np.ndarray:
    """Hermite step from 0 at ``e0`` to 1 at ``e1`` (e0 > e1 gives a falling step)."""
    t = np.clip((np.asarray(x, np.float64) - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def sdf_normals(sdf: Sdf, p: np.ndarray, eps: float = 2e-4) -> np.ndarray:
    """(N, 3) unit gradients of ``sdf`` at ``p`` by central differences."""
    g = np.empty_like(p)
    for axis in range(3):
        d = np.zeros(3)
        d[axis] = eps
        g[:, axis] = sdf(p + d) - sdf(p - d)
    return g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)


def raycast_first_exit(
    sdf: Sdf, origin: np.ndarray, dirs: np.ndarray, max_dist: float = 0.6, iterations: int = 80
) -> np.ndarray:
    """Distance along each ray from an interior ``origin`` to where it first leaves the surface.

    Sphere tracing from inside (steps of 0.8 |d|, at least 0.25 mm), then 11
    bisection steps between the last inside and first outside point (bracket
    below 0.2 micrometres for steps up to 0.4 mm).

    Args:
        sdf: the field; ``origin`` must be inside (sdf < 0).
        origin: (3,) ray origin, metres.
        dirs: (N, 3) unit directions.
        max_dist: rays that have not left by this distance stop there.
        iterations: sphere-tracing steps.

    Returns:
        (N,) float64 distances, metres.
    """
    o = np.asarray(origin, np.float64)
    t = np.zeros(len(dirs))
    t_in = np.zeros(len(dirs))
    active = np.ones(len(dirs), bool)
    for _ in range(iterations):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        d = sdf(o + dirs[idx] * t[idx, None])
        inside = d < 0
        t_in[idx[inside]] = t[idx[inside]]
        step = np.maximum(-d * 0.8, 2.5e-4)
        done = ~inside
        active[idx[done]] = False
        grow = idx[inside]
        t[grow] = np.minimum(t[grow] + step[inside], max_dist)
        active[grow[t[grow] >= max_dist]] = False
    lo, hi = t_in, np.maximum(t, t_in)
    for _ in range(11):
        mid = 0.5 * (lo + hi)
        inside = sdf(o + dirs * mid[:, None]) < 0
        lo = np.where(inside, mid, lo)
        hi = np.where(inside, hi, mid)
    return 0.5 * (lo + hi)


def sphere_dirs(theta: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """Unit directions for longitude ``theta`` (0 = +Z, +pi/2 = +X) and latitude ``phi`` (+Y up).

    Args:
        theta, phi: broadcastable arrays, radians.

    Returns:
        (..., 3) float64.
    """
    c = np.cos(phi)
    return np.stack(np.broadcast_arrays(c * np.sin(theta), np.sin(phi), c * np.cos(theta)), axis=-1)


def grid_indices(rows: int, cols: int, wrap: bool, skip: np.ndarray | None = None) -> np.ndarray:
    """Triangle indices of a rows x cols vertex grid (row-major), counter-clockwise seen from outside.

    Vertex (r, c) has index ``r * cols + c``; rows run top to bottom and columns
    toward +X when seen from outside (longitude increasing), which makes the
    triangles face outward.

    Args:
        rows, cols: grid size.
        wrap: connect the last column back to the first (closed around).
        skip: optional (rows - 1, cols or cols - 1) bool mask of quads to leave out
            (slits such as the mouth and the eyes).

    Returns:
        (F * 3,) uint32.
    """
    qc = cols if wrap else cols - 1
    r, c = np.meshgrid(np.arange(rows - 1), np.arange(qc), indexing="ij")
    c1 = (c + 1) % cols
    a = r * cols + c
    b = r * cols + c1
    d = (r + 1) * cols + c
    e = (r + 1) * cols + c1
    quads = np.stack([a, d, e, a, e, b], axis=-1)
    if skip is not None:
        quads = quads[~skip[:, :qc]]
    return quads.reshape(-1).astype(np.uint32)


def smooth_periodic(values: np.ndarray, passes: int = 2) -> np.ndarray:
    """Light [1, 2, 1] / 4 smoothing of a periodic 1-D signal, ``passes`` times."""
    v = np.asarray(values, np.float64)
    for _ in range(passes):
        v = 0.25 * np.roll(v, 1) + 0.5 * v + 0.25 * np.roll(v, -1)
    return v


def gauss(p: np.ndarray, center, sigma) -> np.ndarray:
    """(N,) anisotropic Gaussian bump ``exp(-|(p - center) / sigma|^2 / 2)`` (sigma per axis, metres)."""
    q = (p - np.asarray(center)) / np.asarray(sigma)
    return np.exp(-0.5 * np.einsum("ij,ij->i", q, q))


def lathe(center, radii, n_rings: int, n_seg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ellipsoid grid with poles on the Z axis.

    Returns:
        positions (n_rings * n_seg, 3), indices (F * 3,) uint32, polar angle per vertex.
    """
    alpha = np.linspace(0.0, np.pi, n_rings)
    beta = np.linspace(0.0, 2 * np.pi, n_seg, endpoint=False)
    a, b = np.meshgrid(alpha, beta, indexing="ij")
    return lathe_from_angles(center, radii, a, b), grid_indices(n_rings, n_seg, wrap=True), a.reshape(-1)


def lathe_from_angles(center, radii, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Ellipsoid points for polar angles ``a`` (from +Z) and azimuths ``b`` (from +X toward +Y)."""
    local = np.stack([np.sin(a) * np.cos(b), np.sin(a) * np.sin(b), np.cos(a)], axis=-1).reshape(-1, 3)
    return np.asarray(center) + local * np.asarray(radii)


def orient_outward(positions: np.ndarray, indices: np.ndarray, center, inward: bool = False) -> np.ndarray:
    """Flip triangles so their normals point away from (or, ``inward``, toward) ``center``."""
    tri = indices.reshape(-1, 3).copy()
    p = positions
    n = np.cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]])
    out = np.einsum("ij,ij->i", n, p[tri].mean(axis=1) - np.asarray(center))
    flip = (out < 0) if not inward else (out > 0)
    tri[flip] = tri[flip][:, ::-1]
    return tri.reshape(-1).astype(np.uint32)


def arc_band(y_lo: np.ndarray | float, y_hi: np.ndarray | float, z_front: float, radius_x: float,
             radius_z: float, alpha_max: float, thickness: float, n_along: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A rounded band swept along a horseshoe arc in XZ (rows of teeth).

    Args:
        y_lo, y_hi: bottom and top of the band, scalars or (n_along,) per arc position.
        z_front: depth of the arc's front (its middle).
        radius_x, radius_z: half-axes of the elliptic arc.
        alpha_max: the arc spans parameter angles -alpha_max .. alpha_max.
        thickness: band thickness across the arc, metres.
        n_along: vertex sections along the arc.

    Returns:
        positions (V, 3), indices (F * 3,) uint32 facing out of the band, and the
        arc parameter s in [-1, 1] per vertex.
    """
    s = np.linspace(-1.0, 1.0, n_along)
    al = s * alpha_max
    cx = radius_x * np.sin(al)
    cz = z_front - radius_z * (1.0 - np.cos(al))
    tx, tz = radius_x * np.cos(al), radius_z * np.sin(al)  # tangent
    nrm = np.stack([tz, -tx], axis=-1)
    nrm /= np.linalg.norm(nrm, axis=-1, keepdims=True)  # horizontal normal of the arc
    y_lo = np.broadcast_to(np.asarray(y_lo, np.float64), s.shape)
    y_hi = np.broadcast_to(np.asarray(y_hi, np.float64), s.shape)
    # rounded-rectangle cross-section (outward offset u, height v in [0, 1])
    ang = np.linspace(0, 2 * np.pi, 10, endpoint=False)
    cu = 0.5 * np.sign(np.cos(ang)) * np.abs(np.cos(ang)) ** 0.4
    cv = 0.5 + 0.5 * np.sign(np.sin(ang)) * np.abs(np.sin(ang)) ** 0.4
    taper = np.sqrt(np.clip(1.0 - np.abs(s) ** 8, 0.0, 1.0))[:, None]  # close the band's ends
    u = cu[None, :] * thickness * taper
    y_mid = 0.5 * (y_lo + y_hi)[:, None]
    y = y_mid + (y_hi - y_lo)[:, None] * (cv[None, :] - 0.5) * taper
    x = cx[:, None] + nrm[:, 0:1] * u
    z = cz[:, None] + nrm[:, 1:2] * u
    pos = np.stack([x, y, z], axis=-1).reshape(-1, 3)
    idx = grid_indices(n_along, len(ang), wrap=True)
    # orient by the local section centre rather than one global point
    tri = idx.reshape(-1, 3).copy()
    sec_c = np.stack([cx, 0.5 * (y_lo + y_hi), cz], axis=-1)
    along = np.repeat(np.arange(n_along), len(ang))
    n = np.cross(pos[tri[:, 1]] - pos[tri[:, 0]], pos[tri[:, 2]] - pos[tri[:, 0]])
    outward = np.einsum("ij,ij->i", n, pos[tri].mean(axis=1) - sec_c[along[tri[:, 0]]])
    tri[outward < 0] = tri[outward < 0][:, ::-1]
    return pos, tri.reshape(-1).astype(np.uint32), np.repeat(s, len(ang))
