"""PyAV helpers shared by the file sources: opening, probing, tolerant decoding.

Private to :mod:`avatar_app.capture`.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.error
import numpy as np

from avatar_app.core.errors import InputError

logger = logging.getLogger(__name__)

#: A stream that ends this many seconds before its declared duration is truncated.
SHORTFALL_S = 0.5

#: Seconds before the declared end from which the tail of a stream is demuxed
#: to find its exact end (packet pts + duration).
_TAIL_PROBE_S = 3.0


def check_file(path: str | Path, what: str) -> Path:
    """Return ``path`` as a Path if it is an existing regular file.

    Raises:
        InputError: the file does not exist, is not a regular file or is empty.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} file not found: '{p}'", path=p)
    if not p.is_file():
        raise InputError(f"{what} path '{p}' is not a file", path=p)
    if p.stat().st_size == 0:
        raise InputError(f"{what} file '{p}' is empty (0 bytes)", path=p)
    return p


def open_container(path: Path, what: str) -> av.container.InputContainer:
    """Open a media file for reading.

    Raises:
        InputError: the file cannot be parsed as media (corrupt, truncated or not media);
            an MP4 cut short before its index (:func:`mp4_index_missing`) is named as such.
    """
    try:
        return av.open(str(path), mode="r")
    except av.error.FFmpegError as e:
        missing = mp4_index_missing(path)
        if missing is not None:
            raise InputError(
                f"'{path}' is truncated and no frame of it can be decoded: {missing}. "
                "A complete copy of the file is needed", path=path) from e
        raise InputError(
            f"'{path}' is not a readable {what} (corrupt, truncated or not a media file). "
            f"FFmpeg says: {error_text(e)}",
            path=path,
        ) from e
    except (OSError, ValueError) as e:
        raise InputError(f"'{path}' cannot be read: {error_text(e)}", path=path) from e


_ERRNO_PREFIX = re.compile(r"^\[Errno -?\d+\]\s*")


def error_text(err: BaseException) -> str:
    """An FFmpeg or OS error as plain text, without the "[Errno N]" prefix and the file name.

    Args:
        err: e.g. ``av.error.InvalidDataError`` (``str`` is "[Errno 1094995529]
            Invalid data found when processing input: 'f.mp4'").

    Returns:
        e.g. "Invalid data found when processing input".
    """
    text = getattr(err, "strerror", None)
    if not text:
        text = _ERRNO_PREFIX.sub("", str(err))
    return str(text)


#: FFmpeg's AVI demuxer. AVI keeps no presentation times: FFmpeg labels each frame from the index's
#: decode order (with B-frames the labels come out of order), and a stream's frame count is its length
#: in ticks of the header's rate (H.264 copied into AVI by FFmpeg: 50 ticks a second for 25 frames).
AVI_FORMATS = ("avi",)
#: Frames held to put their timestamps in order (:func:`in_presentation_times`): more than the B-frames
#: an encoder puts between two references (x264's default: 3).
REORDER_DEPTH = 8


def tagged_duration_s(stream: av.stream.Stream) -> float | None:
    """A stream's ``DURATION`` tag, seconds, or None (Matroska / WebM files written by FFmpeg carry
    one per track, ``HH:MM:SS.fffffffff``, in the header: it survives when the file is cut short)."""
    m = re.fullmatch(r"(\d+):(\d\d):(\d\d(?:\.\d+)?)", str(stream.metadata.get("DURATION", "")).strip())
    if m is None:
        return None
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))


def in_presentation_times(frames: Iterator[av.VideoFrame],
                          depth: int = REORDER_DEPTH) -> Iterator[tuple[av.VideoFrame, float | None]]:
    """``(frame, time)`` pairs for frames that a decoder returns in presentation order but labelled
    with times out of order (AVI: :data:`AVI_FORMATS`): each frame, in the order it came, gets the
    earliest time among the ``depth`` frames around it, so the times rise as the pictures do.

    Frames with no time keep None. Files whose times already rise are passed through unchanged.
    """
    import heapq
    from collections import deque

    held: deque = deque()
    times: list[float] = []
    for fr in frames:
        held.append(fr)
        if fr.time is not None:
            heapq.heappush(times, float(fr.time))
        if len(held) > depth:
            first = held.popleft()
            yield first, (heapq.heappop(times) if first.time is not None else None)
    while held:
        first = held.popleft()
        yield first, (heapq.heappop(times) if first.time is not None else None)


