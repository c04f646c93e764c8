"""The default avatar: a stylised, friendly head built entirely by code.

Construction (all units metres, +Y up, the head faces +Z, its left is +X):

- The skin is a signed distance field (ellipsoids, capsules and a round cone
  blended with smooth minimum, see :mod:`avatar_app.avatar.procedural`) sampled
  on a latitude/longitude grid by casting rays from one interior point. The grid
  has slits for the eyes and the mouth: rows are split there, and the lip and lid
  edges fold inward, so the lips have thickness and the lids wrap the eyeballs.
- Eyelid poses (blink, wide, squint) re-run the same construction with other
  lid-edge positions, so a closed lid lies exactly on a shell around the eyeball.
- Everything else (jaw, lips, brows, cheeks, nose) is a smooth displacement field
  evaluated at the rest positions of every part that it moves (skin, brows, teeth,
  tongue, mouth cavity), so parts move together without tearing.
- Separate primitives: eyeballs (iris and pupil as exact rings of vertex colour),
  brows, ears, hair cap, teeth, tongue, mouth cavity, shoulders with a collar, and
  an inward-facing interior lining: culled from outside, it is seen only through
  openings (mouth, lid corners), as a dark interior instead of the background.
- Everything is single-sided and drawn hair-first, which keeps software OpenGL
  fast (see benchmarks/render.py).

Skeleton: root (neck base, never moves) <- neck <- head <- eye_L, eye_R. The
head joint sits at the top of the neck; the neck joint takes part of the head
rotation so the neck bends smoothly while its base stays.
"""
from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton, compute_normals
from avatar_app.avatar.procedural import (
    grid_indices,
    raycast_first_exit,
    sd_capsule,
    sd_ellipsoid,
    sd_round_cone,
    sdf_normals,
    smax,
    smin,
    smooth_periodic,
    smoothstep,
    sphere_dirs,
)
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- proportions
ORIGIN = np.array([0.0, -0.025, 0.0])  # interior point the skin rays start from
EYE_R = 0.0145  # eyeball radius (stylised: a little large)
EYE_C = np.array([0.0340, 0.0, 0.0635])  # left eyeball centre (avatar's left = +X)
LID_GAP = 0.0015  # lid shell radius - eyeball radius
LID_INNER, LID_OUTER = 0.125, 0.160  # angular radii (from ORIGIN) of the lid-shell blend
MOUTH_Y = -0.056  # height of the lip line
MOUTH_Z = 0.083  # depth of the lip line at the centre (where the lips meet)
HINGE = np.array([0.0, -0.026, -0.008])  # jaw rotation axis point (axis = X)
JAW_OPEN_RAD = 0.30  # jaw rotation at jawOpen = 1
NECK_BASE = np.array([0.0, -0.178, -0.02])
HEAD_PIVOT = np.array([0.0, -0.075, -0.02])


@dataclass(frozen=True)
class HeadStyle:
    """Colours of the default head, linear RGB in [0, 1] (avoid greens: chroma key).

    Attributes:
        skin, lips, blush, hair, brows, iris, shirt, collar, lash: part colours.
        mouth_smile: upward curve of the lip line at the corners, radians of latitude.
    """

    skin: tuple[float, float, float] = (0.80, 0.52, 0.38)
    lips: tuple[float, float, float] = (0.62, 0.24, 0.22)
    blush: tuple[float, float, float] = (0.85, 0.38, 0.33)
    hair: tuple[float, float, float] = (0.105, 0.048, 0.024)
    brows: tuple[float, float, float] = (0.07, 0.035, 0.02)
    iris: tuple[float, float, float] = (0.20, 0.085, 0.030)
    shirt: tuple[float, float, float] = (0.10, 0.13, 0.32)
    collar: tuple[float, float, float] = (0.07, 0.09, 0.22)
    lash: tuple[float, float, float] = (0.035, 0.02, 0.015)
    mouth_smile: float = 0.032


# ----------------------------------------------------------------------------- skin field
def _mirror(p: np.ndarray) -> np.ndarray:
    q = p.copy()
    q[:, 0] = np.abs(q[:, 0])
    return q


def _head_core_sdf(p: np.ndarray) -> np.ndarray:
    """Skull, face, jaw and chin without neck or features."""
    d = sd_ellipsoid(p, (0.0, 0.032, -0.012), (0.078, 0.092, 0.097))
    d = smin(d, sd_ellipsoid(p, (0.0, -0.022, 0.018), (0.064, 0.068, 0.064)), 0.03)
    return smin(d, _jaw_volume_sdf(p), 0.025)


def _jaw_volume_sdf(p: np.ndarray) -> np.ndarray:
    d = sd_ellipsoid(p, (0.0, -0.062, 0.028), (0.054, 0.036, 0.048))
    return smin(d, sd_ellipsoid(p, (0.0, -0.084, 0.053), (0.025, 0.017, 0.018)), 0.016)


def _lips_sdf(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    upper = sd_ellipsoid(p, (0.0, MOUTH_Y + 0.0046, 0.0772), (0.0200, 0.0050, 0.0072))
    lower = sd_ellipsoid(p, (0.0, MOUTH_Y - 0.0052, 0.0760), (0.0175, 0.0060, 0.0078))
    return upper, lower


def _skin_sdf(p: np.ndarray) -> np.ndarray:
    """Signed distance to the whole skin surface (head, neck, features)."""
    pm = _mirror(p)
    d = _head_core_sdf(p)
    d = smin(d, sd_ellipsoid(pm, (0.037, -0.025, 0.047), (0.028, 0.024, 0.027)), 0.02)  # cheeks
    d = smin(d, sd_ellipsoid(p, (0.0, 0.026, 0.056), (0.056, 0.013, 0.024)), 0.02)  # brow ridge
    d = smin(d, sd_capsule(p, (0.0, -0.040, -0.018), (0.0, -0.33, -0.022), 0.046), 0.03)  # neck
    # flatten the eye area a little (eyelids are placed on a shell around each eyeball later)
    d = smax(d, -sd_ellipsoid(pm, EYE_C + [0.0, 0.0, 0.030], (0.023, 0.0145, 0.016)), 0.014)
    # nose: bridge-to-tip round cone, nostril wings
    d = smin(d, sd_round_cone(p, (0.0, 0.004, 0.075), (0.0, -0.022, 0.0905), 0.0056, 0.0098), 0.012)
    d = smin(d, sd_ellipsoid(pm, (0.0098, -0.0275, 0.0825), (0.0078, 0.0058, 0.0075)), 0.006)
    up, lo = _lips_sdf(p)
    d = smin(d, up, 0.0045)
    d = smin(d, lo, 0.0045)
    return d


# ----------------------------------------------------------------------------- skin grid
_N_HALF_COLS = 64


def _columns() -> np.ndarray:
    """Longitudes (C,) from -pi, symmetric about 0, denser on the face."""
    th = np.linspace(0.0, np.pi, 4001)
    dens = 1.0 + 2.6 * np.exp(-((th / 0.85) ** 4))
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(th))])
    half = np.interp(np.linspace(0.0, 1.0, _N_HALF_COLS + 1), cdf / cdf[-1], th)
    return np.concatenate([-half[_N_HALF_COLS:0:-1], half[:_N_HALF_COLS]])


