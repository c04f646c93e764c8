"""Varied offscreen renders of the face model for render-and-track data (moderngl over EGL).

Extends ``training/render_track.py`` (flat-shaded rig with the eye and mouth
holes closed, which MediaPipe tracks in every case tried) with eyeballs, a
photo texture and per-subject variation.

Eye style ``"eyeball"`` (default): the eye openings are windows onto a shaded
eyeball (the fragment shader intersects the camera ray with a sphere of the
rig's gaze radius) whose iris and pupil turn with the rig's gaze, so the lids
occlude the iris as on a face; the first renderer's flat iris discs vanished
under the lids when looking up or down, and MediaPipe's iris points kept only
r = 0.07 of the vertical gaze. A share (:data:`PHOTO_SHARE`) of the subjects
wear the face model's source photo (scikit-image's public-domain astronaut,
mapped through the face mesh MediaPipe finds on it) as skin, lip and brow
texture, tinted to their skin tone. Eye style ``"discs"``: the first renderer
(flat colours, iris and pupil discs drawn over the eyes), kept so its seeds
remake the same images.

Per subject: skin tone (light to dark), lip, brow, iris, sclera and background
colours, a key light from a random direction in front of the face plus
ambient, smooth (Gouraud) or flat shading, a pinhole camera of any focal
length, and image degradations (sensor noise, blur, JPEG) applied by the caller.
"""
from __future__ import annotations

import numpy as np

from avatar_app.avatar.authoring import face_model_topology as topo
from avatar_app.avatar.face_model import FaceModel
from avatar_app.core import landmarks as lmk
from training.render_track import _disc, _region_colours

_VERT = """
#version 330
uniform mat4 mvp; uniform mat4 view;
in vec3 in_pos; in vec3 in_nrm; in vec3 in_col; in float in_eye; in vec3 in_uvt;
out vec3 v_col; out vec3 v_nrm; out vec3 v_cam; flat out int v_eye; out vec2 v_uv; flat out float v_tex;
void main() {
    gl_Position = mvp * vec4(in_pos, 1.0);
    v_col = in_col; v_nrm = in_nrm; v_cam = (view * vec4(in_pos, 1.0)).xyz; v_eye = int(in_eye + 0.5);
    v_uv = in_uvt.xy; v_tex = in_uvt.z;
}
"""
# Eye openings are windows onto an eyeball: the fragment shader casts the camera ray through
# the window onto a sphere (centre ``eye_c``, radius ``eye_r``, camera space) and colours the
# hit by its angle from the gaze direction ``eye_g``: pupil, iris with a darker limbal ring,
# sclera; a ray that misses the sphere sees the shadowed socket corner. The lids, being the
# window's edge, occlude the iris exactly as the rig's lid shapes move.
_FRAG = """
#version 330
uniform vec3 light; uniform float ambient; uniform float diffuse;
uniform vec3 eye_c[2]; uniform vec3 eye_g[2]; uniform float eye_r;
uniform float cos_iris; uniform float cos_pupil; uniform vec3 iris; uniform vec3 sclera;
uniform sampler2D photo; uniform vec3 tint; uniform float photo_gain;
in vec3 v_col; in vec3 v_nrm; in vec3 v_cam; flat in int v_eye; in vec2 v_uv; flat in float v_tex;
out vec4 f_color;
void main() {
    vec3 l = normalize(light);
    if (v_eye == 0) {
        float d = max(dot(normalize(v_nrm), l), 0.0);
        if (v_tex > 0.5) {
            // the photo carries its own light: relight it only partly
            vec3 base = texture(photo, v_uv).rgb * tint;
            f_color = vec4(clamp(base * photo_gain * (ambient + diffuse * d), 0.0, 1.0), 1.0);
        } else {
            f_color = vec4(v_col * (ambient + diffuse * d), 1.0);
        }
        return;
    }
    vec3 c = eye_c[v_eye - 1];
    vec3 g = eye_g[v_eye - 1];
    vec3 dir = normalize(v_cam);
    float b = dot(dir, c);
    float disc = b * b - (dot(c, c) - eye_r * eye_r);
    if (disc < 0.0) { f_color = vec4(sclera * ambient * 0.8, 1.0); return; }
    vec3 h = (b - sqrt(disc)) * dir;
    vec3 n = normalize(h - c);
    float ca = dot(n, g);
    vec3 col = sclera;
    if (ca > cos_pupil) {
        col = vec3(0.02);
    } else if (ca > cos_iris) {
        float t = (ca - cos_iris) / (cos_pupil - cos_iris);
        col = iris * mix(0.45, 1.0, smoothstep(0.0, 0.35, t));
    }
    float d = max(dot(n, l), 0.0);
    float spec = pow(max(dot(reflect(-l, n), -dir), 0.0), 80.0);
    f_color = vec4(col * (ambient + diffuse * d) + vec3(0.6 * spec), 1.0);
}
"""

