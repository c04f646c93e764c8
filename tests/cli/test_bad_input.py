"""Bad input through the CLI: one clear line on stderr, non-zero exit, no traceback."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from tests.helpers import name_index, read_track, run_cli, run_main


def _check(proc: subprocess.CompletedProcess, patterns: str | tuple[str, ...], code: int | None = None) -> None:
    """Non-zero exit (``code`` if given), no traceback, every regex in ``patterns`` found in stderr."""
    import re

    assert proc.returncode != 0, proc.stdout
    if code is not None:
        assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for pattern in (patterns,) if isinstance(patterns, str) else patterns:
        assert re.search(pattern, proc.stderr, re.I), (pattern, proc.stderr)


def test_missing_file(tmp_path):
    _check(run_cli("render", str(tmp_path / "nope.mp4"), "-o", str(tmp_path / "o.mp4")),
           (r"nope\.mp4", r"not found|no such|does not exist"), 2)


def test_text_file_renamed_mp4(tmp_path):
    bad = tmp_path / "notes.mp4"
    bad.write_text("this is not a video\n" * 50)
    _check(run_main("render", str(bad), "-o", str(tmp_path / "o.mp4")), (r"notes\.mp4", r"not a readable video"), 2)
    assert not (tmp_path / "o.mp4").exists()


def test_truncated_mp4(testdata, tmp_path):
    data = (testdata / "video" / "grid_s1_bbaf2n.mp4").read_bytes()
    bad = tmp_path / "cut.mp4"
    bad.write_bytes(data[: int(len(data) * 0.4)])
    proc = run_main("render", str(bad), "-o", str(tmp_path / "o.mp4"), "--size", "160x120")
    _check(proc, (r"cut\.mp4", r"truncated|corrupt", r"rendered what could be decoded, \d+\.\d s", r"o\.mp4"), 2)
    # one message, not "wrote ..." followed by an error
    assert "wrote" not in proc.stdout + proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]) == 1, proc.stderr
    # what could be decoded is kept, not thrown away, and the message says how much
    from tests.helpers import decoded_duration

    said = float(re.search(r"rendered what could be decoded, (\d+\.\d) s", proc.stderr).group(1))
    kept = decoded_duration(tmp_path / "o.mp4", "video")
    assert 0 < kept < 3.0 and abs(kept - said) <= 0.06, (kept, proc.stderr)


def _video_seconds(path) -> float:
    """End of the last video packet minus the start of the first (PyAV demux, no decoding), seconds."""
    import av

    with av.open(str(path)) as c:
        st = c.streams.video[0]
        spans = [(float(p.pts * st.time_base), float((p.pts + p.duration) * st.time_base))
                 for p in c.demux(st) if p.pts is not None and p.duration]
    return max(b for _, b in spans) - min(a for a, _ in spans)


def test_truncated_mpg_keeps_what_decoded_beside_a_finished_clip(testdata, tmp_path):
    """A cut .mpg (which FFmpeg reads without an error) exits 2 saying how many seconds were kept."""
    out = tmp_path / "keep.mp4"
    out.write_bytes(b"a finished clip")
    data = (testdata / "video" / "grid_s1_bbaf2n.mpg").read_bytes()
    bad = tmp_path / "cut.mpg"
    bad.write_bytes(data[: int(len(data) * 0.6)])
    proc = run_main("render", str(bad), "-o", str(out), "--size", "160x120")
    _check(proc, (r"cut\.mpg is truncated", r"ends inside its last packet",
                  r"rendered what could be decoded, \d+\.\d s",
                  r"keep\.mp4 already existed and was kept", r"keep\.partial\.mp4"), 2)
    assert "wrote" not in proc.stdout + proc.stderr
    assert out.read_bytes() == b"a finished clip"
    said = float(re.search(r"rendered what could be decoded, (\d+\.\d) s", proc.stderr).group(1))
    kept = _video_seconds(tmp_path / "keep.partial.mp4")
    assert 0 < kept < 2.9 and abs(kept - said) <= 0.06, (kept, proc.stderr)


def test_truncated_audio_file_exits_2_keeping_the_clip(testdata, tmp_path):
    """A cut .mpg given as --audio (read for its audio only, which its demuxer reads without an error)
    exits 2 saying how many seconds of audio decoded; the clip is kept."""
    data = (testdata / "video" / "grid_s1_bbaf2n.mpg").read_bytes()
    bad = tmp_path / "cut.mpg"
    bad.write_bytes(data[: int(len(data) * 0.6)])
    out = tmp_path / "o.mp4"
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(out), "--size", "160x120",
                    "--audio", str(bad))
    _check(proc, (r"audio file .*cut\.mpg is truncated", r"ends inside its last packet",
                  r"only its first 1\.\d s could be decoded",
                  r"rendered what could be decoded, 3\.0 s \(75 frames\)"), 2)
    assert "wrote" not in proc.stdout + proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]) == 1, proc.stderr
    assert out.stat().st_size > 0


def test_truncated_wav_audio_file_exits_2(testdata, tmp_path, short_grid_clip):
    """A WAVE file cut inside its data chunk, given as --audio: exit 2, said once, the clip kept (trial).
    The video is conftest's 0.4 s ``short_grid_clip``: the audio file is read whole whatever the
    video's length."""
    bad = tmp_path / "cut.wav"
    bad.write_bytes((testdata / "audio" / "jfk.wav").read_bytes()[:60000])
    out = tmp_path / "o.mp4"
    proc = run_main("render", str(short_grid_clip), "-o", str(out), "--size", "160x120", "--audio", str(bad))
    _check(proc, (r"audio file .*cut\.wav is truncated", r"ends inside its audio data",
                  r"only its first 1\.\d s could be decoded"), 2)
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]) == 1, proc.stderr
    assert out.stat().st_size > 0


