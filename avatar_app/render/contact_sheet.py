"""Contact sheet: every ARKit shape on the face model and on the default avatar, side by side.

One PNG: a cell per shape (neutral first, then the 52 ARKit shapes in Apple's
order at weight 1; mouthClose, which closes the lips whatever the jaw does, is
shown on top of jawOpen = 1), each with the face model (the training rig,
:mod:`avatar_app.avatar.face_model`) on the left and the default avatar on the
right, labelled; then the face model's identity morphs at -1 and +1. Both
heads face the viewer, so their own left (+X) is on the image's right.

The rig is drawn as :func:`face_model_avatar` builds it: its triangle mesh with
lips and brows coloured, the eye openings filled with sclera, iris and pupil
discs that follow the iris landmarks, and a dark mouth opening; the same
:class:`~avatar_app.render.renderer.Renderer` and lighting draw both heads.

The avatar's eyeballs are turned by its gaze joints in the app (from
``AvatarState.gaze``, which the reconstruction derives together with the
eyeLook weights); its eyeLook* morph targets move only the lids. So that each
eyeLook cell shows the eye turn on its own side, the sheet bakes that joint
rotation (30 degrees in/out, 25 degrees up/down, the geometric solver's
full-scale angles) into a morph of the one eyeball.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import numpy as np

from avatar_app.avatar.authoring import face_model_topology as topo
from avatar_app.avatar.mesh import AvatarMesh, Joint, Material, MeshPrimitive, Skeleton, compute_normals
from avatar_app.core import landmarks as lmk
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES
from avatar_app.core.errors import InputError, RecordingError
from avatar_app.core.paths import file_in_the_way
from avatar_app.core.rotations import gaze_rotation, rot_y
from avatar_app.core.types import AvatarState

logger = logging.getLogger(__name__)

SKIN = (0.80, 0.60, 0.50)
LIPS = (0.62, 0.28, 0.27)
BROW = (0.30, 0.20, 0.14)
SCLERA = (0.90, 0.88, 0.84)
IRIS = (0.30, 0.18, 0.10)
PUPIL = (0.02, 0.02, 0.02)
MOUTH = (0.12, 0.03, 0.035)
BACKGROUND = (58, 60, 66)
#: Head turn of the identity-morph tiles (a three-quarter view shows depth changes too), radians.
IDENTITY_YAW_RAD = -0.5
#: Eye turn of a full eyeLook shape (radians): the geometric solver's full-scale angles.
LOOK_YAW_RAD = math.radians(30.0)
LOOK_PITCH_RAD = math.radians(25.0)


# ----------------------------------------------------------------------------- the rig as a mesh
def _region_colours(model) -> np.ndarray:
    """(468, 3) vertex colours: skin, lips (vermilion incl. corners), brows."""
    from avatar_app.avatar.authoring.face_model_shapes import lip_regions

    col = np.tile(np.asarray(SKIN), (lmk.NUM_MESH, 1))
    upper, lower = lip_regions(np.asarray(model.triangles))
    lips = upper | lower | set(lmk.MOUTH_CORNER_ROW_LEFT[1:] + lmk.MOUTH_CORNER_ROW_RIGHT[1:])
    col[sorted(lips)] = LIPS
    brows = lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER + lmk.RIGHT_BROW_UPPER + lmk.RIGHT_BROW_LOWER
    col[list(brows)] = BROW
    return col


def _disc_weights(n: int, scale: float) -> np.ndarray:
    """(n + 1, 5) weights over an iris's 5 points (centre, +x, +y, -x, -y): centre then rim."""
    w = np.zeros((n + 1, 5))
    w[0, 0] = 1.0
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    c, s = np.cos(ang) * scale * 0.5, np.sin(ang) * scale * 0.5
    # rim = centre + c (p_x - p_-x) + s (p_y - p_-y)
    w[1:, 0] = 1.0
    w[1:, 1], w[1:, 3] = c, -c
    w[1:, 2], w[1:, 4] = s, -s
    return w


