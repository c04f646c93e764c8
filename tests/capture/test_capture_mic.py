"""MicSource with sounddevice monkeypatched (no audio hardware in CI)."""
from __future__ import annotations

import types

import numpy as np
import pytest
import sounddevice as sd

from avatar_app.capture import mic as mic_mod
from avatar_app.capture.mic import MicSource, StreamResampler, list_microphones
from avatar_app.capture.ring import AudioRing
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import CaptureError

NS = 1_000_000_000


class FakeStream:
    """sd.InputStream stand-in; the test calls its callback by hand."""

    instances: list["FakeStream"] = []

    def __init__(self, *, device, samplerate, channels, dtype, blocksize, callback):
        self.device, self.samplerate, self.channels = device, samplerate, channels
        self.dtype, self.blocksize, self.callback = dtype, blocksize, callback
        self.started = self.closed = False
        # PortAudio's stream clock: here 100 s behind the process clock
        self.clock_offset_s = 100.0
        FakeStream.instances.append(self)

    @property
    def time(self) -> float:
        return now_ns() / NS - self.clock_offset_s

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False

    def close(self) -> None:
        self.closed = True

    def feed(self, block: np.ndarray, adc_time: float) -> None:
        """Deliver a block as PortAudio would: (frames, channels) float32."""
        info = types.SimpleNamespace(inputBufferAdcTime=adc_time, currentTime=adc_time,
                                     outputBufferDacTime=0.0)
        self.callback(block.reshape(-1, 1).astype(np.float32), block.shape[0], info,
                      sd.CallbackFlags())


def fake_device(monkeypatch, *, rate_ok=lambda r: True, default_rate=44100.0):
    dev = {"index": 3, "name": "Fake USB Mic", "max_input_channels": 2,
           "default_samplerate": default_rate}
    out = {"index": 4, "name": "Speakers", "max_input_channels": 0, "default_samplerate": 48000.0}

    def query_devices(device=None, kind=None):
        if device is None and kind is None:
            return [dev, out]
        if device in (None, 3) or (isinstance(device, str) and device in dev["name"]):
            return dev
        raise ValueError(f"No input device matching {device!r}")

    def check_input_settings(device=None, channels=None, dtype=None, extra_settings=None,
                             samplerate=None):
        if not rate_ok(samplerate):
            raise sd.PortAudioError("Invalid sample rate [PaErrorCode -9997]")

    FakeStream.instances = []
    monkeypatch.setattr(sd, "query_devices", query_devices)
    monkeypatch.setattr(sd, "check_input_settings", check_input_settings)
    monkeypatch.setattr(sd, "InputStream", FakeStream)
    return dev


def test_no_microphone(monkeypatch):
    def no_default(device=None, kind=None):
        if device is None and kind is None:
            return []
        raise sd.PortAudioError("Error querying device -1")

    monkeypatch.setattr(sd, "query_devices", no_default)
    with pytest.raises(CaptureError, match="No microphone found"):
        MicSource()
    assert list_microphones() == []


def test_unknown_microphone_name(monkeypatch):
    fake_device(monkeypatch)
    with pytest.raises(CaptureError, match="Microphone 'Studio 9' could not be opened: No input"):
        MicSource("Studio 9")


def test_microphone_refusing_every_rate(monkeypatch):
    fake_device(monkeypatch, rate_ok=lambda r: False)
    with pytest.raises(CaptureError, match="Microphone 'Fake' could not be opened: Invalid sample"):
        MicSource("Fake")


def test_stream_that_fails_to_open(monkeypatch):
    fake_device(monkeypatch)

    def broken(**kw):
        raise sd.PortAudioError("Device unavailable [PaErrorCode -9985]")

    monkeypatch.setattr(sd, "InputStream", broken)
    mic = MicSource(3)
    with pytest.raises(CaptureError, match="Microphone '3' could not be opened: Device unavail"):
        mic.start()


def test_missing_portaudio(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_sounddevice(name, *a, **kw):
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_sounddevice)
    with pytest.raises(CaptureError, match="No microphone found: the PortAudio library is missing"):
        mic_mod._sd()


def test_list_microphones(monkeypatch):
    fake_device(monkeypatch)
    assert list_microphones() == [(3, "Fake USB Mic", 44100.0)]