def test_a_damaged_file_without_a_face_in_what_decodes_is_bad_input(testdata, tmp_path):
    """60 kB of noise from byte 5000 of grid_s2 (new-user trial): 54 of 75 frames decode, garbled, with
    no face in them. Exit 2 naming the damage, not exit 3 blaming the lighting; nothing written."""
    data = bytearray((testdata / "video" / "grid_s2_swwp2s.mp4").read_bytes())
    data[5000:65000] = np.random.default_rng(1).integers(0, 256, 60000, dtype=np.uint8).tobytes()
    bad = tmp_path / "noisy.mp4"
    bad.write_bytes(bytes(data))
    proc = run_main("render", str(bad), "-o", str(tmp_path / "o.mp4"), "--size", "96x64", "-q")
    _check(proc, (r"noisy\.mp4 is truncated or corrupt", r"no face was found in the \d+ frames that did",
                  r"nothing was written"), 2)
    assert "well lit" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noisy.mp4"]


def test_mp4_cut_before_its_index_says_nothing_could_be_kept(testdata, tmp_path):
    """An MP4 with its 'moov' box at the end, cut at 60 %: no frame decodes, the one line says why."""
    data = (testdata / "video" / "expressive" / "lp_d18.mp4").read_bytes()
    bad = tmp_path / "cut.mp4"
    bad.write_bytes(data[: int(len(data) * 0.6)])
    proc = run_main("render", str(bad), "-o", str(tmp_path / "o.mp4"), "--size", "160x120")
    _check(proc, (r"cut\.mp4' is truncated and no frame of it can be decoded", r"index \(the 'moov' box"), 2)
    assert "rendered" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.mp4"]


@pytest.mark.gl
def test_video_with_no_face(tmp_path):
    subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25:duration=1",
         "-f", "lavfi", "-i", "sine=frequency=300:duration=1", "-shortest", "-c:v", "libx264", "-c:a", "aac",
         str(tmp_path / "noface.mp4")], check=True)
    out = tmp_path / "o.mp4"
    _check(run_main("render", str(tmp_path / "noface.mp4"), "-o", str(out), "--size", "320x240"), r"no face", 3)
    assert not out.exists()


