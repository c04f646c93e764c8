"""In-memory avatar: primitives, materials, morph targets, skeleton, blendshape mapping.

The layout follows glTF 2.0 (Khronos, "glTF 2.0 Specification", sections
"Meshes", "Morph Targets", "Skins", "Materials") so a glTF/VRM loader fills it
one-to-one:

- :class:`MeshPrimitive` = a glTF primitive: attributes POSITION, NORMAL,
  TEXCOORD_0, COLOR_0, JOINTS_0, WEIGHTS_0, triangle indices and morph targets
  (POSITION and NORMAL deltas), named per ``mesh.extras.targetNames``.
- :class:`Material` = ``pbrMetallicRoughness`` base colour (+ texture),
  roughness, ``alphaMode``, ``doubleSided``.
- :class:`Skeleton` = a glTF skin: joints with a parent hierarchy, rest local
  transforms and inverse bind matrices.

Coordinates: model space in metres, +Y up, the avatar faces +Z, its own left is
+X (glTF's convention). Weights are driven by the 52 ARKit names
(:data:`avatar_app.core.blendshapes.BLENDSHAPE_NAMES`) through a per-mesh table
(:attr:`AvatarMesh.blendshape_map`), so rigs whose targets carry other names
(VRM presets, "Fcl_EYE_Close", ...) plug in without code changes.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES
from avatar_app.core.errors import InputError

logger = logging.getLogger(__name__)

ALPHA_MODES = ("OPAQUE", "MASK", "BLEND")
#: Most joints one vertex may reference (glTF JOINTS_0 / WEIGHTS_0).
INFLUENCES = 4


@dataclass
class Material:
    """Surface appearance of one primitive (glTF metallic-roughness subset).

    Attributes:
        name: label for logs and the UI.
        base_color: linear RGBA in [0, 1] (glTF ``baseColorFactor``).
        roughness: 0 (mirror) .. 1 (matte), glTF ``roughnessFactor``.
        specular: strength of the specular highlight, 0 .. 1 (KHR_materials_specular
            ``specularFactor``).
        texture: optional (H, W, 4) uint8 sRGB RGBA base-colour image, top row first;
            multiplied with ``base_color`` and the vertex colours.
        alpha_mode: "OPAQUE", "MASK" or "BLEND" (glTF ``alphaMode``).
        alpha_cutoff: threshold for "MASK".
        double_sided: draw back faces too (glTF ``doubleSided``); back faces are shaded
            with :attr:`interior_color` so a view into the mouth or through a hole
            shows a dark interior instead of the background.
        interior_color: linear RGB of back faces of a double-sided material.
    """

    name: str = "material"
    base_color: tuple[float, float, float, float] = (0.8, 0.8, 0.8, 1.0)
    roughness: float = 0.6
    specular: float = 0.3
    texture: np.ndarray | None = None
    alpha_mode: str = "OPAQUE"
    alpha_cutoff: float = 0.5
    double_sided: bool = False
    interior_color: tuple[float, float, float] = (0.05, 0.012, 0.012)

    def validate(self) -> None:
        """Check value ranges.

        Raises:
            InputError: a value is out of range or the texture has the wrong shape/dtype.
        """
        if len(self.base_color) != 4:
            raise InputError(f"material '{self.name}': base_color needs 4 values (RGBA)")
        if self.alpha_mode not in ALPHA_MODES:
            raise InputError(
                f"material '{self.name}': alpha_mode {self.alpha_mode!r} is not one of {ALPHA_MODES}"
            )
        if not 0.0 <= self.roughness <= 1.0:
            raise InputError(f"material '{self.name}': roughness {self.roughness} not in [0, 1]")
        if self.texture is not None:
            t = self.texture
            if t.dtype != np.uint8 or t.ndim != 3 or t.shape[2] != 4:
                raise InputError(
                    f"material '{self.name}': texture must be (H, W, 4) uint8, "
                    f"got {t.shape} {t.dtype}"
                )


@dataclass
class MeshPrimitive:
    """One draw call: vertices, triangles, material, morph targets and skin weights.

    Attributes:
        name: label, e.g. "skin", "eye_L".
        positions: (V, 3) float32, model space, metres.
        normals: (V, 3) float32, unit length.
        indices: (F*3,) uint32 triangle list, counter-clockwise = front face.
        material: how the surface looks.
        uvs: optional (V, 2) float32 texture coordinates (glTF TEXCOORD_0, v down).
        colors: optional (V, 4) float32 linear RGBA vertex colours (glTF COLOR_0).
        morph_targets: target name -> (V, 3) float32 position deltas, metres.
        morph_normals: target name -> (V, 3) float32 normal deltas (optional per target).
        joints: optional (V, 4) uint16 joint indices into the avatar's
            :class:`Skeleton` (glTF JOINTS_0).
        weights: optional (V, 4) float32 skin weights summing to 1 (glTF WEIGHTS_0).
    """

    name: str
    positions: np.ndarray
    normals: np.ndarray
    indices: np.ndarray
    material: Material = field(default_factory=Material)
    uvs: np.ndarray | None = None
    colors: np.ndarray | None = None
    morph_targets: dict[str, np.ndarray] = field(default_factory=dict)
    morph_normals: dict[str, np.ndarray] = field(default_factory=dict)
    joints: np.ndarray | None = None
    weights: np.ndarray | None = None

    @property
    def num_vertices(self) -> int:
        """Number of vertices V."""
        return int(self.positions.shape[0])

    @property
    def num_triangles(self) -> int:
        """Number of triangles F."""
        return int(self.indices.shape[0] // 3)

    def validate(self, num_joints: int = 0) -> None:
        """Check shapes, dtypes and index ranges.

        Args:
            num_joints: joints in the avatar's skeleton (0 = no skeleton).

        Raises:
            InputError: naming the primitive and the offending array.
        """
        v = self.num_vertices
        where = f"avatar primitive '{self.name}'"

        def check(arr: np.ndarray | None, label: str, cols: int, dtype: type) -> None:
            if arr is None:
                return
            if arr.shape != (v, cols) or arr.dtype != dtype:
                raise InputError(
                    f"{where}: {label} must be ({v}, {cols}) {np.dtype(dtype).name}, "
                    f"got {arr.shape} {arr.dtype}"
                )
            if dtype == np.float32 and not np.all(np.isfinite(arr)):
                raise InputError(f"{where}: {label} contains NaN or infinity")

        if self.positions.ndim != 2 or self.positions.shape[1] != 3 or v == 0:
            raise InputError(f"{where}: positions must be (V, 3) with V > 0, got {self.positions.shape}")
        check(self.positions, "positions", 3, np.float32)
        check(self.normals, "normals", 3, np.float32)
        check(self.uvs, "uvs", 2, np.float32)
        check(self.colors, "colors", 4, np.float32)
        check(self.joints, "joints", INFLUENCES, np.uint16)
        check(self.weights, "weights", INFLUENCES, np.float32)
        if (self.joints is None) != (self.weights is None):
            raise InputError(f"{where}: joints and weights must be given together")
        if self.joints is not None:
            if num_joints == 0:
                raise InputError(f"{where}: has skin weights but the avatar has no skeleton")
            if int(self.joints.max()) >= num_joints:
                raise InputError(
                    f"{where}: joint index {int(self.joints.max())} >= {num_joints} joints"
                )
        idx = self.indices
        if idx.ndim != 1 or idx.dtype != np.uint32 or idx.size % 3 or idx.size == 0:
            raise InputError(
                f"{where}: indices must be a non-empty (F*3,) uint32 array, got {idx.shape} {idx.dtype}"
            )
        if int(idx.max()) >= v:
            raise InputError(f"{where}: index {int(idx.max())} out of range for {v} vertices")
        for name, d in self.morph_targets.items():
            check(d, f"morph target '{name}'", 3, np.float32)
        for name, d in self.morph_normals.items():
            if name not in self.morph_targets:
                raise InputError(f"{where}: normal deltas for unknown morph target '{name}'")
            check(d, f"morph normals '{name}'", 3, np.float32)
        self.material.validate()


@dataclass
class Joint:
    """One joint (glTF node used by a skin).

    Attributes:
        name: unique joint name, e.g. "head", "eye_L".
        parent: index of the parent joint in :attr:`Skeleton.joints`, -1 for a root.
            Parents come before their children.
        rest_local: (4, 4) float32 transform relative to the parent at rest (the
            node's TRS), column vectors (``p_parent = rest_local @ p_local``).
        inverse_bind: (4, 4) float32 inverse bind matrix (model space -> joint space
            at bind time), glTF ``inverseBindMatrices``.
    """

    name: str
    parent: int
    rest_local: np.ndarray
    inverse_bind: np.ndarray


@dataclass
class Skeleton:
    """Joint hierarchy of a skinned avatar.

    Posing is expressed as model-space rotations about each joint's rest position,
    so callers (head pose, gaze) never need a rig's local joint axes.
    """

    joints: list[Joint]

    def __post_init__(self) -> None:
        self._rest_world = self._compose([j.rest_local for j in self.joints])
        self._out = np.empty((len(self.joints), 4, 4), np.float32)

    def __len__(self) -> int:
        return len(self.joints)

    def index(self, name: str) -> int:
        """Index of the joint called ``name``.

        Raises:
            InputError: no joint has that name.
        """
        for i, j in enumerate(self.joints):
            if j.name == name:
                return i
        raise InputError(f"skeleton has no joint named '{name}' (has {[j.name for j in self.joints]})")

    def validate(self) -> None:
        """Check the hierarchy and matrix shapes.

        Raises:
            InputError: a parent index is not earlier in the list or a matrix is not (4, 4).
        """
        names = set()
        for i, j in enumerate(self.joints):
            if not -1 <= j.parent < i:
                raise InputError(f"joint '{j.name}': parent {j.parent} must come before it (index {i})")
            for m, label in ((j.rest_local, "rest_local"), (j.inverse_bind, "inverse_bind")):
                if np.asarray(m).shape != (4, 4):
                    raise InputError(f"joint '{j.name}': {label} must be (4, 4)")
            if j.name in names:
                raise InputError(f"joint name '{j.name}' appears twice")
            names.add(j.name)

    def _compose(self, local: Sequence[np.ndarray]) -> np.ndarray:
        world = np.empty((len(self.joints), 4, 4), np.float64)
        for i, j in enumerate(self.joints):
            world[i] = local[i] if j.parent < 0 else world[j.parent] @ local[i]
        return world

    @property
    def rest_world(self) -> np.ndarray:
        """(J, 4, 4) float64 model-space joint transforms at rest."""
        return self._rest_world

    def joint_position(self, index: int) -> np.ndarray:
        """(3,) float64 rest position of joint ``index`` in model space, metres."""
        return self._rest_world[index, :3, 3].copy()

    def skin_matrices(self, rotations: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Skinning matrices for a pose.

        Each joint j gets a model-space delta ``D_j = D_parent(j) @ T(c_j) Q_j T(-c_j)``
        where ``c_j`` is its rest position and ``Q_j`` the given rotation (identity when
        absent); the skinning matrix is ``D_j @ rest_world_j @ inverse_bind_j``
        (linear blend skinning, glTF 2.0 "Skins").

        Args:
            rotations: joint index -> (3, 3) model-space rotation about that joint.

        Returns:
            (J, 4, 4) float32 skinning matrices, column-vector convention. The array
            is reused by the next call: copy it to keep it.
        """
        rotations = rotations or {}
        deltas = np.empty((len(self.joints), 4, 4), np.float64)
        for i, j in enumerate(self.joints):
            q = rotations.get(i)
            if q is None:
                d = np.eye(4)
            else:
                c = self._rest_world[i, :3, 3]
                d = np.eye(4)
                d[:3, :3] = q
                d[:3, 3] = c - q @ c
            deltas[i] = d if j.parent < 0 else deltas[j.parent] @ d
            self._out[i] = deltas[i] @ self._rest_world[i] @ j.inverse_bind
        return self._out


@dataclass
class AvatarMesh:
    """A renderable avatar: primitives, optional skeleton and the ARKit mapping.

    Attributes:
        name: label for logs and the UI.
        primitives: the draw calls, drawn in order (opaque first, then BLEND ones).
        skeleton: joints referenced by the primitives' ``joints`` (None = rigid).
        blendshape_map: ARKit name -> {morph target name: factor}. A target's
            weight is ``clip(sum(factor * arkit_weight), 0, 1)``; by default every
            target named like an ARKit blendshape is driven by it with factor 1.
        head_joint: joint turned by the head rotation (None = rotate nothing).
        neck_joint: optional joint between the neck base and the head that takes
            :attr:`neck_share` of the head rotation, so the neck bends smoothly.
        neck_share: fraction (0..1) of the head rotation angle given to
            ``neck_joint``; the head joint gets the rest.
        gaze_joints: (left eye, right eye) joint names turned by the gaze, or None.
        view_center: (3,) float32 model-space point the camera centres on, metres
            (None = centre of the bounding box).
        view_height_m: height of the model-space slab the camera shows around
            ``view_center`` (None = 1.15 x the bounding-box height).
    """

    name: str
    primitives: list[MeshPrimitive]
    skeleton: Skeleton | None = None
    blendshape_map: dict[str, dict[str, float]] = field(default_factory=dict)
    head_joint: str | None = None
    neck_joint: str | None = None
    neck_share: float = 0.35
    gaze_joints: tuple[str, str] | None = None
    view_center: np.ndarray | None = None
    view_height_m: float | None = None

    def __post_init__(self) -> None:
        if not self.blendshape_map:
            self.blendshape_map = {n: {n: 1.0} for n in BLENDSHAPE_NAMES if n in self.target_names}

    @property
    def target_names(self) -> tuple[str, ...]:
        """All morph target names over the primitives, in first-seen order."""
        seen: dict[str, None] = {}
        for p in self.primitives:
            for n in p.morph_targets:
                seen.setdefault(n, None)
        return tuple(seen)

    @property
    def num_vertices(self) -> int:
        """Total vertex count over all primitives."""
        return sum(p.num_vertices for p in self.primitives)

    @property
    def num_triangles(self) -> int:
        """Total triangle count over all primitives."""
        return sum(p.num_triangles for p in self.primitives)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Rest-pose bounding box: ((3,) min, (3,) max) float32, metres."""
        lo = np.min([p.positions.min(axis=0) for p in self.primitives], axis=0)
        hi = np.max([p.positions.max(axis=0) for p in self.primitives], axis=0)
        return lo.astype(np.float32), hi.astype(np.float32)

    def mapping_matrix(self) -> np.ndarray:
        """The blendshape table as a matrix.

        Returns:
            (52, T) float32 ``M`` with target weights ``clip(arkit @ M, 0, 1)``; T =
            ``len(target_names)``, columns in :attr:`target_names` order.

        Raises:
            InputError: the table names an unknown ARKit blendshape or morph target.
        """
        names = self.target_names
        col = {n: i for i, n in enumerate(names)}
        m = np.zeros((NUM_BLENDSHAPES, len(names)), np.float32)
        for arkit, targets in self.blendshape_map.items():
            if arkit not in BLENDSHAPE_NAMES:
                raise InputError(f"avatar '{self.name}': blendshape map names unknown ARKit shape '{arkit}'")
            for tname, factor in targets.items():
                if tname not in col:
                    raise InputError(
                        f"avatar '{self.name}': blendshape map sends '{arkit}' to missing target '{tname}'"
                    )
                m[BLENDSHAPE_NAMES.index(arkit), col[tname]] += float(factor)
        return m

    def validate(self) -> None:
        """Check every primitive, the skeleton and the joint names.

        Raises:
            InputError: naming what is wrong.
        """
        if not self.primitives:
            raise InputError(f"avatar '{self.name}' has no primitives")
        nj = 0
        if self.skeleton is not None:
            self.skeleton.validate()
            nj = len(self.skeleton)
        for p in self.primitives:
            p.validate(nj)
        for jn in (self.head_joint, self.neck_joint, *(self.gaze_joints or ())):
            if jn is not None:
                if self.skeleton is None:
                    raise InputError(f"avatar '{self.name}' names joint '{jn}' but has no skeleton")
                self.skeleton.index(jn)
        if not 0.0 <= self.neck_share <= 1.0:
            raise InputError(f"avatar '{self.name}': neck_share {self.neck_share} not in [0, 1]")
        self.mapping_matrix()


def compute_normals(positions: np.ndarray, indices: np.ndarray, weld: bool = True) -> np.ndarray:
    """Smooth vertex normals: area-weighted sum of face normals.

    Args:
        positions: (V, 3) float32/float64 vertex positions.
        indices: (F*3,) integer triangle list, counter-clockwise front faces.
        weld: average normals of vertices at the same position (rounded to 1e-6 m,
            positions within +-1 m), so seams of duplicated vertices shade smoothly.

    Returns:
        (V, 3) float32 unit normals (+Y for vertices of zero-area faces only).
    """
    p = np.asarray(positions, np.float64)
    tri = np.asarray(indices, np.int64).reshape(-1, 3)
    fn = np.cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]])
    n = np.zeros_like(p)
    for k in range(3):
        for c in range(3):
            n[:, c] += np.bincount(tri[:, k], weights=fn[:, c], minlength=len(p))
    if weld:
        q = np.round(p * 1e6).astype(np.int64) + (1 << 20)  # micrometres, offset to >= 0 within +-1 m
        key = (q[:, 0] << 42) | (q[:, 1] << 21) | q[:, 2]
        _, inv = np.unique(key, return_inverse=True)
        summed = np.zeros((inv.max() + 1, 3))
        for c in range(3):
            summed[:, c] = np.bincount(inv, weights=n[:, c])
        n = summed[inv]
    length = np.linalg.norm(n, axis=1, keepdims=True)
    out = np.where(length > 1e-20, n / np.maximum(length, 1e-20), np.array([0.0, 1.0, 0.0]))
    return out.astype(np.float32)
