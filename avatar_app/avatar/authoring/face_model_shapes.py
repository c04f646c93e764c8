"""The 52 ARKit blendshapes of the face model, built from the neutral shape by code.

Each shape prescribes the motion of a few landmark groups ("handles": eyelid
contours, lip contours, mouth corners, brow points, a cheek or nose patch) in
millimetres at weight 1, and spreads it over the surrounding skin with
biharmonic interpolation along the mesh (:class:`face_model_fields.MeshFields`),
so every offset field is smooth and stays on its side of the eye and mouth
openings. The jaw shapes move a jaw region (weight 1 on the lower lip, chin
and jawline, 0 on the upper lip and above, smooth in between) rigidly.
Meanings follow Apple's ``ARFaceAnchor.BlendShapeLocation`` documentation;
Left/Right are the subject's own sides (model +x is the subject's left).
Shapes ending in Right are exact mirror images of their Left partners;
unsided shapes are exactly symmetric.

Magnitudes at weight 1 are human (full blink closes the eye, jawOpen drops
the chin about 25 mm); ``docs/face_model.md`` tabulates them with the
expected landmark motions that ``tests/avatar/test_face_model_shapes.py`` checks.
"""
from __future__ import annotations

import numpy as np

from avatar_app.avatar.authoring import face_model_topology as topo
from avatar_app.avatar.authoring.face_model_fields import MeshFields, smoothstep
from avatar_app.core import landmarks as lmk
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES
from avatar_app.core.rotations import gaze_rotation, rot_x

MM = 1e-3

# Eyes ---------------------------------------------------------------------------------
BLINK_MEET = 0.2
"""Where the lids meet in a blink, as a fraction of the aperture above the lower lid."""
EYEBALL_DEPTH_M = 0.010
"""Iris centre to eyeball centre (the eye rotates about a point this far behind the iris)."""
GAZE_RAD = {"Up": np.radians(25.0), "Down": np.radians(30.0),
            "In": np.radians(30.0), "Out": np.radians(30.0)}
"""Eye rotation at weight 1 (a full ARKit eyeLook is near the comfortable gaze limit)."""

# Jaw ----------------------------------------------------------------------------------
JAW_OPEN_RAD = 0.33
"""Jaw rotation of jawOpen about the hinge (plus the condyle's forward glide below)."""
JAW_OPEN_GLIDE_M = np.array([0.0, -0.004, 0.013])
"""Forward/down glide of the jaw at full jawOpen (the condyle slides onto the eminence)."""
JAW_HINGE_DEPTH_M = 0.015
JAW_HINGE_DROP_M = 0.010
"""The hinge axis (x) runs this far behind and below the mesh rim in front of the ears
(landmarks 234/454): near the mandibular condyles. With the glide above, full jawOpen moves
the chin about 25 mm down and 16 mm back and parts the lips about 31 mm."""


CORNERS = frozenset(lmk.MOUTH_CORNER_ROW_LEFT + lmk.MOUTH_CORNER_ROW_RIGHT)