def _rig_layout(model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vertices of the rendered rig as linear combinations of the 478 rig points.

    Returns:
        (W (V, 478) float64 such that vertices = W @ points, triangles (F, 3) int,
        colours (V, 3)).
    """
    n = lmk.NUM_LANDMARKS
    rows = [np.eye(n)[: lmk.NUM_MESH]]
    cols = [_region_colours(model)]
    tris = [np.asarray(model.triangles, np.int64)]
    count = lmk.NUM_MESH
    loops = topo.boundary_loops(np.asarray(model.triangles))
    for loop in loops[1:]:  # eye and mouth openings (the longest loop is the outer rim)
        is_mouth = lmk.FacePoint.LIP_UPPER_INNER in loop or lmk.FacePoint.LIP_LOWER_INNER in loop
        w = np.zeros((1 + len(loop), n))
        w[0, loop] = 1.0 / len(loop)  # centre, then a copy of the rim in the fan's colour
        w[np.arange(1, len(loop) + 1), loop] = 1.0
        rows.append(w)
        cols.append(np.tile(MOUTH if is_mouth else SCLERA, (len(w), 1)))
        ring = count + 1 + np.arange(len(loop))
        tris.append(np.stack([np.full(len(ring), count), ring, np.roll(ring, -1)], axis=1))
        count += len(w)
    for iris in (lmk.RIGHT_IRIS, lmk.LEFT_IRIS):
        for scale, colour in ((1.0, IRIS), (0.42, PUPIL)):
            w5 = _disc_weights(20, scale)
            w = np.zeros((len(w5), n))
            w[:, list(iris)] = w5
            rows.append(w)
            cols.append(np.tile(colour, (len(w5), 1)))
            rim = np.arange(1, len(w5)) + count
            tris.append(np.stack([np.full(len(rim), count), rim, np.roll(rim, -1)], axis=1))
            count += len(w5)
    return np.concatenate(rows), np.concatenate(tris), np.concatenate(cols)


def face_model_avatar(model=None, identity: np.ndarray | None = None) -> AvatarMesh:
    """The face model as a renderable avatar, its 52 blendshapes as morph targets.

    Args:
        model: a :class:`~avatar_app.avatar.face_model.FaceModel`; default the shipped one.
        identity: optional (K,) identity coefficients applied to the neutral.

    Returns:
        An :class:`AvatarMesh` (one primitive "face_model" bound to one joint "head"
        at the model origin, so head rotations turn it), morph targets named after
        the ARKit blendshapes.

    Raises:
        ModelLoadError: the face model cannot be loaded.
        InputError: ``identity`` has the wrong shape.
    """
    from avatar_app.avatar.face_model import load_face_model

    model = model or load_face_model()
    neutral = np.asarray(model.neutral, np.float64)
    if identity is not None:
        neutral = model.evaluate(np.zeros(NUM_BLENDSHAPES), identity).astype(np.float64)
    w, tris, col = _rig_layout(model)
    depth = np.zeros((len(w), 3))
    centres = np.flatnonzero((w > 0).sum(axis=1) > 5)  # fan centres (iris disc points mix 5)
    for r in centres:
        depth[r, 2] = -0.006 if w[r, lmk.FacePoint.LIP_UPPER_INNER] > 0 else -0.0025
    per_disc = 21
    first_disc = len(w) - 4 * per_disc
    for k, start in enumerate(range(first_disc, len(w), per_disc)):
        depth[start:start + per_disc, 2] = 0.0005 if k % 2 == 0 else 0.0007
    pos = w @ neutral + depth
    # fans and discs face the viewer (+z), like the face mesh
    fn = np.cross(pos[tris[:, 1]] - pos[tris[:, 0]], pos[tris[:, 2]] - pos[tris[:, 0]])
    extra = np.arange(len(tris)) >= len(model.triangles)
    flip = extra & (fn[:, 2] < 0)
    tris[flip] = tris[flip][:, ::-1]
    idx = tris.reshape(-1).astype(np.uint32)
    prim = MeshPrimitive(
        "face_model", pos.astype(np.float32), compute_normals(pos, idx, weld=False), idx,
        Material("face_model", roughness=0.6, specular=0.2, double_sided=True),
        colors=np.c_[col, np.ones(len(col))].astype(np.float32))
    targets, normals = {}, {}
    for k, name in enumerate(BLENDSHAPE_NAMES):
        d = w @ np.asarray(model.blendshapes[k], np.float64)
        if np.abs(d).max() < 1e-7:
            continue
        targets[name] = d.astype(np.float32)
        normals[name] = (compute_normals(pos + d, idx, weld=False) - prim.normals).astype(np.float32)
    prim.morph_targets, prim.morph_normals = targets, normals
    # one joint at the model origin (between the ears) so that a head rotation turns it
    prim.joints = np.zeros((len(pos), 4), np.uint16)
    prim.weights = np.zeros((len(pos), 4), np.float32)
    prim.weights[:, 0] = 1.0
    skeleton = Skeleton([Joint("head", -1, np.eye(4), np.eye(4))])
    lo, hi = neutral[: lmk.NUM_MESH].min(0), neutral[: lmk.NUM_MESH].max(0)
    centre = np.array([0.0, 0.5 * (lo[1] + hi[1]) - 0.012, hi[2] - 0.04], np.float32)
    return AvatarMesh("face model", [prim], skeleton=skeleton, head_joint="head", view_center=centre,
                      view_height_m=float(hi[1] - lo[1]) * 1.02)


# ----------------------------------------------------------------------------- avatar helpers
def _look_rotation(name: str) -> np.ndarray:
    left = name.endswith("Left")
    direction = name[len("eyeLook"):-4 if left else -5]
    toward_plus_x = {"In": not left, "Out": left}.get(direction)
    yaw = 0.0 if toward_plus_x is None else (LOOK_YAW_RAD if toward_plus_x else -LOOK_YAW_RAD)
    pitch = {"Up": LOOK_PITCH_RAD, "Down": -LOOK_PITCH_RAD}.get(direction, 0.0)
    return gaze_rotation(yaw, pitch)


def with_eye_turn_morphs(avatar: AvatarMesh) -> AvatarMesh:
    """A copy of ``avatar`` whose eyeballs also turn for the eyeLook* weights (per eye).

    The eyeball primitives named by ``avatar.gaze_joints`` get morph targets
    named eyeLook{Down,In,Out,Up}{Left,Right}: the exact joint rotation at weight 1
    (30 degrees in/out, 25 degrees up/down). For pictures only: in the app the
    gaze joints turn the eyes.

    Raises:
        InputError: the avatar has no gaze joints or skeleton.
    """
    import copy

    if not avatar.gaze_joints or avatar.skeleton is None:
        raise InputError(f"avatar '{avatar.name}' has no gaze joints")
    out = copy.deepcopy(avatar)
    skel = out.skeleton
    for joint, side in zip(out.gaze_joints, ("Left", "Right")):
        j = skel.index(joint)
        centre = skel.joint_position(j)
        for prim in out.primitives:
            if prim.joints is None or not np.all(prim.joints[:, 0] == j):
                continue
            p = prim.positions.astype(np.float64)
            for direction in ("Down", "In", "Out", "Up"):
                name = f"eyeLook{direction}{side}"
                rot = _look_rotation(name)
                prim.morph_targets[name] = ((p - centre) @ rot.T + centre - p).astype(np.float32)
                prim.morph_normals[name] = (prim.normals @ rot.T - prim.normals).astype(np.float32)
    for side in ("Left", "Right"):
        for direction in ("Down", "In", "Out", "Up"):
            name = f"eyeLook{direction}{side}"
            out.blendshape_map[name] = {**out.blendshape_map.get(name, {}), name: 1.0}
    return out


def _framed(avatar: AvatarMesh, centre, height_m: float) -> AvatarMesh:
    return dataclasses.replace(avatar, view_center=np.asarray(centre, np.float32), view_height_m=height_m)


# ----------------------------------------------------------------------------- the sheet
def _label(img: np.ndarray, text: str, x: int, y: int, scale: float, colour=(235, 235, 235)) -> None:
    import cv2

    cv2.putText(img, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, 1, cv2.LINE_AA)


def render_tiles(size: int = 192, *, avatar: AvatarMesh | None = None, face_model=None, msaa: int = 4
                 ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Render every tile of the contact sheet.

    Args:
        size: tile edge, pixels (64..1024).
        avatar: the avatar; default the default head.
        face_model: the rig; default the shipped face model.
        msaa: multisampling of the renders (0, 2, 4, 8).

    Returns:
        (shapes, identity): ``shapes`` maps "neutral" and each ARKit name to (face
        model tile, avatar tile), frontal; ``identity`` maps each identity morph name
        to (tile at -1, tile at +1) of the face model in a three-quarter view. Tiles are (size, size, 3) uint8 RGB.
        mouthClose is rendered on top of jawOpen = 1.

    Raises:
        InputError: a size out of range.
        BackendUnavailableError: no offscreen OpenGL context.
    """
    from avatar_app.avatar.face_model import load_face_model
    from avatar_app.render.headless import HeadlessRenderer

    if not 64 <= int(size) <= 1024:
        raise InputError(f"contact sheet tile size must be within 64..1024 pixels, got {size}")
    size = int(size)
    model = face_model or load_face_model()
    if avatar is None:
        from avatar_app.avatar.default_head import build_default_head

        avatar = build_default_head()
    if avatar.gaze_joints and avatar.skeleton is not None:
        avatar = with_eye_turn_morphs(avatar)
    avatar = _framed(avatar, (0.0, -0.03, 0.05), 0.175)  # brows to chin
    rig = face_model_avatar(model)
    neutral = AvatarState.neutral()
    shapes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    identity: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with HeadlessRenderer(size, size, msaa=msaa, background=BACKGROUND, avatar=rig) as r_rig, \
            HeadlessRenderer(size, size, msaa=msaa, background=BACKGROUND, avatar=avatar) as r_av:
        for name in ("neutral",) + BLENDSHAPE_NAMES:
            w = np.zeros(NUM_BLENDSHAPES, np.float32)
            if name != "neutral":
                w[BLENDSHAPE_NAMES.index(name)] = 1.0
            if name == "mouthClose":  # a corrective shape: it means something with the jaw open
                w[BLENDSHAPE_NAMES.index("jawOpen")] = 1.0
            state = dataclasses.replace(neutral, weights=w)
            shapes[name] = (r_rig.render(state).copy(), r_av.render(state).copy())
        # identity morphs in a three-quarter view: some only change depth (nose bridge)
        turned = dataclasses.replace(neutral, rotation=rot_y(IDENTITY_YAW_RAD).astype(np.float32))
        for k, name in enumerate(model.identity_names):
            pair = []
            for a in (-1.0, 1.0):
                coeff = np.zeros(model.num_identity, np.float32)
                coeff[k] = a
                mesh = face_model_avatar(model, identity=coeff)
                # keep the turned face centred: its front swings sideways about the pivot
                centre = rig.view_center + [0.5 * math.sin(IDENTITY_YAW_RAD) * rig.view_center[2], 0.0, 0.0]
                r_rig.set_avatar(_framed(mesh, centre, rig.view_height_m))
                pair.append(r_rig.render(turned).copy())
            identity[name] = (pair[0], pair[1])
    return shapes, identity


def _check_sheet_path(out_path: Path) -> None:
    """Refuse, before any rendering, an output that cannot become the PNG (one line each).

    Raises:
        InputError: the name does not end in ``.png``.
        RecordingError: ``out_path`` is a folder, or a file stands where a folder should be.
    """
    if out_path.is_dir():
        raise RecordingError(f"cannot write the contact sheet {out_path}: it is a folder; "
                             f"give a file name such as {out_path / 'sheet.png'}")
    if out_path.suffix.lower() != ".png":
        raise InputError(f"the contact sheet is a PNG image: name it {out_path.with_suffix('.png').name}, "
                         f"not {out_path.name}")
    folder = out_path.parent
    blocker = file_in_the_way(folder)
    if blocker is not None:
        raise RecordingError(f"cannot create the folder {folder} for the contact sheet: {blocker} is a file")


def _write_png(out_path: Path, rgb: np.ndarray) -> None:
    """Encode ``rgb`` (H, W, 3) uint8 as PNG in memory (OpenCV) and write it (parents created).

    The file is written through Python, not ``cv2.imwrite``, so a failure is one error with the
    system's reason instead of OpenCV's and libpng's own lines on stderr; a part file renamed into
    place keeps an older sheet whole when the write fails.

    Raises:
        RecordingError: the folder cannot be created or the file cannot be written.
    """
    import cv2

    ok, buf = cv2.imencode(".png", np.ascontiguousarray(rgb[:, :, ::-1]), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    if not ok:
        raise RecordingError(f"cannot encode the contact sheet {out_path} as PNG")
    part = out_path.with_name(f".{out_path.name}.part")
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(buf.tobytes())
        part.replace(out_path)
    except OSError as exc:
        if part.parent.is_dir():
            part.unlink(missing_ok=True)
        raise RecordingError(f"cannot write the contact sheet {out_path}: "
                             f"{exc.strerror or exc}") from exc


def make_contact_sheet(out_path: str | Path, size: int = 192, *, avatar: AvatarMesh | None = None,
                       face_model=None, columns: int = 6, msaa: int = 4) -> Path:
    """Render the contact sheet to a PNG.

    Args:
        out_path: the PNG to write (parent folders are created).
        size: edge of one rendered tile, pixels (64..1024); the sheet is about
            ``2 * columns * size`` pixels wide.
        avatar: the avatar shown on the right; default the default head
            (:func:`~avatar_app.avatar.default_head.build_default_head`).
        face_model: the rig; default the shipped face model.
        columns: cells (pairs of tiles) per row.
        msaa: multisampling of the renders (0, 2, 4, 8).

    Returns:
        ``out_path`` as a :class:`Path`.

    Raises:
        InputError: a size or column count out of range, or ``out_path`` not named ``.png``.
        BackendUnavailableError: no offscreen OpenGL context.
        RecordingError: the PNG cannot be written (a folder in its place, a file where a
            folder should be, no permission, a full disk), checked before the tiles render.
    """
    if not 1 <= int(columns) <= 26:
        raise InputError(f"contact sheet columns must be within 1..26, got {columns}")
    columns = int(columns)
    out_path = Path(out_path)
    _check_sheet_path(out_path)
    shapes, identity = render_tiles(size, avatar=avatar, face_model=face_model, msaa=msaa)
    size = next(iter(shapes.values()))[0].shape[0]

    label_h = max(16, size // 9)
    pad = max(4, size // 32)
    cell_w, cell_h = 2 * size + pad, size + label_h
    n_rows = -(-len(shapes) // columns)
    n_rows_id = -(-len(identity) // columns)
    title_h = 2 * label_h
    width = columns * cell_w + (columns + 1) * pad
    height = title_h + (n_rows + n_rows_id) * (cell_h + pad) + label_h + 2 * pad
    sheet = np.full((height, width, 3), 30, np.uint8)
    font = label_h / 30.0
    _label(sheet, "ARKit shapes at weight 1: face model (left) | default avatar (right). "
                  "Heads face the viewer: their own Left is on the image's right.",
           pad, int(label_h * 1.3), font * 1.1)

    def place(tile: np.ndarray, row: int, col: int, right: bool, y0: int) -> None:
        x = pad + col * (cell_w + pad) + (size + pad if right else 0)
        y = y0 + row * (cell_h + pad) + label_h
        sheet[y:y + size, x:x + size] = tile

    def cell_label(text: str, row: int, col: int, y0: int) -> None:
        _label(sheet, text, pad + col * (cell_w + pad) + 2, y0 + row * (cell_h + pad) + int(label_h * 0.8), font)

    for k, (name, (rig_tile, av_tile)) in enumerate(shapes.items()):
        row, col = divmod(k, columns)
        place(rig_tile, row, col, False, title_h)
        place(av_tile, row, col, True, title_h)
        cell_label("mouthClose (+jawOpen)" if name == "mouthClose" else name, row, col, title_h)
    y_id = title_h + n_rows * (cell_h + pad) + label_h
    _label(sheet, "Face model identity morphs, three-quarter view: coefficient -1 (left) | +1 (right).", pad,
           y_id - int(label_h * 0.3), font * 1.1)
    for k, (name, (minus, plus)) in enumerate(identity.items()):
        row, col = divmod(k, columns)
        place(minus, row, col, False, y_id)
        place(plus, row, col, True, y_id)
        cell_label(f"{name}  -1 | +1", row, col, y_id)
    _write_png(out_path, sheet)
    logger.info("contact sheet %s: %dx%d pixels", out_path, width, height)
    return out_path
