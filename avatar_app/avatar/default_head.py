"""The default avatar: a stylised, friendly head built entirely by code.

Construction (all units metres, +Y up, the head faces +Z, its left is +X):

- The skin is a signed distance field (ellipsoids, capsules and a round cone
  blended with smooth minimum, see :mod:`avatar_app.avatar.procedural`) sampled
  on a latitude/longitude grid (160 columns, denser on the face) by casting rays
  from one interior point. The grid has slits for the eyes and the mouth: rows
  are split there, and the lip and lid edges fold inward, so the lips have
  thickness and the lids wrap the eyeballs.
- Separate primitives: eyeballs (iris and pupil as exact rings of vertex colour),
  brows, ears, hair cap, teeth, tongue, mouth cavity, shoulders with a collar, and
  an inward-facing interior lining: culled from outside, it is seen only through
  openings (mouth, lid corners), as a dark interior instead of the background.
- Everything is single-sided and drawn hair-first, which keeps software OpenGL
  fast (see benchmarks/render.py).

Morph targets: all 52 ARKit shapes, transferred from the face model (the
training rig, :mod:`avatar_app.avatar.face_model`) so that a weight means the
same motion on both heads (:mod:`avatar_app.avatar.transfer`):

- The rig's landmarks are attached to the skin: lid and lip contours, nose,
  chin, brows and face sides are placed by construction (the grid knows where its
  lid edges, lip edges and lip colour border are); a similarity plus thin-plate
  warp of the rig onto those places attaches every other landmark to the nearest
  skin vertex on its side of the mouth. Rig offsets, scaled by the faces' size
  ratio (0.985), are spread over the skin by biharmonic interpolation along its
  edges, so the lips and the lids move apart freely.
- Eyelids: the rig's lid landmarks say how far each lid moves (a fraction of the
  opening: a blink moves the upper lid 80 % and the lower lid 20 % of it); the
  avatar's lids then move by re-running the lid construction, so a closed lid lies
  on a shell around the eyeball and never cuts into it.
- Jaw: jawOpen/Forward/Left/Right move the lower jaw rigidly (the rigid motion
  fitted to the transferred motion of the rig's jaw landmarks) with a smooth jaw
  weight; the rig's own motion is kept on the lips. The lower teeth, tongue and
  mouth floor follow the rigid motion.
- tongueOut: the rig has no tongue (it only pushes the lower lip): the avatar's
  tongue slides 27 mm forward out of the mouth, and the jaw opens 15 %.
- eyeLook*: the eyeballs are turned by the gaze joints (``AvatarState.gaze``);
  the eyeLook targets move only the lids, which follow the gaze as on the rig.
- Brows and the interior lining ride on the skin; everything is mirror-symmetric
  (Right shapes are exact mirrors of the Left ones).

``training/build_default_head.py`` writes the result to
``assets/default_head.glb``; :func:`build_default_head` reads that file (fast
start-up) and builds by code only when it is missing or stale.

Skeleton: root (neck base, never moves) <- neck <- head <- eye_L, eye_R. The
head joint sits at the top of the neck; the neck joint takes part of the head
rotation so the neck bends smoothly while its base stays.
"""
from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from avatar_app.avatar.glb_writer import quantise_colors
from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton, compute_normals
from avatar_app.avatar.procedural import (
    arc_band,
    gauss,
    grid_indices,
    lathe,
    lathe_from_angles,
    orient_outward,
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
from avatar_app.core import landmarks as lmk

# avatar_app.avatar.transfer needs scipy: imported only where the head is BUILT, so loading
# the shipped glb (the normal start-up path, also in the frozen bundle) does not need scipy.
if TYPE_CHECKING:
    from avatar_app.avatar.transfer import Correspondence
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.core.rotations import rigid_fit

logger = logging.getLogger(__name__)

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


# ----------------------------------------------------------------------------- morph targets
#: ARKit shapes that move the lower jaw. The lower teeth, the tongue and the floor of
#: the mouth cavity follow the jaw's rigid motion, fitted to the transferred skin motion.
JAW_SHAPES = ("jawOpen", "jawForward", "jawLeft", "jawRight")
#: A point on the jaw's hinge axis (the axis is X), used to place the jaw weight field.
JAW_HINGE = np.array([0.0, -0.026, -0.008])
#: Share of jawOpen that tongueOut adds (the rig has no tongue; a tongue needs parted lips).
TONGUE_OUT_JAW = 0.15
#: How far tongueOut pushes the tongue tip forward, metres.
TONGUE_OUT_REACH_M = 0.027
#: Rig landmarks at the middle of the upper / lower lid, per eye (+1 left, -1 right).
_EYE_MID = {1: (386, 374), -1: (159, 145)}
#: Lid motion (fraction of the opening) below which a shape leaves the lid construction alone.
_LID_EPS = 0.005
#: For the eye shapes (eyeBlink, eyeSquint, ...), rig landmarks this close to the lid contours
#: are left to the lid construction (the rig spreads lid motion over 14 mm; the avatar's eye
#: band does that).
EYE_REGION_RIG_M = 0.016
#: Transferred skin motion is zero beyond this distance (along the surface) from the rig's landmarks.
FREE_RADIUS_M = 0.03
#: Morph deltas below these are dropped (metres; unit-normal change): invisible, they only cost size.
MORPH_EPS_M = 2e-5
MORPH_NORMAL_EPS = 5e-3


def _jaw_weight(pos: np.ndarray) -> np.ndarray:
    """How much each point follows the lower jaw, from position alone (0..1).

    1 below the line from the mouth corner to the jaw hinge (side view), fading
    out behind the hinge and down the neck. The base of the jaw shapes' skin
    motion beyond the rig's face (under the chin, down the neck).
    """
    y, z = pos[:, 1], pos[:, 2]
    a = np.array([MOUTH_Y + 0.004, 0.078])
    b = np.array([JAW_HINGE[1] - 0.004, JAW_HINGE[2]])
    dvec = b - a
    nline = np.array([dvec[1], -dvec[0]]) / np.linalg.norm(dvec)
    if nline[0] > 0:  # make it point down (toward -y)
        nline = -nline
    below = (np.stack([y, z], axis=1) - a) @ nline
    jaw = smoothstep(-0.005, 0.018, below) * smoothstep(-0.02, 0.005, z)
    return jaw * smoothstep(0.028, 0.0, _jaw_volume_sdf(pos))


def _lid_fractions(model) -> dict[str, dict[int, tuple[float, float]]]:
    """How far each rig shape moves each eye's lids, as fractions of the rest opening.

    Returns:
        shape name -> {side: (du, dl)}: vertical motion of the rig's middle upper and
        lower lid landmarks divided by the distance between them (up positive).
    """
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for side, (u, lo) in _EYE_MID.items():
        gap = float(model.neutral[u, 1] - model.neutral[lo, 1])
        for k, name in enumerate(BLENDSHAPE_NAMES):
            du = float(model.blendshapes[k, u, 1]) / gap
            dl = float(model.blendshapes[k, lo, 1]) / gap
            if max(abs(du), abs(dl)) > _LID_EPS:
                out.setdefault(name, {})[side] = (du, dl)
    return out


def _lid_targets(skin: _Skin, fractions: dict[str, dict[int, tuple[float, float]]]) -> dict[str, np.ndarray]:
    """Eyelid motion by re-running the lid construction (exact on the lid shell).

    A closing lid sits up to 0.9 mm further out (in proportion to the closing), so the
    straight path of a linear morph clears the eyeball.
    """
    sb, grid = skin.sb, skin.grid
    eye_rows = skin.rows_of_kind(K_EYE_UP, K_EYE_LO, K_EYE_UP_FOLD, K_EYE_LO_FOLD)
    out = {}
    for name, fr in fractions.items():
        closing = max(0.0, max(dl - du for du, dl in fr.values()))
        moved = sb.positions(sb.eye_shape(fr), eye_rows, 0.0009 * min(closing, 1.0), tuple(fr))
        d = np.zeros_like(grid)
        d[eye_rows] = moved - grid[eye_rows]
        out[name] = d.reshape(-1, 3)
    return out


def _nearest_col(values: np.ndarray, target: float, allowed: np.ndarray) -> int:
    cand = np.flatnonzero(allowed)
    return int(cand[np.argmin(np.abs(values[cand] - target))])


def _skin_correspondence(skin: _Skin, model) -> tuple[Correspondence, np.ndarray, dict[int, int]]:
    """Attach the rig's landmarks to the skin.

    Landmarks placed by construction (anchors of the warp): lid contours on the
    lid-edge rows, iris centres on the eyeball fronts, inner lip contours on the rows
    where the lips meet, outer lip contours on the lips' colour border, brow contours
    on the brow edges, nose tip / subnasale / nasion / chin on the midline profile,
    ear fronts and jaw angles. Lid contours are anchors only: the lid construction
    moves the lids, and the transfer holds the lid edges still.

    Returns:
        (correspondence, (Z,) skin vertices held at zero by the transfer, rig landmark ->
        its own skin vertex for every landmark placed or attached).
    """
    from avatar_app.avatar.transfer import contour_weights, fit_correspondence

    sb, grid = skin.sb, skin.grid
    R, C = skin.shape
    pos = skin.pos
    rows = sb.rows
    up_edge, lo_edge = skin.up_edge_row, skin.lo_edge_row
    m_up, m_lo = rows.mouth_rows[0], rows.mouth_rows[-1]
    rig = model.neutral.astype(np.float64)
    anchors: dict[int, np.ndarray] = {}
    attached: dict[int, int] = {}

    placed: dict[int, int] = {}  # landmark -> its vertex, for every landmark placed by construction

    def put(lm: int, r: int, c: int, attach: bool = True) -> None:
        anchors[lm] = grid[r, c]
        placed[lm] = r * C + c
        if attach:
            attached[lm] = r * C + c

    side_of = np.sign(sb.cols)
    zero: list[int] = []
    # eyes: lid contours (outer corner first) on the lid edges; irises on the eyeball fronts
    for side, upper, lower, iris in ((1, lmk.LEFT_EYE_UPPER_LID, lmk.LEFT_EYE_LOWER_LID, 473),
                                     (-1, lmk.RIGHT_EYE_UPPER_LID, lmk.RIGHT_EYE_LOWER_LID, 468)):
        x_out, x_in = abs(rig[upper[0], 0]), abs(rig[upper[-1], 0])
        corner_cols = []
        for contour, row in ((upper, up_edge), (lower, lo_edge)):
            for k, lm in enumerate(contour):
                t = 2.0 * (abs(rig[lm, 0]) - x_in) / (x_out - x_in) - 1.0
                corner = k in (0, len(contour) - 1)
                ok = (side_of == side) & ((np.abs(sb.eye_x) >= 1.0) if corner else sb.eye_cols)
                c = _nearest_col(sb.eye_x, t, ok)
                if corner:
                    corner_cols.append(c)
                put(lm, row, c, attach=False)
        anchors[iris] = EYE_C * [side, 1, 1] + [0.0, 0.0, EYE_R]
        cols = np.union1d(np.flatnonzero(sb.eye_cols & (side_of == side)), corner_cols)
        lid_rows = skin.rows_of_kind(K_EYE_UP_FOLD, K_EYE_LO_FOLD).tolist() + [up_edge, lo_edge]
        zero += [r * C + c for r in lid_rows for c in cols]
    # lips: inner contours where the lips meet, outer contours on the colour border
    xm = sb.cols / sb.theta_mouth
    lip_w = _lip_weight(pos).reshape(R, C)

    def lip_col(t: float, corner: bool) -> int:
        ok = (np.abs(xm) >= 1.0) & (np.sign(xm) == np.sign(t)) if corner else sb.mouth_cols
        return _nearest_col(xm, t, ok)

    # every vertex where the lips meet is a handle, interpolated along the rig's inner contour
    edge_cols = np.union1d(np.flatnonzero(sb.mouth_cols), [lip_col(-1.0, True), lip_col(1.0, True)])
    contours = []
    for contour, row in ((lmk.LIP_INNER_UPPER, m_up), (lmk.LIP_INNER_LOWER, m_lo)):
        x_c = abs(rig[contour[-1], 0])
        for k, lm in enumerate(contour):
            put(lm, row, lip_col(rig[lm, 0] / x_c, k in (0, len(contour) - 1)), attach=False)
        lp = rig[list(contour), 0] / x_c
        contours.append((contour, row * C + edge_cols, contour_weights(lp, np.clip(xm[edge_cols], -1, 1))))
    # ... and every vertex of the lips' colour border, along the rig's outer contour
    for contour, step in ((lmk.LIP_OUTER_UPPER, -1), (lmk.LIP_OUTER_LOWER, 1)):
        x_c = abs(rig[contour[-1], 0])
        border = []
        for c in edge_cols:
            r = m_up if step < 0 else m_lo
            if sb.mouth_cols[c]:
                while 0 < r + step < R - 1 and lip_w[r + step, c] >= 0.5:
                    r += step
                if abs(lip_w[r + step, c] - 0.5) < abs(lip_w[r, c] - 0.5):
                    r += step
            border.append(r * C + c)
        border = np.array(border)
        for k, lm in enumerate(contour):
            v = int(border[np.argmin(np.abs(np.clip(xm[edge_cols], -1, 1) - rig[lm, 0] / x_c))])
            put(lm, v // C, v % C, attach=False)
        lp = rig[list(contour), 0] / x_c
        contours.append((contour, border, contour_weights(lp, np.clip(xm[edge_cols], -1, 1))))
    # brows: their edges, projected onto the skin
    fold = np.isin(np.repeat(np.arange(R), C), skin.fold_rows())
    tree_ok = np.flatnonzero(~fold)
    from scipy.spatial import cKDTree

    tree = cKDTree(pos[tree_ok])
    for side, upper, lower in ((1, lmk.LEFT_BROW_UPPER, lmk.LEFT_BROW_LOWER),
                               (-1, lmk.RIGHT_BROW_UPPER, lmk.RIGHT_BROW_LOWER)):
        for contour, cc in ((upper, 1.0), (lower, -1.0)):
            x_out, x_in = abs(rig[contour[0], 0]), abs(rig[contour[-1], 0])
            s = np.array([(abs(rig[lm, 0]) - x_in) / (x_out - x_in) for lm in contour])
            dirs = _brow_dirs(side, s, np.full_like(s, cc))
            pts = ORIGIN + dirs * raycast_first_exit(_skin_sdf, ORIGIN, dirs)[:, None]
            _, near = tree.query(pts)
            for lm, p_, v in zip(contour, pts, tree_ok[near]):
                anchors[lm] = p_
                attached[lm] = int(v)
    # midline profile: nose tip, subnasale, nasion, chin
    c0 = int(np.argmin(np.abs(sb.cols)))
    prof = grid[:, c0]
    rr = np.arange(R)
    tip = int(np.argmax(np.where((rr > lo_edge) & (rr < m_up), prof[:, 2], -np.inf)))
    put(lmk.FacePoint.NOSE_TIP, tip, c0)
    below_nose = (rr > tip) & (rr < m_up) & (prof[:, 1] > MOUTH_Y + 0.009)
    put(lmk.FacePoint.SUBNASALE, int(np.argmin(np.where(below_nose, prof[:, 2], np.inf))), c0)
    bridge = (rr < tip) & (prof[:, 1] > -0.005) & (prof[:, 1] < 0.03) & (prof[:, 2] > 0.05)
    put(lmk.FacePoint.NASION, int(np.argmin(np.where(bridge, prof[:, 2], np.inf))), c0)
    chin_rows = (rr > m_lo) & (prof[:, 2] > prof[m_lo:, 2].max() - 0.012)
    put(lmk.FacePoint.CHIN, int(np.argmin(np.where(chin_rows, prof[:, 1], np.inf))), c0)
    # face sides: in front of the ears, jaw angles (anchors only)
    for lm_ear, lm_jaw, sx in ((lmk.FacePoint.CHEEK_EAR_LEFT, 397, 1.0), (lmk.FacePoint.CHEEK_EAR_RIGHT, 172, -1.0)):
        for lm, target in ((lm_ear, (0.070 * sx, -0.018, 0.004)), (lm_jaw, (0.050 * sx, -0.082, 0.0))):
            d = np.asarray(target) - ORIGIN
            d = (d / np.linalg.norm(d))[None]
            anchors[lm] = ORIGIN + d[0] * raycast_first_exit(_skin_sdf, ORIGIN, d)[0]

    # every other landmark: nearest allowed vertex on its side of the mouth, not between
    # the lip contours (the lips are interpolated between them)
    zero_a = np.unique(np.array(zero, np.int64))
    row_of = np.repeat(np.arange(R), C)
    ok = ~fold & (_shell_weight(pos) < 0.5)
    ok[zero_a] = False
    for (_, border, _), (_, edge, _) in zip(contours[2:], contours[:2]):
        for b_v, e_v in zip(border, edge):
            lo_r, hi_r = sorted((b_v // C, e_v // C))
            ok[np.arange(lo_r, hi_r + 1) * C + b_v % C] = False
    jaw_w = model.blendshapes[BLENDSHAPE_NAMES.index("jawForward"), :lmk.NUM_MESH, 2]
    jaw_w = jaw_w / jaw_w.max()
    lids = set(lmk.LEFT_EYE_UPPER_LID + lmk.LEFT_EYE_LOWER_LID + lmk.RIGHT_EYE_UPPER_LID
               + lmk.RIGHT_EYE_LOWER_LID)
    free = np.array([i for i in range(lmk.NUM_MESH) if i not in lids and i not in attached])
    regions = [(free[jaw_w[free] < 0.5], np.flatnonzero(ok & (row_of <= m_up))),
               (free[jaw_w[free] >= 0.5], np.flatnonzero(ok & (row_of >= m_lo)))]
    corr = fit_correspondence(rig, pos, anchors, attached, regions, contours, max_distance_m=0.006)
    # every landmark's own vertex: attached, snapped, or nearest to its anchor
    lookup = {lm: v for lm, v in placed.items() if lm < lmk.NUM_MESH}
    lookup.update(attached)
    single = corr.mix.max(axis=1) > 0.999
    for row in np.flatnonzero(single):
        lookup.setdefault(int(corr.landmarks[np.argmax(corr.mix[row])]), int(corr.vertices[row]))
    for lm, point in anchors.items():
        if lm not in lookup and lm < lmk.NUM_MESH:
            lookup[lm] = int(tree_ok[tree.query(point)[1]])
    return corr, zero_a, lookup


def _transfer_skin(skin: _Skin, model, corr: Correspondence, zero: np.ndarray,
                   lid: dict[str, np.ndarray], lid_sides: dict[str, tuple[int, ...]],
                   jaw: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """All 52 shapes on the skin.

    Each shape is the transferred field (lid edges held still) plus the lid
    construction; jaw shapes add a base motion first: the jaw's rigid motion times a
    jaw weight (the rig's, transferred, continued under the chin and down the neck by
    :func:`_jaw_weight`), and the field transfers only what the base misses.
    """
    from avatar_app.avatar.transfer import SurfaceInterpolator

    pos = skin.pos
    v = len(pos)
    R, C = skin.shape
    # The lips' inner surfaces (folded rows) copy the row where the lips meet: left in
    # the graph, a biharmonic field would extrapolate past that row into them.
    mouth = skin.sb.rows.mouth_rows
    leader_row = {mouth[1]: mouth[0], mouth[2]: mouth[0], mouth[3]: mouth[5], mouth[4]: mouth[5]}
    tri = skin.prim.indices.reshape(-1, 3)
    in_mouth = np.zeros(C, bool)
    in_mouth[np.flatnonzero(skin.sb.mouth_cols)] = True
    folded = (np.isin(tri // C, list(leader_row)) & in_mouth[tri % C]).any(axis=1)
    interp = SurfaceInterpolator(pos, tri[~folded].reshape(-1), corr.vertices, zero, FREE_RADIUS_M)
    vals = corr.map_offsets(model.blendshapes)  # (52, H, 3)
    # Where the lid construction moves an eye's band (the lids and the skin up to the
    # brow and down to the cheek), it alone moves it: handles there hold still.
    band = np.zeros((R, C), bool)
    band[skin.rows_of_kind(K_EYE_UP, K_EYE_LO, K_EYE_UP_FOLD, K_EYE_LO_FOLD)] = True
    eye_cols = {side: np.convolve(skin.sb.eye_side == side, np.ones(3), "same") > 0 for side in (1, -1)}
    # The rig spreads its lid motion over a 14 mm radius; on the avatar the band does that.
    rig = model.neutral
    near_eye = {}
    for side, lids in ((1, lmk.LEFT_EYE_UPPER_LID + lmk.LEFT_EYE_LOWER_LID),
                       (-1, lmk.RIGHT_EYE_UPPER_LID + lmk.RIGHT_EYE_LOWER_LID)):
        dist = np.linalg.norm(rig[corr.landmarks, None] - rig[None, list(lids)], axis=-1).min(axis=1)
        near_eye[side] = corr.mix @ (dist < EYE_REGION_RIG_M) > 0
    weight = _jaw_weight(pos).reshape(R, C)
    for row, leader in leader_row.items():
        weight[row, in_mouth] = weight[leader, in_mouth]
    base = {n: _rigid_delta(pos, jaw[n]) * weight.reshape(-1, 1) for n in JAW_SHAPES}
    # jaw shapes: the rig's motion is kept on its lips (where it differs most from a rigid
    # jaw); elsewhere the base alone (the rig's jaw region, bent onto the avatar, is too
    # uneven for a 30 mm motion)
    from avatar_app.avatar.face_model_shapes import lip_regions

    upper, lower = lip_regions(np.asarray(model.triangles))
    lips = np.zeros(lmk.NUM_LANDMARKS, bool)
    lips[sorted(upper | lower)] = True
    lips[list(lmk.MOUTH_CORNER_ROW_LEFT + lmk.MOUTH_CORNER_ROW_RIGHT)] = True
    on_lips = corr.mix @ lips[corr.landmarks] > 0.5
    for k, name in enumerate(BLENDSHAPE_NAMES):
        for side in lid_sides.get(name, ()):
            in_band = (band & eye_cols[side][None, :]).reshape(-1)[corr.vertices]
            vals[k, in_band | (near_eye[side] if name.startswith("eye") else False)] = 0.0
        if name in base:
            vals[k] -= base[name][corr.vertices]
            vals[k, ~on_lips] = 0.0
    k_h = len(corr.vertices)
    field = interp(vals.transpose(1, 0, 2).reshape(k_h, -1)).reshape(v, len(BLENDSHAPE_NAMES), 3)
    keep = 1.0 - _shell_weight(pos)  # the lid construction alone moves the lids
    out = {}
    for k, name in enumerate(BLENDSHAPE_NAMES):
        d = field[:, k] * keep[:, None]
        if name in lid:
            d = d + lid[name]
        if name in base:
            d = d + base[name]
        d = d.reshape(R, C, 3)
        for row, leader in leader_row.items():
            d[row, in_mouth] = d[leader, in_mouth]
        out[name] = d.reshape(v, 3)
    return _symmetrised(out, R, C)


def _symmetrised(targets: dict[str, np.ndarray], rows: int, cols: int) -> dict[str, np.ndarray]:
    """Exactly mirror-symmetric skin targets, as on the rig: Left and mirrored Right
    averaged (Right is then the mirror of Left), unsided shapes averaged with their
    mirror. (The grid is symmetric, its triangle diagonals are not, so the solve is
    symmetric only to about a millimetre.)"""
    twin_col = (cols - np.arange(cols)) % cols

    def mirror(d: np.ndarray) -> np.ndarray:
        return (d.reshape(rows, cols, 3)[:, twin_col] * [-1.0, 1.0, 1.0]).reshape(-1, 3)

    out = dict(targets)
    for name in BLENDSHAPE_NAMES:
        if name.endswith("Right"):
            continue
        if name.endswith("Left"):
            twin = name[:-4] + "Right"
            left = 0.5 * (targets[name] + mirror(targets[twin]))
            out[name], out[twin] = left, mirror(left)
        else:
            out[name] = 0.5 * (targets[name] + mirror(targets[name]))
    return out


def _jaw_motions(skin: _Skin, model, corr: Correspondence) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Rigid motion (R (3, 3), t (3,)) of the lower jaw for each jaw shape.

    Fitted (Kabsch) to the transferred motion of the skin points whose rig landmarks
    move fully with the rig's jaw (the rig's jawForward weight above 0.95).
    """
    jf = model.blendshapes[BLENDSHAPE_NAMES.index("jawForward"), :, 2]
    on_jaw = corr.mix @ (jf[corr.landmarks] / jf.max() > 0.95) > 0.999
    p = skin.pos[corr.vertices[on_jaw]]
    out = {}
    for name in JAW_SHAPES:
        d = corr.map_offsets(model.blendshapes[BLENDSHAPE_NAMES.index(name)])[on_jaw]
        rot, t, _ = rigid_fit(p, p + d)
        out[name] = (rot, t)
    return out


def _rigid_delta(pos: np.ndarray, motion: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    rot, t = motion
    return pos @ rot.T + t - pos


def _follow_skin(skin: _Skin, pos: np.ndarray, skin_targets: dict[str, np.ndarray], avoid_lids: bool,
                 k: int = 4) -> dict[str, np.ndarray]:
    """Targets of a part that rides on the skin (brows, interior lining): inverse-distance
    weighted average of the ``k`` nearest skin vertices' deltas (folded rows left out;
    with ``avoid_lids`` the eyelids too, which move far over the eyeballs)."""
    from scipy.spatial import cKDTree

    R, C = skin.shape
    rows = np.repeat(np.arange(R), C)
    use = ~np.isin(rows, skin.fold_rows())
    if avoid_lids:
        use &= _shell_weight(skin.pos) < 0.01
    ok = np.flatnonzero(use)
    dist, near = cKDTree(skin.pos[ok]).query(pos, k=k)
    w = 1.0 / np.maximum(dist, 1e-5) ** 2
    w /= w.sum(axis=1, keepdims=True)
    src = ok[near]
    return {name: np.einsum("nk,nkc->nc", w, d[src]) for name, d in skin_targets.items()}


def _tongue_out(pos: np.ndarray, center: np.ndarray, radii) -> np.ndarray:
    """The tongue slid forward out of the mouth: the front half stretches, thins and
    rises to the lip line, the tip droops over the lower lip."""
    rel = (pos - center) / np.asarray(radii)
    f = smoothstep(-1.0, 1.0, rel[:, 2])  # 0 at the back, 1 at the tip
    d = np.zeros_like(pos)
    d[:, 2] = 0.35 * TONGUE_OUT_REACH_M + 0.65 * TONGUE_OUT_REACH_M * f
    d[:, 1] = 0.0075 * f - 0.2 * (pos[:, 1] - center[1]) * f - 0.007 * smoothstep(0.55, 1.0, f) ** 2
    d[:, 0] = -0.10 * (pos[:, 0] - center[0]) * f
    return d


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


_cache: dict[HeadStyle, AvatarMesh] = {}
_cache_lock = threading.Lock()

#: The shipped default head, written by ``training/build_default_head.py``.
DEFAULT_HEAD_ASSET = "assets/default_head.glb"
#: Bump when the construction changes: an asset written by another version is rebuilt.
BUILDER_VERSION = 2


def build_default_head(style: HeadStyle | None = None, *, cached: bool = True,
                       from_asset: bool = True) -> AvatarMesh:
    """The default avatar head.

    With the default style it is read from ``assets/default_head.glb`` (about
    0.1 s) when that file exists and was written by this builder version;
    otherwise it is built by code (about 2 s, see :func:`build_head`). Later
    calls return a deep copy of the cached result (a few ms), so callers may
    modify what they get. Thread-safe.

    Args:
        style: colours; default :class:`HeadStyle` (other styles are always built).
        cached: reuse (a copy of) an earlier result with the same style.
        from_asset: allow reading the shipped asset.

    Returns:
        An :class:`AvatarMesh`, see :func:`build_head`.
    """
    style = style or HeadStyle()
    if not cached:
        return _load_or_build(style, from_asset)
    with _cache_lock:
        if style not in _cache:
            _cache[style] = _load_or_build(style, from_asset)
        return copy.deepcopy(_cache[style])


def _load_or_build(style: HeadStyle, from_asset: bool) -> AvatarMesh:
    if from_asset and style == HeadStyle():
        from avatar_app.avatar.glb_writer import read_avatar_glb
        from avatar_app.core.errors import AvatarError
        from avatar_app.resources import resource_path

        path = resource_path(DEFAULT_HEAD_ASSET)
        if path.is_file():
            try:
                mesh, extras = read_avatar_glb(path)
            except AvatarError as exc:
                logger.warning("default head asset unusable, building it instead: %s", exc)
            else:
                if extras.get("builder_version") == BUILDER_VERSION:
                    return mesh
                logger.warning("%s was written by builder version %s (this is %s): building the head "
                               "instead; run training/build_default_head.py", path,
                               extras.get("builder_version"), BUILDER_VERSION)
        else:
            logger.info("%s not found: building the default head by code", path)
    return build_head(style)


def build_head(style: HeadStyle | None = None) -> AvatarMesh:
    """Build the default head by code (deterministic).

    The 52 ARKit morph targets are transferred from the face model
    (:func:`avatar_app.avatar.face_model.load_face_model`) through corresponding
    surface points (:mod:`avatar_app.avatar.transfer`): a weight means the same
    motion on both heads, scaled to the avatar's size. Parts the rig lacks are
    built here: the eyelids close over the eyeballs by re-running the lid
    construction, as far as the rig's lid landmarks move; the lower teeth,
    tongue and mouth floor follow the jaw's rigid motion; tongueOut slides the
    tongue out between parted lips. The eyeballs are turned by the gaze joints
    (``AvatarState.gaze``), not by morphs: the eight eyeLook* targets move only
    the lids, which follow the gaze as on the rig.

    Args:
        style: colours; default :class:`HeadStyle`.

    Returns:
        An :class:`AvatarMesh` with primitives hair, skin, brow_L/R, ear_L/R,
        eye_L/R, teeth_upper/lower, tongue, mouth, interior, torso, collar; a
        5-joint skeleton (root, neck, head, eye_L, eye_R); morph targets named
        after all 52 ARKit blendshapes, each driven by its own name.

    Raises:
        ModelLoadError: the face model asset is missing or unreadable.
    """
    from avatar_app.avatar.face_model import load_face_model

    style = style or HeadStyle()
    t0 = time.perf_counter()
    model = load_face_model()
    skin = _skin_part(style)
    skin_prim = skin.prim
    # part, joint, motion: "skin" (transferred), "follow" (rides on the skin), "jaw" + weights
    prims: list[tuple[MeshPrimitive, str, str | None, np.ndarray | None]] = [(skin_prim, "face", "skin", None)]

    def add(prim: MeshPrimitive, joint: str, motion: str | None = None, weights=None):
        prims.append((prim, joint, motion, None if weights is None
                      else np.broadcast_to(np.asarray(weights, np.float64), (prim.num_vertices,))))

    # eyes
    for name, sx in (("eye_L", 1.0), ("eye_R", -1.0)):
        c = EYE_C * [sx, 1, 1]
        pos, idx, col = _eyeball(c, style)
        add(_simple_prim(name, pos, idx, Material(name, roughness=0.10, specular=1.0), col), name)
    # brows
    for name, sx in (("brow_L", 1.0), ("brow_R", -1.0)):
        pos, idx = _brow(sx)
        add(_simple_prim(name, pos, idx, Material(name, (*style.brows, 1.0), roughness=0.85, specular=0.05)),
            "head", "follow")
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
    pos, idx, sp = arc_band(MOUTH_Y - 0.0022 + notch, MOUTH_Y + 0.0085, z_lip - 0.0095, 0.0245, 0.019,
                            1.35, 0.0030, n_along)
    ao = 1.0 - 0.6 * np.abs(sp) ** 1.4
    gap = np.repeat(1.0 - 0.30 * smoothstep(0.36, 0.5, tooth), 10)
    tcol = np.array([0.86, 0.84, 0.76])[None, :] * (ao * gap)[:, None]
    mat_teeth = Material("teeth", roughness=0.35, specular=0.45)
    add(_simple_prim("teeth_upper", pos, idx, mat_teeth, tcol), "head")
    pos, idx, sp = arc_band(MOUTH_Y - 0.0095, MOUTH_Y - 0.0004 - notch, z_lip - 0.0132, 0.0232, 0.018,
                            1.32, 0.0030, n_along)
    ao = 1.0 - 0.6 * np.abs(sp) ** 1.4
    tcol = np.array([0.82, 0.80, 0.72])[None, :] * (ao * gap)[:, None]
    add(_simple_prim("teeth_lower", pos, idx, mat_teeth, tcol), "head", "jaw", 1.0)
    tc = np.array([0.0, MOUTH_Y - 0.0105, z_lip - 0.031])
    t_radii = (0.0170, 0.0062, 0.0215)
    pos, idx, _ = lathe(tc, t_radii, 12, 20)
    idx = orient_outward(pos, idx, tc)
    tcol = np.array([0.52, 0.14, 0.15])[None, :] * (0.45 + 0.55 * smoothstep(tc[2] - 0.02, tc[2] + 0.02, pos[:, 2]))[:, None]
    add(_simple_prim("tongue", pos, idx, Material("tongue", roughness=0.4, specular=0.3), tcol), "head", "jaw", 1.0)
    bc = np.array([0.0, MOUTH_Y - 0.004, z_lip - 0.036])
    pos, idx, _ = lathe(bc, (0.0250, 0.0185, 0.0290), 12, 20)
    idx = orient_outward(pos, idx, bc, inward=True)
    add(_simple_prim("mouth", pos, idx, Material("mouth", (0.10, 0.022, 0.028, 1.0), roughness=0.9, specular=0.05)),
        "head", "jaw", smoothstep(MOUTH_Y + 0.004, MOUTH_Y - 0.008, pos[:, 1]))
    # interior lining: an inward-facing shell a little inside the skull and jaw. Inward
    # faces are culled from outside, so it only shows through openings (mouth, lid
    # corners) from any angle, as a dark interior instead of the background.
    pos, idx = _lining()
    add(_simple_prim("interior", pos, idx, Material("interior", (0.06, 0.014, 0.018, 1.0), roughness=1.0,
                                                    specular=0.0)), "face", "follow")
    # shoulders and collar
    pos, idx = _torso()
    add(_simple_prim("torso", pos, idx, Material("shirt", (*style.shirt, 1.0), roughness=0.85, specular=0.08)), "root")
    cpos, cidx = _collar()
    add(_simple_prim("collar", cpos, cidx,
                     Material("collar", (*style.collar, 1.0), roughness=0.8, specular=0.08)), "root")
    t_parts = time.perf_counter()

    # morph targets: transfer onto the skin, then everything that rides on it or on the jaw
    fractions = _lid_fractions(model)
    lid = _lid_targets(skin, fractions)
    corr, zero, _ = _skin_correspondence(skin, model)
    jaw = _jaw_motions(skin, model, corr)
    skin_t = _transfer_skin(skin, model, corr, zero, lid, {n: tuple(f) for n, f in fractions.items()}, jaw)
    skin_t["tongueOut"] = skin_t["tongueOut"] + TONGUE_OUT_JAW * skin_t["jawOpen"]
    t_transfer = time.perf_counter()

    skeleton, jidx = _skeleton()
    out_prims = []
    for prim, joint, motion, weights in prims:
        p = prim.positions.astype(np.float64)
        if motion == "skin":
            deltas = skin_t
        elif motion == "follow":
            deltas = _follow_skin(skin, p, skin_t, avoid_lids=prim.name == "interior")
        elif motion == "jaw":
            deltas = {n: _rigid_delta(p, jaw[n]) * weights[:, None] for n in JAW_SHAPES}
            deltas["tongueOut"] = TONGUE_OUT_JAW * deltas["jawOpen"]
            if prim.name == "tongue":
                deltas["tongueOut"] = deltas["tongueOut"] + _tongue_out(p, tc, t_radii)
        else:
            deltas = {}
        # the interior lining shows only through the mouth: it needs only sizeable motions
        _set_targets(prim, deltas, 5e-4 if prim.name == "interior" else 0.0)
        _set_skin_weights(prim, joint, jidx)
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
    t1 = time.perf_counter()
    logger.info("default head built in %.0f ms (parts %.0f, transfer %.0f, targets %.0f): %d vertices, "
                "%d triangles, %d morph targets, %d rig landmarks attached (mean residual %.1f mm, scale %.3f)",
                (t1 - t0) * 1e3, (t_parts - t0) * 1e3, (t_transfer - t_parts) * 1e3, (t1 - t_transfer) * 1e3,
                mesh.num_vertices, mesh.num_triangles, len(mesh.target_names), len(corr.vertices),
                corr.residual_m.mean() * 1e3, corr.scale)
    return mesh


def rig_landmark_vertices(landmarks) -> np.ndarray:
    """The default head's skin vertices that correspond to face-model landmarks.

    The correspondence of the morph-target transfer: lid and lip contours placed by
    construction, every other landmark attached where the fitted warp puts it.

    Args:
        landmarks: sequence of MediaPipe landmark indices (0..467).

    Returns:
        (N,) int64 indices into the vertices of the head's "skin" primitive.

    Raises:
        InputError: a landmark has no corresponding vertex (it fell outside the skin,
            e.g. inside an eye socket).
        ModelLoadError: the face model cannot be loaded.
    """
    from avatar_app.core.errors import InputError

    lookup = _landmark_lookup()
    missing = [int(lm) for lm in landmarks if int(lm) not in lookup]
    if missing:
        raise InputError(f"face-model landmarks without a vertex on the default head: {missing}")
    return np.array([lookup[int(lm)] for lm in landmarks], np.int64)


@functools.lru_cache(maxsize=1)
def _landmark_lookup() -> dict[int, int]:
    from avatar_app.avatar.face_model import load_face_model

    return _skin_correspondence(_skin_part(HeadStyle()), load_face_model())[2]


def _set_targets(prim: MeshPrimitive, deltas: dict[str, np.ndarray], min_motion_m: float = 0.0) -> None:
    """Store deltas as morph targets in ARKit order, with normal deltas; tiny values dropped,
    and targets that move nothing farther than ``min_motion_m``."""
    p = prim.positions.astype(np.float64)
    targets, normals = {}, {}
    for name in BLENDSHAPE_NAMES:
        d = deltas.get(name)
        if d is None:
            continue
        d = np.array(np.broadcast_to(d, p.shape), np.float64)
        d[np.abs(d).max(axis=1) < MORPH_EPS_M] = 0.0
        if not d.any() or np.abs(d).max() < min_motion_m:
            continue
        if name == "mouthClose" and "jawOpen" in targets:
            # a corrective shape, meant on top of jawOpen (alone the lips pass through each
            # other): its normals are the change it makes to the jawOpen pose
            on_jaw = p + targets["jawOpen"]
            dn = compute_normals(on_jaw + d, prim.indices).astype(np.float64) - compute_normals(on_jaw, prim.indices)
        else:
            dn = compute_normals(p + d, prim.indices).astype(np.float64) - prim.normals
        dn[np.abs(dn).max(axis=1) < MORPH_NORMAL_EPS] = 0.0
        targets[name] = d.astype(np.float32)
        normals[name] = dn.astype(np.float32)
    prim.morph_targets = targets
    prim.morph_normals = normals


def _skeleton() -> tuple[Skeleton, dict[str, int]]:
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
    return Skeleton(joints), {n: i for i, n in enumerate(joint_names)}


def _set_skin_weights(prim: MeshPrimitive, joint: str, jidx: dict[str, int]) -> None:
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
