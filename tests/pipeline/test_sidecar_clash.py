"""Clips of one stem share a sidecar name: a render or a recording must not replace another clip's track."""
from __future__ import annotations

import json

import pytest

from avatar_app.core.errors import RecordingError
from avatar_app.pipeline.offline import RenderOptions
from avatar_app.pipeline.writer import check_output_name, sidecar_clash, sidecar_path_for, unused_clip_path
from avatar_app.record.sidecar import SidecarWriter, read_sidecar, sidecar_owner


def _track(path, clip=None):
    with SidecarWriter(path, fps=30.0, clip=clip):
        pass
    return path


def test_the_track_names_its_clip_and_still_reads(tmp_path):
    t = _track(tmp_path / "take.blendshapes.jsonl", clip="take.mov")
    assert json.loads(t.read_text().splitlines()[0])["clip"] == "take.mov"
    assert sidecar_owner(t) == "take.mov"
    assert read_sidecar(t).header["clip"] == "take.mov"
    assert sidecar_owner(_track(tmp_path / "old.blendshapes.jsonl")) is None  # written before tracks named it
    (tmp_path / "text.blendshapes.jsonl").write_text("not json\n")
    assert sidecar_owner(tmp_path / "text.blendshapes.jsonl") is None
    assert sidecar_owner(tmp_path / "missing.blendshapes.jsonl") is None
    (tmp_path / "other.jsonl").write_text('{"format": "something else", "clip": "x.mp4"}\n')
    assert sidecar_owner(tmp_path / "other.jsonl") is None


def test_a_clip_of_another_format_is_not_given_the_track(tmp_path):
    mov, webm = tmp_path / "take.mov", tmp_path / "take.webm"
    assert sidecar_clash(webm) is None  # nothing there yet
    mov.write_bytes(b"clip")
    _track(sidecar_path_for(mov), clip="take.mov")
    assert sidecar_clash(webm) == mov
    assert sidecar_clash(tmp_path / "take.mp4") == mov
    assert sidecar_clash(mov) is None  # its own track: rendering take.mov again replaces both
    mov.unlink()
    assert sidecar_clash(webm) is None  # the track's clip is gone: nothing left to keep it for


def test_a_track_without_a_clip_name_belongs_to_the_clip_beside_it(tmp_path):
    mov, webm = tmp_path / "take.mov", tmp_path / "take.webm"
    mov.write_bytes(b"clip")
    _track(sidecar_path_for(mov))
    assert sidecar_clash(webm) == mov
    webm.write_bytes(b"clip")  # both clips exist: the track may be webm's own; writing webm again is allowed
    assert sidecar_clash(webm) is None


def test_check_output_name_refuses_the_clash_in_words(tmp_path):
    mov = tmp_path / "take.mov"
    mov.write_bytes(b"clip")
    _track(sidecar_path_for(mov), clip="take.mov")
    with pytest.raises(RecordingError, match=r"take\.blendshapes\.jsonl is the track of take\.mov.*take-2\.webm"):
        check_output_name(tmp_path / "take.webm", RenderOptions(background="transparent"))
    check_output_name(tmp_path / "take-2.webm", RenderOptions(background="transparent"))


def test_unused_clip_path_steps_past_clips_and_tracks(tmp_path):
    want = tmp_path / "avatar-20261204-203015.mp4"
    assert unused_clip_path(want) == want
    want.write_bytes(b"first")
    assert unused_clip_path(want).name == "avatar-20261204-203015-2.mp4"
    (tmp_path / "avatar-20261204-203015-2.blendshapes.jsonl").write_text("a track")  # another format's
    assert unused_clip_path(want).name == "avatar-20261204-203015-3.mp4"
    webm = tmp_path / "avatar-20261204-203015.webm"
    assert unused_clip_path(webm) == webm  # another format, no track of that stem yet
    (tmp_path / "avatar-20261204-203015.blendshapes.jsonl").write_text("the .mp4's track")
    assert unused_clip_path(webm).name == "avatar-20261204-203015-3.webm"