@dataclass
class _Rows:
    phi: np.ndarray  # (R,) base latitude
    kind: np.ndarray  # (R,) int codes below
    t: np.ndarray  # (R,) position in the eye band, 0 at the lid edge, 1 at the band end
    eye_up_fold: int
    eye_lo_fold: int
    mouth_up_f2: int
    mouth_lo_f2: int
    mouth_rows: tuple[int, ...]  # edge_up, f1_up, f2_up, f2_lo, f1_lo, edge_lo


K_NORMAL, K_EYE_UP, K_EYE_LO, K_EYE_UP_FOLD, K_EYE_LO_FOLD = 0, 1, 2, 3, 4
K_MOUTH = 5  # + offset 0..5 for edge_up, f1_up, f2_up, f2_lo, f1_lo, edge_lo
PHI_EYE_BAND_UP = 0.17
PHI_EYE_BAND_LO = 0.13


#: Rows per skin band: crown, upper lid, lower lid, mid face, lower face, neck.
_ROW_COUNTS = (13, 10, 7, 17, 15, 9)


def _rows(phi_eye: float, phi_mouth: float) -> _Rows:
    n_crown, n_up, n_lo, n_mid, n_low, n_neck = _ROW_COUNTS
    phi: list[float] = []
    kind: list[int] = []
    t: list[float] = []

    def add(values, k: int, band: float | None = None) -> None:
        for f in values:
            phi.append(float(f))
            kind.append(k)
            t.append(abs(f - phi_eye) / band if band else 0.0)

    top = phi_eye + PHI_EYE_BAND_UP
    u = np.linspace(0.0, 1.0, n_crown, endpoint=False)
    add(np.pi / 2 - (np.pi / 2 - top) * np.sin(u * np.pi / 2), K_NORMAL)  # denser toward the forehead
    add(np.linspace(top, phi_eye, n_up), K_EYE_UP, PHI_EYE_BAND_UP)  # ends with the upper lid edge
    eye_up_fold = len(phi)
    add([phi_eye], K_EYE_UP_FOLD)
    eye_lo_fold = len(phi)
    add([phi_eye], K_EYE_LO_FOLD)
    add(np.linspace(phi_eye, phi_eye - PHI_EYE_BAND_LO, n_lo), K_EYE_LO, PHI_EYE_BAND_LO)
    add(np.linspace(phi_eye - PHI_EYE_BAND_LO, phi_mouth, n_mid + 1)[1:-1], K_NORMAL)
    mouth0 = len(phi)
    for k in range(6):
        add([phi_mouth], K_MOUTH + k)
    add(np.linspace(phi_mouth, -0.98, n_low + 1)[1:], K_NORMAL)
    add(np.linspace(-0.98, -np.pi / 2, n_neck + 1)[1:], K_NORMAL)
    return _Rows(np.array(phi), np.array(kind), np.array(t), eye_up_fold, eye_lo_fold,
                 mouth0 + 2, mouth0 + 3, tuple(range(mouth0, mouth0 + 6)))


def _dir_angles(point: np.ndarray) -> tuple[float, float]:
    d = point - ORIGIN
    return float(np.arctan2(d[0], d[2])), float(np.arctan2(d[1], np.hypot(d[0], d[2])))


@dataclass
class _EyeShape:
    """Lid-edge offsets (latitude, radians) per column for both eyes."""

    upper: np.ndarray  # (C,) offset of the upper lid edge
    lower: np.ndarray  # (C,) offset of the lower lid edge (negative = below)


def _onto_lids(p: np.ndarray, dirs: np.ndarray, extra: float = 0.0, extra_sides=(-1, 1)) -> np.ndarray:
    """Blend skin points near each eye onto the lid shell (sphere of radius EYE_R + LID_GAP).

    A ray from ORIGIN that points within ``LID_INNER`` rad of an eye centre lands on
    the shell (where it leaves the sphere); the blend fades out by ``LID_OUTER``.
    Points are never left inside the eyeball (plus a 0.4 mm margin): along their ray
    they are pushed out past it, so the eyeball cannot show through the skin.

    Args:
        p: (N, 3) skin points on rays ``dirs`` from ORIGIN.
        dirs: (N, 3) unit ray directions.
        extra: added to the shell radius (metres) for the eyes in ``extra_sides``.
        extra_sides: +1 (left eye), -1 (right eye).
    """
    out = p.copy()
    for sx in (1.0, -1.0):
        rl = EYE_R + LID_GAP + (extra if sx in extra_sides else 0.0)
        e = EYE_C * [sx, 1, 1] - ORIGIN
        dist_e = np.linalg.norm(e)
        b = dirs @ e
        gamma = np.arccos(np.clip(b / dist_e, -1.0, 1.0))
        disc = b * b - (dist_e ** 2 - rl ** 2)
        m = smoothstep(LID_OUTER, LID_INNER, gamma) * (disc > 0)
        sel = m > 0
        if sel.any():
            t = b[sel] + np.sqrt(np.maximum(disc[sel], 0.0))
            sph = ORIGIN + dirs[sel] * t[:, None]
            out[sel] = p[sel] * (1 - m[sel, None]) + sph * m[sel, None]
        # keep clear of the eyeball itself
        disc_eye = b * b - (dist_e ** 2 - (EYE_R + 0.0004) ** 2)
        hit = disc_eye > 0
        if hit.any():
            t_exit = b[hit] + np.sqrt(disc_eye[hit])
            t_now = np.einsum("ij,ij->i", out[hit] - ORIGIN, dirs[hit])
            k = 0.002  # smooth maximum (no crease where the push starts)
            h = np.clip(0.5 + 0.5 * (t_now - t_exit) / k, 0.0, 1.0)
            t_new = t_exit * (1 - h) + t_now * h + k * h * (1 - h)
            out[hit] += dirs[hit] * (t_new - t_now)[:, None]
    return out


