"""The default head's skin: its signed distance field, the latitude/longitude grid with eye and
mouth slits, and the weights that follow from it (see :mod:`avatar_app.avatar.authoring.default_head`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from avatar_app.avatar.authoring.procedural import (
    gauss,
    grid_indices,
    raycast_first_exit,
    sd_capsule,
    sd_ellipsoid,
    sd_round_cone,
    smax,
    smin,
    smoothstep,
    sphere_dirs,
)
from avatar_app.avatar.default_head import HeadStyle
from avatar_app.avatar.glb_reader import quantise_colors
from avatar_app.avatar.mesh import Material, MeshPrimitive, compute_normals


# ----------------------------------------------------------------------------- proportions
ORIGIN = np.array([0.0, -0.025, 0.0])  # interior point the skin rays start from
EYE_R = 0.0145  # eyeball radius (stylised: a little large)
EYE_C = np.array([0.0340, 0.0, 0.0635])  # left eyeball centre (avatar's left = +X)
LID_GAP = 0.0015  # lid shell radius - eyeball radius
LID_INNER, LID_OUTER = 0.125, 0.160  # angular radii (from ORIGIN) of the lid-shell blend
MOUTH_Y = -0.056  # height of the lip line
MOUTH_Z = 0.083  # depth of the lip line at the centre (where the lips meet)
NECK_BASE = np.array([0.0, -0.178, -0.02])
HEAD_PIVOT = np.array([0.0, -0.075, -0.02])


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
_N_HALF_COLS = 80


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
_ROW_COUNTS = (16, 13, 9, 21, 19, 11)


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
        self.eye_x = xe
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
    def eye_shape(self, fractions: dict[int, tuple[float, float]]) -> _EyeShape:
        """Lid edges moved by fractions of each eye's local opening.

        Args:
            fractions: side (+1 = the avatar's left eye, -1 = right) -> (du, dl): the
                upper and lower lid edges move up by ``du`` and ``dl`` times the rest
                opening at every column (du = -0.8, dl = 0.2 meets them: a blink).
                Eyes not named keep their rest shape.
        """
        rest = self.eye_shape_rest()
        u, lo = rest.upper.copy(), rest.lower.copy()
        gap = rest.upper - rest.lower
        for side, (du, dl) in fractions.items():
            m = self.eye_side == side
            u[m] = rest.upper[m] + du * gap[m]
            lo[m] = rest.lower[m] + dl * gap[m]
        lo = np.minimum(lo, u)  # never past each other
        return _EyeShape(u, lo)

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


# ----------------------------------------------------------------------------- skin
@dataclass
class _Skin:
    """The skin primitive with its grid layout (vertex ``r * C + c`` is grid row r, column c)."""

    sb: _SkinBuilder
    grid: np.ndarray  # (R, C, 3) float64 rest positions
    prim: MeshPrimitive

    @property
    def pos(self) -> np.ndarray:
        return self.grid.reshape(-1, 3)

    @property
    def shape(self) -> tuple[int, int]:
        return self.grid.shape[0], self.grid.shape[1]

    def rows_of_kind(self, *kinds: int) -> np.ndarray:
        return np.flatnonzero(np.isin(self.sb.rows.kind, kinds))

    @property
    def up_edge_row(self) -> int:
        """Row of the upper lid edge (the last row of the upper eye band)."""
        return int(self.rows_of_kind(K_EYE_UP)[-1])

    @property
    def lo_edge_row(self) -> int:
        """Row of the lower lid edge (the first row of the lower eye band)."""
        return int(self.rows_of_kind(K_EYE_LO)[0])

    def fold_rows(self) -> np.ndarray:
        """Rows folded inside (lid folds, the lips' inner surfaces)."""
        return self.rows_of_kind(K_EYE_UP_FOLD, K_EYE_LO_FOLD, *[K_MOUTH + k for k in (1, 2, 3, 4)])


def _skin_part(style: HeadStyle) -> _Skin:
    sb = _SkinBuilder(style)
    grid = sb.positions(sb.eye_shape_rest())
    R, C = grid.shape[:2]
    pos = grid.reshape(-1, 3)
    idx = sb.indices()
    rows = sb.rows
    row_of = np.repeat(np.arange(R), C)
    col_of = np.tile(np.arange(C), R)
    kind = rows.kind[row_of]

    # colours
    skin = np.asarray(style.skin)
    col = np.tile(skin, (len(pos), 1))
    lip = _lip_weight(pos)
    in_mouth = np.isin(kind, [K_MOUTH + k for k in (1, 2, 3, 4)])
    lip = np.where(in_mouth, 1.0, lip)
    col = col * (1 - lip[:, None]) + np.asarray(style.lips) * lip[:, None]
    deep = np.isin(kind, (K_MOUTH + 2, K_MOUTH + 3))
    col[deep] *= 0.55
    # a darker line where the lips meet
    meet = np.isin(kind, (K_MOUTH, K_MOUTH + 5))
    col[meet] *= (1.0 - 0.45 * np.clip(sb.mouth_window[col_of[meet]] * 3.0, 0, 1))[:, None]
    blush = sum(gauss(pos, (0.040 * sx, -0.030, 0.060), (0.012, 0.009, 0.03)) for sx in (1, -1))
    col = col * (1 - 0.35 * blush[:, None]) + np.asarray(style.blush) * 0.35 * blush[:, None]
    nostril = sum(gauss(pos, (0.0085 * sx, -0.0385, 0.0890), (0.0022, 0.0016, 0.004)) for sx in (1, -1))
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
    colors = quantise_colors(np.concatenate([col, np.ones((len(pos), 1))], axis=1))

    prim = MeshPrimitive(
        "skin", pos.astype(np.float32), compute_normals(pos, idx), idx,
        Material("skin", (1.0, 1.0, 1.0, 1.0), roughness=0.62, specular=0.22),
        colors=colors,
    )
    return _Skin(sb, grid, prim)


def _lip_weight(pos: np.ndarray) -> np.ndarray:
    """(N,) 1 on the lips' red (vermilion), 0 on the skin around them, a thin blend between."""
    up_d, lo_d = _lips_sdf(pos)
    return smoothstep(0.0024, 0.0002, np.minimum(up_d, lo_d))


def _shell_weight(pos: np.ndarray) -> np.ndarray:
    """(N,) how much each point lies on an eyelid shell (1 on the lids, 0 beyond LID_OUTER)."""
    d = pos - ORIGIN
    d = d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
    out = np.zeros(len(pos))
    for sx in (1.0, -1.0):
        e = EYE_C * [sx, 1, 1] - ORIGIN
        gamma = np.arccos(np.clip(d @ (e / np.linalg.norm(e)), -1.0, 1.0))
        out = np.maximum(out, smoothstep(LID_OUTER, LID_INNER, gamma))
    return out
