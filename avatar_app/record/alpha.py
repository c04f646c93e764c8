"""Transparent-background recording: ProRes 4444 (MOV) or VP9 with alpha (WebM).

Alpha conventions. ProRes 4444 and VP9/WebM alpha carry *straight* (not
premultiplied) alpha, the convention of FFmpeg's ``yuva`` pixel formats and of
the compositors that read them (OBS, editors). The renderer already writes
straight alpha (``render/renderer.py``, ``background="transparent"``); a source
of premultiplied pixels (an OpenGL framebuffer blended with
``ONE, ONE_MINUS_SRC_ALPHA``) sets ``premultiplied=True`` and is divided by
alpha here. Without this division a straight-alpha compositor multiplies by
alpha twice and every anti-aliased edge gets a dark fringe.

Edge bleeding. Pixels with alpha 0 have no meaningful colour (the renderer
leaves the clear colour, black). A 4:2:0 encoder (VP9 ``yuva420p``) averages
chroma over 2x2 blocks, and scaling filters average neighbours, so that black
leaks into the visible edge pixels as a fringe on any background (chroma-key
or alpha composite). :func:`straight_alpha_frame` therefore copies the colour of
the nearest visible pixels into a band of ``bleed_px`` transparent pixels
around the silhouette (the "edge padding"/"colour dilation" of texture
pipelines); alpha itself is never changed.
"""
from __future__ import annotations

import logging
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from avatar_app.core.errors import InputError, RecordingError
from avatar_app.record.formats import KNOWN_FORMATS, RecordingFormat, choose_alpha_format
from avatar_app.record.recorder import VIDEO_TIME_BASE, ClipRecorder

_log = logging.getLogger(__name__)


def straight_alpha_frame(rgba: np.ndarray, premultiplied: bool = False, bleed_px: int = 2,
                         out: np.ndarray | None = None) -> np.ndarray:
    """Prepare an RGBA image for a straight-alpha encoder.

    Args:
        rgba: (H, W, 4) uint8 RGBA. With ``premultiplied`` its RGB is colour x alpha.
        premultiplied: divide RGB by alpha (rounded, clipped to 255).
        bleed_px: width of the band of fully transparent pixels (alpha 0) around
            visible ones that receives the mean colour of its visible 4-neighbours,
            one pixel ring per step (0 = off).
        out: optional (H, W, 4) uint8 array to write into (may be ``rgba``).

    Returns:
        (H, W, 4) uint8 straight-alpha RGBA with the same alpha channel.

    Raises:
        InputError: wrong shape or dtype.
    """
    rgba = np.asarray(rgba)
    if rgba.ndim != 3 or rgba.shape[2] != 4 or rgba.dtype != np.uint8:
        raise InputError(f"alpha frames must be (H, W, 4) uint8 RGBA; got {rgba.shape} {rgba.dtype}")
    a = rgba[..., 3]
    visible = a > 0
    if out is None:
        out = rgba.copy()
    elif out is not rgba:
        out[...] = rgba
    if premultiplied:
        part = visible & (a < 255)  # a == 255: colour already straight
        if part.any():
            c = rgba[..., :3][part].astype(np.float32) * (255.0 / a[part].astype(np.float32))[:, None]
            out[..., :3][part] = np.minimum(np.rint(c), 255).astype(np.uint8)
    if bleed_px <= 0 or visible.all() or not visible.any():
        return out
    # Work only inside the bounding box of the silhouette grown by bleed_px.
    ys, xs = np.nonzero(visible.any(axis=1))[0], np.nonzero(visible.any(axis=0))[0]
    h, w = a.shape
    y0, y1 = max(0, ys[0] - bleed_px), min(h, ys[-1] + bleed_px + 1)
    x0, x1 = max(0, xs[0] - bleed_px), min(w, xs[-1] + bleed_px + 1)
    known = visible[y0:y1, x0:x1].copy()
    rgb = out[y0:y1, x0:x1, :3].astype(np.float32)
    for _ in range(bleed_px):
        acc = np.zeros_like(rgb)
        cnt = np.zeros(known.shape, np.float32)
        kf = known.astype(np.float32)
        weighted = rgb * kf[..., None]
        acc[1:] += weighted[:-1]; cnt[1:] += kf[:-1]      # from the pixel above
        acc[:-1] += weighted[1:]; cnt[:-1] += kf[1:]      # from below
        acc[:, 1:] += weighted[:, :-1]; cnt[:, 1:] += kf[:, :-1]  # from the left
        acc[:, :-1] += weighted[:, 1:]; cnt[:, :-1] += kf[:, 1:]  # from the right
        new = ~known & (cnt > 0)
        if not new.any():
            break
        rgb[new] = acc[new] / cnt[new][:, None]
        known |= new
    band = known & ~visible[y0:y1, x0:x1]
    out[y0:y1, x0:x1, :3][band] = np.rint(rgb[band]).astype(np.uint8)
    return out


