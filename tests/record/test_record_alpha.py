"""Alpha recordings (ProRes 4444 MOV, VP9 WebM): alpha survives, edges show no fringe."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from avatar_app.core.errors import InputError, RecordingError
from avatar_app.record import AlphaClipRecorder, AsyncRecorder, ClipRecorder, open_recorder
from avatar_app.record import formats as formats_mod
from avatar_app.record.alpha import straight_alpha_frame
from avatar_app.record.formats import available_formats, choose_alpha_format
from tests.helpers import decode_rgba

W, H, FPS, SR = 160, 120, 25, 16000
ALPHA_FORMATS = available_formats(alpha=True)
COLOUR = np.array([255, 200, 0], np.float32)  # orange: the edge test needs strong chroma


def disc_alpha(radius: float = 30.0) -> np.ndarray:
    """(H, W) float alpha of an anti-aliased disc (1 px ramp) slightly off the pixel grid."""
    yy, xx = np.mgrid[0:H, 0:W]
    r = np.hypot(xx - W / 2 + 0.3, yy - H / 2 + 0.2)
    return np.clip(radius - r + 0.5, 0.0, 1.0)


def rgba_frame(a: np.ndarray, premultiplied: bool) -> np.ndarray:
    img = np.zeros((H, W, 4), np.uint8)
    img[..., 3] = np.rint(a * 255)
    straight = np.where(a[..., None] > 0, COLOUR, 0.0)  # colour 0 where fully transparent
    img[..., :3] = np.rint(straight * a[..., None]) if premultiplied else np.rint(straight)
    return img


def edge_error(decoded: np.ndarray, a: np.ndarray) -> float:
    """Largest error of the composite over white on the anti-aliased edge, 8-bit levels."""
    x = decoded.astype(np.float32)
    ad = x[..., 3:4] / 255.0
    comp = x[..., :3] * ad + 255.0 * (1.0 - ad)
    ideal = COLOUR * a[..., None] + 255.0 * (1.0 - a[..., None])
    edge = (a > 0.1) & (a < 0.99)
    return float(np.abs(comp - ideal)[edge].max())


def test_this_build_has_an_alpha_format():
    keys = [f.key for f in ALPHA_FORMATS]
    assert keys, "PyAV's FFmpeg has no ProRes or VP9 encoder"
    assert choose_alpha_format() == ALPHA_FORMATS[0]


@pytest.mark.parametrize("fmt", ALPHA_FORMATS, ids=lambda f: f.key)
def test_alpha_survives_and_audio_is_kept(tmp_path, fmt):
    path = tmp_path / f"clip{fmt.suffix}"
    a = disc_alpha()
    with AlphaClipRecorder(path, W, H, FPS, audio_sample_rate=SR, video_codec=fmt.video_codec) as rec:
        for i in range(25):
            rec.write_video(rgba_frame(a, premultiplied=False), i / FPS)
            rec.write_audio(np.zeros(SR // FPS, np.float32), i / FPS)
    frames = decode_rgba(path)
    assert len(frames) == 25
    for x in frames:
        corners = x[[0, 0, -1, -1], [0, -1, 0, -1], 3]
        assert corners.tolist() == [0, 0, 0, 0]
        assert x[H // 2, W // 2, 3] == 255
        assert np.abs(x[H // 2, W // 2, :3].astype(int) - COLOUR).max() <= 6
    info = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-show_streams", "-of", "json", str(path)],
        capture_output=True, text=True, check=True).stdout)
    kinds = {s["codec_type"]: s for s in info["streams"]}
    assert kinds["video"]["codec_name"] == ("prores" if fmt.container == "mov" else "vp9")
    assert kinds["audio"]["codec_name"] == ("aac" if fmt.container == "mov" else "opus")


@pytest.mark.parametrize("fmt", ALPHA_FORMATS, ids=lambda f: f.key)
@pytest.mark.parametrize("premultiplied", [False, True])
def test_edges_composite_without_fringe(tmp_path, fmt, premultiplied):
    path = tmp_path / f"edge{fmt.suffix}"
    a = disc_alpha()
    with AlphaClipRecorder(path, W, H, FPS, video_codec=fmt.video_codec,
                           premultiplied=premultiplied) as rec:
        for i in range(3):
            rec.write_video(rgba_frame(a, premultiplied), i / FPS)
    assert edge_error(decode_rgba(path)[-1], a) < 12


@pytest.mark.parametrize("fmt", ALPHA_FORMATS, ids=lambda f: f.key)
def test_fringe_control_premultiplied_pixels_declared_straight(tmp_path, fmt):
    """The edge test can fail: premultiplied input taken as straight darkens the edge."""
    path = tmp_path / f"wrong{fmt.suffix}"
    a = disc_alpha()
    with AlphaClipRecorder(path, W, H, FPS, video_codec=fmt.video_codec, premultiplied=False) as rec:
        rec.write_video(rgba_frame(a, premultiplied=True), 0.0)
    assert edge_error(decode_rgba(path)[-1], a) > 30


@pytest.mark.skipif(not any(f.video_codec == "libvpx-vp9" for f in ALPHA_FORMATS),
                    reason="no libvpx-vp9 encoder in this FFmpeg build")
def test_vp9_420_needs_edge_bleeding(tmp_path):
    """4:2:0 chroma mixes the transparent pixels' colour into the edge unless it is padded."""
    path = tmp_path / "nobleed.webm"
    a = disc_alpha()
    with AlphaClipRecorder(path, W, H, FPS, video_codec="libvpx-vp9", bleed_px=0) as rec:
        rec.write_video(rgba_frame(a, premultiplied=False), 0.0)
    assert edge_error(decode_rgba(path)[-1], a) > 30