@pytest.mark.gl
def test_silent_audio_track(testdata, tmp_path):
    silent = tmp_path / "silent.mp4"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-f", "lavfi",
         "-i", "anullsrc=r=44100:cl=mono", "-map", "0:v", "-map", "1:a", "-shortest", "-c:v", "copy", "-c:a", "aac",
         str(silent)], check=True)
    # issue 21 item 3 / issue 17 item 4: a silent track renders with the mouth from vision and a warning
    out = tmp_path / "o.mp4"
    proc = run_main("render", str(silent), "-o", str(out), "--size", "160x120", "-q")
    assert proc.returncode == 0, proc.stderr
    warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert any("is silent" in ln and "mouth follows the video" in ln for ln in warning), proc.stderr
    assert out.is_file()
    jaw = read_track(out.with_suffix(".blendshapes.jsonl")).blendshapes[:, name_index("jawOpen")]
    assert jaw.max() > 0.1  # the talker's mouth moves without any voice


def test_missing_audio_file(testdata, tmp_path):
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "--audio", str(tmp_path / "v.wav"),
                    "-o", str(tmp_path / "o.mp4"))
    _check(proc, r"v\.wav", 2)


@pytest.mark.gl
def test_output_folder_missing_is_created(short_grid_clip, tmp_path):
    out = tmp_path / "new" / "deeper" / "o.mp4"
    proc = run_cli("render", str(short_grid_clip), "-o", str(out), "--size", "160x120")
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0 and out.with_suffix(".blendshapes.jsonl").exists()


def test_output_folder_that_cannot_be_created(testdata, tmp_path):
    (tmp_path / "afile").write_text("in the way")
    folder = tmp_path / "afile" / "sub"
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(folder / "o.mp4"))
    _check(proc, r"^error: cannot create the output folder " + re.escape(str(folder)) + ": "
           + re.escape(str(tmp_path / "afile")) + r" is a file, not a folder$", 4)


def test_bad_size_argument(testdata, tmp_path):
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(tmp_path / "o.mp4"),
                    "--size", "huge")
    _check(proc, r"size must look like 1280x720")


@pytest.mark.gl
def test_contact_sheet_command(tmp_path):
    proc = run_main("contact-sheet", "-o", str(tmp_path / "sheet.png"), "--tile", "64")
    assert proc.returncode == 0, proc.stderr
    import cv2

    img = cv2.imread(str(tmp_path / "sheet.png"))
    assert img is not None and img.shape[0] > 300 and img.std() > 10


def test_contact_sheet_bad_tile(tmp_path):
    _check(run_main("contact-sheet", "-o", str(tmp_path / "s.png"), "--tile", "5"), r"64", 2)


def test_contact_sheet_bad_outputs_are_one_line_before_any_rendering(tmp_path, monkeypatch):
    import avatar_app.render.contact_sheet as cs

    def no_render(*a, **k):  # the path is checked first: nothing is rendered for a bad one
        raise AssertionError("rendered before the output was checked")

    monkeypatch.setattr(cs, "render_tiles", no_render)
    (tmp_path / "afile").write_text("x")
    for out, patterns, code in ((tmp_path, (r"is a folder", r"sheet\.png"), 4),
                                (tmp_path / "sheet", (r"PNG", r"sheet\.png"), 2),
                                (tmp_path / "afile" / "s.png", (r"afile is a file",), 4)):
        proc = run_main("contact-sheet", "-o", str(out), "--tile", "64")
        _check(proc, patterns, code)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_contact_sheet_write_failure_is_one_line_and_keeps_the_old_sheet(tmp_path, monkeypatch):
    import numpy as np

    import avatar_app.render.contact_sheet as cs

    old = tmp_path / "s.png"
    old.write_bytes(b"old sheet")
    real_write = type(old).write_bytes

    def full_disk(self, data):
        if self.name.endswith(".part"):
            real_write(self, data[:10])
            raise OSError(28, "No space left on device")
        return real_write(self, data)

    monkeypatch.setattr(type(old), "write_bytes", full_disk)
    with pytest.raises(cs.RecordingError, match="No space left on device"):
        cs._write_png(old, np.zeros((8, 8, 3), np.uint8))
    assert old.read_bytes() == b"old sheet"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.png"]  # no part file left


