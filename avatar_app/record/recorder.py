"""Clip recorder: rendered RGB frames + audio -> fragmented MP4 (H.264 + AAC) with PyAV.

Design choices:

- H.264 through libx264, ``preset=veryfast``, ``tune=zerolatency`` (no
  B-frames, no look-ahead: a frame reaches the file within one fragment),
  CRF 23, 2 threads. Measured on the 2-core development machine, 1280x720
  RGB in, encoding in the AsyncRecorder (async_recorder.py) thread: ~155 fps for an avatar-like
  picture (flat background) and ~95 fps for a noisy camera-like picture,
  using ~1.2 cores. If the requested encoder is missing from the FFmpeg build
  the recorder falls back to libx264, then MPEG-4 Part 2, with a warning.
- Fragmented MP4 (``movflags=frag_keyframe+empty_moov+delay_moov+default_base_moof``
  and ``frag_duration``): the file is a header plus self-contained fragments
  of at most ``fragment_s`` (default 0.25 s), so a recording cut short (crash,
  SIGKILL, full disk) still plays up to its last complete fragment.
  ``delay_moov`` writes the header with the first fragment, which lets FFmpeg
  put an edit list in it that hides the AAC encoder's 1024-sample priming:
  the audio then starts at the same instant as the input and ends with it.
  ``flush_packets=1`` hands every write to the OS at once (a SIGKILL keeps it).
- AAC at 48 kHz (input audio of any rate is resampled by libswresample).
- Timestamps: video pts = round(media time * 90000) in a 1/90000 time base
  (exact for 24/25/30/50/60 and 29.97 fps, no drift); audio is placed by the
  media time of its first sample, gaps filled with silence and overlaps trimmed.
"""
from __future__ import annotations

import errno
import logging
import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from avatar_app.core.errors import InputError, RecordingError

_log = logging.getLogger(__name__)

#: Video time base: 1/90000 s (the MPEG clock; integer frame steps for all common rates).
VIDEO_TIME_BASE = Fraction(1, 90000)
#: Sample rate of the AAC track, Hz.
AUDIO_OUT_RATE = 48000
_AUDIO_TIME_BASE = Fraction(1, AUDIO_OUT_RATE)
#: Audio timestamp jitter tolerated before a gap is filled or an overlap trimmed, s.
AUDIO_JITTER_S = 0.02
_VIDEO_FALLBACKS = ("libx264", "mpeg4")


def _have_encoder(name: str) -> bool:
    try:
        av.codec.Codec(name, "w")
    except (av.FFmpegError, ValueError):  # UnknownCodecError derives from ValueError
        return False
    return True


def io_reason(err: BaseException) -> str:
    """Why a write failed, in words a user understands.

    Args:
        err: the OSError or av.FFmpegError raised by the write.

    Returns:
        e.g. ``"the disk is full"`` (ENOSPC), ``"permission denied"``, else ``str(err)``.
    """
    code = getattr(err, "errno", None)
    if code == errno.ENOSPC:
        return "the disk is full"
    if code == errno.EFBIG:
        return "the file is larger than the system allows (file size limit)"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "permission denied"
    return str(err)


def _io_message(err: BaseException, path: Path) -> str:
    return f"recording to {path} failed: {io_reason(err)}. The part written so far is kept and plays."


class RecordingWriteError(RecordingError):
    """Writing a recording failed part-way (disk full, file size limit, I/O error).

    ``str(err)`` is the user message (it says the part written so far is kept).

    Attributes:
        path: the file that was being written.
        reason: why, in words, e.g. ``"the disk is full"`` (for callers that
            word their own message, such as the offline render, which writes to a
            temporary file).
    """

    def __init__(self, message: str, path: Path, reason: str):
        super().__init__(message)
        self.path = path
        self.reason = reason


