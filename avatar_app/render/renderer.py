"""OpenGL 3.3 core renderer of an :class:`~avatar_app.avatar.mesh.AvatarMesh` (moderngl).

Works in whatever context is current: a QOpenGLWidget's (create it with
``moderngl.create_context()`` inside ``initializeGL``) or a headless EGL one
(:mod:`avatar_app.render.headless`).

Per frame only uniforms change: morph target weights, joint matrices, camera and
lights. Morph deltas live in one float texture, stored sparsely
(:mod:`avatar_app.render.morph_table`): every vertex carries (first entry, count)
of the (target, delta) pairs that move it, so the vertex shader's work is
proportional to the pairs that exist rather than to vertices x targets. Skinning
is linear blend skinning in the vertex shader (glTF 2.0 "Skins").

Conventions: the virtual camera looks down -Z at the avatar, which faces +Z, so
the avatar's left (+X) appears on the image's right. ``AvatarState.rotation``
(camera space, right-handed, -Z forward) is applied to the head as it is: the
avatar turns the way the user does, as seen by a non-mirrored camera.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Union

import moderngl
import numpy as np

from avatar_app.avatar.mesh import AvatarMesh
from avatar_app.core.blendshapes import NUM_BLENDSHAPES
from avatar_app.core.errors import BackendUnavailableError, InputError
from avatar_app.core.rotations import axis_angle_fraction, gaze_rotation, nearest_rotation
from avatar_app.core.types import AvatarState
from avatar_app.render.morph_table import TEXTURE_WIDTH, build_morph_table
from avatar_app.resources import resource_path

logger = logging.getLogger(__name__)

#: OBS-style chroma green, sRGB bytes.
CHROMA_GREEN: tuple[int, int, int] = (0, 177, 64)
#: Value of ``background`` that gives a transparent output (alpha 0 outside the avatar).
TRANSPARENT = "transparent"
#: MSAA sample counts the settings offer.
MSAA_CHOICES = (0, 2, 4, 8)
#: Must match MAX_TARGETS / MAX_JOINTS / MORPH_WIDTH_LOG2 in assets/shaders/avatar.vert.
MAX_TARGETS = 256
MAX_JOINTS = 64

#: Depth range kept in front of / behind the view centre at least (metres).
_NEAR_MARGIN_M = 0.35
_FAR_MARGIN_M = 0.6

Background = Union[tuple[int, int, int], tuple[int, int, int, int], str]


@dataclass(frozen=True)
class Lighting:
    """A light rig in view space (camera at the origin looking down -Z).

    Attributes:
        key_dir, fill_dir, rim_dir: (x, y, z) directions toward each light (normalised on use).
        key_color, fill_color, rim_color: linear RGB intensities.
        sky_color, ground_color: hemisphere ambient (normal up / down), linear RGB.
        wrap: wrapped-Lambert softness, 0 (hard) .. 1 (very soft).
    """

    key_dir: tuple[float, float, float]
    key_color: tuple[float, float, float]
    fill_dir: tuple[float, float, float]
    fill_color: tuple[float, float, float]
    rim_dir: tuple[float, float, float]
    rim_color: tuple[float, float, float]
    sky_color: tuple[float, float, float]
    ground_color: tuple[float, float, float]
    wrap: float = 0.3


#: Lighting presets by name. "studio": warm key upper left, cool fill right, rim from
#: behind; "soft": low contrast; "flat": almost shadowless (best for tracking tests).
LIGHTING_PRESETS: dict[str, Lighting] = {
    "studio": Lighting(
        key_dir=(-0.55, 0.55, 0.65), key_color=(1.05, 0.98, 0.90),
        fill_dir=(0.75, 0.05, 0.65), fill_color=(0.30, 0.33, 0.40),
        rim_dir=(0.3, 0.6, -0.75), rim_color=(0.55, 0.55, 0.6),
        sky_color=(0.22, 0.23, 0.26), ground_color=(0.10, 0.08, 0.07), wrap=0.35,
    ),
    "soft": Lighting(
        key_dir=(-0.3, 0.45, 0.85), key_color=(0.80, 0.78, 0.74),
        fill_dir=(0.6, 0.1, 0.8), fill_color=(0.42, 0.43, 0.46),
        rim_dir=(0.0, 0.5, -0.85), rim_color=(0.30, 0.30, 0.32),
        sky_color=(0.30, 0.30, 0.32), ground_color=(0.16, 0.14, 0.13), wrap=0.5,
    ),
    "flat": Lighting(
        key_dir=(0.0, 0.2, 1.0), key_color=(0.55, 0.55, 0.55),
        fill_dir=(0.0, -0.2, 1.0), fill_color=(0.25, 0.25, 0.25),
        rim_dir=(0.0, 0.0, -1.0), rim_color=(0.0, 0.0, 0.0),
        sky_color=(0.45, 0.45, 0.45), ground_color=(0.40, 0.40, 0.40), wrap=0.6,
    ),
}

_ALPHA_CODES = {"OPAQUE": 0, "MASK": 1, "BLEND": 2}


def _read_shader(name: str) -> str:
    path = resource_path(f"assets/shaders/{name}")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"shader file {path} cannot be read: {exc}", path=path) from exc


def _normalise_background(background: Background) -> tuple[float, float, float, float]:
    """Validated clear colour: (r, g, b, a) floats in [0, 1]."""
    if isinstance(background, str):
        if background != TRANSPARENT:
            raise InputError(f"background must be an (R, G, B) tuple or '{TRANSPARENT}', got {background!r}")
        return (0.0, 0.0, 0.0, 0.0)
    vals = tuple(background)
    if len(vals) not in (3, 4) or not all(isinstance(v, (int, np.integer)) and 0 <= v <= 255 for v in vals):
        raise InputError(f"background must be 3 or 4 integers in 0..255, got {background!r}")
    r, g, b = (v / 255.0 for v in vals[:3])
    a = vals[3] / 255.0 if len(vals) == 4 else 1.0
    return (r, g, b, a)


def perspective(fovy_rad: float, aspect: float, near: float, far: float) -> np.ndarray:
    """OpenGL perspective projection (gluPerspective), (4, 4) float64, column vectors."""
    f = 1.0 / math.tan(fovy_rad / 2.0)
    m = np.zeros((4, 4))
    m[0, 0] = f / aspect
    m[1, 1] = f
    m[2, 2] = (far + near) / (near - far)
    m[2, 3] = 2.0 * far * near / (near - far)
    m[3, 2] = -1.0
    return m


def _variant(prim) -> tuple[str, ...]:
    """Shader #defines a primitive needs (see assets/shaders/avatar.frag)."""
    m = prim.material
    defines = []
    if m.texture is not None and prim.uvs is not None:
        defines.append("TEXTURED")
    if m.alpha_mode == "MASK":
        defines.append("ALPHA_MASK")
    if m.double_sided:
        defines.append("DOUBLE_SIDED")
        if m.interior_color is None:  # loaded avatars: back faces lit like the front (hair, cloth)
            defines.append("BACK_LIT")
    return tuple(defines)


