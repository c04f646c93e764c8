"""VideoFileSource on the real recordings, and its error paths."""
from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import numpy as np
import pytest

from avatar_app.capture.audio_file import load_audio
from avatar_app.capture.video_file import VideoFileSource, VideoInfo
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import InputError

VIDEOS = ["grid_s1_bbaf2n.mp4", "grid_s1_bbaf2n.mpg", "grid_s2_swwp2s.mp4", "grid_lbax4n.mp4",
          "openmpf_video_01.mp4"]


def ffprobe(path: Path, *args: str) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-of", "json", *args, str(path)],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    return json.loads(out)


def ffprobe_frame_count(path: Path) -> int:
    info = ffprobe(path, "-count_frames", "-select_streams", "v:0",
                   "-show_entries", "stream=nb_read_frames")
    return int(info["streams"][0]["nb_read_frames"])


@pytest.fixture(scope="module")
def grid_mp4(testdata: Path) -> Path:
    return testdata / "video" / "grid_s1_bbaf2n.mp4"


def test_every_test_video_is_covered(testdata: Path):
    found = sorted(p.name for p in (testdata / "video").iterdir() if p.suffix in (".mp4", ".mpg"))
    assert found == sorted(VIDEOS)


@pytest.mark.parametrize("name", VIDEOS)
def test_frames_match_ffprobe(testdata: Path, name: str):
    path = testdata / "video" / name
    probe = ffprobe(path, "-select_streams", "v:0", "-show_entries",
                    "stream=width,height,avg_frame_rate")["streams"][0]
    num, den = (int(x) for x in probe["avg_frame_rate"].split("/"))
    t_before = now_ns()
    with VideoFileSource(path) as src:
        info = src.info
        assert isinstance(info, VideoInfo)
        assert (info.width, info.height) == (probe["width"], probe["height"])
        assert info.fps == pytest.approx(num / den)
        frames = list(src.frames())
    assert len(frames) == ffprobe_frame_count(path)
    assert info.frame_count == len(frames)
    assert info.duration_s == pytest.approx(len(frames) / info.fps, abs=1e-3)
    assert [f.index for f in frames] == list(range(len(frames)))
    times = np.array([f.media_time_s for f in frames])
    assert times[0] == pytest.approx(0.0, abs=1e-9)  # relative to the video stream start
    assert np.diff(times) == pytest.approx(np.full(len(times) - 1, 1 / info.fps), abs=1e-3)
    stamps = [f.t_capture_ns for f in frames]
    assert stamps == sorted(stamps) and stamps[0] >= t_before
    img = frames[10].image
    assert img.shape == (info.height, info.width, 3) and img.dtype == np.uint8
    assert img.flags.c_contiguous


def test_image_is_bgr(grid_mp4: Path):
    """Compare with an independent decode by the ffmpeg CLI (asked for bgr24)."""
    with VideoFileSource(grid_mp4) as src:
        frame = next(iter(src.frames()))
    h, w = frame.image.shape[:2]
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(grid_mp4), "-frames:v", "1",
                          "-f", "rawvideo", "-pix_fmt", "bgr24", "-"],
                         check=True, capture_output=True, timeout=60).stdout
    ref = np.frombuffer(raw, np.uint8).reshape(h, w, 3)
    diff = np.abs(frame.image.astype(int) - ref.astype(int)).mean()
    swapped = np.abs(frame.image[..., ::-1].astype(int) - ref.astype(int)).mean()
    assert diff < 1.0 < swapped


