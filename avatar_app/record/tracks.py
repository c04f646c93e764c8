"""Blendshape tracks for other tools: Live Link Face CSV and a glTF animation.

Both are made from the per-frame values of a recording (the JSON Lines sidecar,
:mod:`avatar_app.record.sidecar`): :func:`convert_sidecar` writes either or both.

Live Link Face CSV (Epic Games' iOS app; Unreal's LiveLinkFaceImporter, the
Blender/Maya importers read it). Column layout, checked against open-source
readers and writers of the app's exports:

    Timecode, BlendShapeCount, EyeBlinkLeft, ... TongueOut (52, the order of
    Unreal's ``EARFaceBlendShape``: note JawRight before JawLeft and MouthRight
    before MouthLeft), HeadYaw, HeadPitch, HeadRoll, LeftEyeYaw, LeftEyePitch,
    LeftEyeRoll, RightEyeYaw, RightEyePitch, RightEyeRoll

- ``Timecode`` is ``HH:MM:SS:FF.mmm``: frame ``FF`` at the (integer) timecode
  rate and ``mmm`` the sub-frame in thousandths of a frame (Unreal's
  ``FQualifiedFrameTime`` subframe), so ``t = h*3600 + m*60 + s + FF.mmm / fps``.
- ``BlendShapeCount`` is 61 (52 blendshapes + 9 angles), as the app writes.
- Angles are in radians (``angle_unit="deg"`` for tools that want degrees),
  right-handed about the face's axes (x = subject's left, y = up, z = out of
  the face) and decomposed as ``R = Ry(yaw) Rx(pitch) Rz(roll)``: yaw > 0 turns
  to the subject's left, pitch > 0 tips the face down, roll > 0 tilts toward
  the subject's right shoulder. Epic does not document the app's signs; these
  follow ARKit's right-handed face frame.

glTF animation (glTF 2.0, Khronos): the avatar mesh (default: the app's default
head) with its morph targets named in ``mesh.extras.targetNames`` (the
convention Blender, three.js and Babylon.js read), its skeleton as a glTF skin,
and one animation: a ``weights`` channel on the mesh node and ``rotation``
channels on the neck, head and eye joints (the renderer's split: the neck
takes ``neck_share`` of the head rotation, the head the rest), LINEAR samplers,
one keyframe per recorded frame. Morph deltas are stored as sparse accessors
where that is smaller (most targets move a small part of the head), and targets
a primitive lacks as accessors without a buffer view (all zeros; glTF
"Accessors", "Sparse Accessors").
"""
from __future__ import annotations

import argparse
import csv
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES
from avatar_app.core.errors import InputError, RecordingError
from avatar_app.core.rotations import (
    axis_angle_fraction,
    euler_from_rotation,
    gaze_rotation,
    nearest_rotation,
    quat_from_matrix,
)

_log = logging.getLogger(__name__)

#: The 52 blendshape columns of a Live Link Face CSV, in the app's order.
LIVE_LINK_BLENDSHAPES: tuple[str, ...] = (
    "EyeBlinkLeft", "EyeLookDownLeft", "EyeLookInLeft", "EyeLookOutLeft", "EyeLookUpLeft",
    "EyeSquintLeft", "EyeWideLeft",
    "EyeBlinkRight", "EyeLookDownRight", "EyeLookInRight", "EyeLookOutRight", "EyeLookUpRight",
    "EyeSquintRight", "EyeWideRight",
    "JawForward", "JawRight", "JawLeft", "JawOpen",
    "MouthClose", "MouthFunnel", "MouthPucker", "MouthRight", "MouthLeft",
    "MouthSmileLeft", "MouthSmileRight", "MouthFrownLeft", "MouthFrownRight",
    "MouthDimpleLeft", "MouthDimpleRight", "MouthStretchLeft", "MouthStretchRight",
    "MouthRollLower", "MouthRollUpper", "MouthShrugLower", "MouthShrugUpper",
    "MouthPressLeft", "MouthPressRight", "MouthLowerDownLeft", "MouthLowerDownRight",
    "MouthUpperUpLeft", "MouthUpperUpRight",
    "BrowDownLeft", "BrowDownRight", "BrowInnerUp", "BrowOuterUpLeft", "BrowOuterUpRight",
    "CheekPuff", "CheekSquintLeft", "CheekSquintRight",
    "NoseSneerLeft", "NoseSneerRight",
    "TongueOut",
)
#: The nine angle columns after the blendshapes.
LIVE_LINK_ANGLES: tuple[str, ...] = (
    "HeadYaw", "HeadPitch", "HeadRoll", "LeftEyeYaw", "LeftEyePitch", "LeftEyeRoll",
    "RightEyeYaw", "RightEyePitch", "RightEyeRoll",
)
#: Morph rows whose position delta stays below this (metres) and whose normal
#: delta stays below MORPH_NORMAL_EPS are stored as exact zeros in the glTF
#: (the default head's displacement fields leave sub-micrometre tails everywhere).
MORPH_EPS_M = 1e-6
MORPH_NORMAL_EPS = 1e-4
#: The full header row.
LIVE_LINK_COLUMNS: tuple[str, ...] = ("Timecode", "BlendShapeCount", *LIVE_LINK_BLENDSHAPES,
                                      *LIVE_LINK_ANGLES)
