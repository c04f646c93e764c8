"""Where the camera looks on a loaded avatar: its face, found from the humanoid bones.

A streamer's avatar is shown head and shoulders. The face is located from the
rig, never from the vertices skinned to the head bone: those include long hair,
hats, ears and (in debug rigs) gizmos, which pull the centre down and zoom out
until the face is a few pixels. In order of preference:

1. the two eye bones (VRM ``leftEye``/``rightEye``) with the head bone;
2. the eye meshes (primitives named ``eye``, not lashes, brows or lids), split
   left/right of the head bone, with the head bone;
3. the face mesh (a primitive named ``face``): its bounds;
4. the head bone alone, with a typical human head size.

From the eyes, the head's height (chin to crown) is estimated from the eye
distance and from the eyes' height above the head bone (which sits at the base
of the skull): ``H = sqrt(3.8 d * 3.5 h)``. The factors are those of the default
head (assets/default_head.glb: 0.26 m head, eyes 68 mm apart, 75 mm above its
head bone), which match adult anthropometry (interpupillary distance about
63 mm, head height about 0.23 m; Dodgson 2004, "Variation and extrema of human
interpupillary distance"); the geometric mean keeps stylised proportions (large
anime eyes, robots) in between. The view is ``1.55 H`` tall, centred ``0.13 H``
below the eyes: the default head's own framing.
"""
from __future__ import annotations

import math

import numpy as np

from avatar_app.avatar.loader.rig import _tokens
from avatar_app.avatar.mesh import AvatarMesh

#: Head height per eye distance, and per height of the eyes above the head bone (see the module doc).
HEAD_PER_EYE_DISTANCE = 3.8
HEAD_PER_EYE_HEIGHT = 3.5
#: View height per head height, and the view centre's drop below the eyes per head height.
VIEW_PER_HEAD = 1.55
CENTRE_BELOW_EYES = 0.13
#: Head height assumed when only the head bone is known, metres (adult, chin to crown).
TYPICAL_HEAD_M = 0.24

_EYE_EXCLUDE = {"lash", "lashes", "eyelash", "eyelashes", "brow", "brows", "eyebrow", "lid", "eyelid", "line",
                "shadow", "highlight", "socket", "white"}


def face_framing(head: np.ndarray, left_eye: np.ndarray, right_eye: np.ndarray) -> tuple[np.ndarray, float]:
    """View centre and height of a face from its head bone and eye centres.

    Args:
        head: (3,) rest position of the head bone, metres (model space, +Y up, facing +Z).
        left_eye, right_eye: (3,) eye centres, metres.

    Returns:
        ((3,) float32 view centre, view height in metres).
    """
    mid = (np.asarray(left_eye, np.float64) + np.asarray(right_eye, np.float64)) / 2.0
    d = float(np.hypot(*(np.asarray(left_eye, np.float64) - right_eye)[[0, 2]]))
    h = float(mid[1] - head[1])
    by_distance = HEAD_PER_EYE_DISTANCE * max(d, 1e-3)
    by_height = HEAD_PER_EYE_HEIGHT * h
    # eyes at or below the head bone, or absurdly far from it: trust the eye distance alone
    size = math.sqrt(by_distance * by_height) if 0.25 * by_distance < by_height < 4.0 * by_distance else by_distance
    centre = np.array([mid[0], mid[1] - CENTRE_BELOW_EYES * size, (mid[2] + head[2]) / 2.0], np.float32)
    return centre, VIEW_PER_HEAD * size


def _eye_mesh_centres(mesh: AvatarMesh, head: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(left, right) centres of the eye meshes, split at the head bone's x; None without both."""
    sides: dict[bool, list[np.ndarray]] = {True: [], False: []}
    for p in mesh.primitives:
        toks = set(_tokens(p.name))
        is_eye = any(t == "eye" or t.startswith("eyeball") or t in ("iris", "pupil") for t in toks)
        if not is_eye or toks & _EYE_EXCLUDE:
            continue
        left = p.positions[:, 0] > head[0]  # the avatar's left is +X
        for side in (True, False):
            if (left == side).any():
                sides[side].append(p.positions[left == side])
    if not sides[True] or not sides[False]:
        return None
    return tuple(np.concatenate(sides[s]).mean(0) for s in (True, False))


def _face_mesh_bounds(mesh: AvatarMesh) -> tuple[np.ndarray, np.ndarray] | None:
    pts = [p.positions for p in mesh.primitives if "face" in _tokens(p.name) and "eye" not in _tokens(p.name)]
    if not pts:
        return None
    allp = np.concatenate(pts)
    return allp.min(0), allp.max(0)


def frame_avatar(mesh: AvatarMesh, eye_joints: tuple[str, str] = ("leftEye", "rightEye"),
                 head_joint: str = "head") -> tuple[np.ndarray, float, str]:
    """Where the camera looks on an avatar with a head bone (see the module doc).

    Args:
        mesh: the avatar, in metres, with a skeleton holding ``head_joint``.
        eye_joints: names of the eye joints in that skeleton (absent ones are skipped).
        head_joint: name of the head joint.

    Returns:
        ((3,) float32 view centre, view height in metres, what it was found from:
        ``"eye bones"``, ``"eye meshes"``, ``"face mesh"`` or ``"head bone"``).
    """
    sk = mesh.skeleton
    names = [j.name for j in sk.joints]
    head = sk.joint_position(names.index(head_joint))
    if all(n in names for n in eye_joints):
        left, right = (sk.joint_position(names.index(n)) for n in eye_joints)
        return (*face_framing(head, left, right), "eye bones")
    eyes = _eye_mesh_centres(mesh, head)
    if eyes is not None:
        return (*face_framing(head, *eyes), "eye meshes")
    face = _face_mesh_bounds(mesh)
    if face is not None:
        lo, hi = face
        size = float(max(hi[1] - lo[1], 0.75 * (hi[0] - lo[0]), 0.05))
        centre = np.array([(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, (lo[2] + hi[2]) / 2], np.float32)
        return centre, VIEW_PER_HEAD * size, "face mesh"
    centre = (head + np.array([0.0, 0.15 * TYPICAL_HEAD_M, 0.0])).astype(np.float32)
    return centre, VIEW_PER_HEAD * TYPICAL_HEAD_M, "head bone"