class ShapeBuilder:
    """Shared geometry of one neutral shape for the shape and identity functions.

    Args:
        neutral: (478, 3) float metres, model frame, mirror-symmetric.
        triangles: (F, 3) int mesh triangles.
        mirror: (478,) int mirror map.

    Attributes:
        p: (478, 3) float64 neutral positions; mesh: its first 468 rows.
        f: :class:`MeshFields` of the mesh.
        normals: (468, 3) unit vertex normals.
        upper_lip, lower_lip: vertex sets of the two lips (:func:`lip_regions`).
        lip_depth: (468,) 0 on the inner lip line, 1 on the outer vermilion border.
        jaw_weight: (468,) 1 on the jaw, 0 above the mouth.
    """

    def __init__(self, neutral: np.ndarray, triangles: np.ndarray, mirror: np.ndarray):
        self.p = np.asarray(neutral, np.float64)
        self.mesh = self.p[:lmk.NUM_MESH]
        self.mirror = np.asarray(mirror)
        self.f = MeshFields(self.mesh, topo.edges(triangles), triangles)
        self.normals = self.f.normals()
        self.upper_lip, self.lower_lip = lip_regions(triangles)
        self.corner_x = self.p[291, 0]
        d_in_u = self.f.geodesic(lmk.LIP_INNER_UPPER)
        d_out_u = self.f.geodesic(lmk.LIP_OUTER_UPPER)
        d_in_l = self.f.geodesic(lmk.LIP_INNER_LOWER)
        d_out_l = self.f.geodesic(lmk.LIP_OUTER_LOWER)
        # 0 on the inner (wet) lip line, 1 on the outer vermilion border
        self.lip_depth = np.zeros(lmk.NUM_MESH)
        for region, di, do in ((self.upper_lip, d_in_u, d_out_u), (self.lower_lip, d_in_l, d_out_l)):
            idx = np.array(sorted(region))
            self.lip_depth[idx] = di[idx] / np.maximum(di[idx] + do[idx], 1e-9)
        self.jaw_weight = self._jaw_weight()

    # ------------------------------------------------------------------ helpers
    def zeros(self) -> np.ndarray:
        """(478, 3) float64 zeros: an empty offset field."""
        return np.zeros((lmk.NUM_LANDMARKS, 3))

    def spread(self, handles: dict[int, np.ndarray], radius_mm: float, pinned=()) -> np.ndarray:
        """(478, 3) metres: handle offsets (mm) spread over the mesh; irises still."""
        out = self.zeros()
        h = {int(k): np.asarray(v, np.float64) * MM for k, v in handles.items()}
        out[:lmk.NUM_MESH] = self.f.interpolate(h, radius_mm * MM, pinned=pinned)
        return out

    def lip_profile(self, x: np.ndarray | float) -> np.ndarray:
        """1 at the lips' centre, 0 at the corners (a parabola in x)."""
        return np.clip(1.0 - (np.asarray(x) / self.corner_x) ** 2, 0.0, 1.0)

    def corner_share(self, x: np.ndarray | float) -> np.ndarray:
        """How much a lip point follows the subject's left corner: 0 for x <= 0, 1 at the corner."""
        return smoothstep(np.asarray(x), 0.0, self.corner_x) ** 1.5

    def left_side(self, x: np.ndarray | float) -> np.ndarray:
        """Share of the subject's left half: 0.5 on the midline; with its mirror it sums to 1."""
        return smoothstep(np.asarray(x), -6 * MM, 6 * MM)

    def lips(self) -> list[int]:
        """Every lip vertex: both lips and the corner rows."""
        return sorted(self.upper_lip | self.lower_lip | CORNERS)

    def nearest(self, target_mm) -> int:
        """Mesh vertex nearest a point given in millimetres."""
        return int(np.argmin(np.linalg.norm(self.mesh - np.asarray(target_mm) * MM, axis=1)))

    def patch(self, center: int, radius_mm: float) -> tuple[np.ndarray, np.ndarray]:
        """Vertices within ``radius_mm`` (along the surface) of ``center`` and a smooth 1->0 falloff."""
        d = self.f.geodesic([center])
        idx = np.nonzero(d < radius_mm * MM)[0]
        return idx, smoothstep(d[idx], radius_mm * MM, 0.0)

    def eye_profile(self, contour) -> np.ndarray:
        """sin(pi t) along an eyelid contour (0 at both corners), t from the x positions."""
        x = self.p[list(contour), 0]
        t = (x - x[0]) / (x[-1] - x[0])
        return np.sin(np.pi * t)

    # ------------------------------------------------------------------ jaw
    def _jaw_weight(self) -> np.ndarray:
        """(468,) 1 on the jaw (lower lip, chin, jawline), 0 above the mouth, smooth between."""
        y = self.mesh[:, 1]
        ones = set(self.lower_lip) | set(np.nonzero(y < self.p[17, 1] - 3 * MM)[0].tolist())
        zeros = set(self.upper_lip) | set(np.nonzero(y > self.p[lmk.FacePoint.SUBNASALE, 1])[0].tolist())
        zeros |= {v for v in lmk.FACE_OVAL if y[v] > self.p[61, 1]}
        handles = {v: 1.0 for v in ones}
        handles.update({v: 0.0 for v in zeros if v not in ones})
        w = self.f.interpolate(handles, radius=np.inf)[:, 0]
        return np.clip(w, 0.0, 1.0)

    def jaw_motion(self, rotation_rad: float = 0.0, translation_m=(0.0, 0.0, 0.0),
                   full: bool = False) -> np.ndarray:
        """(478, 3) offsets of a rigid jaw motion (about the hinge) weighted by the jaw region."""
        ear = self.p[lmk.FacePoint.CHEEK_EAR_LEFT]
        pivot = np.array([0.0, ear[1] - JAW_HINGE_DROP_M, ear[2] - JAW_HINGE_DEPTH_M])
        rot = rot_x(rotation_rad)  # positive: chin down and back
        q = self.mesh - pivot
        disp = q @ rot.T + pivot + np.asarray(translation_m) - self.mesh
        out = self.zeros()
        out[:lmk.NUM_MESH] = disp if full else disp * self.jaw_weight[:, None]
        return out


