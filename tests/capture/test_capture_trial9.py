"""Inputs from the ninth session's new-user trial: AVI with B-frames, cut Matroska / WebM, a cut MP3.

Each file is made from the shared recordings with PyAV (packets copied, nothing re-encoded).
"""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from avatar_app.capture import _media
from avatar_app.capture.video_file import VideoFileSource
from tests.clip_helpers import remux

GRID = "grid_s1_bbaf2n.mp4"  # H.264 with B-frames, 75 frames at 25 fps


def _to_avi(src: Path, dst: Path) -> Path:
    """``src``'s H.264 video copied into AVI (Annex B, as FFmpeg's ``-c copy`` writes it)."""
    with av.open(str(src)) as c, av.open(str(dst), "w", format="avi") as out:
        vin = c.streams.video[0]
        vs = out.add_stream_from_template(vin)
        vs.codec_tag = "H264"
        bsf = av.BitStreamFilterContext("h264_mp4toannexb", vin)
        for pkt in c.demux(vin):
            if pkt.dts is None:
                continue
            for p in bsf.filter(pkt):
                p.stream = vs
                out.mux(p)
    return dst


def _to_mkv(src: Path, dst: Path) -> Path:
    return remux(src, dst, "matroska")


def _cut(src: Path, dst: Path, keep: float) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])
    return dst


@pytest.fixture(scope="module")
def avi(testdata, tmp_path_factory) -> Path:
    return _to_avi(testdata / "video" / GRID, tmp_path_factory.mktemp("avi") / "grid.avi")


def test_avi_with_b_frames_reads_every_frame_in_rising_time_and_is_not_called_cut(avi, testdata):
    with av.open(str(avi)) as c:  # the case: decode-order labels, and a count in index ticks
        v = c.streams.video[0]
        labels = [f.pts for f in c.decode(v)]
        assert v.frames > 75 and any(b < a for a, b in zip(labels, labels[1:]))
    with VideoFileSource(avi) as src:
        frames = list(src.frames())
    assert (src.info.fps, src.info.frame_count, len(frames)) == (25.0, 75, 75)
    assert not src.truncated, src.problem
    times = np.array([f.media_time_s for f in frames])
    assert np.all(np.diff(times) > 0) and np.allclose(np.diff(times), 0.04, atol=0.021)
    with VideoFileSource(testdata / "video" / GRID) as mp4:  # the same pictures as the MP4, in order
        ref = [f.image for f in mp4.frames()]
    assert max(float(np.abs(a.image.astype(np.int16) - b).mean()) for a, b in zip(frames, ref)) < 1.0


def test_in_presentation_times_passes_rising_times_through():
    class F:
        def __init__(self, t):
            self.time = t

    fs = [F(0.0), F(0.04), F(None), F(0.12)]
    assert [(f, t) for f, t in _media.in_presentation_times(iter(fs), depth=2)] == \
        [(fs[0], 0.0), (fs[1], 0.04), (fs[2], None), (fs[3], 0.12)]
    swapped = [F(0.0), F(0.08), F(0.04), F(0.12)]
    assert [t for _, t in _media.in_presentation_times(iter(swapped), depth=2)] == [0.0, 0.04, 0.08, 0.12]


@pytest.mark.parametrize("keep", [0.5, 0.8])
def test_cut_matroska_is_found_from_its_tracks_duration_tag(testdata, tmp_path, keep):
    whole = _to_mkv(testdata / "video" / GRID, tmp_path / "grid.mkv")
    with VideoFileSource(whole) as src:
        assert len(list(src.frames())) == 75 and not src.truncated, src.problem
    cut = _cut(whole, tmp_path / "cut.mkv", keep)
    with VideoFileSource(cut) as src:
        n = len(list(src.frames()))
    assert 0 < n < 75 and src.truncated and "of 3.0" in src.problem, (n, src.problem)


def test_tagged_duration_reads_matroskas_form():
    class S:
        metadata = {"DURATION": "01:02:03.500000000"}

    assert _media.tagged_duration_s(S()) == pytest.approx(3723.5)
    S.metadata = {"DURATION": "3 s"}
    assert _media.tagged_duration_s(S()) is None


def test_mpeg_audio_frame_lengths_from_their_headers():
    assert _media.mpeg_audio_frame_bytes(bytes.fromhex("fffb38c4")) == 216  # MPEG-1 L3 48 kbit/s 32 kHz
    assert _media.mpeg_audio_frame_bytes(bytes.fromhex("fffb9064")) == 417  # 128 kbit/s 44.1 kHz
    assert _media.mpeg_audio_frame_bytes(bytes.fromhex("fffb9264")) == 418  # ... with padding
    assert _media.mpeg_audio_frame_bytes(bytes.fromhex("fff38864")) == 288  # MPEG-2 L3 64 kbit/s 16 kHz
    assert _media.mpeg_audio_frame_bytes(bytes.fromhex("fff38064")) == 208  # ... 22.05 kHz
    assert _media.mpeg_audio_frame_bytes(b"\x00\x00\x00\x00") is None
    assert _media.mpeg_audio_frame_bytes(bytes.fromhex("fffb08c4")) is None  # free format


def test_a_cut_mp3_is_found_and_a_whole_one_is_not(testdata, tmp_path):
    mp3 = testdata / "audio" / "common_voice_ja_24511055.mp3"
    assert _media.cut_short(mp3, "mp3") is None
    data = mp3.read_bytes()
    cut = tmp_path / "cut.mp3"
    cut.write_bytes(data[:13047])  # the trial's cut: inside a frame
    what = _media.cut_short(cut, "mp3")
    assert what is not None and "of its 216 bytes" in what, what


def test_a_cut_avi_is_still_found_from_its_headers_length(avi, tmp_path):
    cut = _cut(avi, tmp_path / "cut.avi", 0.5)  # the index at the end is gone; the header keeps the length
    with VideoFileSource(cut) as src:
        n = len(list(src.frames()))
    assert 0 < n < 60 and src.truncated, (n, src.problem)