def to_seconds(value: int | None, time_base: Fraction | None) -> float | None:
    """``value * time_base`` in seconds, or None if either is missing."""
    if value is None or time_base is None:
        return None
    return float(value * time_base)


def padded_end(declared_end: float | None, last_start: float, decoded_end: float) -> float:
    """End time of an audio stream, without the encoder's end padding.

    Encoders fill the last codec frame with padding; MP4 declares the true
    length (edit list / track duration). Padding is by definition shorter than
    one codec frame, so the declared end is used only when it falls inside the
    last frame ``(last_start, decoded_end]``; otherwise it is an estimate (MPEG-PS
    durations come from the last packet's PTS) and the decoded end is kept.

    Args:
        declared_end: container's start + duration of the stream, seconds, or None.
        last_start: start of the last frame/packet, seconds.
        decoded_end: end of the last frame/packet, seconds.
    """
    if declared_end is not None and last_start < declared_end <= decoded_end:
        return declared_end
    return decoded_end


def stream_start_s(stream: av.stream.Stream) -> float:
    """Start time of a stream in seconds (0.0 when the container gives none)."""
    s = to_seconds(stream.start_time, stream.time_base)
    return s if s is not None else 0.0


def declared_end_s(stream: av.stream.Stream,
                   container: av.container.InputContainer) -> float | None:
    """Start + duration of a stream as the container declares it, seconds, or None."""
    dur = to_seconds(stream.duration, stream.time_base)
    if dur is not None and dur > 0:
        return stream_start_s(stream) + dur
    if container.duration:
        return float(container.duration) / av.time_base
    return None


def probe_tail(container: av.container.InputContainer, stream: av.stream.Stream,
               default_frame_s: float) -> tuple[float, float] | None:
    """(start of the last packet, end of the last packet) of a stream, seconds.

    Seeks to a few seconds before the declared end and demuxes to the end of the
    file (no decoding). Returns None if nothing could be read.

    Args:
        default_frame_s: packet duration to assume when a packet has none.
    """
    end = declared_end_s(stream, container)
    tb = stream.time_base
    if tb is None:
        return None
    try:
        target = max(0.0, end - _TAIL_PROBE_S) if end is not None else 0.0
        container.seek(int(target / tb), stream=stream, backward=True)
        last_start = last_end = None
        for pkt in container.demux(stream):
            if pkt.pts is None:
                continue
            start = float(pkt.pts * tb)
            dur = float(pkt.duration * tb) if pkt.duration else default_frame_s
            if last_end is None or start + dur > last_end:
                last_start, last_end = start, start + dur
    except (av.error.FFmpegError, OSError) as e:
        logger.debug("tail probe of stream %d failed: %s", stream.index, e)
        return None
    if last_end is None:
        return None
    return last_start, last_end