class AlphaClipRecorder(ClipRecorder):
    """Records RGBA frames with transparency: ProRes 4444 in MOV or VP9 in WebM.

    Same behaviour as :class:`ClipRecorder` (timestamps, audio placement, gap
    filling, crash-safe fragments, disk-full handling), with these differences:
    ``write_video`` takes (height, width, 4) uint8 RGBA; the container follows
    the path's suffix (".mov" -> ProRes 4444 + AAC, fragmented MOV; ".webm" ->
    VP9 ``yuva420p`` + Opus, Matroska clusters of at most ``fragment_s``); and
    each frame goes through :func:`straight_alpha_frame`.

    Args:
        path: output ``.mov`` or ``.webm`` file (overwritten).
        width, height: frame size in pixels (even).
        fps: nominal frame rate, Hz.
        audio_sample_rate: Hz of ``write_audio`` input, or None for no audio.
        audio_channels: 1 or 2.
        video_codec: FFmpeg encoder ("prores_aw", "prores_ks", "libvpx-vp9"), or
            None for the first available one for the suffix
            (:func:`~avatar_app.record.formats.choose_alpha_format`).
        premultiplied: the input RGB is premultiplied by alpha (see module doc);
            False for the app's renderer, which writes straight alpha.
        bleed_px: transparent-edge colour padding, pixels (see module doc).
        vp9_crf: VP9 constant quality (0-63, lower = better). Measured with libvpx
            1.x: at 16 and above, flat fully transparent areas decode to alpha 1
            instead of 0 (a faint veil), so the default is 10.
        threads: encoder threads.
        keyframe_interval_s: seconds between VP9 keyframes (ProRes is all-intra).
        fragment_s: longest MOV fragment / WebM cluster, s.
        audio_bitrate: bits per second.
        time_origin_s: media time that becomes 0 in the file (None = first write).
        max_audio_lag_s: see :class:`ClipRecorder`.

    Raises:
        InputError: bad size/fps, or a suffix that cannot carry alpha, or a codec
            that does not fit the suffix.
        RecordingError: no alpha encoder in this FFmpeg build, or the file
            cannot be created.

    Thread: not thread-safe; wrap in :class:`~avatar_app.record.AsyncRecorder` for live use.
    """

    frame_channels = 4

    def __init__(
        self,
        path: str | Path,
        width: int,
        height: int,
        fps: float,
        audio_sample_rate: int | None = None,
        audio_channels: int = 1,
        *,
        video_codec: str | None = None,
        premultiplied: bool = False,
        bleed_px: int = 2,
        vp9_crf: int = 10,
        threads: int = 2,
        keyframe_interval_s: float = 2.0,
        fragment_s: float = 0.25,
        audio_bitrate: int = 128_000,
        time_origin_s: float | None = None,
        max_audio_lag_s: float = 1.0,
    ):
        path = Path(path)
        fmt = self._pick_format(path, video_codec)
        self.format: RecordingFormat = fmt
        self.container_format = fmt.container
        self.premultiplied = bool(premultiplied)
        self.bleed_px = int(bleed_px)
        self._vp9_crf = int(vp9_crf)
        self._buf: np.ndarray | None = None
        super().__init__(
            path, width, height, fps, audio_sample_rate, audio_channels,
            video_codec=fmt.video_codec, threads=threads, keyframe_interval_s=keyframe_interval_s,
            fragment_s=fragment_s, audio_codec=fmt.audio_codec, audio_bitrate=audio_bitrate,
            time_origin_s=time_origin_s, max_audio_lag_s=max_audio_lag_s,
        )

    @staticmethod
    def _pick_format(path: Path, video_codec: str | None) -> RecordingFormat:
        suffix = path.suffix.lower()
        chosen = choose_alpha_format(suffix)  # raises for a wrong suffix / no encoder
        if video_codec is None:
            return chosen
        for f in KNOWN_FORMATS:
            if f.alpha and f.video_codec == video_codec and f.suffix == suffix:
                from avatar_app.record.formats import available_formats

                if f not in available_formats(alpha=True):
                    raise RecordingError(f"the {video_codec} encoder is not in this FFmpeg build")
                return f
        raise InputError(f"video codec {video_codec!r} cannot write transparent {suffix} files")

    def _container_options(self, fragment_s: float) -> dict[str, str]:
        interleave = str(int(max(1.0, 2 * fragment_s) * 1e6))
        if self.container_format == "mov":
            # ProRes is all-intra: cut fragments by duration, not at every keyframe.
            return {
                "movflags": "empty_moov+delay_moov+default_base_moof",
                "frag_duration": str(int(fragment_s * 1e6)),
                "flush_packets": "1",
                "max_interleave_delta": interleave,
            }
        return {  # Matroska/WebM: a cluster is complete on disk once the next starts
            "cluster_time_limit": str(int(fragment_s * 1000)),
            "flush_packets": "1",
            "max_interleave_delta": interleave,
        }

    def _open_video(self, codec, crf, preset, tune, threads, keyframe_interval_s):
        rate = Fraction(self.fps).limit_denominator(1001)
        if codec.startswith("prores"):
            opts = {"profile": "4"}  # 4444 (with alpha)
            if codec == "prores_ks":
                opts["vendor"] = "apl0"
        else:
            opts = {"crf": str(self._vp9_crf), "b": "0", "deadline": "realtime", "cpu-used": "8",
                    "row-mt": "1", "lag-in-frames": "0"}
        stream = self._container.add_stream(codec, rate=rate, options=opts)
        stream.width, stream.height = self.width, self.height
        stream.pix_fmt = self.format.pix_fmt
        stream.time_base = VIDEO_TIME_BASE
        cc = stream.codec_context
        cc.time_base = VIDEO_TIME_BASE
        cc.gop_size = max(1, int(round(self.fps * keyframe_interval_s)))
        cc.thread_count = threads
        return stream

    def _make_frame(self, image: np.ndarray) -> av.VideoFrame:
        if self._buf is None or self._buf.shape != image.shape:
            self._buf = np.empty_like(image)
        straight_alpha_frame(image, self.premultiplied, self.bleed_px, out=self._buf)
        return av.VideoFrame.from_ndarray(self._buf, format="rgba")