def test_straight_alpha_frame_unpremultiplies_and_bleeds():
    a = disc_alpha(10.0)
    pre = rgba_frame(a, premultiplied=True)
    out = straight_alpha_frame(pre, premultiplied=True, bleed_px=2)
    assert np.array_equal(out[..., 3], pre[..., 3])  # alpha never changes
    vis = pre[..., 3] > 0
    assert np.abs(out[..., :3][vis].astype(int) - COLOUR).max() <= 255 / pre[..., 3][vis].min()
    yy, xx = np.mgrid[0:H, 0:W]
    r = np.hypot(xx - W / 2 + 0.3, yy - H / 2 + 0.2)
    padded = straight_alpha_frame(rgba_frame(a, premultiplied=False), bleed_px=2)
    ring = ~vis & (r < 10.5 + 1.0)  # first transparent ring: padded with the edge colour
    assert ring.any() and np.abs(padded[..., :3][ring].astype(int) - COLOUR).max() <= 1
    far = r > 10.5 + 4
    assert not out[..., :3][far].any() and not padded[..., :3][far].any()  # beyond bleed_px
    same = straight_alpha_frame(pre, premultiplied=False, bleed_px=0)
    assert np.array_equal(same, pre)
    with pytest.raises(InputError, match="RGBA"):
        straight_alpha_frame(np.zeros((4, 4, 3), np.uint8))


def test_format_choice_follows_the_build(monkeypatch):
    real = formats_mod._encoder_supports
    monkeypatch.setattr(formats_mod, "_encoder_supports",
                        lambda codec, pix: not codec.startswith("prores") and real(codec, pix))
    fmt = choose_alpha_format()
    assert fmt.video_codec == "libvpx-vp9" and fmt.suffix == ".webm"
    with pytest.raises(RecordingError, match=r"\.mov"):
        choose_alpha_format(".mov")
    monkeypatch.setattr(formats_mod, "_encoder_supports", lambda codec, pix: False)
    with pytest.raises(RecordingError, match="no encoder that keeps transparency"):
        choose_alpha_format()
    assert available_formats() == []


def test_suffix_decides_and_bad_calls_raise(tmp_path):
    with pytest.raises(InputError, match=r"\.mov.*\.webm"):
        AlphaClipRecorder(tmp_path / "x.mp4", W, H, FPS)
    with pytest.raises(InputError, match="cannot write transparent"):
        AlphaClipRecorder(tmp_path / "x.mov", W, H, FPS, video_codec="libx264")
    rec = open_recorder(tmp_path / "a.mov", W, H, FPS)
    assert isinstance(rec, AlphaClipRecorder) and rec.frame_shape == (H, W, 4)
    with pytest.raises(InputError, match="RGBA"):
        rec.write_video(np.zeros((H, W, 3), np.uint8), 0.0)
    rec.close()
    rec = open_recorder(tmp_path / "b.mp4", W, H, FPS)
    assert type(rec) is ClipRecorder and rec.frame_shape == (H, W, 3)
    rec.close()
    with pytest.raises(InputError, match="need a .mov"):
        open_recorder(tmp_path / "c.webm", W, H, FPS, fmt="prores4444-mov")
    with pytest.raises(InputError, match="unknown recording format"):
        open_recorder(tmp_path / "c.mp4", W, H, FPS, fmt="nope")


def test_async_alpha_recording_and_cut_file_plays(tmp_path):
    path = tmp_path / "live.mov"
    rec = AsyncRecorder(AlphaClipRecorder(path, W, H, FPS, audio_sample_rate=SR),
                        max_video_frames=1000, max_audio_s=100)
    a = disc_alpha()
    for i in range(75):
        assert rec.write_video(rgba_frame(a, False), i / FPS)
        rec.write_audio(np.zeros(SR // FPS, np.float32), i / FPS)
    rec.close()
    cut = tmp_path / "cut.mov"
    cut.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.6)])  # a crash mid-write
    frames = decode_rgba(cut)
    assert len(frames) >= 30 and frames[-1][0, 0, 3] == 0 and frames[-1][H // 2, W // 2, 3] == 255