def test_transparent_background_needs_an_alpha_format(testdata, tmp_path):
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(tmp_path / "t.mp4"),
                    "--background", "transparent")
    _check(proc, (r"transparent", r"t\.mov", r"t\.webm"), 2)
    assert not (tmp_path / "t.mp4").exists()


def test_bad_avatar_leaves_no_output(testdata, tmp_path):
    bad = tmp_path / "robot.vrm"
    bad.write_text("not a model")
    out = tmp_path / "o.mp4"
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(out), "--avatar", str(bad))
    _check(proc, (r"robot\.vrm", r"not a glTF"), 2)
    assert not out.exists() and not out.with_suffix(".blendshapes.jsonl").exists()


@pytest.mark.gl
def test_transparent_mov_keeps_alpha(short_grid_clip, tmp_path):
    import av

    out = tmp_path / "t.mov"  # (the first frame is checked: the 0.4 s clip)
    proc = run_main("render", str(short_grid_clip), "-o", str(out),
                    "--background", "transparent", "--size", "320x180")
    assert proc.returncode == 0, proc.stderr
    with av.open(str(out)) as c:
        frame = next(c.decode(video=0)).to_ndarray(format="rgba")
    assert frame[0, 0, 3] == 0 and frame[90, 160, 3] == 255


@pytest.mark.gl
def test_demo_mouth_follows_the_voice(tmp_path):
    from avatar_app.core.blendshapes import Blendshape
    from tests.helpers import read_track

    out = tmp_path / "demo.mp4"
    proc = run_main("demo", "-o", str(out), "--size", "96x64")  # (the track is read: any size)
    assert proc.returncode == 0, proc.stderr
    track = read_track(out.with_suffix(".blendshapes.jsonl"))
    jaw = track.blendshapes[:, Blendshape.jawOpen]
    assert jaw.max() > 0.25 and (jaw > 0.1).mean() > 0.3


def test_a_still_image_is_refused_as_video_input(testdata):
    """A photo is not a video: a clear error instead of a one-frame clip."""
    from avatar_app.capture.video_file import VideoFileSource
    from avatar_app.core.errors import InputError

    for name in ("images/london_005_03_neutral.jpg", "images/grid_lbax4n_frame10.png"):
        with pytest.raises(InputError, match="still image"):
            VideoFileSource(testdata / name)


def test_truncated_input_does_not_replace_a_finished_clip(testdata, tmp_path):
    """A damaged input's partial render goes beside an existing output, which is kept as it was."""
    out = tmp_path / "keep.mp4"
    out.write_bytes(b"a finished clip")
    (tmp_path / "keep.blendshapes.jsonl").write_text("{}\n")
    data = (testdata / "video" / "grid_s1_bbaf2n.mp4").read_bytes()
    bad = tmp_path / "cut.mp4"
    bad.write_bytes(data[: int(len(data) * 0.4)])
    proc = run_main("render", str(bad), "-o", str(out), "--size", "160x120")
    _check(proc, (r"truncated|corrupt", r"keep\.mp4 already existed and was kept", r"keep\.partial\.mp4"), 2)
    assert out.read_bytes() == b"a finished clip"
    assert (tmp_path / "keep.blendshapes.jsonl").read_text() == "{}\n"
    from tests.helpers import decoded_duration

    assert 0 < decoded_duration(tmp_path / "keep.partial.mp4", "video") < 3.0
    assert (tmp_path / "keep.partial.blendshapes.jsonl").stat().st_size > 0


def test_output_over_the_audio_file_is_refused(testdata, tmp_path):
    voice = tmp_path / "voice.mp4"
    voice.write_bytes((testdata / "video" / "grid_s2_swwp2s.mp4").read_bytes())
    before = voice.read_bytes()
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "--audio", str(voice), "-o", str(voice))
    _check(proc, r"would overwrite the --audio file", 2)
    assert voice.read_bytes() == before


