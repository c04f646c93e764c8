"""The default head's morph targets: the correspondence with the face model, the transfer of
its shapes, eyelids, jaw and tongue (see :mod:`avatar_app.avatar.authoring.default_head`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from avatar_app.avatar.authoring.head_parts import _brow_dirs
from avatar_app.avatar.authoring.head_skin import (
    EYE_C,
    EYE_R,
    K_EYE_LO,
    K_EYE_LO_FOLD,
    K_EYE_UP,
    K_EYE_UP_FOLD,
    MOUTH_Y,
    ORIGIN,
    _jaw_volume_sdf,
    _lip_weight,
    _shell_weight,
    _Skin,
    _skin_sdf,
)
from avatar_app.avatar.authoring.procedural import raycast_first_exit, smoothstep
from avatar_app.core import landmarks as lmk
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.core.rotations import rigid_fit

# avatar_app.avatar.authoring.transfer needs scipy: imported where it is used.
if TYPE_CHECKING:
    from avatar_app.avatar.authoring.transfer import Correspondence


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
    from avatar_app.avatar.authoring.transfer import contour_weights, fit_correspondence

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
    from avatar_app.avatar.authoring.transfer import SurfaceInterpolator

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
    from avatar_app.avatar.authoring.face_model_shapes import lip_regions

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
