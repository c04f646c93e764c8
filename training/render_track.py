"""Render the face model flat-shaded and track it with MediaPipe: is render-and-track viable?

The face model (avatar_app.avatar.face_model) is only a face mask: 468 mesh
vertices with open eyes and mouth. This script closes those holes for
rendering (eye fans coloured as sclera with an iris and pupil disc at the iris
landmarks, a dark mouth interior), colours the lips and brows darker than the
skin, renders 640x480 with moderngl on an EGL context (Mesa llvmpipe works)
and one directional light plus ambient, flat shading, and runs the bundled
MediaPipe face mesh (IMAGE mode, refine_landmarks) on the result.

For each case (neutral, jawOpen, eyeBlinkLeft, both blinks, mouthSmileLeft,
and a yawed neutral) it reports whether a face was tracked, the mean distance
between tracked and projected model landmarks (pixels), and the tracked
versus rendered eye apertures and lip gap. Usage (repository root)::

    .venv/bin/python training/render_track.py [--out DIR] [--json FILE]

``--out`` writes the rendered PNGs with the tracked landmarks drawn on them.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from avatar_app.avatar.authoring import face_model_topology as topo  # noqa: E402
from avatar_app.core import landmarks as lmk  # noqa: E402
from avatar_app.avatar.authoring.face_model_shapes import lip_regions  # noqa: E402
from avatar_app.avatar.face_model import FaceModel, load_face_model, project  # noqa: E402
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES  # noqa: E402
from avatar_app.core.rotations import rot_y  # noqa: E402

_log = logging.getLogger("render_track")

SKIN = (0.85, 0.66, 0.55)
LIPS = (0.62, 0.32, 0.32)
BROW = (0.35, 0.25, 0.18)
SCLERA = (0.92, 0.90, 0.86)
IRIS = (0.30, 0.20, 0.12)
PUPIL = (0.03, 0.03, 0.03)
MOUTH = (0.18, 0.06, 0.06)
BACKGROUND = (0.55, 0.58, 0.60)

_VERT = """
#version 330
uniform mat4 mvp;
in vec3 in_pos; in vec3 in_nrm; in vec3 in_col;
flat out vec3 v_col; flat out vec3 v_nrm;
void main() { gl_Position = mvp * vec4(in_pos, 1.0); v_col = in_col; v_nrm = in_nrm; }
"""
_FRAG = """
#version 330
uniform vec3 light;
flat in vec3 v_col; flat in vec3 v_nrm;
out vec4 f_color;
void main() {
    float d = max(dot(normalize(v_nrm), normalize(light)), 0.0);
    f_color = vec4(v_col * (0.35 + 0.75 * d), 1.0);
}
"""


def _region_colours(model: FaceModel) -> np.ndarray:
    """(F, 3) colour per face-mesh triangle: skin, lips (between the lip contours), brows."""
    tris = model.triangles
    upper, lower = lip_regions(tris)  # the vertices between the lip contours (the contours included)
    lips = upper | lower | set(lmk.LIP_OUTER_UPPER + lmk.LIP_OUTER_LOWER + lmk.LIP_INNER_UPPER + lmk.LIP_INNER_LOWER)
    brows = set(lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER + lmk.RIGHT_BROW_UPPER
                + lmk.RIGHT_BROW_LOWER + (46, 276, 70, 300))
    col = np.tile(np.array(SKIN), (len(tris), 1))
    for i, t in enumerate(tris):
        if all(int(v) in lips for v in t):
            col[i] = LIPS
        elif all(int(v) in brows for v in t):
            col[i] = BROW
    return col


def _disc(center: np.ndarray, ring: np.ndarray, scale: float, n: int = 16) -> np.ndarray:
    """(n, 3, 3) fan triangles of a disc through the 4 iris contour points, radius scaled."""
    ux = (ring[0] - ring[2]) / 2
    uy = (ring[1] - ring[3]) / 2
    ang = np.linspace(0, 2 * np.pi, n + 1)
    rim = center + scale * (np.cos(ang)[:, None] * ux + np.sin(ang)[:, None] * uy)
    return np.stack([np.repeat(center[None], n, 0), rim[:-1], rim[1:]], axis=1)


def render_mesh_triangles(model: FaceModel, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Triangles (T, 3, 3) metres and colours (T, 3) of the face with its holes closed.

    Args:
        model: the face model (topology and colours).
        points: (478, 3) posed landmark positions in the model frame.

    Returns:
        ``(triangles, colours)`` float32.
    """
    p = np.asarray(points, np.float64)
    tris = [p[model.triangles]]
    cols = [_region_colours(model)]
    loops = topo.boundary_loops(model.triangles)
    for loop in loops[1:]:  # eye and mouth holes (the longest loop is the outer rim)
        ring = p[loop]
        c = ring.mean(0)
        is_mouth = 13 in loop or 14 in loop
        c = c - np.array([0, 0, 0.004 if is_mouth else 0.0015])
        fan = np.stack([np.repeat(c[None], len(loop), 0), ring[::-1], np.roll(ring[::-1], -1, 0)], 1)
        tris.append(fan)
        cols.append(np.tile(MOUTH if is_mouth else SCLERA, (len(fan), 1)))
    for c in (468, 473):
        push = np.array([0, 0, 0.0004])
        iris = _disc(p[c] + push, p[c + 1:c + 5] + push, 1.0)
        pupil = _disc(p[c] + 2 * push, p[c + 1:c + 5] + 2 * push, 0.4)
        tris += [iris, pupil]
        cols += [np.tile(IRIS, (len(iris), 1)), np.tile(PUPIL, (len(pupil), 1))]
    return np.concatenate(tris).astype(np.float32), np.concatenate(cols).astype(np.float32)