def lip_regions(triangles: np.ndarray) -> tuple[set[int], set[int]]:
    """Vertices of the upper and lower lip (vermilion), corners excluded.

    Flood fill from each inner lip contour that never crosses the outer
    contour; the mouth opening separates the two lips.

    Args:
        triangles: (F, 3) mesh triangles.

    Returns:
        ``(upper, lower)`` sets of vertex indices, each including its inner
        and outer contour points but not the corner rows
        (:data:`face_model_topology.MOUTH_CORNER_ROW_LEFT` / ``_RIGHT``).
    """
    adj: dict[int, set[int]] = {}
    for a, b in topo.edges(triangles):
        adj.setdefault(int(a), set()).add(int(b))
        adj.setdefault(int(b), set()).add(int(a))
    corners = set(lmk.MOUTH_CORNER_ROW_LEFT + lmk.MOUTH_CORNER_ROW_RIGHT)
    out = []
    for inner, outer, other in ((lmk.LIP_INNER_UPPER, lmk.LIP_OUTER_UPPER, lmk.LIP_INNER_LOWER),
                                (lmk.LIP_INNER_LOWER, lmk.LIP_OUTER_LOWER, lmk.LIP_INNER_UPPER)):
        region = set(inner) - corners
        stop = corners | set(lmk.LIP_OUTER_UPPER + lmk.LIP_OUTER_LOWER) | set(other)
        stack = list(region)
        while stack:
            v = stack.pop()
            for n in adj[v]:
                if n not in region and n not in stop:
                    region.add(n)
                    stack.append(n)
        out.append(region | (set(outer) - corners))
    return out[0], out[1]


# ====================================================================== eyes (subject's left)

def _eye_lids(b: ShapeBuilder, up_mm, low_mm, radius_mm=14.0, extra=None) -> np.ndarray:
    """Lid motion of the left eye: per-lid offsets (mm) scaled by the lid profile."""
    up, low = lmk.LEFT_EYE_UPPER_LID, lmk.LEFT_EYE_LOWER_LID
    pu, pl = b.eye_profile(up), b.eye_profile(low)
    h = {}
    for v, s in zip(up, pu):
        h[v] = s * np.asarray(up_mm, np.float64)
    for v, s in zip(low, pl):
        h[v] = s * np.asarray(low_mm, np.float64)
    if extra:
        h.update(extra)
    pinned = lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER
    return b.spread(h, radius_mm, pinned=pinned)