#: Index into our (Apple-order) weight vectors for each Live Link Face column.
_LLF_FROM_ARKIT = np.array([BLENDSHAPE_NAMES.index(n[0].lower() + n[1:]) for n in LIVE_LINK_BLENDSHAPES])
assert sorted(_LLF_FROM_ARKIT.tolist()) == list(range(NUM_BLENDSHAPES))


# ---------------------------------------------------------------------------- timecode
def timecode(t_s: float, fps: float) -> str:
    """Live Link Face timecode ``HH:MM:SS:FF.mmm`` of a media time.

    Args:
        t_s: media time, seconds (>= 0).
        fps: frame rate; the timecode counts frames at ``round(fps)`` per second.

    Returns:
        e.g. ``timecode(61.5, 30) == "00:01:01:15.000"``.

    Raises:
        InputError: negative or non-finite time, or fps <= 0.
    """
    if not (math.isfinite(t_s) and t_s >= 0):
        raise InputError(f"timecodes need a media time >= 0 s; got {t_s!r}")
    rate = round(fps)
    if rate <= 0:
        raise InputError(f"timecode frame rate must be positive; got {fps!r}")
    ticks = round(t_s * rate * 1000)  # thousandths of a frame, rounded once
    frames, sub = divmod(ticks, 1000)
    secs, ff = divmod(frames, rate)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    return f"{h:02d}:{m:02d}:{s:02d}:{ff:02d}.{sub:03d}"


def parse_timecode(tc: str, fps: float) -> float:
    """Seconds of a ``HH:MM:SS:FF[.sub]`` timecode at ``round(fps)`` frames per second.

    Raises:
        InputError: malformed timecode.
    """
    try:
        h, m, s, f = tc.strip().split(":")
        return int(h) * 3600 + int(m) * 60 + int(s) + float(f) / round(fps)
    except ValueError as e:
        raise InputError(f"malformed timecode {tc!r} (expected HH:MM:SS:FF.mmm)") from e


# ---------------------------------------------------------------------------- CSV
def live_link_angles(rot: np.ndarray) -> tuple[float, float, float]:
    """Live Link Face's head (or eye) angles: yaw, pitch and roll with ARKit's pitch sign.

    ARKit's right-handed face frame has pitch > 0 tipping the face down, the
    opposite of the project's convention (:mod:`avatar_app.core.rotations`), so
    pitch is negated: ``rot = Ry(yaw) @ Rx(pitch) @ Rz(roll)``.

    Args:
        rot: (3, 3) rotation matrix (re-orthonormalised first).

    Returns:
        (yaw, pitch, roll) radians; pitch in [-pi/2, pi/2].

    Raises:
        InputError: not a finite (3, 3) matrix.
    """
    yaw, pitch, roll = euler_from_rotation(nearest_rotation(rot))
    return yaw, -pitch, roll


def _angles(rotation: np.ndarray | None, gaze: np.ndarray | None, n: int) -> np.ndarray:
    out = np.zeros((n, 9))
    if rotation is not None:
        for i in range(n):
            out[i, 0:3] = live_link_angles(rotation[i])
    if gaze is not None:
        for i in range(n):
            eye = live_link_angles(gaze_rotation(float(gaze[i, 0]), float(gaze[i, 1])))
            out[i, 3:6] = eye
            out[i, 6:9] = eye
    return out


