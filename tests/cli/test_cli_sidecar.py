"""Reading the sidecar of a render killed with SIGKILL: a cut-off last line is skipped.

The writer flushes whole lines, but a kill can land inside the write of one, so
the file may end anywhere: inside the JSON of the last line, inside a
character, or even inside the header.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.core.types import AvatarState
from avatar_app.record.sidecar import SidecarWriter, read_sidecar
from avatar_app.record.tracks import convert_sidecar


def _states(n: int) -> list[AvatarState]:
    rng = np.random.default_rng(3)
    return [
        AvatarState(t_capture_ns=i, media_time_s=i / 25, weights=rng.random(52).astype(np.float32),
                    rotation=np.eye(3, dtype=np.float32), translation=np.array([0, 0, -0.4], np.float32),
                    gaze=np.zeros(2, np.float32), face_found=True, frame_index=i)
        for i in range(n)
    ]


@pytest.fixture
def track_bytes(tmp_path) -> bytes:
    path = tmp_path / "full.blendshapes.jsonl"
    with SidecarWriter(path, fps=25.0) as w:
        for s in _states(4):
            w.write(s)
    return path.read_bytes()


def test_every_cut_inside_the_last_line_keeps_the_complete_lines(tmp_path, track_bytes, caplog):
    last_start = track_bytes.rstrip(b"\n").rfind(b"\n") + 1
    path = tmp_path / "cut.blendshapes.jsonl"
    for cut in range(last_start + 1, len(track_bytes) - 1):  # ends inside the last line's JSON
        path.write_bytes(track_bytes[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="avatar_app.record.sidecar"):
            track = read_sidecar(path)
        assert len(track) == 3, cut
        assert "cut off" in caplog.text, cut
    path.write_bytes(track_bytes[:last_start])  # cut exactly at a line end: nothing to warn about
    assert len(read_sidecar(path)) == 3


def test_cut_inside_a_multibyte_character(tmp_path, track_bytes):
    # the writer emits ASCII today; a cut inside a UTF-8 sequence must still count as a cut line
    path = tmp_path / "cut.blendshapes.jsonl"
    path.write_bytes(track_bytes + '{"frame": 4, "note": "é'.encode()[:-1])
    assert len(read_sidecar(path)) == 4


def test_cut_inside_the_header_says_so(tmp_path, track_bytes):
    header_len = track_bytes.index(b"\n")
    path = tmp_path / "cut.blendshapes.jsonl"
    for cut in (0, 5, header_len // 2, header_len - 1):
        path.write_bytes(track_bytes[:cut])
        with pytest.raises(InputError, match="header line is cut off"):
            read_sidecar(path)
    path.write_bytes(track_bytes[:header_len])  # a whole header, no frame yet
    assert len(read_sidecar(path)) == 0


def test_broken_line_before_the_last_is_still_an_error(tmp_path, track_bytes):
    lines = track_bytes.split(b"\n")
    lines[2] = lines[2][:40]
    path = tmp_path / "bad.blendshapes.jsonl"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(InputError, match="line 3"):
        read_sidecar(path)


def test_tracks_converter_reads_a_killed_track(tmp_path, track_bytes):
    path = tmp_path / "killed.blendshapes.jsonl"
    path.write_bytes(track_bytes[:-30])
    csv = tmp_path / "killed.csv"
    convert_sidecar(path, csv)
    assert len(csv.read_text().splitlines()) == 1 + 3  # header row + the 3 complete frames