@pytest.mark.parametrize("name", VIDEOS)
def test_audio_duration_and_start(testdata: Path, name: str):
    path = testdata / "video" / name
    probe = ffprobe(path, "-show_entries", "stream=codec_type,start_time,sample_rate")["streams"]
    v = next(s for s in probe if s["codec_type"] == "video")
    a = next(s for s in probe if s["codec_type"] == "audio")
    with VideoFileSource(path) as src:
        info = src.info
        native = src.read_audio()
        at16 = src.read_audio(16000)
    assert info.has_audio and info.audio_sample_rate == int(a["sample_rate"])
    expected_start = float(a["start_time"]) - float(v["start_time"])
    assert info.audio_start_s == pytest.approx(expected_start, abs=1e-4)
    assert native.media_time_s == pytest.approx(expected_start, abs=1e-4)
    assert native.sample_rate == info.audio_sample_rate
    assert at16.sample_rate == 16000 and at16.samples.dtype == np.float32
    assert native.samples.ndim == 1 and np.abs(native.samples).max() <= 1.0
    assert native.samples.shape[0] / native.sample_rate == pytest.approx(info.audio_duration_s,
                                                                          abs=1e-4)
    assert at16.samples.shape[0] / 16000 == pytest.approx(info.audio_duration_s, abs=1e-4)
    assert np.sqrt(np.mean(at16.samples ** 2)) > 0.005  # real sound, not silence


def test_grid_audio_duration_equals_the_original_track(testdata: Path):
    """The 16 kHz WAV is the same recording: both containers must give its length,
    without the AAC end padding (mp4) and including the last MP2 frame (mpg, whose
    audio is shorter than its video)."""
    wav = load_audio(testdata / "audio" / "grid_s1_bbaf2n.wav")
    for name in ("grid_s1_bbaf2n.mp4", "grid_s1_bbaf2n.mpg"):
        with VideoFileSource(testdata / "video" / name) as src:
            chunk = src.read_audio(16000)
            assert src.info.audio_duration_s < src.info.duration_s
        assert abs(chunk.samples.shape[0] - wav.samples.shape[0]) <= 16  # 1 ms


@pytest.mark.parametrize("name", ["grid_s1_bbaf2n.mp4", "grid_s1_bbaf2n.mpg"])
def test_audio_is_time_aligned_with_the_original_track(testdata: Path, name: str):
    wav = load_audio(testdata / "audio" / "grid_s1_bbaf2n.wav").samples
    with VideoFileSource(testdata / "video" / name) as src:
        a = src.read_audio(16000).samples
    n = min(a.shape[0], wav.shape[0])
    margin = 160  # search lags of +-10 ms
    ref = wav[margin:n - margin]
    corr = np.correlate(a[:n], ref, mode="valid")
    lag = int(np.argmax(corr)) - margin
    norm = corr.max() / np.sqrt(np.sum(a[:n] ** 2) * np.sum(ref ** 2))
    assert abs(lag) <= 1
    assert norm > 0.9


def test_frames_can_be_iterated_twice_and_audio_read_meanwhile(grid_mp4: Path):
    with VideoFileSource(grid_mp4) as src:
        it = src.frames()
        first = next(it)
        assert src.read_audio(16000) is not None
        rest = list(it)
        again = list(src.frames())
    assert len(rest) + 1 == len(again)
    assert np.array_equal(first.image, again[0].image)


def test_file_without_audio(tmp_path: Path, grid_mp4: Path):
    out = tmp_path / "silent.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(grid_mp4), "-an", "-c:v", "copy", str(out)],
                   check=True, timeout=60)
    with VideoFileSource(out) as src:
        assert not src.info.has_audio
        assert src.info.audio_sample_rate == 0 and src.info.audio_duration_s == 0.0
        assert src.read_audio() is None
        assert len(list(src.frames())) == 75


# -- errors -----------------------------------------------------------------------------
def test_missing_file(tmp_path: Path):
    with pytest.raises(InputError, match=r"Video file not found: '.*nope\.mp4'"):
        VideoFileSource(tmp_path / "nope.mp4")


def test_directory_is_not_a_file(tmp_path: Path):
    with pytest.raises(InputError, match="is not a file"):
        VideoFileSource(tmp_path)


def test_text_file_renamed_mp4(tmp_path: Path):
    fake = tmp_path / "notes.mp4"
    fake.write_text("these are my notes, not a video\n" * 20)
    with pytest.raises(InputError, match=r"notes\.mp4' is not a readable video") as err:
        VideoFileSource(fake)
    assert err.value.path == fake