class FaceRenderer:
    """Offscreen flat-shaded renderer of the face model (EGL, OpenGL 3.3 core).

    Args:
        size: (width, height) pixels.
        focal_px: pinhole focal length in pixels (the same camera as
            :func:`avatar_app.avatar.face_model.project`).
    """

    def __init__(self, size: tuple[int, int] = (640, 480), focal_px: float = 600.0):
        from avatar_app.render.headless import create_egl_context

        self.size = size
        self.focal_px = focal_px
        self.ctx = create_egl_context()
        self.prog = self.ctx.program(vertex_shader=_VERT, fragment_shader=_FRAG)
        self.fbo = self.ctx.simple_framebuffer(size, components=4)
        self.ctx.enable(self.ctx.DEPTH_TEST)

    def _mvp(self, rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
        w, h = self.size
        near, far = 0.05, 10.0
        proj = np.array([
            [2 * self.focal_px / w, 0, 0, 0],
            [0, 2 * self.focal_px / h, 0, 0],
            [0, 0, -(far + near) / (far - near), -2 * far * near / (far - near)],
            [0, 0, -1, 0]])
        view = np.eye(4)
        view[:3, :3] = rotation
        view[:3, 3] = translation
        return proj @ view

    def render(self, model: FaceModel, points: np.ndarray, rotation: np.ndarray,
               translation: np.ndarray) -> np.ndarray:
        """Render posed landmarks.

        Args:
            model: the face model.
            points: (478, 3) model-frame positions, metres.
            rotation: (3, 3) head rotation (model -> camera).
            translation: (3,) metres, z < 0.

        Returns:
            (H, W, 3) uint8 RGB, top row first.
        """
        tri, col = render_mesh_triangles(model, points)
        n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-12)
        n = n @ np.asarray(rotation, np.float64).T  # light in camera space
        data = np.concatenate([tri.reshape(-1, 3), np.repeat(n, 3, 0), np.repeat(col, 3, 0)], 1)
        vbo = self.ctx.buffer(data.astype("f4").tobytes())
        vao = self.ctx.vertex_array(self.prog, [(vbo, "3f 3f 3f", "in_pos", "in_nrm", "in_col")])
        self.prog["mvp"].write(self._mvp(rotation, translation).T.astype("f4").tobytes())
        self.prog["light"].value = (0.3, 0.4, 1.0)
        self.fbo.use()
        self.fbo.clear(*BACKGROUND, 1.0)
        vao.render()
        img = np.frombuffer(self.fbo.read(components=3), np.uint8).reshape(self.size[1], self.size[0], 3)
        vao.release()
        vbo.release()
        return img[::-1].copy()

    def close(self) -> None:
        """Release the GL context."""
        self.ctx.release()