def write_live_link_csv(path: str | Path, t: np.ndarray, weights: np.ndarray,
                        rotation: np.ndarray | None = None, gaze: np.ndarray | None = None, *,
                        fps: float = 30.0, start_s: float = 0.0, angle_unit: str = "rad") -> Path:
    """Write a track as a Live Link Face CSV (layout in the module doc).

    Args:
        path: the ``.csv`` to write (overwritten).
        t: (T,) media times of the frames, seconds (increasing, >= -start_s).
        weights: (T, 52) blendshape weights in [0, 1], ARKit (Apple) order.
        rotation: (T, 3, 3) head rotations, camera space, or None (angles 0).
        gaze: (T, 2) eye (yaw, pitch) relative to the head, radians, or None.
        fps: timecode frame rate (Live Link Face records at 60 or 30).
        start_s: added to ``t`` before making the timecode (e.g. time of day).
        angle_unit: "rad" or "deg".

    Returns:
        ``path`` as a Path.

    Raises:
        InputError: inconsistent shapes, non-finite values or a bad unit.
        RecordingError: the file cannot be written.
    """
    path = Path(path)
    t = np.asarray(t, np.float64).reshape(-1)
    w = np.asarray(weights, np.float64)
    n = len(t)
    if w.shape != (n, NUM_BLENDSHAPES):
        raise InputError(f"weights must be ({n}, {NUM_BLENDSHAPES}); got {w.shape}")
    if rotation is not None and np.shape(rotation) != (n, 3, 3):
        raise InputError(f"rotations must be ({n}, 3, 3); got {np.shape(rotation)}")
    if gaze is not None and np.shape(gaze) != (n, 2):
        raise InputError(f"gaze must be ({n}, 2); got {np.shape(gaze)}")
    if angle_unit not in ("rad", "deg"):
        raise InputError(f"angle_unit must be 'rad' or 'deg'; got {angle_unit!r}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(w))):
        raise InputError("blendshape track contains NaN or infinite values")
    ang = _angles(None if rotation is None else np.asarray(rotation), gaze, n)
    if angle_unit == "deg":
        ang = np.degrees(ang)
    count = str(NUM_BLENDSHAPES + len(LIVE_LINK_ANGLES))
    try:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            wr = csv.writer(fh, lineterminator="\n")
            wr.writerow(LIVE_LINK_COLUMNS)
            for i in range(n):
                row = [timecode(t[i] + start_s, fps), count]
                row += [f"{v:.6f}" for v in np.clip(w[i, _LLF_FROM_ARKIT], 0.0, 1.0)]
                row += [f"{v:.6f}" for v in ang[i]]
                wr.writerow(row)
    except OSError as e:
        raise RecordingError(f"cannot write the Live Link Face CSV {path}: {e.strerror or e}") from e
    return path


@dataclass(frozen=True)
class LiveLinkTrack:
    """A Live Link Face CSV read back (T rows).

    Attributes:
        columns: the header row.
        timecodes: (T,) the Timecode strings.
        t: (T,) float64 seconds parsed from the timecodes at the given fps.
        weights: (T, 52) float32 blendshapes in ARKit (Apple) order.
        angles: (T, 9) float64 the angle columns in file order and unit.
    """

    columns: tuple[str, ...]
    timecodes: tuple[str, ...]
    t: np.ndarray
    weights: np.ndarray
    angles: np.ndarray

    def column(self, name: str) -> np.ndarray:
        """(T,) values of one blendshape or angle column by its CSV name.

        Raises:
            InputError: no such column.
        """
        if name in LIVE_LINK_BLENDSHAPES:
            return self.weights[:, BLENDSHAPE_NAMES.index(name[0].lower() + name[1:])]
        if name in LIVE_LINK_ANGLES:
            return self.angles[:, LIVE_LINK_ANGLES.index(name)]
        raise InputError(f"Live Link Face CSV has no column {name!r}")


def read_live_link_csv(path: str | Path, fps: float = 30.0) -> LiveLinkTrack:
    """Read a Live Link Face CSV (ours or the app's).

    Blendshape columns are matched by name regardless of the case of the first
    letter; missing angle columns read as 0.

    Args:
        path: the ``.csv``.
        fps: the timecode frame rate, for :attr:`LiveLinkTrack.t`.

    Raises:
        InputError: missing file, missing Timecode or blendshape columns, or a
            malformed value.
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh))
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}", path) from e
    if not rows or not rows[0] or rows[0][0] != "Timecode":
        raise InputError(f"{path} is not a Live Link Face CSV (no Timecode column)", path)
    header = tuple(rows[0])
    lower = {h.lower(): i for i, h in enumerate(header)}
    missing = [n for n in BLENDSHAPE_NAMES if n.lower() not in lower]
    if missing:
        raise InputError(f"{path} lacks blendshape columns: {', '.join(missing[:5])}", path)
    body = [r for r in rows[1:] if r]
    try:
        w = np.array([[float(r[lower[n.lower()]]) for n in BLENDSHAPE_NAMES] for r in body],
                     np.float32).reshape(len(body), NUM_BLENDSHAPES)
        ang = np.array([[float(r[lower[a.lower()]]) if a.lower() in lower else 0.0
                         for a in LIVE_LINK_ANGLES] for r in body]).reshape(len(body), 9)
    except (ValueError, IndexError) as e:
        raise InputError(f"{path}: a row has a missing or malformed value ({e})", path) from e
    tcs = tuple(r[0] for r in body)
    t = np.array([parse_timecode(tc, fps) for tc in tcs])
    return LiveLinkTrack(header, tcs, t, w, ang)


# ---------------------------------------------------------------------------- glTF
def _continuous_quats(rots: Sequence[np.ndarray]) -> np.ndarray:
    q = np.array([quat_from_matrix(r) for r in rots])
    for i in range(1, len(q)):  # same hemisphere as the previous key: LINEAR (slerp) takes the short way
        if np.dot(q[i], q[i - 1]) < 0:
            q[i] = -q[i]
    return q.astype(np.float32)


def _decompose(m: np.ndarray) -> tuple[list[float], list[float]]:
    m = np.asarray(m, np.float64)
    return m[:3, 3].tolist(), quat_from_matrix(m[:3, :3]).tolist()


def _check_track(path: Path, t: np.ndarray, weights: np.ndarray, rotation, gaze) -> tuple[np.ndarray, np.ndarray]:
    """Validate a track for :func:`export_gltf_animation`; returns (times from 0 float32 (T,), weights (T, 52))."""
    if path.suffix.lower() not in (".glb", ".gltf"):
        if path.name.lower() in (".glb", ".gltf"):  # Path(".glb").suffix is "": a hidden file with no name
            raise InputError(f"glTF export needs a name before {path.name}; got just {path.name!r} ({path})")
        raise InputError(f"glTF export needs a .glb or .gltf file name; got {path.name!r}")
    t = np.asarray(t, np.float64).reshape(-1)
    n = len(t)
    w = np.asarray(weights, np.float32)
    if n == 0:
        raise InputError("cannot export an empty track")
    if w.shape != (n, NUM_BLENDSHAPES):
        raise InputError(f"weights must be ({n}, {NUM_BLENDSHAPES}); got {w.shape}")
    if rotation is not None and np.shape(rotation) != (n, 3, 3):
        raise InputError(f"rotations must be ({n}, 3, 3); got {np.shape(rotation)}")
    if gaze is not None and np.shape(gaze) != (n, 2):
        raise InputError(f"gaze must be ({n}, 2); got {np.shape(gaze)}")
    times = (t - t[0]).astype(np.float32)
    if n > 1 and not np.all(np.diff(times) > 0):
        raise InputError("glTF keyframe times must strictly increase")
    return times, w


def _gltf_material(m):
    """A pygltflib Material of an avatar material (colours only; textures are not written)."""
    import pygltflib

    if m.texture is not None:
        _log.warning("glTF export: the texture of '%s' is not written (colours only)", m.name)
    return pygltflib.Material(
        name=m.name, doubleSided=bool(m.double_sided), alphaMode=m.alpha_mode,
        alphaCutoff=float(m.alpha_cutoff) if m.alpha_mode == "MASK" else None,
        pbrMetallicRoughness=pygltflib.PbrMetallicRoughness(
            baseColorFactor=[float(c) for c in m.base_color], metallicFactor=0.0,
            roughnessFactor=float(m.roughness)))


def _gltf_targets(buf, p, names: tuple[str, ...], include_morph_normals: bool) -> list:
    """The morph targets of primitive ``p`` in ``names`` order (sparse where smaller, zeros where absent)."""
    import pygltflib

    targets = []
    zero = None
    for name in names:
        d = p.morph_targets.get(name)
        dn = p.morph_normals.get(name) if include_morph_normals else None
        if d is None:
            zero = zero if zero is not None else buf.zeros(p.num_vertices)
            targets.append(pygltflib.Attributes(POSITION=zero, NORMAL=zero if include_morph_normals else None))
            continue
        moved = np.abs(d).max(axis=1) > MORPH_EPS_M
        if dn is not None:
            moved |= np.abs(dn).max(axis=1) > MORPH_NORMAL_EPS
        rows = np.nonzero(moved)[0]
        ta = pygltflib.Attributes(POSITION=buf.morph(d, rows))
        if include_morph_normals:
            if dn is None:
                zero = zero if zero is not None else buf.zeros(p.num_vertices)
                ta.NORMAL = zero
            else:
                ta.NORMAL = buf.morph(dn, rows)
        targets.append(ta)
    return targets


def _gltf_primitives(g, buf, mesh, names: tuple[str, ...], include_morph_normals: bool) -> list:
    """Materials (appended to ``g``) and the primitives of ``mesh`` with their morph targets."""
    import pygltflib

    from avatar_app.avatar.authoring.gltf_buffer import ARRAY_BUFFER, ELEMENT_ARRAY_BUFFER

    prims = []
    for p in mesh.primitives:
        g.materials.append(_gltf_material(p.material))
        attrs = pygltflib.Attributes(
            POSITION=buf.accessor(np.asarray(p.positions, np.float32), target=ARRAY_BUFFER, minmax=True),
            NORMAL=buf.accessor(np.asarray(p.normals, np.float32), target=ARRAY_BUFFER))
        if p.colors is not None:
            attrs.COLOR_0 = buf.accessor(np.asarray(p.colors, np.float32), target=ARRAY_BUFFER)
        if p.uvs is not None:
            attrs.TEXCOORD_0 = buf.accessor(np.asarray(p.uvs, np.float32), target=ARRAY_BUFFER)
        if p.joints is not None and mesh.skeleton is not None:
            attrs.JOINTS_0 = buf.accessor(np.asarray(p.joints, np.uint16), target=ARRAY_BUFFER)
            attrs.WEIGHTS_0 = buf.accessor(np.asarray(p.weights, np.float32), target=ARRAY_BUFFER)
        idx = buf.accessor(np.asarray(p.indices, np.uint32).reshape(-1), target=ELEMENT_ARRAY_BUFFER)
        prims.append(pygltflib.Primitive(attributes=attrs, indices=idx, material=len(g.materials) - 1,
                                         targets=_gltf_targets(buf, p, names, include_morph_normals)))
    return prims


def _gltf_nodes(g, buf, mesh, rigid_head: bool) -> dict[str, int]:
    """Nodes: 0 = scene root, 1 = mesh node, then the joints (with a skin), or one "head" node
    above the mesh when ``rigid_head`` and the mesh has no skeleton. Returns joint name -> node."""
    import pygltflib

    g.nodes.append(pygltflib.Node(name=mesh.name, children=[1]))
    g.nodes.append(pygltflib.Node(name=f"{mesh.name} mesh", mesh=0))
    joint_node: dict[str, int] = {}
    skel = mesh.skeleton
    if skel is not None:
        first = len(g.nodes)
        for i, j in enumerate(skel.joints):
            tr, rq = _decompose(j.rest_local)
            g.nodes.append(pygltflib.Node(name=j.name, translation=tr, rotation=rq))
            joint_node[j.name] = first + i
            parent = g.nodes[0] if j.parent < 0 else g.nodes[first + j.parent]
            parent.children.append(first + i)
        ibm = np.stack([np.asarray(j.inverse_bind, np.float32).T for j in skel.joints])  # column-major
        g.skins.append(pygltflib.Skin(
            name="skeleton", joints=[joint_node[j.name] for j in skel.joints],
            inverseBindMatrices=buf.accessor(ibm.reshape(len(skel.joints), 16), kind="MAT4"),
            skeleton=joint_node[skel.joints[0].name]))
        g.nodes[1].skin = 0
    elif rigid_head:  # rigid avatar: turn the whole mesh
        g.nodes.append(pygltflib.Node(name="head", children=[1]))
        g.nodes[0].children = [len(g.nodes) - 1]
        joint_node["head"] = len(g.nodes) - 1
    g.scenes.append(pygltflib.Scene(name="avatar_app", nodes=[0]))
    return joint_node


def _gltf_animation(g, buf, mesh, joint_node: dict[str, int], times: np.ndarray, target_w: np.ndarray,
                    rotation, gaze, name: str) -> None:
    """The animation: morph weights of the mesh node, head (and neck) rotation, eye rotations (LINEAR)."""
    import pygltflib

    t_acc = buf.accessor(times, minmax=True)
    samplers, channels = [], []

    def channel(node: int, path_: str, values: np.ndarray, kind: str) -> None:
        samplers.append(pygltflib.AnimationSampler(input=t_acc, output=buf.accessor(values, kind=kind),
                                                   interpolation=pygltflib.ANIM_LINEAR))
        channels.append(pygltflib.AnimationChannel(
            sampler=len(samplers) - 1, target=pygltflib.AnimationChannelTarget(node=node, path=path_)))

    channel(1, "weights", target_w.reshape(-1), "SCALAR")
    if rotation is not None:
        rots = [np.asarray(r, np.float64) for r in rotation]
        head_name = getattr(mesh, "head_joint", None) or "head"
        neck_name = getattr(mesh, "neck_joint", None)
        if head_name in joint_node:
            if neck_name in joint_node:
                necks = [axis_angle_fraction(r, mesh.neck_share) for r in rots]
                channel(joint_node[neck_name], "rotation", _continuous_quats(necks), "VEC4")
                rots = [nk.T @ r for nk, r in zip(necks, rots)]
            channel(joint_node[head_name], "rotation", _continuous_quats(rots), "VEC4")
        else:
            _log.warning("glTF export: avatar '%s' has no head joint; head rotation not written", mesh.name)
    if gaze is not None and getattr(mesh, "gaze_joints", None):
        eyes = _continuous_quats([gaze_rotation(float(y), float(p)) for y, p in np.asarray(gaze)])
        for jn in mesh.gaze_joints:
            if jn in joint_node:
                channel(joint_node[jn], "rotation", eyes, "VEC4")
    g.animations.append(pygltflib.Animation(name=name, samplers=samplers, channels=channels))


def export_gltf_animation(path: str | Path, t: np.ndarray, weights: np.ndarray,
                          rotation: np.ndarray | None = None, gaze: np.ndarray | None = None, *,
                          mesh=None, include_morph_normals: bool = True,
                          animation_name: str = "avatar_app take") -> Path:
    """Write the avatar with an animation of its morph weights and head/eye rotations.

    Args:
        path: ``.glb`` (one binary file) or ``.gltf`` (JSON plus ``<name>.bin``).
        t: (T,) frame times, seconds (strictly increasing; shifted so the first is 0).
        weights: (T, 52) ARKit weights in [0, 1]; mapped to the mesh's morph
            targets by its blendshape table (``AvatarMesh.mapping_matrix``).
        rotation: (T, 3, 3) head rotations (camera space), or None (no rotation channels).
        gaze: (T, 2) eye (yaw, pitch) radians, or None (no eye channels).
        mesh: an :class:`~avatar_app.avatar.mesh.AvatarMesh` (or an object with the
            same attributes); None = the default head
            (:func:`avatar_app.avatar.default_head.build_default_head`).
        include_morph_normals: also store the targets' normal deltas (about
            twice the size, better shading in other tools).
        animation_name: name of the glTF animation.

    Returns:
        ``path`` as a Path.

    Raises:
        InputError: inconsistent shapes, times that do not increase, or a
            mesh without morph targets.
        RecordingError: the file cannot be written.
    """
    import pygltflib

    from avatar_app.avatar.authoring.gltf_buffer import GltfBuffer

    path = Path(path)
    times, w = _check_track(path, t, weights, rotation, gaze)
    if mesh is None:
        from avatar_app.avatar.default_head import build_default_head

        mesh = build_default_head()
    names = tuple(mesh.target_names)
    if not names:
        raise InputError(f"avatar '{mesh.name}' has no morph targets to animate")
    target_w = np.clip(w @ mesh.mapping_matrix(), 0.0, 1.0).astype(np.float32)  # (T, targets)

    g = pygltflib.GLTF2(asset=pygltflib.Asset(version="2.0", generator="avatar_app"))
    g.scene = 0
    buf = GltfBuffer(g)
    prims = _gltf_primitives(g, buf, mesh, names, include_morph_normals)
    g.meshes.append(pygltflib.Mesh(name=mesh.name, primitives=prims, weights=[0.0] * len(names),
                                   extras={"targetNames": list(names)}))
    joint_node = _gltf_nodes(g, buf, mesh, rigid_head=rotation is not None)
    _gltf_animation(g, buf, mesh, joint_node, times, target_w, rotation, gaze, animation_name)
    data = buf.finish()
    try:
        if path.suffix.lower() == ".glb":
            g.save_binary(str(path))
        else:
            bin_path = path.with_suffix(".bin")
            bin_path.write_bytes(data)
            g.set_binary_blob(None)
            g.buffers[0].uri = bin_path.name
            g.save_json(str(path))
    except OSError as e:
        raise RecordingError(f"cannot write the glTF animation {path}: {e.strerror or e}") from e
    _log.info("glTF animation %s: %d frames, %d morph targets, %.1f MB", path, len(times), len(names),
              len(data) / 1e6)
    return path


# ---------------------------------------------------------------------------- converter
def convert_sidecar(sidecar_path: str | Path, csv_path: str | Path | None = None,
                    gltf_path: str | Path | None = None, *, fps: float | None = None, mesh=None,
                    angle_unit: str = "rad") -> list[Path]:
    """Turn a recording's JSON Lines track into a Live Link Face CSV and/or a glTF animation.

    Args:
        sidecar_path: the ``.jsonl`` written by :class:`~avatar_app.record.sidecar.SidecarWriter`.
        csv_path: CSV to write, or None.
        gltf_path: ``.glb``/``.gltf`` to write, or None.
        fps: timecode rate for the CSV; default the track's fps, else 30.
        mesh: avatar for the glTF (default head when None).
        angle_unit: CSV angle unit, "rad" or "deg".

    Returns:
        The files written.

    Raises:
        InputError: unreadable track, nothing to write, or an empty track.
        RecordingError: a file cannot be written.
    """
    from avatar_app.record.sidecar import read_sidecar

    if csv_path is None and gltf_path is None:
        raise InputError("convert_sidecar: give a CSV path, a glTF path or both")
    track = read_sidecar(sidecar_path)
    if len(track) == 0:
        raise InputError(f"{sidecar_path} has no frames to convert", sidecar_path)
    if tuple(track.names) != BLENDSHAPE_NAMES:
        raise InputError(f"{sidecar_path}: blendshape names differ from the 52 ARKit names")
    out = []
    if csv_path is not None:
        rate = fps or track.fps or 30.0
        out.append(write_live_link_csv(csv_path, track.t - min(0.0, float(track.t[0])),
                                       track.blendshapes, track.rotation, track.gaze, fps=rate,
                                       angle_unit=angle_unit))
    if gltf_path is not None:
        out.append(export_gltf_animation(gltf_path, track.t, track.blendshapes, track.rotation,
                                         track.gaze, mesh=mesh))
    return out


def output_stem(sidecar: Path) -> str:
    """The name the converter's outputs get beside ``sidecar`` (``<stem>.csv``, ``<stem>.glb``).

    ``clip.blendshapes.jsonl`` -> ``clip``; the sidecar suffixes (``.jsonl``, then
    ``.blendshapes``) are taken off the end, so dot-names keep their name: the hidden part
    file a killed render leaves, ``.clip.part-123-ab12cd34.blendshapes.jsonl``, gives
    ``.clip.part-123-ab12cd34``, and ``take.2.blendshapes.jsonl`` gives ``take.2``.
    """
    name = sidecar.name
    for suffix in (".jsonl", ".blendshapes"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m avatar_app.record.tracks clip.blendshapes.jsonl [--csv X] [--gltf Y]``."""
    ap = argparse.ArgumentParser(prog="python -m avatar_app.record.tracks",
                                 description="Convert a blendshape track to Live Link Face CSV / glTF.")
    ap.add_argument("sidecar", type=Path)
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--gltf", type=Path, default=None)
    ap.add_argument("--fps", type=float, default=None)
    ap.add_argument("--degrees", action="store_true", help="CSV angles in degrees")
    a = ap.parse_args(argv)
    csv_p, gltf_p = a.csv, a.gltf
    if csv_p is None and gltf_p is None:
        stem = output_stem(a.sidecar)
        csv_p = a.sidecar.with_name(stem + ".csv")
        gltf_p = a.sidecar.with_name(stem + ".glb")
    try:
        for p in convert_sidecar(a.sidecar, csv_p, gltf_p, fps=a.fps,
                                 angle_unit="deg" if a.degrees else "rad"):
            sys.stdout.write(f"{p}\n")
    except (InputError, RecordingError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