EYE_RADIUS_M = 0.0103  # the rig's iris points turn on a sphere of this radius (eyeLookUp: 4.2 mm
# up, 0.9 mm back); the human eyeball is ~12 mm (Bekerman et al. 2014), its front ~10 mm
IRIS_RADIUS_M = 0.0060  # the rig's iris ring (points 469-472), cf. ~5.9 mm in MediaPipe Iris
PUPIL_RADIUS_M = 0.0020
#: Share of subjects textured with the face model's source photo (scikit-image's astronaut,
#: public domain; mapped through the face mesh MediaPipe finds on it): real skin, brow, lip and
#: lid texture, which MediaPipe was trained on; the rest keep flat region colours.
PHOTO_SHARE = 0.6
EYE_STYLES = ("eyeball", "discs")

SKIN_TONES = np.array([  # sRGB 0..1, light to dark (roughly Fitzpatrick I-VI)
    (0.96, 0.80, 0.69), (0.90, 0.72, 0.60), (0.85, 0.66, 0.55), (0.76, 0.57, 0.44),
    (0.62, 0.44, 0.32), (0.45, 0.31, 0.22), (0.32, 0.21, 0.15)])


class SubjectLook:
    """Colours and light of one rendered subject.

    Args:
        rng: the subject's random generator.
        eyes: ``"eyeball"`` (shaded eyeballs behind the eye openings, photo texture for a share
            of the subjects) or ``"discs"`` (the first renderer: flat sclera, iris and pupil
            discs on top, flat colours; the subjects of a seed are those it made).

    Raises:
        ValueError: an unknown ``eyes`` style.

    Attributes:
        eyes: the eye style.
        skin, lips, brow, iris, background: RGB in [0, 1].
        light: (3,) direction toward the light in camera space.
        ambient, diffuse: shading terms.
        smooth: Gouraud shading (else flat).
        lash, lash_mm: colour and height of the upper lash line (the rig has no lashes;
            without them a closed eye reads as an empty socket to MediaPipe).
        sclera: RGB of the white of the eye.
        photo: skin, lips and brows from the photo texture (tinted to ``skin``) instead of
            flat colours; photo_mirror: the texture mirrored left-right; photo_gain: its
            brightness.
    """

    def __init__(self, rng: np.random.Generator, eyes: str = "eyeball"):
        if eyes not in EYE_STYLES:
            raise ValueError(f"eyes must be one of {EYE_STYLES}, got {eyes!r}")
        self.eyes = eyes
        t = rng.uniform(0, len(SKIN_TONES) - 1)
        i = int(t)
        f = t - i
        skin = SKIN_TONES[i] * (1 - f) + SKIN_TONES[min(i + 1, len(SKIN_TONES) - 1)] * f
        self.skin = np.clip(skin * rng.uniform(0.92, 1.08, 3), 0, 1)
        self.lips = np.clip(self.skin * np.array([0.78, 0.55, 0.55]) * rng.uniform(0.85, 1.1), 0, 1)
        self.brow = np.clip(self.skin * rng.uniform(0.25, 0.6), 0, 1)
        self.iris = np.clip(rng.choice([np.array([0.30, 0.20, 0.12]), np.array([0.25, 0.35, 0.45]),
                                        np.array([0.30, 0.35, 0.20]), np.array([0.12, 0.08, 0.05])])
                            * rng.uniform(0.8, 1.2), 0, 1)
        self.background = rng.uniform(0.1, 0.9, 3)
        az, el = rng.uniform(-0.9, 0.9), rng.uniform(-0.5, 0.8)
        self.light = np.array([np.sin(az) * np.cos(el), np.sin(el), np.cos(az) * np.cos(el)])
        self.ambient = rng.uniform(0.25, 0.5)
        self.diffuse = rng.uniform(0.5, 0.85)
        self.smooth = bool(rng.random() < 0.5)
        self.lash = np.clip(self.brow * rng.uniform(0.3, 0.8), 0, 1)
        self.lash_mm = rng.uniform(0.8, 1.6)
        if eyes == "discs":  # the first renderer: no further draws, so its seeds give the same subjects
            self.sclera = np.array([0.92, 0.90, 0.86])
            self.photo, self.photo_mirror, self.photo_gain = False, False, 1.0
            return
        self.sclera = np.clip(np.array([0.92, 0.90, 0.86]) * rng.uniform(0.85, 1.05), 0, 1)
        self.photo = bool(rng.random() < PHOTO_SHARE)
        self.photo_mirror = bool(rng.random() < 0.5)
        self.photo_gain = rng.uniform(0.8, 1.15)


