"""The default head's other parts: eyeballs, ears, hair cap, brows, interior lining, collar and
shoulders (see :mod:`avatar_app.avatar.authoring.default_head`).
"""
from __future__ import annotations

import numpy as np

from avatar_app.avatar.authoring.head_skin import (
    EYE_C,
    EYE_R,
    LID_GAP,
    ORIGIN,
    _dir_angles,
    _head_core_sdf,
    _lips_sdf,
    _mirror,
    _skin_sdf,
)
from avatar_app.avatar.authoring.procedural import (
    grid_indices,
    lathe_from_angles,
    orient_outward,
    raycast_first_exit,
    sd_capsule,
    sd_ellipsoid,
    sdf_normals,
    smin,
    smooth_periodic,
    smoothstep,
    sphere_dirs,
)
from avatar_app.avatar.default_head import HeadStyle
from avatar_app.avatar.glb_reader import quantise_colors
from avatar_app.avatar.mesh import Material, MeshPrimitive, compute_normals


# ----------------------------------------------------------------------------- other parts
def _eyeball(center: np.ndarray, style: HeadStyle) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eyeball with the pupil/iris/sclera boundaries as duplicated vertex rings.

    Returns positions (V, 3), indices, colours (V, 4).
    """
    a_pupil, a_iris = 0.245, 0.60  # angular radii from the front pole, radians
    rings = [(0.0, "pupil"), (0.12, "pupil"), (a_pupil, "pupil"), (a_pupil, "iris")]
    rings += [(a_pupil + (a_iris - a_pupil) * f, "iris") for f in (0.2, 0.4, 0.6, 0.8, 0.92)]
    rings += [(a_iris, "iris_edge"), (a_iris, "sclera")]
    rings += [(a_iris + (np.pi - a_iris) * f, "sclera") for f in (0.06, 0.14, 0.24, 0.36, 0.52, 0.75, 1.0)]
    n_seg = 40
    alpha = np.array([r[0] for r in rings])
    beta = np.linspace(0.0, 2 * np.pi, n_seg, endpoint=False)
    a, b = np.meshgrid(alpha, beta, indexing="ij")
    pos = lathe_from_angles(center, (EYE_R, EYE_R, EYE_R), a, b)
    idx = orient_outward(pos, grid_indices(len(rings), n_seg, wrap=True), center)
    iris = np.asarray(style.iris)
    rng = np.random.default_rng(7)
    streak = smooth_periodic(rng.uniform(-1, 1, n_seg), 1)
    col = np.empty((len(rings), n_seg, 4), np.float64)
    col[..., 3] = 1.0
    for i, (ang, kind) in enumerate(rings):
        if kind == "pupil":
            c = np.full((n_seg, 3), 0.006)
        elif kind in ("iris", "iris_edge"):
            f = (ang - a_pupil) / (a_iris - a_pupil)
            bright = 1.55 - 0.75 * f + 0.22 * streak * (1 - f)
            if kind == "iris_edge":
                bright = np.full(n_seg, 0.35)
            c = iris[None, :] * np.asarray(bright)[:, None]
        else:
            f = (ang - a_iris) / (np.pi - a_iris)
            c = np.tile(np.array([0.86, 0.84, 0.80]) * (1.0 - 0.25 * f) + np.array([0.0, -0.04, -0.04]) * f, (n_seg, 1))
        col[i, :, :3] = c
    return pos, idx, col.reshape(-1, 4)


def _ear(side: float) -> tuple[np.ndarray, np.ndarray]:
    """A stylised ear: rim (helix), bowl (concha) and lobe as a closed pillow."""
    n_r, n_t = 8, 32
    s = np.linspace(0.0, 1.0, n_r)
    t = np.linspace(0.0, 2 * np.pi, n_t, endpoint=False)
    S, T = np.meshgrid(s, t, indexing="ij")
    # outline: taller than wide, wider at the top, lobe at the bottom
    half_h, half_w = 0.030, 0.0165
    wmod = 1.0 + 0.18 * np.sin(T)
    u = S * half_w * wmod * np.cos(T)  # toward the back of the ear
    v = S * half_h * np.sin(T)  # up
    rim = np.exp(-((S - 0.86) / 0.10) ** 2)
    bowl = np.exp(-((S / 0.55) ** 2)) * (1.0 - 0.6 * np.clip(-np.sin(T), 0, 1))
    lobe = np.clip(-np.sin(T), 0, 1) ** 2 * np.exp(-((S - 0.7) / 0.3) ** 2)
    edge = np.sqrt(np.clip(1.0 - S ** 8, 0.0, 1.0))
    front = (0.0032 * rim + 0.0022 * lobe - 0.0018 * bowl + 0.0012) * edge
    back = -(0.0028 * edge + 0.0006)
    # local frame: n = outward normal of the ear plane, b = toward the back, up
    beta, gamma = np.radians(24.0), np.radians(14.0)
    n = np.array([np.cos(beta), 0.0, np.sin(beta)])
    back_dir = np.array([np.sin(beta), 0.0, -np.cos(beta)])
    up = np.array([0.0, np.cos(gamma), -np.sin(gamma)])
    up = up - n * (up @ n)
    up /= np.linalg.norm(up)
    side_dir = np.cross(up, n)
    back_dir = side_dir if side_dir @ back_dir >= 0 else -side_dir  # exactly orthogonal, still backward
    center = np.array([0.0715, -0.020, -0.016])
    pos_f = center + u.reshape(-1, 1) * back_dir + v.reshape(-1, 1) * up + front.reshape(-1, 1) * n
    pos_b = center + u.reshape(-1, 1) * back_dir + v.reshape(-1, 1) * up + (back * np.ones_like(S)).reshape(-1, 1) * n
    pos = np.concatenate([pos_f, pos_b])
    nv = n_r * n_t
    idx_f = grid_indices(n_r, n_t, wrap=True).reshape(-1, 3)
    idx_b = idx_f + nv
    # stitch the outline: make the last ring of both sheets one ring
    pos[nv + (n_r - 1) * n_t: nv + n_r * n_t] = pos[(n_r - 1) * n_t: n_r * n_t]
    tri = np.concatenate([idx_f, idx_b])
    # orient: front sheet faces +n, back sheet -n
    p = pos
    nrm = np.cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]])
    want = np.concatenate([np.ones(len(idx_f)), -np.ones(len(idx_b))])
    flip = np.einsum("ij,j->i", nrm, n) * want < 0
    tri[flip] = tri[flip][:, ::-1]
    if side < 0:
        pos = pos * [-1, 1, 1]
        tri = tri[:, ::-1]
    return pos, tri.reshape(-1).astype(np.uint32)


def _hairline(theta: np.ndarray) -> np.ndarray:
    """Latitude of the hairline (ray angles from ORIGIN) for each longitude."""
    keys_t = np.array([0.0, 0.30, 0.55, 0.80, 1.00, 1.14, 1.26, 1.40, 1.62, 1.90, 2.25, 2.70, np.pi])
    keys_p = np.array([0.74, 0.74, 0.70, 0.62, 0.52, 0.40, 0.38, 0.56, 0.63, 0.42, 0.08, -0.14, -0.18])
    ph = np.interp(np.abs(theta), keys_t, keys_p)
    # side-swept fringe: lower over the avatar's right (-X) brow, rising to its left,
    # cut into a few soft locks
    ph -= 0.11 * np.exp(-(((theta + 0.30) / 0.32) ** 2)) + 0.04 * np.exp(-(((theta - 0.05) / 0.35) ** 2))
    locks = np.abs(np.sin(theta * 7.0 + 0.6)) ** 0.6
    ph += 0.035 * (locks - 0.5) * np.exp(-((theta / 0.75) ** 4))
    return ph


def _hair(style: HeadStyle) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hair cap: a shell over the skull with volume on top and a rounded edge."""
    n_cols, n_rows = 112, 24
    theta = np.linspace(-np.pi, np.pi, n_cols, endpoint=False)
    ph_h = smooth_periodic(_hairline(theta), 3)
    u = np.linspace(0.0, 1.0, n_rows)
    t = 1.0 - (1.0 - u) ** 1.5  # rows crowd toward the edge, where the shape turns
    T, TH = np.meshgrid(t, theta, indexing="ij")
    PH = np.pi / 2 - T * (np.pi / 2 - ph_h[None, :])
    dirs = sphere_dirs(TH, PH).reshape(-1, 3)
    dist = raycast_first_exit(_skin_sdf, ORIGIN, dirs)
    surf = ORIGIN + dirs * dist[:, None]
    nrm = sdf_normals(_skin_sdf, surf)
    tt, th = T.reshape(-1), TH.reshape(-1)
    front = np.exp(-((th / 0.9) ** 2))
    thick = 0.0075 + 0.0075 * np.exp(-((tt - 0.35) / 0.35) ** 2) * (0.6 + 0.4 * front)
    thick += 0.0035 * np.exp(-(((th - 0.5) / 0.5) ** 2)) * np.exp(-((tt - 0.5) / 0.3) ** 2)  # part volume
    # locks: soft ridges running from the crown to the edge, swept slightly sideways
    thick += 0.0014 * np.sin(th * 16.0 + 3.0 * tt) * smoothstep(0.15, 0.5, tt)
    edge = smoothstep(1.0, 0.93, tt)
    off = thick * np.sqrt(edge) - 0.0015 * (1.0 - edge)
    pos = surf + nrm * off[:, None]
    idx = grid_indices(n_rows, n_cols, wrap=True)  # winds outward: rows crown to edge, longitude up
    rng = np.random.default_rng(3)
    streak = smooth_periodic(rng.uniform(-1, 1, n_cols), 1)
    shade = 1.0 + 0.14 * np.tile(streak, n_rows) - 0.10 * tt
    col = np.ones((len(pos), 4))
    col[:, :3] = np.asarray(style.hair)[None, :] * shade[:, None]
    return pos, idx, col


