"""Blendshape tracks: Live Link Face CSV and glTF animation, from arrays and from a sidecar."""
from __future__ import annotations

import csv
import math

import numpy as np
import pygltflib
import pytest

from avatar_app.avatar.mesh import AvatarMesh, Material, MeshPrimitive
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape
from avatar_app.core.errors import InputError
from avatar_app.core.rotations import gaze_rotation, matrix_from_quat, rot_x, rot_y, rot_z, rotation_from_euler
from avatar_app.core.types import AvatarState
from avatar_app.record import SidecarWriter
from avatar_app.record.tracks import (
    LIVE_LINK_ANGLES,
    LIVE_LINK_COLUMNS,
    convert_sidecar,
    export_gltf_animation,
    live_link_angles,
    main,
    parse_timecode,
    read_live_link_csv,
    timecode,
    write_live_link_csv,
)

T = 24


def track(seed: int = 0):
    """(t, weights, rotations, gaze) of a synthetic take: the head turns, the eyes wander."""
    rng = np.random.default_rng(seed)
    t = np.arange(T) / 30.0 + 0.1
    w = rng.random((T, 52)).astype(np.float32)
    rot = np.stack([rot_y(0.02 * i) @ rot_x(-0.01 * i) @ rot_z(0.005 * i) for i in range(T)])
    gaze = np.stack([0.01 * np.arange(T), -0.005 * np.arange(T)], axis=1)
    return t, w, rot.astype(np.float32), gaze.astype(np.float32)


# ---------------------------------------------------------------------------- CSV
@pytest.mark.parametrize("t, fps, tc", [
    (0.0, 30, "00:00:00:00.000"),
    (61.5, 30, "00:01:01:15.000"),
    (3723.0 + 7.5 / 30, 30, "01:02:03:07.500"),
    (1 / 60, 30, "00:00:00:00.500"),
    (10.0 + 59 / 60, 60, "00:00:10:59.000"),
    (29.999999, 30, "00:00:30:00.000"),  # rounds up into the next second, not to frame 30
])
def test_timecode(t, fps, tc):
    assert timecode(t, fps) == tc
    assert parse_timecode(tc, fps) == pytest.approx(round(t * fps * 1000) / (fps * 1000), abs=1e-9)


def test_timecode_rejects_negative_time():
    with pytest.raises(InputError, match=">= 0"):
        timecode(-0.1, 30)


def test_csv_has_live_link_layout_and_reads_back(tmp_path):
    t, w, rot, gaze = track()
    rot[3] = rot_y(math.radians(20))  # subject turns 20 degrees to their own left
    gaze[5] = (0.2, 0.1)
    path = write_live_link_csv(tmp_path / "take.csv", t, w, rot, gaze, fps=30)
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    assert header == list(LIVE_LINK_COLUMNS) and len(header) == 2 + 52 + 9
    arkit_cols = header[2:54]
    assert {c[0].lower() + c[1:] for c in arkit_cols} == set(BLENDSHAPE_NAMES)
    assert all(c[0].isupper() for c in arkit_cols)
    assert arkit_cols.index("JawRight") < arkit_cols.index("JawLeft")  # the app's order
    assert arkit_cols.index("MouthRight") < arkit_cols.index("MouthLeft")
    assert header[54:] == list(LIVE_LINK_ANGLES)
    assert len(rows) == T + 1 and all(r[1] == "61" for r in rows[1:])
    assert rows[1][0] == "00:00:00:03.000"  # t = 0.1 s at 30 fps

    back = read_live_link_csv(path, fps=30)
    assert back.weights.shape == (T, 52)
    np.testing.assert_allclose(back.weights, w, atol=1e-6)
    np.testing.assert_allclose(back.t, np.round(t * 30) / 30, atol=1e-9)
    assert float(back.column("JawOpen")[7]) == pytest.approx(w[7, Blendshape.jawOpen], abs=1e-6)
    assert back.column("HeadYaw")[3] == pytest.approx(math.radians(20), abs=1e-6)
    assert back.column("HeadPitch")[3] == pytest.approx(0, abs=1e-6)
    assert back.column("LeftEyeYaw")[5] == pytest.approx(0.2, abs=1e-6)
    assert back.column("RightEyePitch")[5] == pytest.approx(-0.1, abs=1e-6)  # + = down
    # the head angles re-compose the rotation: R = Ry(yaw) Rx(pitch) Rz(roll)
    for i in (0, 10, 23):
        y, p, r = (back.column(n)[i] for n in ("HeadYaw", "HeadPitch", "HeadRoll"))
        np.testing.assert_allclose(rot_y(y) @ rot_x(p) @ rot_z(r), rot[i], atol=2e-5)