def eye_blink_left(b: ShapeBuilder) -> np.ndarray:
    """Upper lid down to meet the slightly raised lower lid (aperture -> 0)."""
    up, low = lmk.LEFT_EYE_UPPER_LID, lmk.LEFT_EYE_LOWER_LID
    h = {}
    prof = b.eye_profile(up)
    for u, lo, s in zip(up, low, prof):
        meet = b.p[lo] + BLINK_MEET * (b.p[u] - b.p[lo])
        meet[2] = max(b.p[u, 2], b.p[lo, 2]) + 0.8 * MM * s  # the closed lid bulges over the cornea
        h[u] = (meet - b.p[u]) / MM
        h[lo] = (meet - b.p[lo]) / MM
    return b.spread(h, 16.0, pinned=lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER)


def eye_wide_left(b: ShapeBuilder) -> np.ndarray:
    """Upper lid raised 3 mm, lower lid lowered 0.8 mm."""
    return _eye_lids(b, (0, 3.0, -0.3), (0, -0.8, 0))


def eye_squint_left(b: ShapeBuilder) -> np.ndarray:
    """Lower lid up 2.8 mm, upper lid down 1 mm, lateral corner drawn in (orbicularis)."""
    return _eye_lids(b, (0, -1.0, 0), (0, 2.8, 0.5), radius_mm=18.0,
                     extra={263: np.array([-0.8, 0.3, 0.0])})


def _rotate_iris(b: ShapeBuilder, center: int, axis: str, angle: float) -> np.ndarray:
    """Offsets of one iris's 5 points rotated about the eyeball centre."""
    pts = b.p[center:center + 5]
    eye = b.p[center] - np.array([0.0, 0.0, EYEBALL_DEPTH_M])
    # axis "x": positive angle = gaze up; "y": positive angle = gaze toward +x
    rot = gaze_rotation(0.0, angle) if axis == "x" else gaze_rotation(angle, 0.0)
    return (pts - eye) @ rot.T + eye - pts


def eye_look_left(b: ShapeBuilder, direction: str) -> np.ndarray:
    """Left eye turned Up/Down/In (toward the nose, -x)/Out (+x); lids follow a little."""
    ang = GAZE_RAD[direction]
    if direction == "Up":
        out = _eye_lids(b, (0, 2.0, 0), (0, 0.8, 0))
        iris = _rotate_iris(b, 473, "x", ang)
    elif direction == "Down":
        out = _eye_lids(b, (0, -3.5, 0.3), (0, -1.0, 0))
        iris = _rotate_iris(b, 473, "x", -ang)
    elif direction == "In":
        out = _eye_lids(b, (-0.6, 0, 0), (-0.4, 0, 0))
        iris = _rotate_iris(b, 473, "y", -ang)
    else:
        out = _eye_lids(b, (0.6, 0, 0), (0.4, 0, 0))
        iris = _rotate_iris(b, 473, "y", ang)
    out[473:478] = iris
    return out


# ====================================================================== brows

def _brow_t(b: ShapeBuilder, pts) -> np.ndarray:
    """0 at the outer end of the left brow, 1 at the inner end."""
    x = b.p[list(pts), 0]
    xs = b.p[list(lmk.LEFT_BROW_UPPER), 0]
    return np.clip((xs.max() - x) / (xs.max() - xs.min()), 0.0, 1.0)


def _brow_pinned() -> tuple[int, ...]:
    return (lmk.LEFT_EYE_UPPER_LID + lmk.LEFT_EYE_LOWER_LID
            + lmk.RIGHT_EYE_UPPER_LID + lmk.RIGHT_EYE_LOWER_LID)


def brow_down_left(b: ShapeBuilder) -> np.ndarray:
    """Left brow lowered (outer part 5 mm, inner 4 mm) and drawn toward the nose."""
    pts = lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER
    t = _brow_t(b, pts)
    h = {v: np.array([-1.5 * ti, -(5.0 - 1.0 * ti), 0.5]) for v, ti in zip(pts, t)}
    return b.spread(h, 25.0, pinned=_brow_pinned())