class _SkinBuilder:
    """Grid layout of the skin and positions for any lid shape."""

    def __init__(self, style: HeadStyle):
        self.style = style
        self.cols = _columns()
        front = EYE_C + np.array([0.0, 0.0, EYE_R + LID_GAP])
        self.theta_eye, self.phi_eye = _dir_angles(front)
        rl = EYE_R + LID_GAP
        xi, xo = 0.80 * rl, 0.83 * rl
        inner = EYE_C + np.array([-xi, -0.0006, np.sqrt(rl ** 2 - xi ** 2)])
        outer = EYE_C + np.array([xo, 0.0016, np.sqrt(rl ** 2 - xo ** 2 - 0.0016 ** 2)])
        th_in, _ = _dir_angles(inner)
        th_out, _ = _dir_angles(outer)
        _, self.phi_mouth = _dir_angles(np.array([0.0, MOUTH_Y, 0.082]))
        self.theta_mouth, _ = _dir_angles(np.array([0.0218, MOUTH_Y, 0.0735]))
        self.rows = _rows(self.phi_eye, self.phi_mouth)
        th = np.abs(self.cols)
        side = np.sign(self.cols)
        # eye profile coordinate x in [-1, 1] from the inner to the outer corner, per column
        xe = (th - 0.5 * (th_in + th_out)) / (0.5 * (th_out - th_in))
        inside = np.abs(xe) < 1.0
        self.eye_cols = inside
        self.eye_side = np.where(inside, side, 0.0)
        s = np.clip(1.0 - xe ** 2, 0.0, None)
        # almond: upper lid peaks slightly toward the inner side, lower lid toward the outer
        self.eye_up_profile = np.where(inside, s ** 0.55 * (1.0 - 0.12 * xe), 0.0)
        self.eye_lo_profile = np.where(inside, s ** 0.75 * (1.0 + 0.10 * xe), 0.0)
        self.eye_fold_window = np.where(inside, s ** 0.3, 0.0)
        xm = th / self.theta_mouth
        self.mouth_cols = xm < 1.0
        self.mouth_window = np.where(self.mouth_cols, np.clip(1.0 - xm ** 2, 0, None) ** 0.35, 0.0)
        self.h_up = 0.086 * EYE_R / 0.013
        self.h_lo = 0.066 * EYE_R / 0.013

    # lid shapes ------------------------------------------------------------
    def eye_shape(self, up: float, lo: float, close: float = 0.0, sides=(-1, 1)) -> _EyeShape:
        """Lid edges: ``up``/``lo`` scale the rest opening; ``close`` in [0, 1] meets them."""
        meet = -0.22 * self.h_lo * self.eye_lo_profile
        u = self.h_up * up * self.eye_up_profile
        l_ = -self.h_lo * lo * self.eye_lo_profile
        u = (1 - close) * u + close * meet
        l_ = (1 - close) * l_ + close * meet
        mask = np.isin(self.eye_side, sides)
        rest = self.eye_shape_rest() if sides != (-1, 1) else None
        if rest is not None:
            u = np.where(mask, u, rest.upper)
            l_ = np.where(mask, l_, rest.lower)
        return _EyeShape(u, l_)

    def eye_shape_rest(self) -> _EyeShape:
        return _EyeShape(self.h_up * self.eye_up_profile, -self.h_lo * self.eye_lo_profile)

    # parameters ----------------------------------------------------------------
    def params(self, eyes: _EyeShape) -> tuple[np.ndarray, np.ndarray]:
        """(R, C) longitude and latitude of every skin vertex."""
        r = self.rows
        theta = np.broadcast_to(self.cols, (len(r.phi), len(self.cols)))
        phi = np.repeat(r.phi[:, None], len(self.cols), axis=1).copy()
        up_rows = np.isin(r.kind, (K_EYE_UP, K_EYE_UP_FOLD))
        lo_rows = np.isin(r.kind, (K_EYE_LO, K_EYE_LO_FOLD))
        fall = (1.0 - r.t)[:, None]
        phi += np.where(up_rows[:, None], eyes.upper[None, :] * fall, 0.0)
        phi += np.where(lo_rows[:, None], eyes.lower[None, :] * fall, 0.0)
        # friendly lip line: corners curve up
        xm = np.abs(self.cols) / self.theta_mouth
        curve = self.style.mouth_smile * np.minimum(xm, 1.25) ** 2 * np.exp(-np.maximum(xm - 1.0, 0) ** 2 / 0.3)
        fall_m = np.exp(-(((r.phi - self.phi_mouth) / 0.09) ** 2))
        phi += curve[None, :] * fall_m[:, None]
        return theta, phi

    def positions(self, eyes: _EyeShape, rows_subset: np.ndarray | None = None,
                  shell_extra: float = 0.0, sides=(-1, 1)) -> np.ndarray:
        """(R, C, 3) skin positions (or only ``rows_subset`` rows, (r, C, 3)).

        ``shell_extra`` (metres) enlarges the lid shell: closed lids sit a little
        further out, so the straight-line path of a linear morph clears the eyeball.
        """
        theta, phi = self.params(eyes)
        rows = np.arange(len(self.rows.phi)) if rows_subset is None else rows_subset
        theta, phi = theta[rows], phi[rows]
        dirs = sphere_dirs(theta, phi).reshape(-1, 3)
        dist = raycast_first_exit(_skin_sdf, ORIGIN, dirs)
        p = ORIGIN + dirs * dist[:, None]
        p = _onto_lids(p, dirs, shell_extra, sides).reshape(len(rows), len(self.cols), 3)
        kind = self.rows.kind[rows]
        # lid folds: toward the eyeball centre, under the eyeball surface
        fold = np.isin(kind, (K_EYE_UP_FOLD, K_EYE_LO_FOLD))
        if fold.any():
            centre = np.where(self.cols[:, None] >= 0, EYE_C, EYE_C * [-1, 1, 1])
            to_c = centre[None] - p[fold]
            to_c /= np.linalg.norm(to_c, axis=-1, keepdims=True)
            p[fold] += to_c * (0.0024 * self.eye_fold_window)[None, :, None]
        # lip folds: up/down and inward, making the lips' inner surfaces
        inward = -np.stack([np.sin(self.cols), np.zeros_like(self.cols), np.cos(self.cols)], axis=-1)
        offsets = {1: (0.0016, 0.0032), 2: (0.0036, 0.0078), 3: (-0.0036, 0.0078), 4: (-0.0016, 0.0032)}
        w = self.mouth_window[:, None]
        for k, (dy, din) in offsets.items():
            sel = kind == K_MOUTH + k
            if sel.any():
                p[sel] += (w ** 2.5 * np.array([0.0, dy, 0.0]) + w ** 1.5 * inward * din)[None]
        return p

    def indices(self) -> np.ndarray:
        r = self.rows
        skip = np.zeros((len(r.phi) - 1, len(self.cols)), bool)
        # a quad (c, c+1) belongs to a slit when either of its columns is inside it
        eye_q = self.eye_cols | np.roll(self.eye_cols, -1)
        mouth_q = self.mouth_cols | np.roll(self.mouth_cols, -1)
        skip[r.eye_up_fold] = eye_q
        skip[r.mouth_up_f2] = mouth_q
        return grid_indices(len(r.phi), len(self.cols), wrap=True, skip=skip)


