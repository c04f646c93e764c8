"""Microphone capture with sounddevice (PortAudio) into a timestamped AudioRing.

The PortAudio callback only copies samples (DESIGN.md: "the audio callback
only copies into a ring buffer"). A device that cannot run at the requested
rate is opened at its own default rate; a worker thread then resamples the
stream with ``av.AudioResampler`` (FFmpeg libswresample) into the ring.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import av
import numpy as np

from avatar_app.capture.ring import AudioRing
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import CaptureError

logger = logging.getLogger(__name__)

_NS_PER_S = 1_000_000_000
#: An ADC timestamp further than this from the callback time is not trusted.
_MAX_ADC_AGE_NS = 1 * _NS_PER_S


def _sd() -> Any:
    """The sounddevice module (imported lazily: it needs the PortAudio library).

    Raises:
        CaptureError: PortAudio is not installed.
    """
    try:
        import sounddevice
    except OSError as e:  # sounddevice raises OSError when libportaudio is missing
        raise CaptureError(f"No microphone found: the PortAudio library is missing ({e})") from e
    return sounddevice


def list_microphones() -> list[tuple[int, str, float]]:
    """Input devices PortAudio knows.

    Returns:
        [(device index, name, default sample rate in Hz)], empty if none (or
        PortAudio is unavailable).
    """
    try:
        sd = _sd()
        devices = sd.query_devices()
    except (CaptureError, OSError) as e:
        logger.warning("cannot list microphones: %s", e)
        return []
    return [(int(d["index"]), str(d["name"]), float(d["default_samplerate"]))
            for d in devices if d.get("max_input_channels", 0) > 0]


def _resolve_device(sd: Any, device: int | str | None) -> dict:
    """The sounddevice info dict of the chosen input device.

    Raises:
        CaptureError: no input device / the named one does not exist.
    """
    if device is None:
        try:
            info = sd.query_devices(kind="input")
        except (sd.PortAudioError, ValueError) as e:
            raise CaptureError(f"No microphone found (no default input device: {e})") from e
        if not info or info.get("max_input_channels", 0) < 1:
            raise CaptureError("No microphone found (the default device has no input channels)")
        return info
    try:
        info = sd.query_devices(device, kind="input")
    except (sd.PortAudioError, ValueError) as e:
        raise CaptureError(f"Microphone '{device}' could not be opened: {e}", device=device) from e
    return info


class MicSource:
    """A microphone streaming mono float32 into an :class:`AudioRing`.

    Samples are stamped on the process clock: ``time_info.inputBufferAdcTime``
    (PortAudio's stream clock) plus an offset to ``now_ns`` measured at start;
    if the host API gives no usable ADC time, ``now_ns()`` at the callback
    minus the block length.

    Construction resolves the device and checks the format; :meth:`start`
    opens and starts the stream.

    Thread: the PortAudio callback only copies; with resampling a worker thread
    converts. Construct/start/stop from one thread.

    Args:
        device: sounddevice device index or name substring; None: the default input.
        sample_rate: rate of the ring, Hz (16 kHz for the speech engine).
        block_s: callback block length, seconds.
        ring: where samples go; default a new 10 s ring at ``sample_rate``.

    Raises:
        CaptureError: "No microphone found ..." (no input device or PortAudio),
            or "Microphone '<device>' could not be opened: ..." (bad name/index,
            unsupported format).
        ValueError: ``ring.sample_rate`` differs from ``sample_rate``.
    """

    def __init__(self, device: int | str | None = None, sample_rate: int = 16000,
                 block_s: float = 0.01, ring: AudioRing | None = None):
        self.ring = ring if ring is not None else AudioRing(sample_rate=sample_rate)
        if self.ring.sample_rate != sample_rate:
            raise ValueError(f"ring runs at {self.ring.sample_rate} Hz, not {sample_rate} Hz")
        self.sample_rate = int(sample_rate)
        self.block_s = float(block_s)
        self.error: BaseException | None = None
        self.overflows = 0
        self.timestamp_source = "adc"
        self._sd = _sd()
        info = _resolve_device(self._sd, device)
        self.device_index = int(info.get("index", -1))
        self.device_name = str(info.get("name", device))
        self._label = device if device is not None else self.device_name
        self.device_rate = self._choose_rate(info)
        self.resampling = self.device_rate != self.sample_rate
        self._stream: Any = None
        self._offset_ns: int | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._stopped = False

    def _choose_rate(self, info: dict) -> int:
        sd = self._sd
        dev = self.device_index if self.device_index >= 0 else None
        try:
            sd.check_input_settings(device=dev, channels=1, dtype="float32",
                                    samplerate=self.sample_rate)
            return self.sample_rate
        except (sd.PortAudioError, ValueError) as e:
            native = int(round(float(info.get("default_samplerate") or 0)))
            logger.info("microphone '%s' refuses %d Hz (%s); using %d Hz and resampling",
                        self.device_name, self.sample_rate, e, native)
        try:
            if native <= 0:
                raise ValueError("the device reports no default sample rate")
            sd.check_input_settings(device=dev, channels=1, dtype="float32", samplerate=native)
        except (sd.PortAudioError, ValueError) as e:
            raise CaptureError(f"Microphone '{self._label}' could not be opened: {e}",
                               device=self._label) from e
        return native

    # -- running ----------------------------------------------------------------------
    def start(self) -> "MicSource":
        """Open and start the input stream (no-op if running).

        Raises:
            CaptureError: the stream cannot be opened or started, or the source
                was stopped.
        """
        if self._stopped:
            raise CaptureError(f"Microphone '{self._label}' was stopped; open it again",
                               device=self._label)
        if self._stream is not None:
            return self
        sd = self._sd
        blocksize = max(1, int(round(self.block_s * self.device_rate)))
        callback = self._callback_queue if self.resampling else self._callback_ring
        try:
            self._stream = sd.InputStream(
                device=self.device_index if self.device_index >= 0 else None,
                samplerate=self.device_rate, channels=1, dtype="float32",
                blocksize=blocksize, callback=callback)
            self._measure_offset()
            if self.resampling:
                self._worker = threading.Thread(target=self._resample_loop, name="mic-resample",
                                                daemon=True)
                self._worker.start()
            self._stream.start()
        except (sd.PortAudioError, ValueError, OSError) as e:
            self._stream = None
            self._queue.put(None)
            raise CaptureError(f"Microphone '{self._label}' could not be opened: {e}",
                               device=self._label) from e
        logger.info("microphone '%s' started at %d Hz%s", self.device_name, self.device_rate,
                    " (resampled to %d Hz)" % self.sample_rate if self.resampling else "")
        return self

    def _measure_offset(self) -> None:
        """Offset from PortAudio's stream clock to now_ns (best of 5 brackets)."""
        best = None
        for _ in range(5):
            t1 = now_ns()
            st = float(self._stream.time)
            t2 = now_ns()
            if st <= 0:
                self._offset_ns = None
                return
            if best is None or t2 - t1 < best[0]:
                best = (t2 - t1, (t1 + t2) // 2 - int(st * _NS_PER_S))
        self._offset_ns = best[1]

    def _block_time(self, frames: int, time_info: Any) -> int:
        """Process-clock time of the first sample of a callback block."""
        now = now_ns()
        if self._offset_ns is not None:
            adc = getattr(time_info, "inputBufferAdcTime", 0.0)
            if adc and adc > 0:
                t = self._offset_ns + int(adc * _NS_PER_S)
                if now - _MAX_ADC_AGE_NS <= t <= now:
                    return t
        self.timestamp_source = "callback"
        return now - frames * _NS_PER_S // self.device_rate

    def _callback_ring(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        if status:
            self.overflows += 1
        self.ring.write(indata[:, 0], self._block_time(frames, time_info))

    def _callback_queue(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        if status:
            self.overflows += 1
        self._queue.put((indata[:, 0].copy(), self._block_time(frames, time_info)))

    def _resample_loop(self) -> None:
        """Worker: device-rate blocks from the queue -> 16 kHz blocks in the ring."""
        try:
            resampler = StreamResampler(self.device_rate, self.sample_rate)
            while True:
                item = self._queue.get()
                if item is None:
                    break
                for out, t in resampler.push(*item):
                    self.ring.write(out, t)
        except Exception as e:  # noqa: BLE001 - thread boundary: record, never crash the app
            self.error = CaptureError(f"Microphone '{self._label}' resampling failed: {e}",
                                      device=self._label)
            logger.error("%s", self.error)

    def stop(self) -> None:
        """Stop and close the stream. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
                stream.close()
            except self._sd.PortAudioError as e:
                logger.warning("closing microphone '%s': %s", self.device_name, e)
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(2.0)

    def __enter__(self) -> "MicSource":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StreamResampler:
    """Streaming mono resampler with timestamps (``av.AudioResampler`` inside).

    libswresample keeps its output aligned with its input: output sample ``j``
    corresponds to input time ``j / out_rate`` after the first input sample, so
    output blocks are stamped through the newest input block's timestamp.

    Args:
        in_rate: input rate, Hz.
        out_rate: output rate, Hz.
    """

    def __init__(self, in_rate: int, out_rate: int):
        self.in_rate = int(in_rate)
        self.out_rate = int(out_rate)
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=self.out_rate)
        self._in_count = 0
        self._out_count = 0
        self._anchor: tuple[int, int] | None = None  # (input sample index, t_ns)

    def push(self, samples: np.ndarray, t_first_ns: int) -> list[tuple[np.ndarray, int]]:
        """Resample one block.

        Args:
            samples: (N,) float32 mono at ``in_rate``.
            t_first_ns: process-clock time of its first sample.

        Returns:
            [((M,) float32 at ``out_rate``, process-clock time of its first sample)].
        """
        x = np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1)
        self._anchor = (self._in_count, int(t_first_ns))
        self._in_count += x.shape[1]
        frame = av.AudioFrame.from_ndarray(x, format="flt", layout="mono")
        frame.sample_rate = self.in_rate
        out = []
        for o in self._resampler.resample(frame):
            y = np.array(o.to_ndarray().reshape(-1), dtype=np.float32)
            # input position (in input samples) of this output block's first sample
            pos_in = self._out_count * self.in_rate / self.out_rate
            a_idx, a_t = self._anchor
            t = a_t + int(round((pos_in - a_idx) * _NS_PER_S / self.in_rate))
            out.append((y, t))
            self._out_count += y.shape[0]
        return out