def brow_outer_up_left(b: ShapeBuilder) -> np.ndarray:
    """Outer part of the left brow raised 6.5 mm, the inner end 0.5 mm."""
    pts = lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER
    t = _brow_t(b, pts)
    h = {v: np.array([0.3 * (1 - ti), 0.5 + 6.0 * (1 - ti), 0.0]) for v, ti in zip(pts, t)}
    return b.spread(h, 30.0, pinned=_brow_pinned())


def brow_inner_up(b: ShapeBuilder) -> np.ndarray:
    """Inner ends of both brows raised 8 mm (the outer ends 1 mm)."""
    pts = lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER
    t = _brow_t(b, pts)
    h = {v: np.array([-0.5 * ti, 1.0 + 7.0 * ti ** 1.5, 0.0]) for v, ti in zip(pts, t)}
    h.update({int(b.mirror[v]): d * np.array([-1, 1, 1]) for v, d in list(h.items())})
    return b.spread(h, 30.0, pinned=_brow_pinned())


# ====================================================================== cheeks and nose

def cheek_puff(b: ShapeBuilder) -> np.ndarray:
    """Both cheeks pushed out 7 mm along the surface normal; lips forward 1.5 mm."""
    h = {}
    for sign in (1, -1):
        c = b.nearest((sign * 44.0, -22.0, 55.0))
        idx, w = b.patch(c, 16.0)
        for v, wi in zip(idx, w):
            h[int(v)] = b.normals[v] * 7.0 * wi
    for v in b.lips():
        h[v] = np.array([0.0, 0.0, 1.5])
    return b.spread(h, 30.0)


def cheek_squint_left(b: ShapeBuilder) -> np.ndarray:
    """Left cheek below the eye raised 3 mm (and forward 1 mm); lower lid up 1 mm."""
    c = b.nearest((36.0, 8.0, 60.0))
    idx, w = b.patch(c, 14.0)
    h = {int(v): np.array([0.0, 3.0, 1.0]) * wi for v, wi in zip(idx, w)}
    prof = b.eye_profile(lmk.LEFT_EYE_LOWER_LID)
    for v, s in zip(lmk.LEFT_EYE_LOWER_LID, prof):
        h[v] = np.array([0.0, 1.0, 0.0]) * s
    for v in lmk.LEFT_EYE_UPPER_LID:
        h.setdefault(v, np.zeros(3))
    return b.spread(h, 30.0)


def nose_sneer_left(b: ShapeBuilder) -> np.ndarray:
    """Left nose wing raised 3.5 mm (slightly in and back); the upper lip beside it 1 mm."""
    wing = b.nearest(0.5 * (b.p[lmk.FacePoint.NOSE_WING_LEFT] + b.p[lmk.FacePoint.NOSTRIL_LEFT]) / MM)
    idx, w = b.patch(wing, 9.0)
    h = {int(v): np.array([-0.5, 3.5, -0.5]) * wi for v, wi in zip(idx, w)}
    for v in (267, 269, 270):
        h[v] = np.array([0.0, 1.0, 0.0])
    pinned = (lmk.FacePoint.NOSE_TIP, 1, 5, 195, 197) + tuple(sorted(b.lower_lip))
    return b.spread(h, 22.0, pinned=pinned)


# ====================================================================== jaw

def jaw_open(b: ShapeBuilder) -> np.ndarray:
    """Jaw rotated down about the hinge with the condyle's glide; corners drawn in 2 mm."""
    out = b.jaw_motion(JAW_OPEN_RAD, JAW_OPEN_GLIDE_M)
    corners = {v: np.array([-2.0 * np.sign(b.p[v, 0]), 0.0, 0.0]) for v in CORNERS}
    return out + b.spread(corners, 18.0, pinned=sorted(b.upper_lip | b.lower_lip))