def test_truncated_mp4_yields_what_decodes_and_warns(tmp_path: Path, grid_mp4: Path, caplog):
    data = grid_mp4.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: int(len(data) * 0.4)])  # download interrupted at 40 %
    with caplog.at_level(logging.WARNING), VideoFileSource(cut) as src:
        frames = list(src.frames())
        audio = src.read_audio(16000)
    assert 0 < len(frames) < 75
    assert [f.index for f in frames] == list(range(len(frames)))
    assert src.truncated
    assert any("corrupt or truncated" in r.getMessage() and "cut.mp4" in r.getMessage()
               for r in caplog.records)
    assert 0 < audio.samples.shape[0] < 16000 * 2.9


def test_truncated_mp4_with_nothing_decodable(tmp_path: Path, grid_mp4: Path):
    data = grid_mp4.read_bytes()
    cut = tmp_path / "stub.mp4"
    cut.write_bytes(data[:5000])  # header and a sliver of the first key frame
    with VideoFileSource(cut) as src:
        with pytest.raises(InputError, match=r"stub\.mp4' is corrupt or truncated"):
            list(src.frames())


def test_mp4_missing_its_beginning(tmp_path: Path, grid_mp4: Path):
    data = grid_mp4.read_bytes()
    cut = tmp_path / "tail.mp4"
    cut.write_bytes(data[int(len(data) * 0.4):])  # first 40 % of the bytes cut away
    with pytest.raises(InputError,
                       match=r"tail\.mp4' is not a readable video \(corrupt, truncated"):
        VideoFileSource(cut)


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_truncated_mpg_is_found_truncated(tmp_path: Path, testdata: Path, fraction: float, caplog):
    """MPEG-PS: FFmpeg decodes a cut .mpg without an error and takes its length from the cut file;
    the file ending inside its last packet tells that it was cut."""
    full = testdata / "video" / "grid_s1_bbaf2n.mpg"
    with VideoFileSource(full) as src:
        n_full = len(list(src.frames()))
    assert not src.truncated and src.problem == ""
    data = full.read_bytes()
    cut = tmp_path / "cut.mpg"
    cut.write_bytes(data[: int(len(data) * fraction)])
    with caplog.at_level(logging.WARNING), VideoFileSource(cut) as src:
        frames = list(src.frames())
    assert 0 < len(frames) < n_full
    assert src.info.frame_count <= len(frames) + 1  # the header claims no more than what decodes
    assert src.truncated
    assert "ends inside its last" in src.problem
    assert any("corrupt or truncated" in r.getMessage() and "cut.mpg" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("fraction", "box", "suffix", "what"), [(0.6, "media data", "mp4", "an MP4"),
                                                              (0.999, "index", "mp4", "an MP4"),
                                                              (0.6, "media data", "mov", "a MOV")])
def test_mp4_cut_before_its_index_says_nothing_decodes(tmp_path: Path, testdata: Path, fraction: float, box: str,
                                                       suffix: str, what: str):
    """An MP4 whose 'moov' box comes after the media data has no index once cut: the message says so
    (a .mov, the same box layout, is named a MOV)."""
    full = testdata / "video" / "expressive" / "lp_d18.mp4"
    data = full.read_bytes()
    assert data.find(b"moov") > data.find(b"mdat") > 0  # the layout this test is about
    cut = tmp_path / f"cut.{suffix}"
    cut.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(InputError, match=rf"cut\.{suffix}' is truncated and no frame of it can be decoded: "
                                         rf"it is {what} cut short inside its {box}.*'moov'") as err:
        VideoFileSource(cut)
    assert err.value.path == cut


def test_complete_files_pass_the_structure_checks(testdata: Path):
    from avatar_app.capture._media import mp4_index_missing, mpeg_ps_cut_short

    assert mpeg_ps_cut_short(testdata / "video" / "grid_s1_bbaf2n.mpg") is None
    mp4s = sorted((testdata / "video").rglob("*.mp4"))
    assert len(mp4s) >= 5
    assert [p.name for p in mp4s if mp4_index_missing(p) is not None] == []


