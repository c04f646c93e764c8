"""SidecarWriter / read_sidecar: one JSON line per frame, survives being cut off."""
from __future__ import annotations

import json

import numpy as np
import pytest

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape
from avatar_app.core.errors import InputError, RecordingError
from avatar_app.core.types import AvatarState
from avatar_app.record import SidecarWriter, read_sidecar


def make_states(n: int) -> list[AvatarState]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        a = 0.1 * i
        c, s = np.cos(a), np.sin(a)
        rot = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]], np.float32)
        out.append(AvatarState(
            t_capture_ns=1_000_000 * i, media_time_s=10.0 + i / 30, frame_index=100 + i,
            weights=rng.random(52).astype(np.float32),
            vision_weights=rng.random(52).astype(np.float32),
            audio_weights=rng.random(52).astype(np.float32),
            rotation=rot, translation=np.array([0.01 * i, -0.02, -0.6], np.float32),
            gaze=np.array([0.1, -0.05 * i], np.float32), face_found=i % 3 != 0,
        ))
    return out


def test_round_trip(tmp_path):
    path = tmp_path / "clip.jsonl"
    states = make_states(20)
    with SidecarWriter(path, fps=30.0) as w:
        for i, s in enumerate(states):
            w.write(s, media_time_s=i / 30)
    track = read_sidecar(path)
    assert len(track) == 20 and track.names == BLENDSHAPE_NAMES and track.fps == 30.0
    np.testing.assert_array_equal(track.frame, np.arange(20))
    np.testing.assert_array_equal(track.source_frame, 100 + np.arange(20))
    np.testing.assert_allclose(track.t, np.arange(20) / 30, atol=1e-6)
    np.testing.assert_array_equal(track.face, [s.face_found for s in states])
    for key, attr in [("blendshapes", "weights"), ("vision", "vision_weights"),
                      ("audio", "audio_weights")]:
        got = getattr(track, key)
        assert got.shape == (20, 52) and got.dtype == np.float32
        np.testing.assert_allclose(got, [getattr(s, attr) for s in states], atol=5e-5)
    np.testing.assert_allclose(track.rotation, [s.rotation for s in states], atol=5e-7)
    np.testing.assert_allclose(track.translation, [s.translation for s in states], atol=5e-6)
    np.testing.assert_allclose(track.gaze, [s.gaze for s in states], atol=5e-6)


def test_line_format(tmp_path):
    path = tmp_path / "fmt.jsonl"
    w = SidecarWriter(path)
    w.write(make_states(1)[0])
    # flushed per line: readable before close
    lines = path.read_text().splitlines()
    w.close()
    header, row = json.loads(lines[0]), json.loads(lines[1])
    assert header["blendshape_names"][Blendshape.jawOpen] == "jawOpen"
    assert header["units"]["translation"] == "m"
    assert set(row) == {"frame", "source_frame", "t", "face", "blendshapes", "vision", "audio",
                        "rotation", "translation", "gaze"}
    assert row["t"] == 10.0  # default: the state's media time
    assert len(row["blendshapes"]) == 52
    assert all(round(v, 4) == v for v in row["blendshapes"])


def test_cut_off_last_line_is_skipped(tmp_path):
    path = tmp_path / "cut.jsonl"
    with SidecarWriter(path) as w:
        for s in make_states(5):
            w.write(s)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # killed mid-line
    track = read_sidecar(path)
    assert len(track) == 4


def test_errors(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        read_sidecar(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something else"}\n')
    with pytest.raises(InputError, match="not a blendshape track"):
        read_sidecar(bad)
    broken = tmp_path / "broken.jsonl"
    with SidecarWriter(broken) as w:
        for s in make_states(3):
            w.write(s)
    lines = broken.read_text().splitlines()
    lines[1] = lines[1][:30]
    broken.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 2"):
        read_sidecar(broken)
    with pytest.raises(RecordingError, match="no_dir"):
        SidecarWriter(tmp_path / "no_dir" / "x.jsonl")
    w = SidecarWriter(tmp_path / "closed.jsonl")
    w.close()
    with pytest.raises(RecordingError, match="closed"):
        w.write(make_states(1)[0])


def test_disk_full():
    with pytest.raises(RecordingError, match="/dev/full"):
        SidecarWriter("/dev/full")  # the header write fails with ENOSPC