class _Program:
    """A compiled program with its uniforms looked up once (absent ones are ignored)."""

    def __init__(self, ctx: moderngl.Context, vertex: str, fragment: str):
        self.prog = ctx.program(vertex_shader=vertex, fragment_shader=fragment)
        self.uniforms = {name: self.prog[name] for name in self.prog}

    def set(self, name: str, value) -> None:
        u = self.uniforms.get(name)
        if u is not None:
            u.value = value

    def write(self, name: str, array: np.ndarray) -> None:
        u = self.uniforms.get(name)
        if u is not None:
            u.write(array.tobytes())

    def release(self) -> None:
        self.prog.release()


class _GpuPrimitive:
    """GPU resources of one primitive."""

    def __init__(self, ctx: moderngl.Context, program: _Program, prim, morph_range: np.ndarray,
                 skinned: bool):
        self.program = program
        prog = program.prog
        v = prim.num_vertices
        data = np.zeros((v, 20), np.float32)
        data[:, 0:3] = prim.positions
        data[:, 3:6] = prim.normals
        data[:, 6:10] = prim.colors if prim.colors is not None else 1.0
        if prim.uvs is not None:
            data[:, 10:12] = prim.uvs
        if prim.joints is not None:
            data[:, 12:16] = prim.joints.astype(np.float32)
            data[:, 16:20] = prim.weights
        else:
            data[:, 16] = 1.0
        self.vbo = ctx.buffer(data.tobytes())
        self.ibo = ctx.buffer(prim.indices.astype(np.uint32).tobytes())
        self.index_count = int(np.asarray(prim.indices).size)
        self.morph_vbo = ctx.buffer(np.ascontiguousarray(morph_range, np.int32).tobytes())
        self.vao = ctx.vertex_array(
            prog,
            [(self.vbo, "3f 3f 4f 2f 4f 4f", "in_position", "in_normal", "in_color", "in_uv",
              "in_joints", "in_weights"),
             (self.morph_vbo, "2i", "in_morph")],
            index_buffer=self.ibo,
            index_element_size=4,
            skip_errors=True,  # attributes the compiler dropped are fine
        )
        m = prim.material
        self.material = m
        # Blinn-Phong exponent from roughness (Karis' alpha = roughness^2 mapping,
        # s = 2 / alpha^2 - 2) and the energy normalisation (s + 8) / (8 pi).
        alpha = max(m.roughness, 0.02) ** 2
        self.shininess = float(np.clip(2.0 / alpha ** 2 - 2.0, 2.0, 2048.0))
        self.spec_scale = float(m.specular * 0.25 * (self.shininess + 8.0) / (8.0 * math.pi))
        self.rim_scale = float(0.3 + 0.7 * min(m.specular * 4.0, 1.0))
        self.skinned = skinned and prim.joints is not None
        self.alpha_code = _ALPHA_CODES[m.alpha_mode]
        self.texture = None
        if m.texture is not None and prim.uvs is not None:
            h, w = m.texture.shape[:2]
            self.texture = ctx.texture((w, h), 4, np.ascontiguousarray(m.texture).tobytes())
            self.texture.build_mipmaps()
            self.texture.filter = (moderngl.LINEAR_MIPMAP_LINEAR, moderngl.LINEAR)

    def release(self) -> None:
        for obj in (self.vao, self.vbo, self.ibo, self.morph_vbo, self.texture):
            if obj is not None:
                obj.release()