def test_csv_in_degrees_and_without_pose(tmp_path):
    t, w, rot, _ = track()
    p = write_live_link_csv(tmp_path / "deg.csv", t, w, rot, None, angle_unit="deg")
    back = read_live_link_csv(p)
    assert back.column("HeadYaw")[10] == pytest.approx(math.degrees(0.2), abs=1e-4)
    assert not back.column("LeftEyeYaw").any()
    p = write_live_link_csv(tmp_path / "bare.csv", t, w)
    assert not read_live_link_csv(p).angles.any()


def test_csv_bad_input(tmp_path):
    t, w, rot, _ = track()
    with pytest.raises(InputError, match=r"\(24, 52\)"):
        write_live_link_csv(tmp_path / "x.csv", t, w[:, :51])
    with pytest.raises(InputError, match="angle_unit"):
        write_live_link_csv(tmp_path / "x.csv", t, w, angle_unit="grad")
    (tmp_path / "bad.csv").write_text("Timecode,BlendShapeCount,EyeBlinkLeft\n00:00:00:00.000,1,0.5\n")
    with pytest.raises(InputError, match="lacks blendshape columns"):
        read_live_link_csv(tmp_path / "bad.csv")
    with pytest.raises(InputError, match="not a Live Link Face CSV"):
        (tmp_path / "nope.csv").write_text("a,b\n")
        read_live_link_csv(tmp_path / "nope.csv")


# ---------------------------------------------------------------------------- glTF
def accessor_array(g: pygltflib.GLTF2, index: int) -> np.ndarray:
    """Decode an accessor (dense, sparse or without a buffer view) from a loaded GLB."""
    acc = g.accessors[index]
    blob = g.binary_blob()
    ncomp = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}[acc.type]
    dtype = {pygltflib.FLOAT: np.float32, pygltflib.UNSIGNED_INT: np.uint32,
             pygltflib.UNSIGNED_SHORT: np.uint16}[acc.componentType]

    def view(bv_index, dt, count, comps):
        bv = g.bufferViews[bv_index]
        return np.frombuffer(blob, dt, count * comps, bv.byteOffset or 0).reshape(count, comps)

    if acc.bufferView is None:
        out = np.zeros((acc.count, ncomp), dtype)
    else:
        out = view(acc.bufferView, dtype, acc.count, ncomp).copy()
    if acc.sparse is not None:
        sp = acc.sparse
        idx_dtype = {pygltflib.UNSIGNED_INT: np.uint32, pygltflib.UNSIGNED_SHORT: np.uint16}[sp.indices.componentType]
        idx = view(sp.indices.bufferView, idx_dtype, sp.count, 1)[:, 0]
        out[idx] = view(sp.values.bufferView, dtype, sp.count, ncomp)
    return out


@pytest.fixture(scope="module")
def default_head():
    from avatar_app.avatar.default_head import build_default_head

    return build_default_head()


def animation_channels(g):
    anim = g.animations[0]
    out = {}
    for ch in anim.channels:
        s = anim.samplers[ch.sampler]
        out[(g.nodes[ch.target.node].name, ch.target.path)] = (s, accessor_array(g, s.input)[:, 0],
                                                             accessor_array(g, s.output))
    return out