def test_native_16k_callback_copies_into_ring_with_adc_time(monkeypatch):
    fake_device(monkeypatch)
    ring = AudioRing(capacity_s=1.0, sample_rate=16000)
    with MicSource(ring=ring) as mic:
        assert not mic.resampling and mic.device_rate == 16000
        stream = FakeStream.instances[0]
        assert stream.samplerate == 16000 and stream.channels == 1 and stream.blocksize == 160
        assert stream.dtype == "float32" and stream.started
        t_adc_ns = now_ns() - 20_000_000  # block recorded 20 ms ago
        block = np.linspace(-0.5, 0.5, 160, dtype=np.float32)
        stream.feed(block, adc_time=t_adc_ns / NS - stream.clock_offset_s)
        latest = ring.latest_t_ns
    assert stream.closed
    assert mic.timestamp_source == "adc"
    # ADC time converted through the measured clock offset (float seconds: ~us precision)
    assert abs((latest - 160 * NS // 16000) - t_adc_ns) < 100_000
    assert np.array_equal(ring.read_window(latest, 0.01), block)


def test_missing_adc_time_falls_back_to_callback_time(monkeypatch):
    fake_device(monkeypatch)
    ring = AudioRing(capacity_s=1.0, sample_rate=16000)
    with MicSource(ring=ring) as mic:
        before = now_ns()
        FakeStream.instances[0].feed(np.zeros(160, np.float32), adc_time=0.0)
        after = now_ns()
    assert mic.timestamp_source == "callback"
    t_first = ring.latest_t_ns - 10_000_000
    assert before - 10_000_000 <= t_first <= after - 10_000_000


def test_44k_device_is_resampled_to_16k(monkeypatch):
    fake_device(monkeypatch, rate_ok=lambda r: r == 44100, default_rate=44100.0)
    ring = AudioRing(capacity_s=2.0, sample_rate=16000)
    mic = MicSource(ring=ring, block_s=0.01)
    assert mic.resampling and mic.device_rate == 44100
    mic.start()
    stream = FakeStream.instances[0]
    assert stream.samplerate == 44100 and stream.blocksize == 441
    n = 44100  # 1 s of a 1 kHz tone in 100 blocks
    tone = (0.5 * np.sin(2 * np.pi * 1000 * np.arange(n) / 44100)).astype(np.float32)
    t0_ns = now_ns() - 1_500_000_000
    for k in range(100):
        t_block = t0_ns + k * 441 * NS // 44100
        stream.feed(tone[k * 441:(k + 1) * 441], adc_time=t_block / NS - stream.clock_offset_s)
    mic.stop()  # the worker drains the queue, then ends (stop waits 2 s; a loaded machine may take longer)
    mic._worker.join(60)
    assert mic.error is None
    assert not mic._worker.is_alive()
    assert ring.total_written == pytest.approx(16000, abs=200)
    assert ring.gap_samples == 0
    # timestamps stay on the input's time line: the ring ends where the input ends
    # (minus what the resampler still holds)
    end = ring.latest_t_ns
    assert 0 <= (t0_ns + NS) - end < 5_000_000
    # the tone comes out at 1 kHz with its amplitude, at the right place in time
    w = ring.read_window(t0_ns + 900_000_000, 0.5)
    spec = np.abs(np.fft.rfft(w * np.hanning(w.shape[0])))
    assert np.argmax(spec) * 16000 / w.shape[0] == pytest.approx(1000, abs=2)
    assert np.abs(w).max() == pytest.approx(0.5, rel=0.02)
    expected = 0.5 * np.sin(2 * np.pi * 1000 * (0.4 + np.arange(8000) / 16000))
    assert np.abs(w - expected).max() < 0.02


def test_stream_resampler_keeps_impulse_position():
    rs = StreamResampler(48000, 16000)
    x = np.zeros(48000, np.float32)
    x[24000] = 1.0
    out, times = [], []
    for k in range(100):
        for y, t in rs.push(x[k * 480:(k + 1) * 480], 10**12 + k * 10_000_000):
            out.append(y)
            times.append(t)
    y = np.concatenate(out)
    assert abs(int(np.argmax(y)) - 8000) <= 1
    assert times[0] == 10**12
    # output blocks are contiguous on the 16 kHz grid
    lengths = np.cumsum([0] + [o.shape[0] for o in out[:-1]])
    assert np.allclose(np.array(times) - 10**12, lengths * NS / 16000, atol=2)


def test_ring_rate_must_match(monkeypatch):
    fake_device(monkeypatch)
    with pytest.raises(ValueError, match="ring runs at 8000 Hz, not 16000 Hz"):
        MicSource(ring=AudioRing(sample_rate=8000))