def display_transform(matrix: bytes | None) -> Callable[[np.ndarray], np.ndarray] | None:
    """What to do to a decoded image so that it looks as players show it, from its display matrix.

    Phone clips store frames as the sensor saw them and a display matrix (MP4
    ``tkhd`` matrix, the ``rotate`` tag) saying how to show them. FFmpeg's
    matrix is 3x3 int32, row-major, 16.16 fixed point (the last column 2.30); a
    source pixel ``(x, y, 1)`` (row vector) times it gives the displayed pixel, so
    ``x' = a x + c y`` and ``y' = b x + d y`` with ``a, b, c, d`` = elements 0, 1, 3, 4.
    Only quarter turns and mirrors are applied (what cameras write); any other
    angle is logged and ignored.

    Source: FFmpeg ``libavutil/display.h`` (matrix layout, ``av_display_rotation_get``)
    and ``fftools`` auto-rotation (which this reproduces for the axis-aligned cases).

    Args:
        matrix: the 36 bytes of ``AV_FRAME_DATA_DISPLAYMATRIX`` side data, or None.

    Returns:
        ``f(image) -> image`` for (H, W, ...) arrays (a view; the caller copies), or
        None when nothing is to be done (no matrix, identity, or not axis-aligned).
    """
    if not matrix or len(matrix) < 36:
        return None
    m = np.frombuffer(bytes(matrix)[:36], "<i4").astype(np.float64) / 65536.0
    a, b, c, d = (int(np.sign(round(v))) for v in (m[0], m[1], m[3], m[4]))
    if (a == 0) == (b == 0) or (c == 0) == (d == 0) or (a == 0) != (d == 0):
        logger.warning("display matrix %s is not a quarter turn or a mirror; frames are used as stored",
                       np.round(m[[0, 1, 3, 4]], 3).tolist())
        return None
    if (a, b, c, d) == (1, 0, 0, 1):
        return None
    swap = a == 0  # x' comes from y: transpose, then flip the axes whose scale is negative
    flip_rows = (b if swap else d) < 0
    flip_cols = (c if swap else a) < 0

    def apply(image: np.ndarray) -> np.ndarray:
        out = np.swapaxes(image, 0, 1) if swap else image
        if flip_rows:
            out = out[::-1]
        if flip_cols:
            out = out[:, ::-1]
        return out

    return apply


def frame_display_matrix(frame: av.VideoFrame) -> bytes | None:
    """The display-matrix side data of a decoded frame (bytes), or None."""
    for sd in frame.side_data:
        if sd.type.name == "DISPLAYMATRIX":
            return bytes(sd)
    return None


@dataclass
class DecodeReport:
    """What happened while decoding one stream (filled during iteration)."""

    frames: int = 0
    errors: int = 0
    first_error: str = ""

    def note_error(self, err: Exception) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = error_text(err)


def decode_tolerant(container: av.container.InputContainer, stream: av.stream.Stream,
                    report: DecodeReport) -> Iterator[av.frame.Frame]:
    """Decode every frame of ``stream``, skipping packets that fail to decode.

    A demux error (file cut short) ends the iteration after flushing the decoder.
    Errors are counted in ``report``; the caller decides whether to warn or raise.
    """
    demux = container.demux(stream)
    while True:
        try:
            pkt = next(demux)
        except StopIteration:
            break
        except av.error.FFmpegError as e:
            report.note_error(e)
            pkt = None
        try:
            frames = stream.codec_context.decode(pkt)
        except av.error.FFmpegError as e:
            report.note_error(e)
            frames = []
        for fr in frames:
            report.frames += 1
            yield fr
        if pkt is None:  # flushed after a demux error
            break


def mono_float(frame: av.AudioFrame) -> np.ndarray:
    """(N,) float32 mono from a planar float frame: the mean of its channels.

    The mean keeps full-scale input within [-1, 1] (FFmpeg's own stereo->mono
    matrix adds channels at -3 dB, which can exceed 1); the result is clipped
    to [-1, 1].
    """
    a = frame.to_ndarray()
    if a.ndim == 2 and a.shape[0] > 1:
        x = a.mean(axis=0, dtype=np.float32)
    else:
        x = np.array(a.reshape(-1), dtype=np.float32)
    # Lossy decoders (AAC, MP3) and resampling overshoot full scale slightly.
    return np.clip(x, -1.0, 1.0, out=x)