def _brow_dirs(side: float, s: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Ray directions of brow points: ``s`` 0 (inner end) .. 1 (outer end), ``c`` -1 (lower edge) .. 1 (upper)."""
    th_in, th_out = 0.10, 0.66
    _, phi_e = _dir_angles(EYE_C + [0, 0, EYE_R + LID_GAP])
    theta = th_in + (th_out - th_in) * s
    center_phi = phi_e + 0.195 + 0.055 * np.sin(np.pi * s ** 0.75) - 0.03 * s
    width = 0.050 * (1.0 - 0.55 * s) * np.clip(np.sin(np.pi * np.clip(s, 0.02, 0.98)) ** 0.25, 0, 1)
    phi = center_phi + c * width * 0.5
    return sphere_dirs(theta * side, phi).reshape(-1, 3)


def _brow(side: float) -> tuple[np.ndarray, np.ndarray]:
    n_a, n_c = 26, 7
    s = np.linspace(0.0, 1.0, n_a)
    c = np.linspace(-1.0, 1.0, n_c)
    S, Cc = np.meshgrid(s, c, indexing="ij")
    dirs = _brow_dirs(side, S, Cc)
    dist = raycast_first_exit(_skin_sdf, ORIGIN, dirs)
    surf = ORIGIN + dirs * dist[:, None]
    nrm = sdf_normals(_skin_sdf, surf)
    ends = smoothstep(0.0, 0.08, S) * smoothstep(1.0, 0.9, S)
    h = (0.0024 * np.sqrt(np.clip(1.0 - Cc ** 2, 0, 1)) * ends - 0.0006).reshape(-1)
    pos = surf + nrm * h[:, None]
    idx = grid_indices(n_a, n_c, wrap=False)
    # orient with the surface normal
    tri = idx.reshape(-1, 3).copy()
    fn = np.cross(pos[tri[:, 1]] - pos[tri[:, 0]], pos[tri[:, 2]] - pos[tri[:, 0]])
    flip = np.einsum("ij,ij->i", fn, nrm[tri[:, 0]]) < 0
    tri[flip] = tri[flip][:, ::-1]
    return pos, tri.reshape(-1).astype(np.uint32)


def _lining_sdf(p: np.ndarray) -> np.ndarray:
    """Skull, face, cheeks and lips: the volume the interior lining follows (no neck, no nose)."""
    d = smin(_head_core_sdf(p), sd_ellipsoid(_mirror(p), (0.037, -0.025, 0.047), (0.028, 0.024, 0.027)), 0.02)
    up, lo = _lips_sdf(p)
    return smin(smin(d, up, 0.0045), lo, 0.0045)


def _lining() -> tuple[np.ndarray, np.ndarray]:
    n_c, n_r = 44, 26
    theta = np.linspace(-np.pi, np.pi, n_c, endpoint=False)
    phi = np.linspace(np.pi / 2, -np.pi / 2, n_r)
    PH, TH = np.meshgrid(phi, theta, indexing="ij")
    dirs = sphere_dirs(TH, PH).reshape(-1, 3)
    dist = raycast_first_exit(_lining_sdf, ORIGIN, dirs)
    pos = ORIGIN + dirs * (dist - 0.0025)[:, None]
    # the grid winds outward (rows top to bottom, longitude increasing): reverse it
    idx = grid_indices(n_r, n_c, wrap=True).reshape(-1, 3)[:, ::-1]
    return pos, idx.reshape(-1).astype(np.uint32)


def _collar() -> tuple[np.ndarray, np.ndarray]:
    """A crew-neck collar: a torus (slightly oval) where the neck enters the shirt."""
    n_a, n_b = 8, 36
    a_ = np.repeat(np.linspace(0, 2 * np.pi, n_a), n_b)
    b_ = np.tile(np.linspace(0, 2 * np.pi, n_b, endpoint=False), n_a)
    ring_c = np.array([0.0, -0.176, -0.021])
    major, minor, oval = 0.0495, 0.0062, 1.08
    ring = (major + minor * np.cos(a_))
    pos = np.stack([ring * np.sin(b_), minor * np.sin(a_), ring * np.cos(b_) * oval], 1) + ring_c
    tri = grid_indices(n_a, n_b, wrap=True).reshape(-1, 3).copy()
    fn = np.cross(pos[tri[:, 1]] - pos[tri[:, 0]], pos[tri[:, 2]] - pos[tri[:, 0]])
    tube_c = ring_c + np.stack([major * np.sin(b_), np.zeros_like(b_), major * np.cos(b_) * oval], 1)
    flip = np.einsum("ij,ij->i", fn, pos[tri[:, 0]] - tube_c[tri[:, 0]]) < 0
    tri[flip] = tri[flip][:, ::-1]
    return pos, tri.reshape(-1).astype(np.uint32)


def _torso_sdf(p: np.ndarray) -> np.ndarray:
    pm = _mirror(p)
    d = sd_capsule(pm, (0.0, -0.232, -0.025), (0.150, -0.244, -0.030), 0.050)
    d = smin(d, sd_ellipsoid(p, (0.0, -0.192, -0.024), (0.080, 0.040, 0.055)), 0.05)
    d = smin(d, sd_ellipsoid(p, (0.0, -0.34, -0.020), (0.175, 0.13, 0.095)), 0.06)
    return d


def _torso() -> tuple[np.ndarray, np.ndarray]:
    n_c, n_r = 80, 24
    theta = np.linspace(-np.pi, np.pi, n_c, endpoint=False)
    phi = np.linspace(np.pi / 2, -np.pi / 2, n_r)
    PH, TH = np.meshgrid(phi, theta, indexing="ij")
    o = np.array([0.0, -0.28, -0.022])
    dirs = sphere_dirs(TH, PH).reshape(-1, 3)
    dist = raycast_first_exit(_torso_sdf, o, dirs, max_dist=0.4)
    pos = o + dirs * dist[:, None]
    return pos, grid_indices(n_r, n_c, wrap=True)


def _simple_prim(name: str, pos: np.ndarray, idx: np.ndarray, material: Material,
                 colors: np.ndarray | None = None) -> MeshPrimitive:
    cols = None
    if colors is not None:
        cols = np.asarray(colors, np.float64)
        if cols.shape[1] == 3:
            cols = np.concatenate([cols, np.ones((len(cols), 1))], axis=1)
        cols = quantise_colors(cols)
    return MeshPrimitive(name, pos.astype(np.float32), compute_normals(pos, idx), idx.astype(np.uint32),
                         material, colors=cols)
