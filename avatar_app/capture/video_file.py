"""Video files (MP4, MPEG, MKV, ... anything FFmpeg reads) as a frame and audio source.

Offline use: every frame in order, no drops (DESIGN.md, offline mode). For a file
played in real time as if it were a camera, see :mod:`avatar_app.capture.live_file`.
"""
from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from avatar_app.capture import _media
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import InputError
from avatar_app.core.types import AudioChunk, Frame

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoInfo:
    """What a video file contains (from its headers plus a demux of its last seconds).

    Attributes:
        width: frame width in pixels, as displayed (after the display matrix:
            a phone clip stored 1920x1080 with ``rotate=90`` is 1080 wide).
        height: frame height in pixels, as displayed.
        fps: frames per second (the stream's average rate; 0.0 if unknown).
        frame_count: number of frames: the container's count where it has one,
            else round(duration_s * fps) (an estimate; :meth:`VideoFileSource.frames`
            yields the true count).
        duration_s: seconds from the first frame's start to the last frame's end.
        has_audio: whether the file has an audio stream.
        audio_sample_rate: Hz of that stream (0 without audio).
        audio_duration_s: seconds of audio without the encoder's end padding
            (0.0 without audio); from the packets at the end of the stream, so it
            agrees with :meth:`VideoFileSource.read_audio` to a few samples.
        audio_start_s: start of the audio relative to the first video frame,
            seconds (negative when the audio starts earlier).
    """

    width: int
    height: int
    fps: float
    frame_count: int
    duration_s: float
    has_audio: bool
    audio_sample_rate: int
    audio_duration_s: float
    audio_start_s: float


