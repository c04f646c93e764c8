"""Audio files (WAV, FLAC, MP3, the audio of MP4/MKV, ...) as one mono chunk."""
from __future__ import annotations

import logging
from pathlib import Path

from avatar_app.capture import _media
from avatar_app.core.types import AudioChunk

logger = logging.getLogger(__name__)


def load_audio(path: str | Path, sample_rate: int | None = 16000, warn: bool = True) -> AudioChunk:
    """Decode a whole audio file (or the first audio stream of a video) with PyAV.

    Args:
        path: any file FFmpeg reads that has an audio stream.
        sample_rate: output rate in Hz (resampled with ``av.AudioResampler``),
            or None to keep the file's rate. The default 16 kHz is the rate of
            the speech engine (DESIGN.md, "Contracts").
        warn: log a warning when the file is corrupt or truncated (False for a second
            read of a file whose first read warned: one warning per file).

    Returns:
        :class:`~avatar_app.core.types.AudioChunk`: ``samples`` (N,) float32 mono in
        [-1, 1] (channels averaged, encoder end padding removed), ``sample_rate``
        in Hz, ``media_time_s`` = start time of the stream in the file (seconds),
        ``t_start_ns`` = 0. A corrupt or truncated file gives the part that
        decodes, says what is wrong in ``problem`` and logs a warning; truncation is
        found from decode errors, an end earlier than declared and, for MPEG-PS (.mpg)
        and MPEG-TS (.ts), whose demuxers read a cut file as complete, from the file
        ending inside a packet.

    Raises:
        InputError: the file is missing, not readable as media (corrupt,
            truncated, not media), has no audio stream, or no audio decodes.
        ValueError: ``sample_rate`` is not positive.
    """
    if sample_rate is not None and sample_rate <= 0:
        raise ValueError(f"sample_rate must be > 0, got {sample_rate}")
    p = _media.check_file(path, "Audio")
    samples, rate, t0, problem = _media.load_stream_audio(p, sample_rate, warn=warn)
    logger.debug("loaded %s: %d samples at %d Hz", p, samples.shape[0], rate)
    return AudioChunk(samples=samples, sample_rate=rate, t_start_ns=0, media_time_s=t0, problem=problem)
