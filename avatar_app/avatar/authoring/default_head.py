"""The default avatar: a stylised, friendly head built entirely by code.

Construction (all units metres, +Y up, the head faces +Z, its left is +X):

- The skin is a signed distance field (ellipsoids, capsules and a round cone
  blended with smooth minimum, see :mod:`avatar_app.avatar.authoring.procedural`) sampled
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
same motion on both heads (:mod:`avatar_app.avatar.authoring.transfer`):

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
``assets/default_head.glb``; :func:`avatar_app.avatar.default_head.build_default_head`
reads that file (fast start-up) and builds by code only when it is missing or stale.

Code: the skin field and grid in :mod:`~avatar_app.avatar.authoring.head_skin`, the
other parts in :mod:`~avatar_app.avatar.authoring.head_parts`, the morph targets in
:mod:`~avatar_app.avatar.authoring.head_morphs`; the assembly here.

Skeleton: root (neck base, never moves) <- neck <- head <- eye_L, eye_R. The
head joint sits at the top of the neck; the neck joint takes part of the head
rotation so the neck bends smoothly while its base stays.
"""
from __future__ import annotations

import functools
import logging
import time

import numpy as np

from avatar_app.avatar.authoring.head_morphs import (
    JAW_SHAPES,
    MORPH_EPS_M,
    MORPH_NORMAL_EPS,
    TONGUE_OUT_JAW,
    _follow_skin,
    _jaw_motions,
    _lid_fractions,
    _lid_targets,
    _rigid_delta,
    _skin_correspondence,
    _tongue_out,
    _transfer_skin,
)
from avatar_app.avatar.authoring.head_parts import _brow, _collar, _ear, _eyeball, _hair, _lining, _simple_prim, _torso
from avatar_app.avatar.authoring.head_skin import (EYE_C, HEAD_PIVOT, MOUTH_Y, MOUTH_Z, NECK_BASE, _head_core_sdf,
                                                  _skin_part)
from avatar_app.avatar.authoring.procedural import arc_band, lathe, orient_outward, smoothstep
from avatar_app.avatar.default_head import HeadStyle
from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton, compute_normals
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES

logger = logging.getLogger(__name__)

def build_head(style: HeadStyle | None = None) -> AvatarMesh:
    """Build the default head by code (deterministic).

    The 52 ARKit morph targets are transferred from the face model
    (:func:`avatar_app.avatar.face_model.load_face_model`) through corresponding
    surface points (:mod:`avatar_app.avatar.authoring.transfer`): a weight means the same
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
    shade = 0.45 + 0.55 * smoothstep(tc[2] - 0.02, tc[2] + 0.02, pos[:, 2])
    tcol = np.array([0.52, 0.14, 0.15])[None, :] * shade[:, None]
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
