"""Part files (avatar_app.record.parts): names, commit, discard, and stale parts of killed renders."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from avatar_app.core.errors import RecordingError
from avatar_app.record.parts import OutputParts, remove_stale_parts

SIDE = ".blendshapes.jsonl"


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def test_part_names_are_hidden_and_keep_the_extension_last(tmp_path):
    parts = OutputParts(tmp_path / "my.clip.mp4", (SIDE,))
    clip, side = parts.parts
    assert parts.targets == [tmp_path / "my.clip.mp4", tmp_path / "my.clip.blendshapes.jsonl"]
    assert clip.parent == tmp_path and clip.name.startswith(f".my.clip.part-{os.getpid()}-")
    assert clip.suffix == ".mp4" and side.name.endswith(SIDE)
    assert side.name[: -len(SIDE)] == clip.name[: -len(".mp4")]
    assert OutputParts(tmp_path / "my.clip.mp4", (SIDE,)).clip != clip  # unique per render


def test_commit_replaces_targets_and_discard_leaves_them(tmp_path):
    target = tmp_path / "o.mp4"
    target.write_bytes(b"old")
    (tmp_path / "o.blendshapes.jsonl").write_bytes(b"old track")
    failed = OutputParts(target, (SIDE,))
    for p in failed.parts:
        p.write_bytes(b"new")
    failed.discard()
    failed.discard()  # idempotent
    assert target.read_bytes() == b"old" and not any(p.exists() for p in failed.parts)
    kept = OutputParts(target, (SIDE,))
    for p in kept.parts:
        p.write_bytes(b"new " + p.suffix.encode())
    kept.commit()
    assert target.read_bytes() == b"new .mp4"
    assert (tmp_path / "o.blendshapes.jsonl").read_bytes() == b"new .jsonl"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.blendshapes.jsonl", "o.mp4"]


def test_commit_over_a_folder_is_a_recording_error(tmp_path):
    (tmp_path / "o.mp4").mkdir()
    parts = OutputParts(tmp_path / "o.mp4")
    parts.clip.write_bytes(b"new")
    with pytest.raises(RecordingError, match=r"o\.mp4"):
        parts.commit()
    assert not parts.clip.exists()


def test_stale_parts_of_dead_renders_are_removed_others_kept(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    names = {
        f".o.part-{dead}-0a1b2c3d.mp4": False, f".o.part-{dead}-0a1b2c3d{SIDE}": False,  # killed render
        f".o.part-{alive}-00ff00ff.mp4": True,  # a render still running
        f".other.part-{dead}-0a1b2c3d.mp4": True,  # another output's
        f".o.part-{dead}-0a1b2c3d.txt": True, "o.mp4": True,  # not a part file of o.mp4
    }
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    removed = remove_stale_parts(tmp_path / "o.mp4", (SIDE,))
    assert sorted(p.name for p in removed) == sorted(n for n, keep in names.items() if not keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, keep in names.items() if keep)
    OutputParts(tmp_path / "other.mp4")  # a new render cleans up its own output's stale parts
    assert not (tmp_path / f".other.part-{dead}-0a1b2c3d.mp4").exists()