def jaw_forward(b: ShapeBuilder) -> np.ndarray:
    """Lower jaw pushed 8 mm forward."""
    return b.jaw_motion(0.0, (0.0, -0.5 * MM, 8.0 * MM))


def jaw_left(b: ShapeBuilder) -> np.ndarray:
    """Lower jaw shifted 9 mm to the subject's left (+x)."""
    return b.jaw_motion(0.0, (9.0 * MM, 0.0, 0.0))


def mouth_close(b: ShapeBuilder, jaw_open_shape: np.ndarray) -> np.ndarray:
    """Lips brought together whatever the jaw does: with jawOpen at 1 they close.

    With jawOpen = mouthClose = 1 every lip point sits at a quarter of the full
    jaw motion, so the lips touch, carried down a little by the jaw.
    """
    full = b.jaw_motion(JAW_OPEN_RAD, JAW_OPEN_GLIDE_M, full=True)
    h = {v: (0.25 * full[v] - jaw_open_shape[v]) / MM for v in b.lips()}
    return b.spread(h, 14.0)


# ====================================================================== mouth

def lip_handles(b: ShapeBuilder, fn) -> dict[int, np.ndarray]:
    """Handles for every lip vertex and the corner rows.

    Args:
        b: the builder.
        fn: ``fn(vertex, x_m, lip_depth, is_upper_lip) -> (3,)`` offset in millimetres.

    Returns:
        ``{vertex: offset_mm}``.
    """
    h = {}
    for v in b.lips():
        h[v] = np.asarray(fn(v, b.p[v, 0], b.lip_depth[v], v in b.upper_lip), np.float64)
    return h


def mouth_funnel(b: ShapeBuilder) -> np.ndarray:
    """Lips pushed forward into an open, rounded funnel; corners drawn in 5 mm."""
    def fn(v, x, depth, upper):
        prof = b.lip_profile(x)
        sign = 1.0 if upper else -1.0
        dy = sign * prof * (2.5 + 1.5 * depth)
        if v in CORNERS:
            dy = 0.0
        return (-5.0 * x / b.corner_x, dy, 4.0 + 1.5 * prof)
    return b.spread(lip_handles(b, fn), 20.0)


def mouth_pucker(b: ShapeBuilder) -> np.ndarray:
    """Closed lips pushed forward 6 mm and drawn together: corners in 8 mm."""
    def fn(v, x, depth, upper):
        prof = b.lip_profile(x)
        sign = -1.0 if upper else 1.0
        return (-8.0 * x / b.corner_x, sign * 0.6 * depth * prof, 4.5 + 1.5 * prof)
    return b.spread(lip_handles(b, fn), 22.0)


def mouth_left(b: ShapeBuilder) -> np.ndarray:
    """Both lips moved 9 mm to the subject's left, wrapping round the face."""
    def fn(v, x, depth, upper):
        return (9.0, 0.0, -2.0 * x / b.corner_x)
    return b.spread(lip_handles(b, fn), 25.0)


def _corner_shape(b: ShapeBuilder, corner_mm, radius_mm, extra=None) -> np.ndarray:
    """The subject's left mouth corner moved by ``corner_mm``; lip points follow by their share."""
    d = np.asarray(corner_mm, np.float64)

    def fn(v, x, depth, upper):
        return d * b.corner_share(x)
    h = lip_handles(b, fn)
    if extra:
        for k, v in extra.items():
            h[k] = h.get(k, 0) + np.asarray(v)
    return b.spread(h, radius_mm)


def mouth_smile_left(b: ShapeBuilder) -> np.ndarray:
    """Left corner up 8 mm, out 6 mm, back 3 mm; the cheek beside it rises 3 mm."""
    cheek = b.nearest((38.0, -14.0, 62.0))
    idx, w = b.patch(cheek, 12.0)
    extra = {int(v): np.array([1.0, 3.0, 1.0]) * wi for v, wi in zip(idx, w)}
    return _corner_shape(b, (6.0, 8.0, -3.0), 32.0, extra)