def test_gltf_animation_on_default_head(tmp_path, default_head):
    t, w, rot, gaze = track()
    path = export_gltf_animation(tmp_path / "take.glb", t, w, rot, gaze, mesh=default_head)
    g = pygltflib.GLTF2().load(str(path))
    mesh = g.meshes[0]
    names = mesh.extras["targetNames"]
    assert tuple(names) == default_head.target_names and len(names) > 40
    assert all(len(p.targets) == len(names) for p in mesh.primitives)
    ch = animation_channels(g)
    mesh_node = next(n.name for n in g.nodes if n.mesh == 0)
    sampler, times, out = ch[(mesh_node, "weights")]
    assert sampler.interpolation == "LINEAR"
    np.testing.assert_allclose(times, t - t[0], atol=1e-6)
    weights = out.reshape(T, len(names))
    cols = [BLENDSHAPE_NAMES.index(n) for n in names]
    np.testing.assert_array_equal(weights, w[:, cols])  # the default head maps 1:1
    # head rotation: neck share then head; together the track's rotation
    _, _, neck_q = ch[("neck", "rotation")]
    _, times_h, head_q = ch[("head", "rotation")]
    np.testing.assert_allclose(times_h, times)
    for i in (0, 11, 23):
        composed = matrix_from_quat(neck_q[i]) @ matrix_from_quat(head_q[i])
        np.testing.assert_allclose(composed, rot[i], atol=1e-5)
    _, _, eye_q = ch[("eye_L", "rotation")]
    np.testing.assert_allclose(matrix_from_quat(eye_q[7]), gaze_rotation(*gaze[7]), atol=1e-5)
    # skin and morph data round-trip
    skin = g.skins[0]
    assert [g.nodes[j].name for j in skin.joints] == [j.name for j in default_head.skeleton.joints]
    n_sparse = 0
    for prim, src in zip(mesh.primitives, default_head.primitives):
        np.testing.assert_allclose(accessor_array(g, prim.attributes.POSITION), src.positions)
        for k, name in enumerate(names):
            acc_i = prim.targets[k]["POSITION"]
            delta = accessor_array(g, acc_i)
            ref = src.morph_targets.get(name)
            if ref is None:  # a target this part lacks: zeros without a buffer view
                assert g.accessors[acc_i].bufferView is None and not delta.any()
                continue
            n_sparse += g.accessors[acc_i].sparse is not None
            kept = np.where(np.abs(ref).max(1, keepdims=True) > 1e-6, ref, 0)
            assert np.abs(delta - ref).max() < 1e-4  # only sub-micrometre tails may be dropped
            moved = np.abs(delta).max(1) > 0
            np.testing.assert_array_equal(delta[moved], ref[moved])
            assert not np.abs(kept[~moved]).any()
    assert n_sparse > 10  # most targets move a small part of the head: stored sparse


def tiny_mesh() -> AvatarMesh:
    """A quad with one morph target driven by two ARKit shapes, no skeleton."""
    pos = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32) * 0.1
    prim = MeshPrimitive(
        name="quad", positions=pos, normals=np.tile([0, 0, 1], (4, 1)).astype(np.float32),
        indices=np.array([0, 1, 2, 0, 2, 3], np.uint32), material=Material("m"),
        morph_targets={"blink": np.array([[0, 0, 0], [0, 0, 0], [0, -0.05, 0], [0, -0.05, 0]],
                                         np.float32)})
    return AvatarMesh("tiny", [prim], blendshape_map={"eyeBlinkLeft": {"blink": 0.75},
                                                        "eyeBlinkRight": {"blink": 0.75}})