# ----------------------------------------------------------------------------- other parts
def _lathe(center, radii, n_rings: int, n_seg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ellipsoid grid with poles on the Z axis: positions (V, 3), indices, polar angle per vertex."""
    alpha = np.linspace(0.0, np.pi, n_rings)
    beta = np.linspace(0.0, 2 * np.pi, n_seg, endpoint=False)
    a, b = np.meshgrid(alpha, beta, indexing="ij")
    return _lathe_from_angles(center, radii, a, b), _lathe_indices(n_rings, n_seg), a.reshape(-1)


def _lathe_from_angles(center, radii, a, b) -> np.ndarray:
    local = np.stack([np.sin(a) * np.cos(b), np.sin(a) * np.sin(b), np.cos(a)], axis=-1).reshape(-1, 3)
    return np.asarray(center) + local * np.asarray(radii)


def _lathe_indices(n_rings: int, n_seg: int) -> np.ndarray:
    return grid_indices(n_rings, n_seg, wrap=True)


def _orient_outward(positions: np.ndarray, indices: np.ndarray, center, inward: bool = False) -> np.ndarray:
    """Flip triangles so their normals point away from (or toward) ``center``."""
    tri = indices.reshape(-1, 3).copy()
    p = positions
    n = np.cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]])
    out = np.einsum("ij,ij->i", n, p[tri].mean(axis=1) - np.asarray(center))
    flip = (out < 0) if not inward else (out > 0)
    tri[flip] = tri[flip][:, ::-1]
    return tri.reshape(-1).astype(np.uint32)


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
    pos = _lathe_from_angles(center, (EYE_R, EYE_R, EYE_R), a, b)
    idx = _orient_outward(pos, _lathe_indices(len(rings), n_seg), center)
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


def _arc_band(y_lo: np.ndarray | float, y_hi: np.ndarray | float, z_front: float, radius_x: float,
              radius_z: float, alpha_max: float, thickness: float, n_along: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A rounded band swept along a horseshoe arc in XZ (teeth rows).

    Returns positions (V, 3), indices and the arc parameter s in [-1, 1] per vertex.
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


def _brow(side: float) -> tuple[np.ndarray, np.ndarray]:
    n_a, n_c = 26, 7
    s = np.linspace(0.0, 1.0, n_a)
    c = np.linspace(-1.0, 1.0, n_c)
    S, Cc = np.meshgrid(s, c, indexing="ij")
    th_in, th_out = 0.10, 0.66
    _, phi_e = _dir_angles(EYE_C + [0, 0, EYE_R + LID_GAP])
    theta = th_in + (th_out - th_in) * S
    center_phi = phi_e + 0.195 + 0.055 * np.sin(np.pi * S ** 0.75) - 0.03 * S
    width = 0.050 * (1.0 - 0.55 * S) * np.clip(np.sin(np.pi * np.clip(S, 0.02, 0.98)) ** 0.25, 0, 1)
    phi = center_phi + Cc * width * 0.5
    dirs = sphere_dirs(theta * side, phi).reshape(-1, 3)
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
    n_c, n_r = 64, 20
    theta = np.linspace(-np.pi, np.pi, n_c, endpoint=False)
    phi = np.linspace(np.pi / 2, -np.pi / 2, n_r)
    PH, TH = np.meshgrid(phi, theta, indexing="ij")
    o = np.array([0.0, -0.28, -0.022])
    dirs = sphere_dirs(TH, PH).reshape(-1, 3)
    dist = raycast_first_exit(_torso_sdf, o, dirs, max_dist=0.4)
    pos = o + dirs * dist[:, None]
    return pos, grid_indices(n_r, n_c, wrap=True)


# ----------------------------------------------------------------------------- morph fields
def _gauss(p: np.ndarray, center, sigma) -> np.ndarray:
    q = (p - np.asarray(center)) / np.asarray(sigma)
    return np.exp(-0.5 * np.einsum("ij,ij->i", q, q))


def _rot_x_delta(p: np.ndarray, pivot: np.ndarray, angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    q = p - pivot
    out = np.zeros_like(p)
    out[:, 1] = q[:, 1] * (c - 1) - q[:, 2] * s
    out[:, 2] = q[:, 1] * s + q[:, 2] * (c - 1)
    return out


@dataclass
class _PartInfo:
    """Per-vertex attributes that the morph fields read."""

    pos: np.ndarray  # (N, 3) rest positions
    jaw: np.ndarray  # (N,) how much the vertex follows the jaw, 0..1
    face: np.ndarray  # (N,) 1 where facial-expression fields apply (skin, brows)
    upper_lip: np.ndarray  # (N,) upper lip region weight
    lower_lip: np.ndarray  # (N,) lower lip region weight


def _expression_deltas(info: _PartInfo) -> dict[str, np.ndarray]:
    """Displacement fields (metres) for every non-lid blendshape."""
    p, f = info.pos, info.face[:, None]
    x = p[:, 0:1]
    out: dict[str, np.ndarray] = {}
    jaw_rot = _rot_x_delta(p, HINGE, JAW_OPEN_RAD)
    out["jawOpen"] = jaw_rot * info.jaw[:, None]
    out["jawForward"] = np.array([0.0, 0.0, 0.0055]) * info.jaw[:, None]
    out["jawLeft"] = np.array([0.0065, 0.0, 0.0]) * info.jaw[:, None]
    out["jawRight"] = np.array([-0.0065, 0.0, 0.0]) * info.jaw[:, None]
    # Fields that move the upper and lower lip apart fade to zero at the mouth corners,
    # where both lips share vertices (else the corners would split open).
    corners_shut = np.sqrt(np.clip(1.0 - (x / 0.0215) ** 2, 0.0, 1.0))
    ul, ll = info.upper_lip[:, None] * corners_shut, info.lower_lip[:, None] * corners_shut
    out["mouthClose"] = (-0.72 * jaw_rot * ll + 0.28 * jaw_rot * ul) * f
    corner = np.array([0.0218, MOUTH_Y + 0.0025, MOUTH_Z - 0.0085])
    mouth_c = np.array([0.0, MOUTH_Y, MOUTH_Z])
    lips_region = _gauss(p, mouth_c, (0.020, 0.011, 0.02))[:, None] * f
    for name, sx in (("Left", 1.0), ("Right", -1.0)):
        c = corner * [sx, 1, 1]
        g = _gauss(p, c, (0.013, 0.011, 0.02))[:, None] * f
        g_cheek = _gauss(p, (0.036 * sx, -0.036, 0.062), (0.016, 0.013, 0.02))[:, None] * f
        out[f"mouthSmile{name}"] = g * [0.0042 * sx, 0.0062, -0.0028] + g_cheek * [0.001 * sx, 0.0030, 0.0012]
        out[f"mouthFrown{name}"] = g * [0.0008 * sx, -0.0060, -0.0008]
        out[f"mouthStretch{name}"] = g * [0.0048 * sx, -0.0022, -0.0022]
        out[f"mouthDimple{name}"] = g * [0.0018 * sx, 0.0004, -0.0032]
        side_w = smoothstep(-0.006, 0.010, x * sx)
        out[f"mouthPress{name}"] = (ul * [0, -0.0012, -0.0010] + ll * [0, 0.0014, -0.0010]) * side_w * f
        out[f"mouthLowerDown{name}"] = ll * side_w * lips_region * [0.0, -0.0055, 0.0006] / np.maximum(lips_region.max(), 1e-9)
        out[f"mouthUpperUp{name}"] = ul * side_w * lips_region * [0.0, 0.0045, 0.0004] / np.maximum(lips_region.max(), 1e-9)
        out[f"cheekSquint{name}"] = _gauss(p, (0.037 * sx, -0.020, 0.064), (0.016, 0.009, 0.02))[:, None] * f * [0, 0.0032, 0.0006]
        nose = _gauss(p, (0.011 * sx, -0.030, 0.088), (0.008, 0.008, 0.012))[:, None] * f
        out[f"noseSneer{name}"] = nose * [0.0008 * sx, 0.0032, 0.0004]
        brow_band = smoothstep(0.0125, 0.019, p[:, 1:2])  # keep the lids out of brow fields
        own_side = smoothstep(-0.004, 0.008, x * sx)
        g_brow = _gauss(p, (0.034 * sx, 0.026, 0.074), (0.020, 0.014, 0.03))[:, None] * f * brow_band * own_side
        out[f"browDown{name}"] = g_brow * [-0.0016 * sx, -0.0042, 0.0010]
        g_out = _gauss(p, (0.048 * sx, 0.026, 0.062), (0.016, 0.015, 0.03))[:, None] * f * brow_band * own_side
        out[f"browOuterUp{name}"] = g_out * [0.0, 0.0055, 0.0]
    out["mouthLeft"] = lips_region * [0.0062, 0.0, -0.0008]
    out["mouthRight"] = lips_region * [-0.0062, 0.0, -0.0008]
    squeeze = np.concatenate([-x, np.zeros_like(x), np.zeros_like(x)], axis=1)  # toward x = 0, uniform
    out["mouthFunnel"] = lips_region * ([0.0, 0.0, 0.0065] + 0.38 * squeeze) \
        + (ul * [0, 0.0030, 0.0015] + ll * [0, -0.0042, 0.0015]) * f
    out["mouthPucker"] = lips_region * ([0.0, 0.0, 0.0080] + 0.45 * squeeze)
    out["mouthRollLower"] = ll * lips_region * [0.0, 0.0018, -0.0032]
    out["mouthRollUpper"] = ul * lips_region * [0.0, -0.0016, -0.0030]
    chin = _gauss(p, (0.0, -0.092, 0.070), (0.02, 0.015, 0.02))[:, None] * f
    out["mouthShrugLower"] = ll * lips_region * [0.0, 0.0026, 0.0018] + chin * [0, 0.002, 0.0015]
    out["mouthShrugUpper"] = ul * lips_region * [0.0, 0.0022, 0.0010]
    inner = (_gauss(p, (0.014, 0.024, 0.082), (0.011, 0.011, 0.03)) + _gauss(p, (-0.014, 0.024, 0.082), (0.011, 0.011, 0.03)))
    brow_band = smoothstep(0.0125, 0.019, p[:, 1:2])
    out["browInnerUp"] = inner[:, None] * f * brow_band * [0.0, 0.0060, 0.0004]
    for sx in (1.0, -1.0):
        puff = _gauss(p, (0.040 * sx, MOUTH_Y + 0.008, 0.052), (0.014, 0.016, 0.02))[:, None] * f
        out["cheekPuff"] = out.get("cheekPuff", 0) + puff * [0.0060 * sx, 0.0, 0.0022]
    return out


# ----------------------------------------------------------------------------- assembly
def _normals_with(base_pos: np.ndarray, delta: np.ndarray, idx: np.ndarray, base_nrm: np.ndarray) -> np.ndarray:
    return compute_normals(base_pos + delta, idx) - base_nrm


def _jaw_spatial(pos: np.ndarray) -> np.ndarray:
    """How much each point follows the jaw, from position alone (0..1).

    1 below the line from the mouth corner to the jaw hinge (side view), fading
    out behind the hinge and down the neck.
    """
    y, z = pos[:, 1], pos[:, 2]
    a = np.array([MOUTH_Y + 0.004, 0.078])
    b = np.array([HINGE[1] - 0.004, HINGE[2]])
    dvec = b - a
    nline = np.array([dvec[1], -dvec[0]]) / np.linalg.norm(dvec)
    if nline[0] > 0:  # make it point down (toward -y)
        nline = -nline
    below = (np.stack([y, z], axis=1) - a) @ nline
    jaw = smoothstep(-0.004, 0.010, below) * smoothstep(-0.02, 0.005, z)
    return jaw * smoothstep(0.028, 0.0, _jaw_volume_sdf(pos))


def _skin_part(style: HeadStyle) -> tuple[MeshPrimitive, _PartInfo, dict]:
    sb = _SkinBuilder(style)
    rest_shape = sb.eye_shape_rest()
    grid = sb.positions(rest_shape)
    R, C = grid.shape[:2]
    pos = grid.reshape(-1, 3)
    idx = sb.indices()
    rows = sb.rows
    row_of = np.repeat(np.arange(R), C)
    col_of = np.tile(np.arange(C), R)
    kind = rows.kind[row_of]

    # lid poses: recompute only the eye-band rows
    eye_rows = np.flatnonzero(np.isin(rows.kind, (K_EYE_UP, K_EYE_LO, K_EYE_UP_FOLD, K_EYE_LO_FOLD)))
    lid_targets = {}
    for name, sides in (("Left", (1,)), ("Right", (-1,))):
        for tname, kw, extra in (("eyeBlink", dict(up=1.0, lo=1.0, close=1.0), 0.0006),
                                 ("eyeWide", dict(up=1.38, lo=1.10), 0.0),
                                 ("eyeSquint", dict(up=0.90, lo=0.50), 0.0002)):
            shape = sb.eye_shape(sides=sides, **kw)
            moved = sb.positions(shape, eye_rows, extra, sides)
            d = np.zeros_like(grid)
            d[eye_rows] = moved - grid[eye_rows]
            lid_targets[f"{tname}{name}"] = d.reshape(-1, 3)

    # masks for the fields
    y, z = pos[:, 1], pos[:, 2]
    above_split = row_of <= rows.mouth_up_f2
    mouth_x = np.abs(pos[:, 0])
    lipzone_y = smoothstep(0.016, 0.004, np.abs(y - MOUTH_Y))
    lip_x = smoothstep(0.030, 0.020, mouth_x)
    upper_lip = np.where(above_split, 1.0, 0.0) * lipzone_y * lip_x * (z > 0.05)
    lower_lip = np.where(~above_split, 1.0, 0.0) * lipzone_y * lip_x * (z > 0.05)
    jaw = _jaw_spatial(pos)
    # inside the mouth the split decides: upper lip stays, lower lip goes with the jaw
    # (both lips follow the jaw halfway at the corners, so the mouth opens as an oval)
    split_w = smoothstep(0.032, 0.021, mouth_x) * smoothstep(0.014, 0.006, np.abs(y - MOUTH_Y)) * (z > 0.05)
    half_open = 0.5 * np.sqrt(np.clip(1.0 - (mouth_x / 0.0215) ** 2, 0.0, 1.0))
    lip_jaw = np.where(above_split, 0.5 - half_open, 0.5 + half_open)
    jaw = jaw * (1 - split_w) + lip_jaw * split_w

    # colours
    skin = np.asarray(style.skin)
    col = np.tile(skin, (len(pos), 1))
    up_d, lo_d = _lips_sdf(pos)
    lip = smoothstep(0.0024, 0.0002, np.minimum(up_d, lo_d))
    in_mouth = np.isin(kind, [K_MOUTH + k for k in (1, 2, 3, 4)])
    lip = np.where(in_mouth, 1.0, lip)
    col = col * (1 - lip[:, None]) + np.asarray(style.lips) * lip[:, None]
    deep = np.isin(kind, (K_MOUTH + 2, K_MOUTH + 3))
    col[deep] *= 0.55
    # a darker line where the lips meet
    meet = np.isin(kind, (K_MOUTH, K_MOUTH + 5))
    col[meet] *= (1.0 - 0.45 * np.clip(sb.mouth_window[col_of[meet]] * 3.0, 0, 1))[:, None]
    blush = sum(_gauss(pos, (0.040 * sx, -0.030, 0.060), (0.012, 0.009, 0.03)) for sx in (1, -1))
    col = col * (1 - 0.35 * blush[:, None]) + np.asarray(style.blush) * 0.35 * blush[:, None]
    nostril = sum(_gauss(pos, (0.0085 * sx, -0.0385, 0.0890), (0.0022, 0.0016, 0.004)) for sx in (1, -1))
    col *= (1 - 0.55 * np.clip(nostril, 0, 1))[:, None]
    # lash line: the upper lid edge and its fold, fading at the corners
    eyew = sb.eye_fold_window[col_of]
    lash = np.where(np.isin(kind, (K_EYE_UP_FOLD,)) | ((kind == K_EYE_UP) & (rows.t[row_of] < 1e-9)), 1.0, 0.0)
    lash += np.where((kind == K_EYE_UP) & (rows.t[row_of] > 0) & (rows.t[row_of] < 0.09), 0.55, 0.0)
    lash = np.clip(lash * np.clip(eyew * 1.6, 0, 1), 0, 1)
    col = col * (1 - lash[:, None]) + np.asarray(style.lash) * lash[:, None]
    lower_edge = np.isin(kind, (K_EYE_LO_FOLD,)) | ((kind == K_EYE_LO) & (rows.t[row_of] < 1e-9))
    lw = 0.25 * eyew[lower_edge, None]
    col[lower_edge] = col[lower_edge] * (1 - lw) + np.array([0.55, 0.25, 0.22]) * lw
    colors = np.concatenate([col, np.ones((len(pos), 1))], axis=1).astype(np.float32)

    info = _PartInfo(pos, jaw, np.ones(len(pos)), upper_lip, lower_lip)
    prim = MeshPrimitive(
        "skin", pos.astype(np.float32), compute_normals(pos, idx), idx,
        Material("skin", (1.0, 1.0, 1.0, 1.0), roughness=0.62, specular=0.22),
        colors=colors,
    )
    return prim, info, lid_targets


def _simple_prim(name: str, pos: np.ndarray, idx: np.ndarray, material: Material,
                 colors: np.ndarray | None = None) -> MeshPrimitive:
    cols = None
    if colors is not None:
        cols = np.asarray(colors, np.float32)
        if cols.shape[1] == 3:
            cols = np.concatenate([cols, np.ones((len(cols), 1), np.float32)], axis=1)
    return MeshPrimitive(name, pos.astype(np.float32), compute_normals(pos, idx), idx.astype(np.uint32),
                         material, colors=cols)


_cache: dict[HeadStyle, AvatarMesh] = {}
_cache_lock = threading.Lock()


def build_default_head(style: HeadStyle | None = None, *, cached: bool = True) -> AvatarMesh:
    """Build the default avatar head by code.

    The first build in a process takes a few hundred milliseconds; later calls
    return a deep copy of the cached result (about 2 ms), so callers may modify
    what they get. Thread-safe.

    Args:
        style: colours; default :class:`HeadStyle`.
        cached: reuse (a copy of) an earlier build with the same style.

    Returns:
        An :class:`AvatarMesh` with primitives skin, hair, brow_L/R, ear_L/R,
        eye_L/R, teeth_upper/lower, tongue, mouth, torso, collar; a 5-joint
        skeleton (root, neck, head, eye_L, eye_R); morph targets named after the
        ARKit blendshapes (all except the eight eyeLook*, which the gaze joints
        cover), each mapped from its own ARKit name.
    """
    style = style or HeadStyle()
    if not cached:
        return _build(style)
    with _cache_lock:
        if style not in _cache:
            _cache[style] = _build(style)
        return copy.deepcopy(_cache[style])


def _build(style: HeadStyle) -> AvatarMesh:
    t0 = time.perf_counter()
    skin, skin_info, lid_targets = _skin_part(style)

    prims: list[tuple[MeshPrimitive, _PartInfo, str]] = [(skin, skin_info, "face")]

    def add(prim: MeshPrimitive, joint: str, jaw: np.ndarray | float = 0.0, face: float = 0.0):
        n = prim.num_vertices
        info = _PartInfo(prim.positions.astype(np.float64), np.broadcast_to(np.asarray(jaw, float), (n,)).copy(),
                         np.full(n, face), np.zeros(n), np.zeros(n))
        prims.append((prim, info, joint))

    # eyes
    for name, sx in (("eye_L", 1.0), ("eye_R", -1.0)):
        c = EYE_C * [sx, 1, 1]
        pos, idx, col = _eyeball(c, style)
        add(_simple_prim(name, pos, idx, Material(name, roughness=0.10, specular=1.0), col), name)
    # brows
    for name, sx in (("brow_L", 1.0), ("brow_R", -1.0)):
        pos, idx = _brow(sx)
        add(_simple_prim(name, pos, idx, Material(name, (*style.brows, 1.0), roughness=0.85, specular=0.05)),
            "head", face=1.0)
    # ears
    for name, sx in (("ear_L", 1.0), ("ear_R", -1.0)):
        pos, idx = _ear(sx)
        add(_simple_prim(name, pos, idx, Material(name, (*style.skin, 1.0), roughness=0.62, specular=0.18)), "head")
    # hair
    pos, idx, col = _hair(style)
    add(_simple_prim("hair", pos, idx, Material("hair", roughness=0.48, specular=0.35), col), "head")
    # mouth interior: teeth, tongue, cavity
    z_lip = MOUTH_Z
    n_along = 48
    s = np.linspace(-1.0, 1.0, n_along)
    arc_len = np.abs(s) * 1.35 * 0.0245
    tooth = np.abs(((arc_len / 0.0072) + 0.5) % 1.0 - 0.5)  # 0 at a tooth centre, 0.5 at a gap
    notch = 0.0009 * smoothstep(0.30, 0.5, tooth)
    pos, idx, sp = _arc_band(MOUTH_Y - 0.0022 + notch, MOUTH_Y + 0.0085, z_lip - 0.0095, 0.0245, 0.019,
                             1.35, 0.0030, n_along)
    ao = 1.0 - 0.6 * np.abs(sp) ** 1.4
    gap = np.repeat(1.0 - 0.30 * smoothstep(0.36, 0.5, tooth), 10)
    tcol = np.array([0.86, 0.84, 0.76])[None, :] * (ao * gap)[:, None]
    mat_teeth = Material("teeth", roughness=0.35, specular=0.45)
    add(_simple_prim("teeth_upper", pos, idx, mat_teeth, tcol), "head", jaw=0.0)
    pos, idx, sp = _arc_band(MOUTH_Y - 0.0095, MOUTH_Y - 0.0004 - notch, z_lip - 0.0132, 0.0232, 0.018,
                             1.32, 0.0030, n_along)
    ao = 1.0 - 0.6 * np.abs(sp) ** 1.4
    tcol = np.array([0.82, 0.80, 0.72])[None, :] * (ao * gap)[:, None]
    add(_simple_prim("teeth_lower", pos, idx, mat_teeth, tcol), "head", jaw=1.0)
    tc = np.array([0.0, MOUTH_Y - 0.0105, z_lip - 0.031])
    pos, idx, _ = _lathe(tc, (0.0170, 0.0062, 0.0215), 12, 20)
    idx = _orient_outward(pos, idx, tc)
    tcol = np.array([0.52, 0.14, 0.15])[None, :] * (0.45 + 0.55 * smoothstep(tc[2] - 0.02, tc[2] + 0.02, pos[:, 2]))[:, None]
    add(_simple_prim("tongue", pos, idx, Material("tongue", roughness=0.4, specular=0.3), tcol), "head", jaw=1.0)
    bc = np.array([0.0, MOUTH_Y - 0.004, z_lip - 0.036])
    pos, idx, _ = _lathe(bc, (0.0250, 0.0185, 0.0290), 12, 20)
    idx = _orient_outward(pos, idx, bc, inward=True)
    bag_jaw = smoothstep(MOUTH_Y + 0.004, MOUTH_Y - 0.008, pos[:, 1])
    add(_simple_prim("mouth", pos, idx, Material("mouth", (0.10, 0.022, 0.028, 1.0), roughness=0.9, specular=0.05)),
        "head", jaw=bag_jaw)
    # interior lining: an inward-facing shell a little inside the skull and jaw. Inward
    # faces are culled from outside, so it only shows through openings (mouth, lid
    # corners) from any angle, as a dark interior instead of the background.
    pos, idx = _lining()
    add(_simple_prim("interior", pos, idx, Material("interior", (0.06, 0.014, 0.018, 1.0), roughness=1.0,
                                                    specular=0.0)), "face", jaw=_jaw_spatial(pos))
    # shoulders and collar
    pos, idx = _torso()
    add(_simple_prim("torso", pos, idx, Material("shirt", (*style.shirt, 1.0), roughness=0.85, specular=0.08)), "root")
    cpos, cidx = _collar()
    add(_simple_prim("collar", cpos, cidx,
                     Material("collar", (*style.collar, 1.0), roughness=0.8, specular=0.08)), "root")

    # skeleton
    joint_names = ["root", "neck", "head", "eye_L", "eye_R"]
    world = {"root": NECK_BASE + [0, -0.03, 0], "neck": NECK_BASE, "head": HEAD_PIVOT,
             "eye_L": EYE_C, "eye_R": EYE_C * [-1, 1, 1]}
    parents = {"root": -1, "neck": 0, "head": 1, "eye_L": 2, "eye_R": 2}
    joints = []
    for n in joint_names:
        par = parents[n]
        local = np.eye(4)
        local[:3, 3] = world[n] - (world[joint_names[par]] if par >= 0 else 0.0)
        ib = np.eye(4)
        ib[:3, 3] = -world[n]
        joints.append(Joint(n, par, local, ib))
    skeleton = Skeleton(joints)
    jidx = {n: i for i, n in enumerate(joint_names)}

    # morph targets
    names_order = [n for n in BLENDSHAPE_NAMES if not n.startswith("eyeLook")]  # gaze joints do those
    out_prims = []
    for prim, info, joint in prims:
        deltas = _expression_deltas(info)
        if prim.name == "skin":
            deltas.update(lid_targets)
        targets, normals = {}, {}
        for n in names_order:
            d = deltas.get(n)
            if d is None:
                continue
            d = np.asarray(d, np.float64)
            if d.shape != prim.positions.shape:
                d = np.broadcast_to(d, prim.positions.shape)
            if not np.any(np.abs(d) > 1e-7):
                continue
            targets[n] = d.astype(np.float32)
            normals[n] = _normals_with(prim.positions.astype(np.float64), d, prim.indices, prim.normals).astype(np.float32)
        prim.morph_targets = targets
        prim.morph_normals = normals
        # skin weights
        nv = prim.num_vertices
        joints_a = np.zeros((nv, 4), np.uint16)
        weights_a = np.zeros((nv, 4), np.float32)
        if joint == "face":
            p = prim.positions.astype(np.float64)
            d_head = _head_core_sdf(p)
            wh = smoothstep(0.045, 0.006, d_head) * smoothstep(-0.17, -0.095, p[:, 1])
            wh = np.maximum(wh, smoothstep(-0.11, -0.075, p[:, 1]))
            wn = (1.0 - wh) * smoothstep(NECK_BASE[1] - 0.01, NECK_BASE[1] + 0.05, p[:, 1])
            wr = 1.0 - wh - wn
            joints_a[:, :3] = [jidx["head"], jidx["neck"], jidx["root"]]
            weights_a[:, 0], weights_a[:, 1], weights_a[:, 2] = wh, wn, wr
        else:
            joints_a[:, 0] = jidx[joint]
            weights_a[:, 0] = 1.0
        prim.joints = joints_a
        prim.weights = weights_a
        out_prims.append(prim)
    # Draw order: big near occluders first, so hidden pixels fail the early depth test
    # instead of being shaded and overwritten (matters on software OpenGL).
    first = {"hair": 0, "skin": 1}
    out_prims.sort(key=lambda q: first.get(q.name, 2))

    mesh = AvatarMesh(
        name="default head",
        primitives=out_prims,
        skeleton=skeleton,
        head_joint="head",
        neck_joint="neck",
        neck_share=0.3,
        gaze_joints=("eye_L", "eye_R"),
        view_center=np.array([0.0, -0.035, 0.0], np.float32),  # head and neck centred
        view_height_m=0.40,
    )
    mesh.validate()
    logger.info("default head built in %.0f ms: %d vertices, %d triangles, %d morph targets",
                (time.perf_counter() - t0) * 1e3, mesh.num_vertices, mesh.num_triangles, len(mesh.target_names))
    return mesh