class VariedFaceRenderer:
    """Renders posed face-model landmarks as a closed, coloured, lit face.

    Args:
        model: the face model (topology and region colours, computed once).
        size: (width, height) pixels.
    """

    def __init__(self, model: FaceModel, size: tuple[int, int] = (640, 480)):
        from avatar_app.render.headless import create_egl_context

        self.model = model
        self.size = size
        self.ctx = create_egl_context()
        self.prog = self.ctx.program(vertex_shader=_VERT, fragment_shader=_FRAG)
        self.fbo = self.ctx.simple_framebuffer(size, components=4)
        self.ctx.enable(self.ctx.DEPTH_TEST)
        self._region = _region_colours(model)  # 0: skin, 1: lips, 2: brow per triangle
        self._kind = np.zeros(len(self._region), np.int32)
        from training.render_track import BROW, LIPS
        self._kind[np.all(np.isclose(self._region, LIPS), 1)] = 1
        self._kind[np.all(np.isclose(self._region, BROW), 1)] = 2
        loops = topo.boundary_loops(model.triangles)
        self._holes = [np.asarray(loop) for loop in loops[1:]]
        self._photo = None  # the photo texture, made when a textured subject is first rendered

    def _init_photo(self) -> None:
        """Texture coordinates of the mesh on the source photo (MediaPipe run once on it).

        Raises:
            ModelLoadError: scikit-image (which ships the photo) is not installed.
            NoFaceError: MediaPipe finds no face on the photo.
        """
        from avatar_app.avatar.authoring.face_model_neutral import measure_landmarks, photo_rgb

        img = photo_rgb()
        h, w = img.shape[:2]
        px = measure_landmarks(img)  # model axes, pixels: y up
        uv = np.stack([px[:, 0] / w, -px[:, 1] / h], 1)
        mirror = np.asarray(self.model.mirror)
        self._uv = {False: uv, True: uv[mirror]}  # mirrored: each point samples its partner
        self._photo = self.ctx.texture((w, h), 3, np.ascontiguousarray(img).tobytes())
        self._photo.build_mipmaps()
        # skin reference: the mean colour of the cheeks (the tint maps it to the subject's tone)
        cheeks = [50, 280, 101, 330]
        samples = [img[int(v * h) - 4:int(v * h) + 5, int(u * w) - 4:int(u * w) + 5].reshape(-1, 3)
                   for u, v in uv[cheeks]]
        self._photo_skin = np.concatenate(samples).mean(0) / 255.0

    def _geometry(self, p: np.ndarray, look: SubjectLook
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(T, 3, 3) triangles, (T, 3, 3) per-corner normals, (T, 3) colours, (T,) eye window
        index (0: not an eye window, 1: iris 468's eye, 2: iris 473's eye), (T, 3, 3) per-corner
        photo texture coordinates and flag (1: textured)."""
        tris = p[self.model.triangles]
        n_face = np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0])
        if look.smooth:
            vn = np.zeros_like(p)
            for k in range(3):
                np.add.at(vn, self.model.triangles[:, k], n_face)
            vn /= np.maximum(np.linalg.norm(vn, axis=1, keepdims=True), 1e-12)
            nrm = vn[self.model.triangles]
        else:
            nf = n_face / np.maximum(np.linalg.norm(n_face, axis=1, keepdims=True), 1e-12)
            nrm = np.repeat(nf[:, None], 3, 1)
        palette = np.stack([look.skin, look.lips, look.brow])
        cols = [palette[self._kind]]
        eye = [np.zeros(len(tris))]
        if look.photo:
            if self._photo is None:
                self._init_photo()
            uv = self._uv[look.photo_mirror][self.model.triangles]
        else:
            uv = np.zeros(self.model.triangles.shape + (2,))
        uvt = [np.concatenate([uv, np.full(uv.shape[:2] + (1,), float(look.photo))], 2)]
        all_t, all_n = [tris], [nrm]
        for loop in self._holes:
            ring = p[loop]
            is_mouth = 13 in loop or 14 in loop
            c = ring.mean(0) - np.array([0, 0, 0.004 if is_mouth else 0.0015])
            fan = np.stack([np.repeat(c[None], len(loop), 0), ring[::-1], np.roll(ring[::-1], -1, 0)], 1)
            fn = np.cross(fan[:, 1] - fan[:, 0], fan[:, 2] - fan[:, 0])
            fn /= np.maximum(np.linalg.norm(fn, axis=1, keepdims=True), 1e-12)
            all_t.append(fan)
            all_n.append(np.repeat(fn[:, None], 3, 1))
            col = np.array([0.18, 0.06, 0.06]) if is_mouth else look.sclera
            cols.append(np.tile(col, (len(fan), 1)))
            # eye windows: 1 looks onto the eyeball of iris 468, 2 onto that of iris 473
            which = 0 if is_mouth or look.eyes == "discs" else \
                1 + int(np.argmin([np.linalg.norm(ring.mean(0) - p[i]) for i in (468, 473)]))
            eye.append(np.full(len(fan), float(which)))
        for lid, h_max, col in ((lmk.LEFT_EYE_UPPER_LID, look.lash_mm, look.lash),
                                (lmk.RIGHT_EYE_UPPER_LID, look.lash_mm, look.lash),
                                (lmk.LEFT_EYE_LOWER_LID, -0.4, look.lash * 0.5 + look.skin * 0.5),
                                (lmk.RIGHT_EYE_LOWER_LID, -0.4, look.lash * 0.5 + look.skin * 0.5)):
            strip = self._lash_strip(p[list(lid)], h_max * 1e-3)
            all_t.append(strip)
            all_n.append(np.tile(np.array([0, 0, 1.0]), (len(strip), 3, 1)))
            cols.append(np.tile(col, (len(strip), 1)))
            eye.append(np.zeros(len(strip)))
        if look.eyes == "discs":  # iris and pupil discs at the iris landmarks, drawn over everything
            for ci in (468, 473):
                push = np.array([0, 0, 0.0004])
                for disc, col in ((_disc(p[ci] + push, p[ci + 1:ci + 5] + push, 1.0), look.iris),
                                  (_disc(p[ci] + 2 * push, p[ci + 1:ci + 5] + 2 * push, 0.4), np.zeros(3) + 0.03)):
                    all_t.append(disc)
                    all_n.append(np.tile(np.array([0, 0, 1.0]), (len(disc), 3, 1)))
                    cols.append(np.tile(col, (len(disc), 1)))
                    eye.append(np.zeros(len(disc)))
        uvt += [np.zeros((len(t), 3, 3)) for t in all_t[1:]]
        return (np.concatenate(all_t), np.concatenate(all_n), np.concatenate(cols), np.concatenate(eye),
                np.concatenate(uvt))

    @staticmethod
    def _lash_strip(margin: np.ndarray, height_m: float) -> np.ndarray:
        """(2 (n - 1), 3, 3) triangles of a lash line: a strip from a lid margin polyline up
        (or down, for a negative height) by ``height_m``, tapered to the eye corners and pushed
        0.3 mm out of the face so it draws over the lid."""
        n = len(margin)
        taper = np.sqrt(np.sin(np.pi * np.arange(n) / (n - 1))) * 0.8 + 0.2
        base = margin + np.array([0, 0, 0.0003])
        top = base + np.outer(taper * height_m, [0, 1.0, 0]) + np.array([0, 0, 0.0002])
        tris = []
        for i in range(n - 1):
            tris.append([base[i], base[i + 1], top[i + 1]])
            tris.append([base[i], top[i + 1], top[i]])
        out = np.array(tris)
        if height_m < 0:  # keep the winding counter-clockwise seen from the front
            out = out[:, ::-1]
        return out

    def render(self, points: np.ndarray, rotation: np.ndarray, translation: np.ndarray,
               focal_px: float, look: SubjectLook, rest_points: np.ndarray | None = None) -> np.ndarray:
        """Render one face.

        Args:
            points: (478, 3) model-frame positions, metres.
            rotation: (3, 3) model -> camera.
            translation: (3,) metres (z < 0).
            focal_px: pinhole focal length, pixels (principal point at the centre).
            look: colours and light.
            rest_points: (478, 3) the same face with no expression (zero weights, same
                identity): the eyeball centres sit ``EYE_RADIUS_M`` behind its iris centres,
                and the gaze is the direction from there to ``points``' iris centres. None:
                ``points`` (gaze straight ahead).

        Returns:
            (H, W, 3) uint8 RGB.
        """
        points = np.asarray(points, np.float64)
        rest = points if rest_points is None else np.asarray(rest_points, np.float64)
        rotation = np.asarray(rotation, np.float64)
        tri, nrm, col, eye, uvt = self._geometry(points, look)
        nrm = nrm @ rotation.T
        data = np.concatenate([tri.reshape(-1, 3), nrm.reshape(-1, 3), np.repeat(col, 3, 0),
                               np.repeat(eye, 3)[:, None], uvt.reshape(-1, 3)], 1)
        vbo = self.ctx.buffer(data.astype("f4").tobytes())
        vao = self.ctx.vertex_array(self.prog, [(vbo, "3f 3f 3f 1f 3f", "in_pos", "in_nrm", "in_col", "in_eye",
                                                 "in_uvt")])
        w, h = self.size
        near, far = 0.05, 10.0
        proj = np.array([[2 * focal_px / w, 0, 0, 0], [0, 2 * focal_px / h, 0, 0],
                         [0, 0, -(far + near) / (far - near), -2 * far * near / (far - near)],
                         [0, 0, -1, 0]])
        view = np.eye(4)
        view[:3, :3] = rotation
        view[:3, 3] = translation
        self.prog["mvp"].write((proj @ view).T.astype("f4").tobytes())
        self.prog["view"].write(view.T.astype("f4").tobytes())
        centres, gazes = [], []
        for i in (468, 473):
            c = rest[i] - np.array([0, 0, EYE_RADIUS_M])
            g = points[i] - c
            centres.append(rotation @ c + translation)
            gazes.append(rotation @ (g / np.linalg.norm(g)))
        self.prog["eye_c"].write(np.array(centres, "f4").tobytes())
        self.prog["eye_g"].write(np.array(gazes, "f4").tobytes())
        self.prog["eye_r"].value = EYE_RADIUS_M
        self.prog["cos_iris"].value = float(np.sqrt(1 - (IRIS_RADIUS_M / EYE_RADIUS_M) ** 2))
        self.prog["cos_pupil"].value = float(np.sqrt(1 - (PUPIL_RADIUS_M / EYE_RADIUS_M) ** 2))
        self.prog["iris"].value = tuple(float(x) for x in look.iris)
        self.prog["sclera"].value = tuple(float(x) for x in look.sclera)
        self.prog["light"].value = tuple(float(x) for x in look.light)
        if look.photo:
            self._photo.use(0)
            self.prog["photo"].value = 0
            self.prog["tint"].value = tuple(float(x) for x in np.clip(look.skin / self._photo_skin, 0.3, 1.6))
            self.prog["photo_gain"].value = float(look.photo_gain / (look.ambient + 0.6 * look.diffuse))
        self.prog["ambient"].value = float(look.ambient)
        self.prog["diffuse"].value = float(look.diffuse)
        self.fbo.use()
        self.fbo.clear(*look.background, 1.0)
        vao.render()
        img = np.frombuffer(self.fbo.read(components=3), np.uint8).reshape(h, w, 3)
        vao.release()
        vbo.release()
        return img[::-1].copy()

    def close(self) -> None:
        """Release the GL context."""
        if self._photo is not None:
            self._photo.release()
        self.ctx.release()


def degrade(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Camera-like degradations: Gaussian blur, sensor noise, JPEG (each with some probability).

    Args:
        img: (H, W, 3) uint8 RGB.

    Returns:
        (H, W, 3) uint8 RGB.
    """
    import cv2

    out = img
    if rng.random() < 0.4:
        out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.4, 1.2))
    if rng.random() < 0.6:
        noise = rng.normal(0, rng.uniform(1, 6), out.shape)
        out = np.clip(out.astype(np.float32) + noise, 0, 255).astype(np.uint8)
    if rng.random() < 0.6:
        ok, enc = cv2.imencode(".jpg", out[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(50, 96))])
        out = cv2.imdecode(enc, cv2.IMREAD_COLOR)[:, :, ::-1]
    return np.ascontiguousarray(out)