class ClosingContext:
    """``with`` support shared by the recorders: ``close()`` on exit.

    After an exception in the block the original exception is kept; a
    RecordingError raised while closing is then only logged (the file is still
    released).
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:
            try:
                self.close()
            except RecordingError as e:
                _log.debug("while closing after an error: %s", e)


def _check_recording_args(width: int, height: int, fps: float, audio_sample_rate: int | None,
                          audio_channels: int, fragment_s: float) -> None:
    """:class:`ClipRecorder`'s argument checks.

    Raises:
        InputError: an odd or non-positive size, a non-positive fps or sample rate, a channel
            count other than 1 or 2, or ``fragment_s`` outside (0, 10] s.
    """
    if width <= 0 or height <= 0 or width % 2 or height % 2:
        raise InputError(f"recording size must be positive and even for H.264; got {width}x{height}")
    if not fps > 0:
        raise InputError(f"recording fps must be positive; got {fps!r}")
    if audio_sample_rate is not None and audio_sample_rate <= 0:
        raise InputError(f"audio sample rate must be positive; got {audio_sample_rate}")
    if audio_channels not in (1, 2):
        raise InputError(f"audio must be mono or stereo; got {audio_channels} channels")
    if not 0 < fragment_s <= 10:
        raise InputError(f"fragment_s must be in (0, 10] s; got {fragment_s}")


class ClipRecorder(ClosingContext):
    """Writes an MP4 clip (H.264 video, optional AAC audio) frame by frame.

    Args:
        path: output ``.mp4`` file (overwritten; its folder must exist).
        width: frame width in pixels (even, H.264 4:2:0 needs it).
        height: frame height in pixels (even).
        fps: nominal frame rate, Hz (rate control, keyframe interval, metadata);
            each frame's real time comes from ``write_video``.
        audio_sample_rate: rate of the audio passed to ``write_audio``, Hz, or
            None for a video-only clip.
        audio_channels: 1 (mono) or 2 (stereo).
        video_codec: FFmpeg encoder name; "h264" means libx264.
        crf: libx264 constant rate factor (0-51, lower = better; 23 is x264's default).
        preset: libx264 speed preset ("ultrafast" ... "veryslow").
        tune: libx264 tuning; "zerolatency" removes encoder delay (see module doc).
        threads: encoder threads (0 = FFmpeg's choice).
        keyframe_interval_s: seconds between keyframes.
        fragment_s: longest MP4 fragment, s (at most this much is lost when cut short).
        audio_codec: FFmpeg audio encoder name.
        audio_bitrate: bits per second of the audio track.
        time_origin_s: media time that becomes 0 in the file; None = the first
            time passed to ``write_video`` or ``write_audio``.
        max_audio_lag_s: when the audio track lags the video by more than this,
            s, it is filled with silence up to ``video time - max_audio_lag_s``
            (a dead microphone must not stall the file: FFmpeg writes the first
            fragment only once every track has a sample); later audio for that
            span is trimmed.

    Raises:
        InputError: bad size, fps or channel count.
        RecordingError: the file cannot be created or no encoder can be opened.

    Thread: not thread-safe; use from one thread (see :class:`AsyncRecorder`).

    Subclasses change the container and pixel format through ``container_format``,
    ``frame_channels``, ``_container_options``, ``_open_video`` and ``_make_frame``
    (:class:`~avatar_app.record.alpha.AlphaClipRecorder`); for live capture with
    drifting clocks wrap it in :class:`~avatar_app.record.synced.SyncedRecorder`.
    """

    def __init__(
        self,
        path: str | Path,
        width: int,
        height: int,
        fps: float,
        audio_sample_rate: int | None = None,
        audio_channels: int = 1,
        *,
        video_codec: str = "h264",
        crf: int = 23,
        preset: str = "veryfast",
        tune: str | None = "zerolatency",
        threads: int = 2,
        keyframe_interval_s: float = 2.0,
        fragment_s: float = 0.25,
        audio_codec: str = "aac",
        audio_bitrate: int = 128_000,
        time_origin_s: float | None = None,
        max_audio_lag_s: float = 1.0,
    ):
        self.path = Path(path)
        _check_recording_args(width, height, fps, audio_sample_rate, audio_channels, fragment_s)
        self.width, self.height, self.fps = int(width), int(height), float(fps)
        self.audio_sample_rate = audio_sample_rate
        self.max_audio_lag_s = float(max_audio_lag_s)
        self.audio_channels = audio_channels
        self.frames_written = 0
        self.audio_samples_written = 0  # at the input rate, including filled gaps
        self._origin = time_origin_s
        self._last_pts: int | None = None
        self._audio_next: int | None = None  # next expected input-sample index
        self._audio_out_pts = 0
        self._error: RecordingError | None = None
        self._closed = False
        self._skipped_early = 0

        codec = video_codec
        if not _have_encoder(codec):
            codec = next((c for c in _VIDEO_FALLBACKS if _have_encoder(c)), None)
            if codec is None:
                raise RecordingError(
                    f"cannot record {self.path}: no H.264 or MPEG-4 encoder in this FFmpeg build"
                )
            _log.warning("video encoder %r is not available; recording with %r", video_codec, codec)
        options = self._container_options(fragment_s)
        if not self.path.parent.is_dir():
            raise RecordingError(f"cannot create recording {self.path}: folder does not exist")
        if not os.access(self.path.parent, os.W_OK):
            raise RecordingError(f"cannot create recording {self.path}: folder is not writable")
        try:
            self._container = av.open(str(self.path), mode="w", format=self.container_format,
                                      options=options)
        except (av.FFmpegError, OSError) as e:
            raise RecordingError(f"cannot create recording {self.path}: {e}") from e
        try:
            self._video = self._open_video(codec, crf, preset, tune, threads, keyframe_interval_s)
            self._audio, self._resampler = self._open_audio(audio_codec, audio_bitrate)
        except (av.FFmpegError, ValueError, OSError) as e:
            self._container.close()
            raise RecordingError(f"cannot set up the encoders for {self.path}: {e}") from e
        self.video_codec = self._video.codec_context.name
        _log.info(
            "recording %s: %dx%d @ %.3g fps, %s%s", self.path, width, height, fps,
            self.video_codec, f" + {audio_codec} {audio_sample_rate} Hz" if self._audio else "",
        )

    def _open_audio(self, audio_codec: str, audio_bitrate: int):
        """The audio stream (AUDIO_OUT_RATE) and its resampler, or (None, None) without audio."""
        if self.audio_sample_rate is None:
            return None, None
        stream = self._container.add_stream(
            audio_codec, rate=AUDIO_OUT_RATE, layout="mono" if self.audio_channels == 1 else "stereo")
        stream.bit_rate = audio_bitrate
        stream.time_base = _AUDIO_TIME_BASE
        resampler = av.AudioResampler(format=stream.codec_context.format.name, layout=stream.layout,
                                      rate=AUDIO_OUT_RATE)
        return stream, resampler

    # ------------------------------------------------------------ format hooks
    #: FFmpeg muxer name (subclasses for other containers override it).
    container_format = "mp4"
    #: Channels of the images ``write_video`` takes: 3 (RGB) here, 4 (RGBA) with alpha.
    frame_channels = 3

    def _container_options(self, fragment_s: float) -> dict[str, str]:
        """Muxer options: fragmented MP4 (see the module doc)."""
        return {
            "movflags": "frag_keyframe+empty_moov+delay_moov+default_base_moof",
            "frag_duration": str(int(fragment_s * 1e6)),
            "flush_packets": "1",
            # write a stream's packets even if the other stream lags by this much (µs),
            # so a silent or missing audio track cannot hold back video in memory
            "max_interleave_delta": str(int(max(1.0, 2 * fragment_s) * 1e6)),
        }

    def _make_frame(self, image: np.ndarray) -> av.VideoFrame:
        """An encoder input frame from a checked (height, width, channels) uint8 image."""
        return av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        """(height, width, channels) of the uint8 images ``write_video`` takes."""
        return (self.height, self.width, self.frame_channels)

    @property
    def time_origin_s(self) -> float | None:
        """Media time that is 0 in the file (None until the first write)."""
        return self._origin

    def _open_video(self, codec, crf, preset, tune, threads, keyframe_interval_s):
        rate = Fraction(self.fps).limit_denominator(1001)
        opts = {}
        if codec in ("libx264", "h264"):
            opts = {"preset": preset, "crf": str(crf)}
            if tune:
                opts["tune"] = tune
        stream = self._container.add_stream(codec, rate=rate, options=opts)
        stream.width, stream.height = self.width, self.height
        stream.pix_fmt = "yuv420p"
        stream.time_base = VIDEO_TIME_BASE
        cc = stream.codec_context
        # MPEG-4 Part 2 allows time-base denominators up to 65535 only
        cc.time_base = VIDEO_TIME_BASE if codec in ("libx264", "h264") else Fraction(1, 30000)
        cc.gop_size = max(1, int(round(self.fps * keyframe_interval_s)))
        cc.thread_count = threads
        if codec not in ("libx264", "h264"):
            # no CRF: about 0.15 bit per pixel (good quality for MPEG-4 Part 2)
            cc.bit_rate = int(0.15 * self.width * self.height * self.fps)
        return stream

    # ------------------------------------------------------------------ state
    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    @property
    def error(self) -> RecordingError | None:
        """The write error that stopped this recording, if any."""
        return self._error

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise RecordingError(f"recording {self.path} is already closed")

    def _fail(self, err: BaseException) -> RecordingError:
        self._error = RecordingWriteError(_io_message(err, self.path), self.path, io_reason(err))
        # raised to the caller, who reports it: a warning here, not a second error line
        _log.warning("%s", self._error)
        return self._error

    def _mux(self, packets) -> None:
        try:
            self._container.mux(packets)
        except (av.FFmpegError, OSError) as e:
            raise self._fail(e) from e

    def _relative(self, media_time_s: float) -> float:
        if not np.isfinite(media_time_s):
            raise InputError(f"media time must be finite seconds; got {media_time_s!r}")
        if self._origin is None:
            self._origin = float(media_time_s)
        return float(media_time_s) - self._origin

    # ------------------------------------------------------------------ video
    def write_video(self, rgb: np.ndarray, media_time_s: float) -> None:
        """Encode one frame shown at ``media_time_s``.

        Args:
            rgb: (height, width, 3) uint8 RGB image (not reused after return).
            media_time_s: presentation time, s; strictly increasing between calls
                (equal to or more than 1/90000 s apart). Frames before the
                time origin are skipped.

        Raises:
            InputError: wrong shape/dtype, or a time not after the previous frame's.
            RecordingError: the recorder is closed or writing failed (disk full,
                file size limit); the file written so far stays playable.
        """
        self._check_open()
        rgb = np.asarray(rgb)
        if rgb.shape != self.frame_shape or rgb.dtype != np.uint8:
            kind = "RGB" if self.frame_channels == 3 else "RGBA"
            raise InputError(
                f"recording frames must be {self.frame_shape} uint8 {kind}; "
                f"got {rgb.shape} {rgb.dtype}"
            )
        t = self._relative(media_time_s)
        if t < 0:
            self._skipped_early += 1
            _log.debug("frame at %.3f s is before the recording start; skipped", media_time_s)
            return
        pts = int(round(t / VIDEO_TIME_BASE))
        if self._last_pts is not None and pts <= self._last_pts:
            raise InputError(
                f"video frame times must increase: {media_time_s:.6f} s is not after the "
                f"previous frame ({(self._last_pts * VIDEO_TIME_BASE) + self._origin:.6f} s)"
            )
        frame = self._make_frame(rgb)
        frame.pts = pts
        frame.time_base = VIDEO_TIME_BASE
        try:
            packets = self._video.encode(frame)
        except (av.FFmpegError, OSError) as e:
            raise self._fail(e) from e
        self._mux(packets)
        self._last_pts = pts
        self.frames_written += 1
        if self._audio is not None:
            lag_end = int((t - self.max_audio_lag_s) * self.audio_sample_rate)
            behind = lag_end - (self._audio_next or 0)
            if behind > 0:
                _log.debug("audio lags video by > %.1f s; filling %d samples of silence",
                           self.max_audio_lag_s, behind)
                self._encode_audio(np.zeros((behind, self.audio_channels), np.float32))

    # ------------------------------------------------------------------ audio
    def write_audio(self, samples: np.ndarray, media_time_s: float) -> None:
        """Encode audio whose first sample is at ``media_time_s``.

        Consecutive chunks may jitter by up to 20 ms (:data:`AUDIO_JITTER_S`);
        a larger gap is filled with silence and an overlap is trimmed, so the
        track stays in sync with the video.

        Args:
            samples: (N,) or (N, channels) float32 in [-1, 1] at ``audio_sample_rate``.
            media_time_s: media time of ``samples[0]``, s.

        Raises:
            InputError: the recorder has no audio track, or wrong shape/values.
            RecordingError: closed, or writing failed.
        """
        self._check_open()
        if self._audio is None:
            raise InputError(f"recording {self.path} was opened without an audio track")
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[1] != self.audio_channels:
            raise InputError(
                f"recording audio must be (N,) or (N, {self.audio_channels}); "
                f"got {np.shape(samples)}"
            )
        if not np.isfinite(x).all():
            raise InputError("recording audio contains NaN or infinite samples")
        sr = self.audio_sample_rate
        start = int(round(self._relative(media_time_s) * sr))
        expected = self._audio_next if self._audio_next is not None else 0
        tol = int(AUDIO_JITTER_S * sr) if self._audio_next is not None else 0
        if start > expected + tol:  # gap (or leading silence before the first chunk)
            self._encode_audio(np.zeros((start - expected, self.audio_channels), np.float32))
        elif start < expected - tol:  # overlap, or audio before the origin
            x = x[expected - start:]
        self._encode_audio(x)

    def _encode_audio(self, x: np.ndarray) -> None:
        if len(x) == 0:
            return
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(x.clip(-1.0, 1.0)).reshape(1, -1), format="flt",
            layout="mono" if self.audio_channels == 1 else "stereo",
        )
        frame.sample_rate = self.audio_sample_rate
        self._push_audio(self._resampler.resample(frame))
        self._audio_next = (self._audio_next or 0) + len(x)
        self.audio_samples_written += len(x)

    def _push_audio(self, frames) -> None:
        for f in frames:
            f.pts = self._audio_out_pts
            # a constant: some muxers (Matroska) change the stream's time base to 1/1000
            # when they write the header, after the first frames were stamped
            f.time_base = _AUDIO_TIME_BASE
            self._audio_out_pts += f.samples
            try:
                packets = self._audio.encode(f)
            except (av.FFmpegError, OSError) as e:
                raise self._fail(e) from e
            self._mux(packets)

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Flush the encoders and finish the file. Idempotent.

        Raises:
            RecordingError: the final flush failed (the earlier fragments are kept).
        """
        if self._closed:
            return
        self._closed = True
        failed = self._error is not None
        try:
            if not failed:
                if self._audio is not None:
                    self._push_audio(self._resampler.resample(None))
                    self._mux(self._audio.encode(None))
                self._mux(self._video.encode(None))
        except RecordingError:
            failed = True
        finally:
            try:
                self._container.close()
            except (av.FFmpegError, OSError) as e:
                if not failed:
                    self._fail(e)
                    failed = True
                else:
                    _log.debug("closing the failed recording %s: %s", self.path, e)
        if self._skipped_early:
            _log.info("%d frames before the recording start were skipped", self._skipped_early)
        if failed and self._error is not None:
            raise self._error