def test_file_with_no_video_stream(testdata: Path):
    with pytest.raises(InputError, match=r"jfk\.wav' has no video stream \(streams found: audio\)"):
        VideoFileSource(testdata / "audio" / "jfk.wav")


def test_closed_source(grid_mp4: Path):
    src = VideoFileSource(grid_mp4)
    it = src.frames()
    next(it)
    src.close()
    assert list(it) == []  # the open iterator was closed
    with pytest.raises(InputError, match="is closed"):
        src.frames()
    with pytest.raises(InputError, match="is closed"):
        src.read_audio()


def test_bad_sample_rate(grid_mp4: Path):
    with VideoFileSource(grid_mp4) as src:
        with pytest.raises(ValueError, match="sample_rate must be > 0"):
            src.read_audio(0)


def _remux_ts(src: Path, dst: Path) -> Path:
    """``src``'s packets into an MPEG-TS ``dst`` (PyAV, no re-encoding)."""
    from tests.clip_helpers import remux

    return remux(src, dst, "mpegts")


@pytest.fixture(scope="module")
def grid_ts(testdata: Path, tmp_path_factory) -> Path:
    return _remux_ts(testdata / "video" / "grid_s1_bbaf2n.mpg", tmp_path_factory.mktemp("ts") / "grid.ts")


def test_complete_ts_reads_whole(grid_ts: Path):
    """A whole .ts: no structure complaint, 25 fps (not FFmpeg's guess of 50 from the timestamps), every frame."""
    from avatar_app.capture._media import mpeg_ts_cut_short

    assert mpeg_ts_cut_short(grid_ts) is None
    with VideoFileSource(grid_ts) as src:
        frames = list(src.frames())
        audio = src.read_audio(16000)
    assert (src.info.fps, src.info.frame_count, len(frames)) == (25.0, 75, 75)
    assert not src.truncated and audio.problem == "" and audio.samples.shape[0] > 2.9 * 16000


def _warnings_about(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and "corrupt or truncated" in r.getMessage() and name in r.getMessage()]


@pytest.mark.parametrize(("suffix", "said"), [(".mpg", "ends inside its last packet"),
                                              (".ts", "ends inside its last transport packet")])
def test_truncated_audio_reads_say_so_once(tmp_path: Path, testdata: Path, grid_ts: Path, caplog,
                                           suffix: str, said: str):
    """The audio of a cut .mpg / .ts (whose demuxers read it as complete) is found truncated
    when only the audio is read: load_audio and VideoFileSource.read_audio, one warning per source."""
    full = testdata / "video" / "grid_s1_bbaf2n.mpg" if suffix == ".mpg" else grid_ts
    whole = load_audio(full, 16000)
    assert whole.problem == ""
    data = full.read_bytes()
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    with caplog.at_level(logging.WARNING):
        a = load_audio(cut, 16000)
    assert said in a.problem
    assert 0 < a.samples.shape[0] < 0.7 * whole.samples.shape[0]
    assert len(_warnings_about(caplog, cut.name)) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING), VideoFileSource(cut) as src:
        first = src.read_audio()
        second = src.read_audio(16000)
        list(src.frames())
    assert said in first.problem and said in second.problem
    assert src.truncated and said in src.problem
    assert len(_warnings_about(caplog, cut.name)) == 1, caplog.records


def test_ts_cut_between_transport_packets_inside_a_pes_packet(tmp_path: Path, grid_ts: Path):
    """A .ts cut on a 188-byte boundary is still found when a stream's last PES packet declares more bytes."""
    from avatar_app.capture._media import mpeg_ts_cut_short

    data = grid_ts.read_bytes()
    cut = tmp_path / "cut.ts"
    found = []
    for k in range(1500, 1520):  # packet boundaries near 56 % of the file
        cut.write_bytes(data[: k * 188])
        found.append(mpeg_ts_cut_short(cut))
    assert any(f is not None and "last PES packet of PID" in f for f in found), found