def iter_audio(container: av.container.InputContainer, stream: av.stream.Stream,
               sample_rate: int | None, report: DecodeReport,
               tail: dict | None = None) -> Iterator[tuple[np.ndarray, float]]:
    """Decode an audio stream to mono float32 blocks at ``sample_rate``.

    Resampling uses ``av.AudioResampler`` (FFmpeg libswresample), which keeps the
    output aligned with its input (no added delay); channels are averaged.

    Args:
        sample_rate: output rate in Hz, or None for the stream's own rate.
        report: counts decoded frames and errors.
        tail: if given, receives ``last_start`` and ``decoded_end`` (seconds,
            stream time) of the last decoded frame, for :func:`padded_end`.

    Yields:
        ((N,) float32 samples, start time of the first sample in seconds of
        stream time), contiguous blocks.
    """
    resampler = av.AudioResampler(format="fltp", rate=sample_rate)
    out_rate = sample_rate
    t0: float | None = None
    next_start = 0.0
    out_count = 0
    for fr in decode_tolerant(container, stream, report):
        if t0 is None:
            t0 = fr.time if fr.time is not None else stream_start_s(stream)
            out_rate = sample_rate or fr.sample_rate
            next_start = t0
        start = fr.time if fr.time is not None else next_start
        next_start = start + fr.samples / fr.sample_rate
        if tail is not None:
            tail["last_start"] = start
            tail["decoded_end"] = next_start
        fr.pts = None  # timing is tracked here; let the resampler ignore gaps
        for o in resampler.resample(fr):
            x = mono_float(o)
            yield x, t0 + out_count / out_rate
            out_count += x.shape[0]
    if t0 is None:
        return
    for o in resampler.resample(None):
        x = mono_float(o)
        yield x, t0 + out_count / out_rate
        out_count += x.shape[0]


def check_report(report: DecodeReport, unit: str, path: Path, warn: bool = True) -> bool:
    """Judge a finished decode: raise if nothing decoded, warn if some errors.

    Args:
        unit: what was decoded, for messages ("video frame", "audio frame").
        path: the file, named in messages.
        warn: log the warning (False: a looping player's later passes, already warned once).

    Returns:
        True if the stream is corrupt or truncated (a warning was logged).

    Raises:
        InputError: no frame could be decoded.
    """
    if report.frames == 0:
        detail = f" ({report.first_error})" if report.first_error else ""
        raise InputError(
            f"'{path}' is corrupt or truncated: no {unit} could be decoded{detail}", path=path)
    if report.errors == 0:
        return False
    if warn:
        logger.warning("'%s' is corrupt or truncated: %d %ss decoded, %d problem(s) (%s)",
                       path, report.frames, unit, report.errors, report.first_error)
    return True


def load_stream_audio(path: Path, sample_rate: int | None, warn: bool = True,
                      cut: Callable[[str], str | None] | None = None) -> tuple[np.ndarray, int, float, str]:
    """Decode the first audio stream of ``path`` to one mono float32 array.

    The encoder's end padding is removed (:func:`padded_end`). Truncation is found from
    decode errors, an end earlier than the stream declares and, for the containers whose
    demuxer reads a cut file as complete (MPEG-PS, MPEG-TS), from the file's structure
    (:func:`cut_short`).

    Args:
        sample_rate: output rate in Hz, or None for the stream's own rate.
        warn: log the warning when the stream is corrupt or truncated (False: the
            caller has warned about this file already).
        cut: ``cut(format_name) -> what is cut or None`` in place of :func:`cut_short`
            (a source that caches the verdict: the walk reads every packet header).

    Returns:
        ((N,) float32 mono samples in [-1, 1], sample rate Hz, start time of the
        first sample in seconds of stream time, what is wrong with the stream: ""
        when it decoded whole, else the first problem (corrupt or truncated; a
        warning was logged when ``warn``)).

    Raises:
        InputError: the file cannot be opened, has no audio stream, or no
            audio frame decodes.
    """
    report = DecodeReport()
    blocks: list[np.ndarray] = []
    tail: dict = {}
    t0 = 0.0
    with open_container(path, "media file") as c:
        if not c.streams.audio:
            kinds = ", ".join(sorted({s.type for s in c.streams})) or "none"
            raise InputError(f"'{path}' has no audio stream (streams found: {kinds})", path=path)
        stream = c.streams.audio[0]
        rate = int(sample_rate or stream.rate or stream.codec_context.sample_rate)
        for i, (x, t) in enumerate(iter_audio(c, stream, sample_rate, report, tail)):
            if i == 0:
                t0 = t
            blocks.append(x)
        declared = declared_end_s(stream, c)
        declared_stream = to_seconds(stream.duration, stream.time_base)
        if declared_stream is not None:
            declared_stream += stream_start_s(stream)
        fmt = c.format.name
    if tail and declared_stream is not None:
        if declared_stream - tail["decoded_end"] > SHORTFALL_S:
            report.note_error(RuntimeError(
                f"audio ends at {tail['decoded_end']:.2f} s of {declared_stream:.2f} s"))
    if report.frames and report.errors == 0:
        what = (cut or (lambda name: cut_short(path, name)))(fmt)
        if what is not None:
            report.note_error(RuntimeError(what))
    bad = check_report(report, "audio frame", path, warn=warn)
    samples = np.concatenate(blocks) if blocks else np.zeros(0, np.float32)
    if tail:
        end = padded_end(declared, tail["last_start"], tail["decoded_end"])
        n = int(round((end - t0) * rate))
        samples = samples[:max(n, 0)]
    return np.ascontiguousarray(samples, dtype=np.float32), rate, t0, report.first_error if bad else ""