class Renderer:
    """Draws an avatar for an :class:`AvatarState` into a framebuffer.

    Thread: use it only on the thread where its GL context is current (the GUI
    thread for a QOpenGLWidget).

    Args:
        ctx: a moderngl context, OpenGL 3.3 core or newer.
        msaa: multisample count, one of 0, 2, 4, 8 (0 = off). Counts above what the
            driver offers are lowered to its maximum (logged). Software OpenGL
            (llvmpipe) pays roughly per sample, so the default is 0.
        background: (R, G, B) or (R, G, B, A) sRGB bytes (default chroma green
            (0, 177, 64)), or ``"transparent"`` (alpha 0 around the avatar, straight
            (not premultiplied) alpha in the output).
        lighting: a name from :data:`LIGHTING_PRESETS` or a :class:`Lighting`.
        fovy_deg: vertical field of view of the virtual camera, degrees.
        draw_elements: ``draw(program_glo, vao_glo, index_count)`` issuing the avatar's draw
            calls without the GIL (:func:`~avatar_app.render.context.gil_free_draw`, for a
            context of :func:`~avatar_app.render.context.create_context`), or None.

    Raises:
        BackendUnavailableError: the context is older than OpenGL 3.3.
        InputError: a setting is invalid or a shader file is missing.
    """

    def __init__(
        self,
        ctx: moderngl.Context,
        *,
        msaa: int = 0,
        background: Background = CHROMA_GREEN,
        lighting: str | Lighting = "studio",
        fovy_deg: float = 22.0,
        draw_elements=None,
    ):
        if ctx.version_code < 330:
            raise BackendUnavailableError(
                f"OpenGL 3.3 is not available: the context offers {ctx.version_code // 100}."
                f"{ctx.version_code % 100 // 10} ({ctx.info.get('GL_RENDERER', '?')})"
            )
        self.ctx = ctx
        #: ``draw(program_glo, vao_glo, index_count)`` for the avatar's triangles without the GIL
        #: (:func:`avatar_app.render.context.gil_free_draw`), or None: ``VertexArray.render``.
        self.draw_elements = draw_elements
        self._sources = (_read_shader("avatar.vert"), _read_shader("avatar.frag"))
        self._programs: dict[tuple[str, ...], _Program] = {}
        try:
            self._program(())
            self._blit_prog = ctx.program(vertex_shader=_read_shader("blit.vert"),
                                          fragment_shader=_read_shader("blit.frag"))
        except moderngl.Error as exc:
            raise BackendUnavailableError(f"OpenGL shaders failed to compile: {exc}") from exc
        self._blit_vao = ctx.vertex_array(self._blit_prog, [])
        self._uniform_set("u_morph", 0)
        self._uniform_set("u_texture", 1)
        self._blit_prog["u_image"].value = 0
        self._target_w = np.zeros(MAX_TARGETS, np.float32)
        self._joint_buf = np.zeros((MAX_JOINTS, 4, 4), np.float32)
        self._joint_buf[:] = np.eye(4, dtype=np.float32)
        self._prims: list[_GpuPrimitive] = []
        self._morph_tex: moderngl.Texture | None = None
        self._avatar: AvatarMesh | None = None
        self._head_points = np.zeros((0, 3))  # model-space vertices of the head (head_rect)
        self._head_rects: dict[tuple[int, int], tuple[float, float, float, float] | None] = {}
        self._map = np.zeros((NUM_BLENDSHAPES, 0), np.float32)
        self._msaa_fbo: moderngl.Framebuffer | None = None
        self._resolve_fbo: moderngl.Framebuffer | None = None
        self.fovy_deg = float(fovy_deg)
        self._camera_key: tuple | None = None
        #: Number of morph targets with a non-zero weight in the last frame.
        self.last_active_targets = 0
        #: Number of (vertex, target) deltas of the current avatar.
        self.morph_entries = 0
        self.msaa = msaa
        self.background = background
        self.lighting = lighting

    # ------------------------------------------------------------------ settings
    @property
    def msaa(self) -> int:
        """Effective multisample count (0 = off)."""
        return self._msaa

    @msaa.setter
    def msaa(self, samples: int) -> None:
        if samples not in MSAA_CHOICES:
            raise InputError(f"MSAA must be one of {MSAA_CHOICES}, got {samples!r}")
        max_samples = int(self.ctx.max_samples)
        if samples > max_samples:
            logger.warning("MSAA %dx not offered by this OpenGL driver; using %dx", samples, max_samples)
            samples = max_samples if max_samples >= 2 else 0
        self._msaa = samples
        self._release_targets()

    @property
    def background(self) -> Background:
        """The background setting as given (RGB(A) bytes or ``"transparent"``)."""
        return self._background

    @background.setter
    def background(self, value: Background) -> None:
        self._clear = _normalise_background(value)
        self._background = value
        self._transparent = isinstance(value, str)

    @property
    def transparent(self) -> bool:
        """Whether the background is transparent."""
        return self._transparent

    @property
    def lighting(self) -> Lighting:
        """The active light rig."""
        return self._lighting

    @lighting.setter
    def lighting(self, value: str | Lighting) -> None:
        if isinstance(value, str):
            if value not in LIGHTING_PRESETS:
                raise InputError(f"unknown lighting preset {value!r}; choose from {sorted(LIGHTING_PRESETS)}")
            value = LIGHTING_PRESETS[value]
        self._lighting = value
        for name in ("key", "fill", "rim"):
            d = np.asarray(getattr(value, f"{name}_dir"), np.float64)
            self._uniform_set(f"u_{name}_dir", tuple(d / np.linalg.norm(d)))
            self._uniform_set(f"u_{name}_color", tuple(getattr(value, f"{name}_color")))
        key = np.asarray(value.key_dir, np.float64)
        half = key / np.linalg.norm(key) + [0.0, 0.0, 1.0]
        self._uniform_set("u_key_half", tuple(half / np.linalg.norm(half)))
        self._uniform_set("u_sky_color", tuple(value.sky_color))
        self._uniform_set("u_ground_color", tuple(value.ground_color))
        self._uniform_set("u_wrap", float(value.wrap))

    @property
    def avatar(self) -> AvatarMesh | None:
        """The avatar being drawn."""
        return self._avatar

    # ------------------------------------------------------------------ avatar
    def set_avatar(self, mesh: AvatarMesh) -> None:
        """Upload an avatar (replaces the previous one).

        Args:
            mesh: the avatar; validated first.

        Raises:
            InputError: the mesh is invalid, has more than 64 joints, or its morph
                data does not fit in one texture.
        """
        mesh.validate()
        skel = mesh.skeleton
        if skel is not None and len(skel) > MAX_JOINTS:
            raise InputError(f"avatar '{mesh.name}' has {len(skel)} joints; the renderer supports {MAX_JOINTS}")
        names = mesh.target_names
        if len(names) > MAX_TARGETS:
            raise InputError(f"avatar '{mesh.name}' has {len(names)} morph targets; "
                             f"the renderer supports {MAX_TARGETS}")
        table = build_morph_table(mesh.primitives, names)
        if table.height > int(self.ctx.info.get("GL_MAX_TEXTURE_SIZE", 16384)):
            raise InputError(f"avatar '{mesh.name}': {table.count} morph deltas are too many for one texture")
        ranges, count = table.ranges, table.count

        self._release_avatar()
        self._morph_tex = self.ctx.texture((TEXTURE_WIDTH, table.height), 4, table.texels.tobytes(), dtype="f4")
        self._morph_tex.filter = (moderngl.NEAREST, moderngl.NEAREST)
        self._morph_tex.repeat_x = self._morph_tex.repeat_y = False
        order = sorted(range(len(mesh.primitives)), key=lambda i: mesh.primitives[i].material.alpha_mode == "BLEND")
        self._prims = [
            _GpuPrimitive(self.ctx, self._program(_variant(mesh.primitives[i])), mesh.primitives[i], ranges[i],
                          skel is not None)
            for i in order
        ]
        self._refresh_uniforms()
        self._camera_key = None
        self.morph_entries = count
        self._avatar = mesh
        self._map = mesh.mapping_matrix()
        self._head = skel.index(mesh.head_joint) if skel is not None and mesh.head_joint else None
        self._neck = skel.index(mesh.neck_joint) if skel is not None and mesh.neck_joint else None
        self._eyes = tuple(skel.index(n) for n in mesh.gaze_joints) if skel is not None and mesh.gaze_joints else ()
        lo, hi = mesh.bounds()
        self._view_center = (np.asarray(mesh.view_center, np.float64) if mesh.view_center is not None
                             else (lo + hi) / 2.0)
        self._view_height = float(mesh.view_height_m or 1.15 * (hi[1] - lo[1]))
        # the head: what lies above a fifth of the framed height below the view centre (the chin)
        floor = self._view_center[1] - 0.2 * self._view_height
        head = [p.positions[p.positions[:, 1] >= floor] for p in mesh.primitives]
        head = [h for h in head if len(h)]
        self._head_points = np.concatenate(head).astype(np.float64) if head else np.zeros((0, 3))
        self._head_rects = {}
        # Depth range: at least 0.35 m in front of / 0.6 m behind the view centre (a head),
        # more for avatars whose horizontal radius about the centre is larger (a full body
        # framed at its head, wide clothes), so turning never pushes them past the planes.
        reach = 0.05 + max(float(np.hypot(p.positions[:, 0] - self._view_center[0],
                                          p.positions[:, 2] - self._view_center[2]).max())
                           for p in mesh.primitives)
        self._depth_front = max(_NEAR_MARGIN_M, reach)
        self._depth_back = max(_FAR_MARGIN_M, reach)
        logger.info("avatar '%s' uploaded: %d primitives, %d vertices, %d triangles, %d morph targets, "
                    "%d morph deltas", mesh.name, len(self._prims), mesh.num_vertices, mesh.num_triangles,
                    len(names), count)

    # ------------------------------------------------------------------ frame
    def render(
        self,
        state: AvatarState,
        width: int,
        height: int,
        fbo: moderngl.Framebuffer | None = None,
        *,
        flip_y: bool = False,
    ) -> None:
        """Draw one frame.

        Args:
            state: weights (52,) in [0, 1], head rotation (3, 3) camera space, gaze
                (yaw, pitch) radians. The translation is ignored: the head stays
                centred. Non-finite values are replaced (neutral/identity).
            width, height: size of the drawable in pixels.
            fbo: target framebuffer; None = the one bound now (a QOpenGLWidget's).
            flip_y: draw upside down, so a ``read()`` of the framebuffer is top row
                first (what image consumers expect) without a copy.

        Raises:
            InputError: no avatar was set or the size is not positive.
        """
        if self._avatar is None:
            raise InputError("Renderer.render called before set_avatar")
        if width <= 0 or height <= 0:
            raise InputError(f"render size must be positive, got {width}x{height}")
        ctx = self.ctx
        target = fbo if fbo is not None else self._current_framebuffer()

        self._update_weights(state.weights)
        self._update_joints(state)
        self._update_camera(width, height, flip_y)

        if self._msaa:
            draw_fbo = self._ensure_msaa(width, height)
        else:
            draw_fbo = target
        draw_fbo.use()
        draw_fbo.viewport = (0, 0, width, height)
        ctx.viewport = (0, 0, width, height)
        draw_fbo.clear(*self._clear, depth=1.0, viewport=(0, 0, width, height))
        ctx.front_face = "cw" if flip_y else "ccw"
        self._draw_primitives()

        if self._msaa:
            if not self._transparent and tuple(target.size) == (width, height):
                ctx.copy_framebuffer(target, draw_fbo)
            else:
                ctx.copy_framebuffer(self._resolve_fbo, draw_fbo)
                target.use()
                ctx.viewport = (0, 0, width, height)
                ctx.disable(moderngl.DEPTH_TEST | moderngl.CULL_FACE | moderngl.BLEND)
                self._resolve_fbo.color_attachments[0].use(0)
                self._blit_prog["u_unpremultiply"].value = self._transparent
                self._blit_vao.render(moderngl.TRIANGLES, vertices=3)
        target.use()

    def _draw_primitives(self) -> None:
        ctx = self.ctx
        if self._morph_tex is not None:
            self._morph_tex.use(0)
        for gp in self._prims:
            m = gp.material
            flags = moderngl.DEPTH_TEST
            if not m.double_sided:
                flags |= moderngl.CULL_FACE
            if gp.alpha_code == 2:
                flags |= moderngl.BLEND
                ctx.blend_func = (moderngl.SRC_ALPHA, moderngl.ONE_MINUS_SRC_ALPHA,
                                  moderngl.ONE, moderngl.ONE_MINUS_SRC_ALPHA)
            ctx.enable_only(flags)
            ctx.depth_mask = gp.alpha_code != 2
            pr = gp.program
            pr.set("u_skinned", gp.skinned)
            pr.set("u_base_color", tuple(m.base_color))
            pr.set("u_shininess", gp.shininess)
            pr.set("u_spec_scale", gp.spec_scale)
            pr.set("u_rim_scale", gp.rim_scale)
            pr.set("u_alpha_mode", gp.alpha_code)
            pr.set("u_alpha_cutoff", float(m.alpha_cutoff))
            if m.interior_color is not None:
                pr.set("u_interior_color", tuple(m.interior_color))
            if gp.texture is not None:
                gp.texture.use(1)
            if self.draw_elements is not None:
                self.draw_elements(pr.prog.glo, gp.vao.glo, gp.index_count)
            else:
                gp.vao.render(moderngl.TRIANGLES)
        ctx.depth_mask = True

    def _update_weights(self, weights: np.ndarray) -> None:
        w = np.asarray(weights, np.float32).reshape(-1)
        if w.shape != (NUM_BLENDSHAPES,) or not np.all(np.isfinite(w)):
            fixed = np.zeros(NUM_BLENDSHAPES, np.float32)
            n = min(w.size, NUM_BLENDSHAPES)
            fixed[:n] = np.nan_to_num(w[:n], nan=0.0, posinf=1.0, neginf=0.0)
            w = fixed
        tw = np.clip(w @ self._map, 0.0, 1.0)
        self._target_w[: tw.size] = tw
        self._uniform_write("u_target_weight", self._target_w)
        self.last_active_targets = int(np.count_nonzero(tw))

    def _update_joints(self, state: AvatarState) -> None:
        skel = self._avatar.skeleton
        if skel is None:
            return
        try:
            rot = nearest_rotation(state.rotation)
        except InputError:  # not a finite (3, 3): show the rest pose rather than fail the frame
            rot = np.eye(3)
        rotations: dict[int, np.ndarray] = {}
        if self._head is not None:
            if self._neck is not None:
                share = self._avatar.neck_share
                neck_rot = axis_angle_fraction(rot, share)
                rotations[self._neck] = neck_rot
                rotations[self._head] = neck_rot.T @ rot  # neck then head composes to rot
            else:
                rotations[self._head] = rot
        if self._eyes:
            g = np.asarray(state.gaze, np.float64).reshape(-1)
            if g.size >= 2 and np.all(np.isfinite(g[:2])):
                # Eye joints are children of the head, so this turn is relative to it.
                eye_rot = gaze_rotation(float(g[0]), float(g[1]))
                for e in self._eyes:
                    rotations[e] = eye_rot
        mats = skel.skin_matrices(rotations)
        self._joint_buf[: len(mats)] = mats.transpose(0, 2, 1)  # column-major for GLSL
        self._uniform_write("u_joints", self._joint_buf)

    def camera(self, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
        """View and projection matrices of the virtual camera for a drawable size.

        The camera looks down -Z at the avatar's ``view_center`` from a distance that
        fits ``view_height_m`` vertically (and horizontally in portrait sizes).

        Returns:
            (view (4, 4), projection (4, 4)) float64, column-vector convention.

        Raises:
            InputError: no avatar was set.
        """
        if self._avatar is None:
            raise InputError("Renderer.camera called before set_avatar")
        aspect = width / height
        fovy = math.radians(self.fovy_deg)
        dist = self._view_height / (2.0 * math.tan(fovy / 2.0)) / min(1.0, aspect)
        c = self._view_center
        view = np.eye(4)
        view[:3, 3] = -np.array([c[0], c[1], c[2] + dist])
        near = max(dist - self._depth_front, 0.02)  # 0.35 m in front of the centre, or the avatar's reach
        return view, perspective(fovy, aspect, near, dist + self._depth_back)

    def project(self, points: np.ndarray, width: int, height: int) -> np.ndarray:
        """Pixel positions of model-space points (rest pose, no skinning or morphs).

        Args:
            points: (N, 3) model-space positions, metres.
            width, height: drawable size in pixels.

        Returns:
            (N, 2) float64 (x, y) pixels, origin at the top-left corner, y down.
        """
        view, proj = self.camera(width, height)
        p = np.c_[np.asarray(points, np.float64).reshape(-1, 3), np.ones(len(points))]
        clip = p @ (proj @ view).T
        ndc = clip[:, :2] / clip[:, 3:4]
        return np.c_[(ndc[:, 0] + 1.0) * 0.5 * width, (1.0 - ndc[:, 1]) * 0.5 * height]

    def head_rect(self, width: int, height: int) -> tuple[float, float, float, float] | None:
        """The avatar's head on screen: the bounding box of its vertices at rest above the neck
        (those above a fifth of the framed height below ``view_center``: the chin), projected.

        Thread: any (reads what :meth:`set_avatar` set; the result is cached per size).

        Args:
            width, height: the view's size in pixels (logical or device: the box scales with them).

        Returns:
            ``(x0, y0, x1, y1)`` pixels, origin at the top-left corner, y down (may reach outside
            the view); None without an avatar.
        """
        if self._avatar is None or width <= 0 or height <= 0:
            return None
        key = (int(width), int(height))
        cached = self._head_rects.get(key)
        if cached is None and len(self._head_points):
            px = self.project(self._head_points, width, height)
            lo, hi = px.min(axis=0), px.max(axis=0)
            cached = (float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1]))
            if len(self._head_rects) > 16:
                self._head_rects.clear()
            self._head_rects[key] = cached
        return cached

    def _update_camera(self, width: int, height: int, flip_y: bool) -> None:
        key = (width, height, flip_y, self.fovy_deg, id(self._avatar))
        if key == self._camera_key:
            return
        self._camera_key = key
        view, proj = self.camera(width, height)
        if flip_y:
            proj = np.diag([1.0, -1.0, 1.0, 1.0]) @ proj
        self._uniform_set("u_view", tuple(view.T.astype(np.float32).reshape(-1)))
        self._uniform_set("u_proj", tuple(proj.T.astype(np.float32).reshape(-1)))

    # ------------------------------------------------------------------ helpers
    def _program(self, defines: tuple[str, ...]) -> _Program:
        """The shader variant with these #defines (compiled on first use)."""
        prog = self._programs.get(defines)
        if prog is None:
            header = "#version 330 core\n" + "".join(f"#define {d}\n" for d in defines)
            vert, frag = (src.replace("#version 330 core\n", header, 1) for src in self._sources)
            try:
                prog = _Program(self.ctx, vert, frag)
            except moderngl.Error as exc:
                raise BackendUnavailableError(f"OpenGL shader variant {defines} failed to compile: {exc}") from exc
            self._programs[defines] = prog
        return prog

    def _refresh_uniforms(self) -> None:
        """Give newly compiled variants the sampler units and the light rig."""
        self._uniform_set("u_morph", 0)
        self._uniform_set("u_texture", 1)
        self.lighting = self._lighting

    def _uniform_set(self, name: str, value) -> None:
        for pr in self._programs.values():
            pr.set(name, value)

    def _uniform_write(self, name: str, array: np.ndarray) -> None:
        for pr in self._programs.values():
            pr.write(name, array)

    def _current_framebuffer(self) -> moderngl.Framebuffer:
        # A QOpenGLWidget binds its own framebuffer object before paintGL.
        return self.ctx.detect_framebuffer()

    def _ensure_msaa(self, width: int, height: int) -> moderngl.Framebuffer:
        if self._msaa_fbo is not None and self._msaa_fbo.size == (width, height):
            return self._msaa_fbo
        self._release_targets()
        ctx = self.ctx
        color = ctx.renderbuffer((width, height), 4, samples=self._msaa)
        depth = ctx.depth_renderbuffer((width, height), samples=self._msaa)
        self._msaa_fbo = ctx.framebuffer(color_attachments=[color], depth_attachment=depth)
        tex = ctx.texture((width, height), 4)
        tex.filter = (moderngl.NEAREST, moderngl.NEAREST)
        self._resolve_fbo = ctx.framebuffer(color_attachments=[tex])
        return self._msaa_fbo

    def _release_targets(self) -> None:
        for fb in (getattr(self, "_msaa_fbo", None), getattr(self, "_resolve_fbo", None)):
            if fb is not None:
                for att in (*fb.color_attachments, fb.depth_attachment):
                    if att is not None:
                        att.release()
                fb.release()
        self._msaa_fbo = None
        self._resolve_fbo = None

    def _release_avatar(self) -> None:
        for gp in self._prims:
            gp.release()
        self._prims = []
        if self._morph_tex is not None:
            self._morph_tex.release()
            self._morph_tex = None

    def release(self) -> None:
        """Free every GL object (call with the context current). Idempotent."""
        self._release_avatar()
        self._release_targets()
        for obj in ("_blit_vao", "_blit_prog"):
            o = getattr(self, obj, None)
            if o is not None:
                o.release()
                setattr(self, obj, None)
        for pr in getattr(self, "_programs", {}).values():
            pr.release()
        self._programs = {}
        self._avatar = None