def test_gltf_generic_mesh_without_skeleton(tmp_path):
    t, w, rot, gaze = track(1)
    path = export_gltf_animation(tmp_path / "tiny.gltf", t, w, rot, gaze, mesh=tiny_mesh())
    assert (tmp_path / "tiny.bin").is_file()
    g = pygltflib.GLTF2().load(str(path))
    with pytest.warns(UserWarning, match="orphaned"):  # pygltflib: the .bin stays on disk
        g.convert_buffers(pygltflib.BufferFormat.BINARYBLOB)
    ch = animation_channels(g)
    _, _, out = ch[("tiny mesh", "weights")]
    expect = np.clip(0.75 * (w[:, Blendshape.eyeBlinkLeft] + w[:, Blendshape.eyeBlinkRight]), 0, 1)
    np.testing.assert_allclose(out[:, 0], expect, atol=1e-6)
    _, _, q = ch[("head", "rotation")]
    np.testing.assert_allclose(matrix_from_quat(q[20]), rot[20], atol=1e-5)
    assert g.meshes[0].extras["targetNames"] == ["blink"]


def test_gltf_bad_input(tmp_path):
    t, w, rot, gaze = track()
    with pytest.raises(InputError, match="glb or .gltf"):
        export_gltf_animation(tmp_path / "x.obj", t, w, mesh=tiny_mesh())
    t2 = t.copy()
    t2[5] = t2[4]
    with pytest.raises(InputError, match="strictly increase"):
        export_gltf_animation(tmp_path / "x.glb", t2, w, mesh=tiny_mesh())
    with pytest.raises(InputError, match=r"\(24, 3, 3\)"):
        export_gltf_animation(tmp_path / "x.glb", t, w, rot[:3], mesh=tiny_mesh())


# ---------------------------------------------------------------------------- sidecar
def write_sidecar(path, n: int = T):
    t, w, rot, gaze = track(2)
    with SidecarWriter(path, fps=30.0) as sw:
        for i in range(n):
            sw.write(AvatarState(t_capture_ns=i, media_time_s=float(t[i]), weights=w[i],
                                 rotation=rot[i], translation=np.array([0, 0, -0.6], np.float32),
                                 gaze=gaze[i], face_found=True, frame_index=i))
    return t, w, rot, gaze


def test_convert_sidecar_to_both(tmp_path):
    side = tmp_path / "clip.blendshapes.jsonl"
    t, w, rot, gaze = write_sidecar(side)
    csv_p, glb_p = convert_sidecar(side, tmp_path / "clip.csv", tmp_path / "clip.glb",
                                   mesh=tiny_mesh())
    back = read_live_link_csv(csv_p, fps=30)
    np.testing.assert_allclose(back.weights, w, atol=2e-4)  # the sidecar keeps 4 decimals
    assert back.column("HeadYaw")[12] == pytest.approx(0.24, abs=1e-3)
    g = pygltflib.GLTF2().load(str(glb_p))
    assert len(animation_channels(g)) == 2  # weights + head rotation (tiny mesh: no eyes)
    with pytest.raises(InputError, match="CSV path, a glTF path"):
        convert_sidecar(side)


def test_cli_writes_beside_the_track(tmp_path, capsys, monkeypatch):
    side = tmp_path / "take.blendshapes.jsonl"
    write_sidecar(side, 5)
    monkeypatch.setattr("avatar_app.avatar.default_head.build_default_head", tiny_mesh)
    assert main([str(side)]) == 0
    assert (tmp_path / "take.csv").is_file() and (tmp_path / "take.glb").is_file()
    assert "take.csv" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.jsonl"), "--csv", str(tmp_path / "m.csv")]) == 2


def test_live_link_angles_use_arkit_pitch_sign():
    rng = np.random.default_rng(1)
    for _ in range(100):
        q = rng.normal(size=4)
        r = matrix_from_quat(q / np.linalg.norm(q))
        y, p, ro = live_link_angles(r)
        np.testing.assert_allclose(rot_y(y) @ rot_x(p) @ rot_z(ro), r, atol=1e-9)
    # the subject looking up is a negative Live Link pitch (ARKit: pitch > 0 tips the face down)
    y, p, ro = live_link_angles(rotation_from_euler(0.1, 0.2, -0.05))
    assert (y, p, ro) == pytest.approx((0.1, -0.2, -0.05))
    with pytest.raises(InputError, match="finite"):
        live_link_angles(np.full((3, 3), np.nan))