# -- truncation that the demuxer does not report --------------------------------------
#: FFmpeg demuxers of MPEG program streams (.mpg, .mpeg, .vob).
MPEG_PS_FORMATS = ("mpeg", "vob")
_PS_PREFIX = b"\x00\x00\x01"


def mpeg_ps_cut_short(path: Path) -> str | None:
    """Whether an MPEG program stream (.mpg, .vob) ends inside one of its packs or packets.

    FFmpeg's MPEG-PS demuxer gives a cut-off last packet as it is (its corrupt flag
    is lost to the parsers most of the time) and estimates the duration from the
    last timestamp in the file, so a truncated .mpg decodes without an error and looks
    complete. The pack headers (``0x000001BA``) and the packets (system header,
    PES, padding: ``0x000001BB``..``FF``, with a 16-bit length) chain from the first
    byte to the last; a file cut at an arbitrary byte ends inside one of them.
    Only the 4..14-byte headers are read, not the payload.

    Source: ISO/IEC 11172-1 section 2.4.3 (MPEG-1 pack and packet layer) and
    ISO/IEC 13818-1 section 2.5.3 (MPEG-2 program stream pack header).

    Args:
        path: the file (FFmpeg format ``mpeg``).

    Returns:
        What is cut (e.g. "the file ends inside its last packet (stream 0xe0), at byte
        270336: 1228 of its 2048 bytes are there"), or None: the chain ends at the end of
        the file, at an end code (``0x000001B9``) or in trailing padding, or it breaks
        before the end (not a layout this check knows: no verdict). A cut that falls
        exactly between two packets cannot be told from a complete file.
    """
    size = path.stat().st_size
    pos = 0
    with path.open("rb") as f:
        while pos < size:
            f.seek(pos)
            head = f.read(14)
            if len(head) < 4 or head[:3] != _PS_PREFIX:
                return None  # trailing padding (0xff / 0x00) or a layout not known here
            code = head[3]
            if code == 0xB9:  # MPEG program end code
                return None
            if code == 0xBA:  # pack header: 12 bytes (MPEG-1) or 14 + stuffing (MPEG-2)
                if len(head) < 5:
                    length = 14
                elif head[4] >> 6 == 1:
                    length = 14 + (head[13] & 7) if len(head) >= 14 else 14
                else:
                    length = 12
                what = "pack header"
            elif code >= 0xBB:
                length = 6 + (int.from_bytes(head[4:6], "big") if len(head) >= 6 else 0xFFFF)
                what = f"packet (stream 0x{code:02x})"
            else:
                return None  # an elementary stream start code: not a program stream walk
            if pos + length > size:
                return (f"the file ends inside its last {what}, at byte {pos}: "
                        f"{size - pos} of its {length} bytes are there")
            pos += length
    return None


