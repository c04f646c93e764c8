"""Videos with a display matrix (phone clips: ``rotate=90``) are decoded upright (issue 21, item 9).

Test clips are made at test time from a test-data clip by stream copy with rotation metadata
(nothing is committed); FFmpeg's own auto-rotation (what every player shows) is the reference.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from avatar_app.capture.live_file import LiveFileSource
from avatar_app.capture.video_file import VideoFileSource

W, H = 360, 288  # grid_s1_bbaf2n.mp4


@pytest.fixture(scope="module")
def rotated(testdata, tmp_path_factory):
    """rotate tag (degrees) -> a 1 s copy of grid_s1_bbaf2n.mp4 carrying it."""
    folder = tmp_path_factory.mktemp("rotated")
    clips = {}
    for deg in (0, 90, 180, 270):
        out = folder / f"rot{deg}.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-i", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-t", "1",
                        "-c", "copy", "-metadata:s:v", f"rotate={deg}", str(out)], check=True, timeout=60)
        clips[deg] = out
    return clips


@pytest.fixture(scope="module")
def phone_clip(testdata, tmp_path_factory) -> Path:
    """What a phone writes: frames stored turned a quarter clockwise, and rotate=90 to show them upright."""
    folder = tmp_path_factory.mktemp("phone")
    side = folder / "side.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-t", "1",
                    "-vf", "transpose=clock", "-c:v", "libx264", "-c:a", "copy", str(side)], check=True, timeout=60)
    out = folder / "phone.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(side), "-c", "copy", "-metadata:s:v", "rotate=90", str(out)],
                   check=True, timeout=60)
    return out


def _ffmpeg_first_frame(path: Path, w: int, h: int) -> np.ndarray:
    """The first frame as FFmpeg shows it (auto-rotation on), (h, w, 3) uint8 BGR."""
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-frames:v", "1", "-f", "rawvideo",
                          "-pix_fmt", "bgr24", "-"], check=True, capture_output=True, timeout=60).stdout
    return np.frombuffer(raw, np.uint8).reshape(h, w, 3)


@pytest.mark.parametrize("deg", [0, 90, 180, 270])
def test_frames_come_out_as_players_show_them(rotated, deg):
    upright = deg in (0, 180)
    w, h = (W, H) if upright else (H, W)
    with VideoFileSource(rotated[deg]) as src:
        assert (src.info.width, src.info.height) == (w, h)  # the displayed size
        first = next(iter(src.frames()))
    want = _ffmpeg_first_frame(rotated[deg], w, h)
    assert first.image.shape == (h, w, 3) and first.image.flags.c_contiguous
    assert np.abs(first.image.astype(int) - want).mean() < 1.0


def test_a_phone_clip_is_decoded_upright(phone_clip, testdata):
    with VideoFileSource(phone_clip) as src:
        assert (src.info.width, src.info.height) == (W, H)
        first = next(iter(src.frames()))
    with VideoFileSource(testdata / "video" / "grid_s1_bbaf2n.mp4") as ref:
        want = next(iter(ref.frames())).image
    assert np.abs(first.image.astype(int) - want).mean() < 4.0  # the re-encode's loss only


@pytest.mark.slow
@pytest.mark.gl
def test_a_phone_clip_renders_with_the_head_upright(phone_clip, tmp_path):
    """The field report: main rendered this clip with head roll -88 deg."""
    import json

    from tests.helpers import run_cli

    out = tmp_path / "o.mp4"
    proc = run_cli("render", str(phone_clip), "-o", str(out), "--size", "160x120", "-q")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(ln) for ln in out.with_suffix(".blendshapes.jsonl").read_text().splitlines()[1:]]
    rolls = [np.degrees(np.arctan2(r["rotation"][1][0], r["rotation"][0][0])) for r in rows if r.get("rotation")]
    assert len(rolls) > 20 and np.abs(np.median(rolls)) < 10, np.round(rolls, 1)


def test_live_playback_is_upright_too(rotated):
    with LiveFileSource(rotated[90]) as src:
        assert src.granted[:2] == (H, W)
        frame = src.get_latest(timeout_s=10.0)
    assert frame is not None and frame.image.shape == (W, H, 3)


def _matrix(a, b, c, d) -> bytes:
    """A display matrix (FFmpeg's 3x3 int32, 16.16 fixed point, w = 1 in 2.30) as side-data bytes."""
    return np.array([a * 65536, b * 65536, 0, c * 65536, d * 65536, 0, 0, 0, 1 << 30], "<i4").tobytes()


def test_display_transform_handles_rotations_and_mirrors():
    from avatar_app.capture._media import display_transform

    img = np.arange(2 * 3).reshape(2, 3)  # [[0 1 2] [3 4 5]]
    apply = lambda m: display_transform(_matrix(*m))(img)  # noqa: E731
    assert display_transform(None) is None and display_transform(_matrix(1, 0, 0, 1)) is None
    assert apply((0, -1, 1, 0)).tolist() == np.rot90(img, 1).tolist()  # ffmpeg rotate=90 (shown counterclockwise)
    assert apply((-1, 0, 0, -1)).tolist() == np.rot90(img, 2).tolist()
    assert apply((0, 1, -1, 0)).tolist() == np.rot90(img, 3).tolist()
    assert apply((-1, 0, 0, 1)).tolist() == img[:, ::-1].tolist()  # mirrored (front camera)
    assert apply((1, 0, 0, -1)).tolist() == img[::-1].tolist()
    assert apply((0, 1, 1, 0)).tolist() == img.T.tolist()  # transpose: a mirror and a quarter turn