def test_wrong_output_extension_names_the_suffix_not_a_temporary_file(testdata, tmp_path):
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(tmp_path / "out.txt"))
    _check(proc, r"need a \.mp4 file name, not \.txt", 2)
    assert ".part-" not in proc.stderr
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(tmp_path / "out"))
    _check(proc, r"need a \.mp4 file name; out has no extension", 2)
    assert ".part-" not in proc.stderr
    assert list(tmp_path.iterdir()) == []



def test_a_second_render_to_the_same_output_is_refused_while_the_first_writes(testdata, tmp_path):
    from avatar_app.record.parts import TargetLock

    out = tmp_path / "same.mp4"
    out.write_bytes(b"an earlier clip")
    with TargetLock(out):  # what a running render holds while it writes
        lock_file = tmp_path / ".same.mp4.lock"
        assert lock_file.is_file()
        proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(out), "-q")
        _check(proc, (r"another render \(process \d+\) is writing it now", r"same\.mp4"), 4)
        assert out.read_bytes() == b"an earlier clip"  # nothing written over it
    assert not lock_file.exists()  # released with the lock
    proc = run_main("render", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-o", str(out), "-q",
                    "--size", "96x64")
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() != b"an earlier clip" and not lock_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.blendshapes.jsonl", "same.mp4"]


@pytest.mark.parametrize(("argv", "pattern", "code"), [
    (["render", "{video}", "-o", "{tmp}/" + "a" * 246 + ".mp4"], r"at most 214 bytes here \(it has 246\)", 4),
    (["render", "{tmp}/" + "c" * 260 + ".mp4", "-o", "{tmp}/x.mp4"], r"the input has a name of 264 bytes", 2),
    (["render", "{video}", "-o", "{tmp}/x.mp4", "--audio", "{tmp}/" + "c" * 260 + ".wav"], r"--audio has a name", 2),
    (["render", "{video}", "-o", "{tmp}/" + "c" * 260 + "/x.mp4"], r"a folder name of 260 bytes", 4),
    (["contact-sheet", "-o", "{tmp}/" + "c" * 260 + ".png"], r"at most 249 bytes", 4),
])
def test_names_too_long_for_the_file_system_are_one_line(testdata, tmp_path, argv, pattern, code):
    args = [a.format(video=testdata / "video" / "grid_s1_bbaf2n.mp4", tmp=tmp_path) for a in argv]
    proc = run_main(*args)
    _check(proc, pattern, code)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_an_unforeseen_os_error_is_one_line(tmp_path, monkeypatch):
    import avatar_app.render.contact_sheet as cs

    def refused(*a, **k):
        raise OSError(5, "Input/output error", str(tmp_path / "s.png"))

    monkeypatch.setattr(cs, "make_contact_sheet", refused)
    proc = run_main("contact-sheet", "-o", str(tmp_path / "s.png"))
    _check(proc, r"^error: input/output error: .*s\.png$", 4)


def test_a_clip_of_another_format_does_not_replace_the_first_clips_track(testdata, tmp_path):
    """New-user trial: take.mov then take.webm: the second render replaced take.mov's track."""
    video = str(testdata / "video" / "grid_s1_bbaf2n.mp4")
    mov, track = tmp_path / "take.mov", tmp_path / "take.blendshapes.jsonl"
    proc = run_main("render", video, "-o", str(mov), "-q", "--size", "96x64", "--background", "transparent")
    assert proc.returncode == 0, proc.stderr
    before = track.read_bytes()
    proc = run_main("render", video, "-o", str(tmp_path / "take.webm"), "-q", "--size", "96x64",
                    "--background", "transparent")
    _check(proc, (r"take\.blendshapes\.jsonl is the track of take\.mov", r"take-2\.webm"), 4)
    assert track.read_bytes() == before and not (tmp_path / "take.webm").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["take.blendshapes.jsonl", "take.mov"]