#: FFmpeg's demuxer of MPEG transport streams (.ts, .m2ts, .mts).
MPEG_TS_FORMATS = ("mpegts",)
_TS_SYNC = 0x47
#: (packet size, offset of the sync byte in it): plain 188-byte packets, M2TS (a 4-byte
#: timestamp before each packet) and 204-byte packets (16 bytes of FEC after each).
_TS_LAYOUTS = ((188, 0), (192, 4), (204, 0))
#: Transport packets at the end of the file in which a cut-off PES packet is looked for.
_TS_TAIL_PACKETS = 1024


def mpeg_ts_cut_short(path: Path) -> str | None:
    """Whether an MPEG transport stream (.ts, .m2ts) ends inside a transport packet or a PES packet.

    FFmpeg's MPEG-TS demuxer, like its MPEG-PS one, hands a cut-off last PES packet on
    without an error (PyAV's ``Packet.is_corrupt`` stays False) and estimates the duration
    from the last timestamp in the cut file, so a truncated .ts decodes cleanly and looks
    complete. Transport packets have a fixed size (188 bytes; 192 for M2TS, 204 with FEC),
    so a file cut at an arbitrary byte ends inside one. A file cut exactly between two
    transport packets is found when a stream's last PES packet declares a length
    (``PES_packet_length``, audio always, video when under 64 KiB) that the packets
    after its start, among the last :data:`_TS_TAIL_PACKETS`, do not fill.
    Only the 4-byte packet headers and the 6-byte PES headers are read.

    Source: ISO/IEC 13818-1 section 2.4.3 (transport packet: sync byte 0x47, PID,
    payload_unit_start_indicator, adaptation_field_control) and 2.4.3.6 (PES packet:
    start code prefix 0x000001, stream id, 16-bit PES_packet_length, 0 = unbounded).

    Args:
        path: the file (FFmpeg format ``mpegts``).

    Returns:
        What is cut (e.g. "the file ends inside its last transport packet, at byte 300800:
        24 of its 188 bytes are there"), or None: the file ends on a packet boundary with
        every PES packet whole, or its layout is not one this check knows (no verdict).
    """
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(4 * 204)
        layout = next((
            (n, off) for n, off in _TS_LAYOUTS
            if len(head) > off and all(head[i] == _TS_SYNC for i in range(off, min(len(head), off + 4 * n), n))
            and (size >= off + 2 * n or size % n)), None)
        if layout is None:
            return None
        n, off = layout
        rest = size % n
        if rest:
            return (f"the file ends inside its last transport packet, at byte {size - rest}: "
                    f"{rest} of its {n} bytes are there")
        start = max(0, size - _TS_TAIL_PACKETS * n)
        f.seek(start)
        tail = f.read(size - start)
    pending: dict[int, list[int]] = {}  # PID -> [bytes its open PES packet declares, bytes there]
    for pos in range(off, len(tail) - 187, n):
        pkt = tail[pos:pos + 188]
        if pkt[0] != _TS_SYNC:
            return None  # lost sync: not a layout this check knows
        pid = ((pkt[1] & 0x1F) << 8) | pkt[2]
        control = (pkt[3] >> 4) & 3
        if not control & 1:
            continue  # adaptation field only, no payload
        body = 4 + (1 + pkt[4] if control & 2 else 0)
        payload = pkt[body:188] if body < 188 else b""
        if pkt[1] & 0x40:  # a PES packet (or a PSI section) starts here
            if payload[:3] == _PS_PREFIX and len(payload) >= 6 and int.from_bytes(payload[4:6], "big"):
                pending[pid] = [6 + int.from_bytes(payload[4:6], "big"), len(payload)]
            else:
                pending.pop(pid, None)
        elif pid in pending:
            pending[pid][1] += len(payload)
    for pid, (declared, there) in sorted(pending.items()):
        if there < declared:
            return (f"the file ends inside the last PES packet of PID 0x{pid:04x}: "
                    f"{there} of its {declared} bytes are there")
    return None


#: FFmpeg demuxer of RIFF WAVE files.
WAV_FORMATS = ("wav",)