def mouth_frown_left(b: ShapeBuilder) -> np.ndarray:
    """Left corner down 6 mm (1 mm out)."""
    return _corner_shape(b, (1.0, -6.0, 0.0), 25.0)


def mouth_dimple_left(b: ShapeBuilder) -> np.ndarray:
    """Left corner pulled back 5 mm and out 3 mm."""
    return _corner_shape(b, (3.0, 0.5, -5.0), 22.0)


def mouth_stretch_left(b: ShapeBuilder) -> np.ndarray:
    """Left corner pulled out 6 mm and down 4 mm."""
    return _corner_shape(b, (6.0, -4.0, -1.0), 28.0)


def mouth_roll(b: ShapeBuilder, upper: bool) -> np.ndarray:
    """One lip rolled in over the teeth: its outer border moves toward the inner line and back."""
    region = b.upper_lip if upper else b.lower_lip
    other = b.lower_lip if upper else b.upper_lip
    sign = -1.0 if upper else 1.0

    def fn(v, x, depth, is_up):
        if v not in region:
            return (0.0, 0.0, 0.0)
        prof = b.lip_profile(x)
        return (0.0, sign * (0.3 + 3.2 * depth) * prof, -(2.0 + 2.0 * depth) * prof)
    h = {k: v for k, v in lip_handles(b, fn).items() if k in region or k in CORNERS}
    return b.spread(h, 15.0, pinned=sorted(other))


def mouth_shrug_lower(b: ShapeBuilder) -> np.ndarray:
    """Lower lip pushed up 2.5 mm and out 3 mm by the chin (the upper lip rides up 2 mm)."""
    chin = b.nearest(b.p[200] / MM)
    idx, w = b.patch(chin, 18.0)
    h = {int(v): np.array([0.0, 2.0, 1.5]) * wi for v, wi in zip(idx, w)}

    def fn(v, x, depth, upper):
        prof = b.lip_profile(x)
        if upper:
            return (0.0, (2.5 - 1.3 * depth) * prof, 0.5 * prof)
        return (0.0, 2.5 * prof, 3.0 * prof)
    h.update(lip_handles(b, fn))
    return b.spread(h, 25.0)


def mouth_shrug_upper(b: ShapeBuilder) -> np.ndarray:
    """Upper lip pushed up 2.5 mm and out 2.5 mm."""
    def fn(v, x, depth, upper):
        prof = b.lip_profile(x)
        if not upper:
            return (0.0, 0.0, 0.0)
        return (0.0, 2.5 * prof, (2.0 + 1.0 * depth) * prof)
    return b.spread(lip_handles(b, fn), 18.0)


def mouth_press_left(b: ShapeBuilder) -> np.ndarray:
    """Left half of the lips pressed together: lower border up 2.5 mm, upper border down 1.5 mm."""
    def fn(v, x, depth, upper):
        s = b.left_side(x) * b.lip_profile(0.6 * x)
        if upper:
            return (0.0, -(0.2 + 1.3 * depth) * s, -0.5 * s)
        return (0.0, (0.5 + 2.0 * depth) * s, -0.5 * s)
    return b.spread(lip_handles(b, fn), 15.0)


def mouth_lower_down_left(b: ShapeBuilder) -> np.ndarray:
    """Left half of the lower lip pulled down 6 mm (and out 1 mm); the upper lip stays."""
    def fn(v, x, depth, upper):
        if upper:
            return (0.0, 0.0, 0.0)
        s = b.left_side(x) * b.lip_profile(0.8 * x)
        return (0.0, -6.0 * s, 1.0 * s)
    return b.spread(lip_handles(b, fn), 18.0)


def mouth_upper_up_left(b: ShapeBuilder) -> np.ndarray:
    """Left half of the upper lip raised 5 mm; the lower lip stays."""
    def fn(v, x, depth, upper):
        if not upper:
            return (0.0, 0.0, 0.0)
        s = b.left_side(x) * b.lip_profile(0.8 * x)
        return (0.0, 5.0 * s, 0.5 * s)
    return b.spread(lip_handles(b, fn), 18.0)