def _aperture(px: np.ndarray, upper, lower) -> float:
    return float(np.mean(np.linalg.norm(px[list(upper)] - px[list(lower)], axis=-1)))


def run(out_dir: Path | None = None) -> dict:
    """Render the standard cases, track each, and return the report."""
    import mediapipe as mp

    model = load_face_model()
    renderer = FaceRenderer()
    w, h = renderer.size
    cases = {
        "neutral": ({}, 0.0), "jawOpen": ({"jawOpen": 1.0}, 0.0),
        "eyeBlinkLeft": ({"eyeBlinkLeft": 1.0}, 0.0),
        "eyeBlink_both": ({"eyeBlinkLeft": 1.0, "eyeBlinkRight": 1.0}, 0.0),
        "mouthSmileLeft": ({"mouthSmileLeft": 1.0}, 0.0),
        "neutral_yaw0.5": ({}, 0.5), "jawOpen_yaw0.5": ({"jawOpen": 1.0}, 0.5),
    }
    t = np.array([0.0, 0.0, -0.45])
    report = {}
    with mp.solutions.face_mesh.FaceMesh(static_image_mode=True, refine_landmarks=True,
                                         max_num_faces=1) as mesh:
        for name, (ws, yaw) in cases.items():
            wv = np.zeros(len(BLENDSHAPE_NAMES), np.float32)
            for k, v in ws.items():
                wv[BLENDSHAPE_NAMES.index(k)] = v
            pts = model.evaluate(wv)
            rot = rot_y(yaw)
            img = renderer.render(model, pts, rot, t)
            proj = project(pts, rot, t, renderer.focal_px, (w, h))
            res = mesh.process(img)
            entry = {"tracked": bool(res.multi_face_landmarks)}
            rend = {
                "left_eye_px": _aperture(proj, lmk.LEFT_EYE_UPPER, lmk.LEFT_EYE_LOWER),
                "right_eye_px": _aperture(proj, lmk.RIGHT_EYE_UPPER, lmk.RIGHT_EYE_LOWER),
                "lip_gap_px": _aperture(proj, lmk.LIP_GAP_UPPER, lmk.LIP_GAP_LOWER),
            }
            entry["rendered"] = {k: round(v, 2) for k, v in rend.items()}
            if res.multi_face_landmarks:
                lm = res.multi_face_landmarks[0].landmark
                trk = np.array([[q.x * w, q.y * h] for q in lm])
                entry["mean_error_px"] = round(float(np.linalg.norm(trk - proj, axis=1).mean()), 2)
                entry["tracked_measures"] = {
                    "left_eye_px": round(_aperture(trk, lmk.LEFT_EYE_UPPER, lmk.LEFT_EYE_LOWER), 2),
                    "right_eye_px": round(_aperture(trk, lmk.RIGHT_EYE_UPPER, lmk.RIGHT_EYE_LOWER), 2),
                    "lip_gap_px": round(_aperture(trk, lmk.LIP_GAP_UPPER, lmk.LIP_GAP_LOWER), 2),
                }
                if out_dir is not None:
                    import cv2
                    img = img.copy()
                    for x, y in trk:
                        cv2.circle(img, (int(x), int(y)), 1, (0, 255, 0), -1)
            if out_dir is not None:
                import cv2
                out_dir.mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(out_dir / f"{name}.png"), img[:, :, ::-1])
            report[name] = entry
            _log.info("%s: %s", name, entry)
    renderer.close()
    return report


def main(argv: list[str] | None = None) -> int:
    """Command line entry: render, track, print (and optionally write) the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the rendered PNGs")
    ap.add_argument("--json", type=Path, help="write the report here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = run(args.out)
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