class VideoFileSource:
    """Decode a video file's frames and audio with PyAV (FFmpeg).

    Each call of :meth:`frames` or :meth:`read_audio` opens the file anew, so the
    two can be used independently and :meth:`frames` can be iterated again.

    Thread: use one instance from one thread.

    Args:
        path: the video file.

    Raises:
        InputError: the file is missing, not a readable video (corrupt,
            truncated, not media), a still image, or has no video stream.

    Example:
        >>> with VideoFileSource("talk.mp4") as src:
        ...     for frame in src.frames():
        ...         process(frame.image)
    """

    def __init__(self, path: str | Path):
        self.path = _media.check_file(path, "Video")
        #: Set when decoding hit errors (a corrupt or truncated file).
        self.truncated = False
        #: What was wrong when :attr:`truncated` was set (the first problem, for messages).
        self.problem = ""
        self._transform = None  # display matrix -> upright image (see _media.display_transform)
        self._generators: weakref.WeakSet = weakref.WeakSet()
        self._closed = False
        with _media.open_container(self.path, "video") as c:
            fmt = c.format.name
            if fmt in ("image2", "image2pipe") or fmt.endswith("_pipe"):
                # FFmpeg's still-image demuxers (image2, png_pipe, jpeg_pipe, ...): one frame
                codec = c.streams.video[0].codec_context.name if c.streams.video else fmt
                raise InputError(
                    f"'{self.path}' is a still image ({'jpeg' if codec == 'mjpeg' else codec}), not a video: "
                    "give a video file (.mp4, .mov, .mkv, .webm, ...)", path=self.path)
            if not c.streams.video:
                kinds = ", ".join(sorted({s.type for s in c.streams})) or "none"
                raise InputError(
                    f"'{self.path}' has no video stream (streams found: {kinds})", path=self.path)
            self.info = self._probe(c)
            # the MPEG-PS and MPEG-TS demuxers read a cut-off file as complete: its packets are looked
            # at once the frames (or the audio) have been read (not at open: the PS walk reads every
            # packet header), once per source
            self._format = fmt
            self._check_cut = fmt in _media.MPEG_PS_FORMATS + _media.MPEG_TS_FORMATS
            self._cut_short: str | None = None
            self._cut_checked = False
        logger.debug("opened %s: %s", self.path, self.info)

    # -- probing ----------------------------------------------------------------------
    def _probe(self, c: av.container.InputContainer) -> VideoInfo:
        v = c.streams.video[0]
        avi = c.format.name in _media.AVI_FORMATS
        # without an average rate (MPEG-TS), the codec's own frame rate before FFmpeg's guess from the
        # timestamps: the guess reads an MPEG-1 video in a .ts at 25 fps as 50. AVI: the guessed rate
        # (FFmpeg reads H.264 copied into AVI at the header's 50 ticks a second for 25 frames)
        if avi:
            rate = v.guessed_rate or v.codec_context.framerate or v.average_rate or v.base_rate
        else:
            rate = v.average_rate or v.codec_context.framerate or v.guessed_rate or v.base_rate
        fps = float(rate) if rate else 0.0
        self._video_start_s = _media.stream_start_s(v)
        width, height = int(v.codec_context.width), int(v.codec_context.height)
        self._transform = self._probe_transform(c, v)
        if self._transform is not None:
            height, width = self._transform(np.empty((height, width), np.bool_)).shape
        tail = _media.probe_tail(c, v, 1.0 / fps if fps else 0.0)
        if tail is not None:
            duration = tail[1] - self._video_start_s
        else:
            end = _media.declared_end_s(v, c)
            duration = (end - self._video_start_s) if end is not None else 0.0
        if avi and v.frames > 0 and v.time_base:  # index ticks of the stream's time base, not frames
            frame_count = int(round(float(v.frames * v.time_base) * fps))
        else:
            frame_count = v.frames if v.frames > 0 else int(round(duration * fps))

        has_audio = bool(c.streams.audio)
        a_rate, a_dur, a_start = 0, 0.0, 0.0
        if has_audio:
            a = c.streams.audio[0]
            a_rate = int(a.rate or a.codec_context.sample_rate or 0)
            a_start_stream = _media.stream_start_s(a)
            a_start = a_start_stream - self._video_start_s
            frame_s = (a.codec_context.frame_size or 1024) / a_rate if a_rate else 0.0
            tail = _media.probe_tail(c, a, frame_s)
            declared = _media.declared_end_s(a, c)
            if tail is not None:
                a_end = _media.padded_end(declared, tail[0], tail[1])
            else:
                a_end = declared if declared is not None else a_start_stream
            a_dur = max(0.0, a_end - a_start_stream)
        return VideoInfo(
            width=width, height=height, fps=fps,
            frame_count=int(frame_count), duration_s=float(max(duration, 0.0)),
            has_audio=has_audio, audio_sample_rate=a_rate, audio_duration_s=float(a_dur),
            audio_start_s=float(a_start),
        )

    def _probe_transform(self, c: av.container.InputContainer, v: av.stream.Stream):
        """The display transform of the stream, from its first decodable frame (FFmpeg puts the
        container's display matrix on every decoded frame)."""
        first = next(_media.decode_tolerant(c, v, _media.DecodeReport()), None)
        matrix = _media.frame_display_matrix(first) if first is not None else None
        transform = _media.display_transform(matrix)
        if transform is not None:
            logger.info("%s has a display matrix (rotation %s deg); frames are turned upright",
                        self.path, getattr(first, "rotation", "?"))
        return transform

    # -- frames -----------------------------------------------------------------------
    def frames(self) -> Iterator[Frame]:
        """Decode every video frame in presentation order.

        Yields:
            :class:`~avatar_app.core.types.Frame` with ``index`` from 0,
            ``media_time_s`` = pts relative to the video stream's start (seconds),
            ``t_capture_ns`` = ``now_ns()`` when the frame was decoded and
            ``image`` (H, W, 3) uint8 BGR, upright: the file's display matrix
            (rotation metadata of phone clips) is applied, as players do.

        Frames whose timestamp does not increase (a corrupt stretch of the file) are dropped,
        with a warning naming the file and how many, and the file counts as corrupt.
        If the file is corrupt or truncated, the frames that decode are yielded,
        a warning is logged and :attr:`truncated` and :attr:`problem` are set. Truncation
        is found from decode errors, fewer frames or an earlier end than the container
        declares, and for MPEG program and transport streams (.mpg, .ts), whose declared
        length is estimated from the cut file itself, from a last packet that the file ends
        inside (:func:`~avatar_app.capture._media.cut_short`).

        Raises:
            InputError: no frame at all could be decoded (corrupt/truncated file),
                or the source was closed.
        """
        if self._closed:
            raise InputError(f"VideoFileSource for '{self.path}' is closed", path=self.path)
        gen = self._frames()
        self._generators.add(gen)
        return gen

    def _frames(self) -> Iterator[Frame]:
        report = _media.DecodeReport()
        fps = self.info.fps
        with _media.open_container(self.path, "video") as c:
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            avi = self._format in _media.AVI_FORMATS
            # AVI: a frame count in index ticks, not frames (see _media.AVI_FORMATS); its end is checked
            declared_frames = 0 if avi else stream.frames
            declared_end = _media.to_seconds(stream.duration, stream.time_base)
            if avi and stream.frames > 0:  # the header's length (ticks); the duration comes from the index
                declared_end = _media.to_seconds(stream.frames, stream.time_base)
            if declared_end is None:  # Matroska / WebM: the track's DURATION tag (the header keeps it)
                declared_end = _media.tagged_duration_s(stream)
            index = 0
            last_t = None
            out_of_order = 0
            decoded = _media.decode_tolerant(c, stream, report)
            # AVI labels B-frame pictures with decode-order times: put the times in order, not the frames
            timed = _media.in_presentation_times(decoded) if avi else ((fr, fr.time) for fr in decoded)
            for fr, fr_time in timed:
                if fr_time is not None:
                    t = fr_time - self._video_start_s
                elif last_t is not None:
                    t = last_t + (1.0 / fps if fps else 0.0)
                else:
                    t = 0.0
                if avi and fps:  # AVI is constant-rate: times on its frame grid; a guessed end label next
                    t = round(t * fps) / fps
                    if last_t is not None and t <= last_t:
                        t = last_t + 1.0 / fps
                if last_t is not None and t <= last_t:  # a corrupt stretch: time runs backwards or stands
                    out_of_order += 1
                    continue
                last_t = t
                image = fr.to_ndarray(format="bgr24")
                if self._transform is not None:
                    image = self._transform(image)
                image = np.ascontiguousarray(image)
                yield Frame(index=index, t_capture_ns=now_ns(), image=image, media_time_s=t)
                index += 1
        if out_of_order:
            logger.warning("%s: %d video frame%s dropped: %s timestamp did not increase (a corrupt stretch of "
                        "the file)", self.path, out_of_order, "" if out_of_order == 1 else "s",
                        "its" if out_of_order == 1 else "their")
            report.note_error(RuntimeError(f"{out_of_order} frame{'' if out_of_order == 1 else 's'} with "
                                           f"timestamps out of order dropped"))
        if self._check_cut and index > 0:
            if self._cut(self._format) is not None:
                report.note_error(RuntimeError(self._cut_short))
        if declared_frames > index > 0:
            report.note_error(RuntimeError(f"{index} of {declared_frames} frames in the file"))
        elif declared_end is not None and last_t is not None:
            got_end = last_t + (1.0 / fps if fps else 0.0)
            if declared_end - got_end > _media.SHORTFALL_S:
                report.note_error(RuntimeError(
                    f"frames end at {got_end:.2f} s of {declared_end:.2f} s"))
        self._check_report(report, "video frame")

    def _cut(self, format_name: str) -> str | None:
        """:func:`~avatar_app.capture._media.cut_short` of the file, looked at once per source
        (however often it is played through, and for its frames and its audio alike)."""
        if not self._cut_checked:
            self._cut_short, self._cut_checked = _media.cut_short(self.path, format_name), True
        return self._cut_short

    def _check_report(self, report: _media.DecodeReport, unit: str) -> None:
        # warned once per source: a looping player (LiveFileSource) decodes the file again each pass
        if _media.check_report(report, unit, self.path, warn=not self.truncated):
            self.truncated = True
            self.problem = self.problem or report.first_error

    # -- audio ------------------------------------------------------------------------
    def read_audio(self, sample_rate: int | None = None) -> AudioChunk | None:
        """The whole audio track as one mono float32 chunk.

        Args:
            sample_rate: output rate in Hz (resampled with ``av.AudioResampler``),
                or None for the file's own rate.

        Returns:
            :class:`~avatar_app.core.types.AudioChunk` with ``samples`` (N,) float32
            in [-1, 1] (channels averaged), the encoder's end padding removed,
            ``media_time_s`` = start of the audio relative to the video start
            (seconds) and ``t_start_ns`` = 0; None if the file has no audio. A corrupt or
            truncated track gives the part that decodes, its ``problem`` says what is wrong and
            :attr:`truncated` and :attr:`problem` are set (found as :meth:`frames` finds it; one
            warning per source, whether the frames or the audio are read first).

        Raises:
            InputError: the audio stream cannot be decoded at all, or the source
                was closed.
            ValueError: ``sample_rate`` is not positive.
        """
        if self._closed:
            raise InputError(f"VideoFileSource for '{self.path}' is closed", path=self.path)
        if not self.info.has_audio:
            return None
        if sample_rate is not None and sample_rate <= 0:
            raise ValueError(f"sample_rate must be > 0, got {sample_rate}")
        # warned once per source: the frames, or an earlier read of the audio, may have warned already
        samples, rate, t0, problem = _media.load_stream_audio(self.path, sample_rate, warn=not self.truncated,
                                                              cut=self._cut)
        if problem:
            self.truncated = True
            self.problem = self.problem or problem
        return AudioChunk(samples=samples, sample_rate=rate, t_start_ns=0,
                          media_time_s=t0 - self._video_start_s, problem=problem)

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        """Stop open :meth:`frames` iterators and release the file. Idempotent."""
        self._closed = True
        for gen in list(self._generators):
            try:
                gen.close()
            except ValueError:  # running in another thread: it closes its file when done
                logger.debug("frames() iterator of %s is running; not closed", self.path)
        self._generators = weakref.WeakSet()

    def __enter__(self) -> "VideoFileSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VideoFileSource('{self.path}')"