def tongue_out(b: ShapeBuilder) -> np.ndarray:
    """The tongue has no landmark: only the lower lip is pushed down 2 mm and out 2.5 mm."""
    def fn(v, x, depth, upper):
        if upper or v in CORNERS:
            return (0.0, 0.0, 0.0)
        prof = b.lip_profile(x)
        return (0.0, -2.0 * prof, 2.5 * prof)
    return b.spread(lip_handles(b, fn), 12.0)


# ====================================================================== all 52

def build_blendshapes(neutral: np.ndarray, triangles: np.ndarray, mirror: np.ndarray) -> np.ndarray:
    """All 52 ARKit blendshapes of a neutral face.

    Args:
        neutral: (478, 3) float metres, model frame, exactly mirror-symmetric.
        triangles: (F, 3) int mesh triangles.
        mirror: (478,) int mirror map.

    Returns:
        (52, 478, 3) float64 offsets in metres at weight 1, ARKit order.
    """
    b = ShapeBuilder(neutral, triangles, mirror)
    flip = np.array([-1.0, 1.0, 1.0])

    def mirrored(shape: np.ndarray) -> np.ndarray:
        return shape[b.mirror] * flip

    def symmetric(shape: np.ndarray) -> np.ndarray:
        return 0.5 * (shape + mirrored(shape))

    left: dict[str, np.ndarray] = {
        "eyeBlinkLeft": eye_blink_left(b),
        "eyeLookDownLeft": eye_look_left(b, "Down"),
        "eyeLookInLeft": eye_look_left(b, "In"),
        "eyeLookOutLeft": eye_look_left(b, "Out"),
        "eyeLookUpLeft": eye_look_left(b, "Up"),
        "eyeSquintLeft": eye_squint_left(b),
        "eyeWideLeft": eye_wide_left(b),
        "jawLeft": jaw_left(b),
        "mouthLeft": mouth_left(b),
        "mouthSmileLeft": mouth_smile_left(b),
        "mouthFrownLeft": mouth_frown_left(b),
        "mouthDimpleLeft": mouth_dimple_left(b),
        "mouthStretchLeft": mouth_stretch_left(b),
        "mouthPressLeft": mouth_press_left(b),
        "mouthLowerDownLeft": mouth_lower_down_left(b),
        "mouthUpperUpLeft": mouth_upper_up_left(b),
        "browDownLeft": brow_down_left(b),
        "browOuterUpLeft": brow_outer_up_left(b),
        "cheekSquintLeft": cheek_squint_left(b),
        "noseSneerLeft": nose_sneer_left(b),
    }
    jaw_open_shape = symmetric(jaw_open(b))
    both: dict[str, np.ndarray] = {
        "jawForward": jaw_forward(b),
        "jawOpen": jaw_open_shape,
        "mouthClose": mouth_close(b, jaw_open_shape),
        "mouthFunnel": mouth_funnel(b),
        "mouthPucker": mouth_pucker(b),
        "mouthRollLower": mouth_roll(b, upper=False),
        "mouthRollUpper": mouth_roll(b, upper=True),
        "mouthShrugLower": mouth_shrug_lower(b),
        "mouthShrugUpper": mouth_shrug_upper(b),
        "browInnerUp": brow_inner_up(b),
        "cheekPuff": cheek_puff(b),
        "tongueOut": tongue_out(b),
    }
    out = np.zeros((NUM_BLENDSHAPES, lmk.NUM_LANDMARKS, 3))
    for i, name in enumerate(BLENDSHAPE_NAMES):
        if name in left:
            out[i] = left[name]
        elif name.endswith("Right") and name[:-5] + "Left" in left:
            out[i] = mirrored(left[name[:-5] + "Left"])
        else:
            out[i] = symmetric(both[name])
    return out