def wav_cut_short(path: Path) -> str | None:
    """What is cut off a RIFF WAVE file, from its ``data`` chunk's declared size, or None.

    FFmpeg's wav demuxer reads a file cut inside its ``data`` chunk as complete (it decodes
    what is there and reports no error). The chunk's size field (little-endian uint32, after
    the ``data`` id; the RIFF/WAVE layout of Microsoft's Multimedia Programming Interface and
    Data Specifications 1.0, 1991) says how many sample bytes were written.

    Args:
        path: the file.

    Returns:
        None when the ``data`` chunk is all there, or when its size is unknown (0 or
        0xFFFFFFFF, which streaming writers leave; RF64 files; no ``data`` chunk found), else
        a sentence saying how many of the declared bytes are there.
    """
    import struct

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return None
            pos = 12
            while pos + 8 <= size:
                f.seek(pos)
                cid, n = struct.unpack("<4sI", f.read(8))
                if cid == b"data":
                    if n in (0, 0xFFFFFFFF):
                        return None
                    there = size - (pos + 8)
                    if there < n:
                        return f"the file ends inside its audio data: {there} of its {n} bytes are there"
                    return None
                pos += 8 + n + (n & 1)  # chunks are padded to an even size
    except OSError:
        return None
    return None


#: FFmpeg's demuxer of MPEG audio elementary streams (.mp3, .mp2).
MPEG_AUDIO_FORMATS = ("mp3",)
#: Bit rates, kbit/s, by (MPEG-1, layer) and (MPEG-2 / 2.5, layer) and the header's 4-bit index
#: (0 = free format, 15 = invalid). ISO/IEC 11172-3 section 2.4.2.3, ISO/IEC 13818-3 section 2.4.2.3.
_MPA_KBPS = {
    (1, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (1, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (1, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (2, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (2, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
#: Sampling rates, Hz, by the header's version bits (3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5) and 2-bit index.
_MPA_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def mpeg_audio_frame_bytes(header: bytes) -> int | None:
    """Length in bytes of the MPEG audio frame that starts with the 4-byte ``header``, or None.

    Layer I: ``(12 * bitrate / rate + padding) * 4``; layers II and III: ``144 * bitrate / rate
    + padding``, ``72 * ...`` for layer III of MPEG-2 and 2.5 (ISO/IEC 11172-3 section 2.4.3.1,
    ISO/IEC 13818-3 section 2.4.3.1).

    Returns:
        The length, or None for no frame sync, a reserved version, layer, rate or bit-rate index,
        or free format (no length in the header).
    """
    if len(header) < 4 or header[0] != 0xFF or (header[1] & 0xE0) != 0xE0:
        return None
    version, layer_bits = (header[1] >> 3) & 3, (header[1] >> 1) & 3
    rate_index, br_index, padding = (header[2] >> 2) & 3, header[2] >> 4, (header[2] >> 1) & 1
    if version == 1 or layer_bits == 0 or rate_index == 3 or br_index in (0, 15):
        return None
    layer = 4 - layer_bits
    table = _MPA_KBPS[(1, layer)] if version == 3 else _MPA_KBPS[(2, 1 if layer == 1 else 2)]
    bitrate, rate = table[br_index] * 1000, _MPA_RATES[version][rate_index]
    if layer == 1:
        return (12 * bitrate // rate + padding) * 4
    return (144 if layer == 2 or version == 3 else 72) * bitrate // rate + padding


def mpeg_audio_cut_short(path: Path) -> str | None:
    """What is cut off an MPEG audio file (.mp3, .mp2) that ends inside its last frame, or None.

    FFmpeg's mp3 demuxer hands the partial last frame on as a short packet, and the decoder
    drops it without an error, so a cut file reads as complete. The last packet's own header
    says how long the frame is (:func:`mpeg_audio_frame_bytes`). Only the last 2 s are demuxed.

    Returns:
        A sentence saying how many of the last frame's bytes are there, or None when it is whole
        (or the file cannot be read, or its last packet has no MPEG audio header).
    """
    try:
        with av.open(str(path)) as c:
            if not c.streams.audio:
                return None
            stream = c.streams.audio[0]
            if c.duration and c.duration > 2 * av.time_base:
                c.seek(int(c.duration - 2 * av.time_base), any_frame=True)
            last = None
            for packet in c.demux(stream):
                if packet.size:
                    last = bytes(packet)
    except (av.FFmpegError, OSError):
        return None
    want = mpeg_audio_frame_bytes(last) if last else None
    if want is None or len(last) >= want:
        return None
    return f"the file ends inside its last MPEG audio frame: {len(last)} of its {want} bytes are there"


def cut_short(path: Path, format_name: str) -> str | None:
    """What is cut off a file whose demuxer reads a truncated file as complete, or None.

    Args:
        path: the file.
        format_name: FFmpeg's name of its container format (``container.format.name``).

    Returns:
        :func:`mpeg_ps_cut_short` for MPEG program streams, :func:`mpeg_ts_cut_short` for
        MPEG transport streams, :func:`wav_cut_short` for WAVE files, :func:`mpeg_audio_cut_short`
        for MPEG audio (.mp3, .mp2); None for other formats
        (their demuxers report a cut file: decode errors, fewer frames or an earlier end than
        declared).
    """
    if format_name in WAV_FORMATS:
        return wav_cut_short(path)
    if format_name in MPEG_PS_FORMATS:
        return mpeg_ps_cut_short(path)
    if format_name in MPEG_TS_FORMATS:
        return mpeg_ts_cut_short(path)
    if format_name in MPEG_AUDIO_FORMATS:
        return mpeg_audio_cut_short(path)
    return None


def mp4_index_missing(path: Path) -> str | None:
    """Why an MP4/MOV file that FFmpeg cannot open has no index, if it is a cut-off MP4.

    An MP4's frames are found through its ``moov`` box (sample tables). Writers that
    stream (phones, OBS, FFmpeg without ``+faststart``) put ``moov`` after the media
    data (``mdat``), at the very end; a file cut short then has no index and no frame
    can be decoded at all (the data may be intact but where each frame starts is not
    known). Reads only the 8..16-byte box headers of the top level.

    Source: ISO/IEC 14496-12 section 4.2 (box header: 32-bit size, type, 64-bit
    ``largesize`` when size is 1; size 0 = to the end of the file).

    Args:
        path: the file.

    Returns:
        What is missing, for the user (which box is cut, and where),
        or None when the file does not start with an ``ftyp`` box or its ``moov`` box is
        there and whole.
    """
    size = path.stat().st_size
    boxes: list[tuple[str, int, int]] = []  # (type, offset, declared size)
    pos = 0
    with path.open("rb") as f:
        while pos + 8 <= size:
            f.seek(pos)
            head = f.read(16)
            length = int.from_bytes(head[:4], "big")
            kind = head[4:8].decode("latin-1")
            if length == 1 and len(head) >= 16:
                length = int.from_bytes(head[8:16], "big")
            elif length == 0:
                length = size - pos
            if length < 8 or not kind.isprintable():
                return None  # not a box layout this check knows
            boxes.append((kind, pos, length))
            pos += length
    if not boxes or boxes[0][0] != "ftyp":
        return None
    kinds = [b[0] for b in boxes]
    last_kind, last_pos, last_len = boxes[-1]
    cut = last_pos + last_len > size
    if "moov" in kinds and not (cut and last_kind == "moov"):
        return None
    what = "a MOV" if path.suffix.lower() == ".mov" else "an MP4"  # (the same ISO box layout)
    if last_kind == "moov":
        return (f"it is {what} cut short inside its index (the 'moov' box at byte {last_pos} declares "
                f"{last_len} bytes, the file has {size - last_pos})")
    if cut and last_kind == "mdat":
        return (f"it is {what} cut short inside its media data ('mdat' box at byte {last_pos} declares "
                f"{last_len} bytes, the file has {size - last_pos}) and its index (the 'moov' box, which "
                "this file's writer puts after the media data) is missing")
    return (f"it is {what} without its index (no 'moov' box: the file was cut short or its writer "
            "never finished it)")
