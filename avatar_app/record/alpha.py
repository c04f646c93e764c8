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
import sys
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

    The edge padding touches only the ``bleed_px`` rings of transparent pixels
    next to the silhouette (found by 4-neighbour dilation of the alpha > 0 mask
    inside its bounding box) and reads only their neighbours, so its cost grows
    with the length of the silhouette's outline, not with its area.

    Args:
        rgba: (H, W, 4) uint8 RGBA. With ``premultiplied`` its RGB is colour x alpha.
        premultiplied: divide RGB by alpha (rounded, clipped to 255).
        bleed_px: width of the band of fully transparent pixels (alpha 0) around
            visible ones that receives the mean colour of its visible 4-neighbours,
            one pixel ring per step (0 = off). Ring ``k`` averages the (unrounded)
            colours of its neighbours in ring ``k - 1``; the result is rounded once.
        out: optional (H, W, 4) uint8 array to write into (may be ``rgba``).

    Returns:
        (H, W, 4) uint8 straight-alpha RGBA with the same alpha channel.

    Raises:
        InputError: wrong shape or dtype.
    """
    rgba = np.asarray(rgba)
    if rgba.ndim != 3 or rgba.shape[2] != 4 or rgba.dtype != np.uint8:
        raise InputError(f"alpha frames must be (H, W, 4) uint8 RGBA; got {rgba.shape} {rgba.dtype}")
    if out is None:
        out = rgba.copy()
    elif out is not rgba:
        out[...] = rgba
    a = rgba[..., 3]
    if sys.byteorder == "little" and rgba.flags.c_contiguous:
        # alpha is the high byte of each pixel read as uint32: one contiguous compare
        # instead of a strided one (about 6x faster at 1280x720)
        vis_all = rgba.view(np.uint32)[..., 0] > 0x00FFFFFF
    else:
        vis_all = a > 0
    rows = vis_all.any(axis=1)
    if not rows.any():
        return out
    ys, xs = np.flatnonzero(rows), np.flatnonzero(vis_all.any(axis=0))
    h, w = a.shape
    # Bounding box of the silhouette: every visible pixel lies inside it.
    vy0, vy1, vx0, vx1 = ys[0], ys[-1] + 1, xs[0], xs[-1] + 1
    box_a = a[vy0:vy1, vx0:vx1]
    visible = vis_all[vy0:vy1, vx0:vx1]
    if premultiplied:
        part = visible & (box_a < 255)  # a == 255: colour already straight
        if part.any():
            src = rgba[vy0:vy1, vx0:vx1, :3][part].astype(np.float32)
            c = src * (255.0 / box_a[part].astype(np.float32))[:, None]
            out[vy0:vy1, vx0:vx1, :3][part] = np.minimum(np.rint(c), 255).astype(np.uint8)
    if bleed_px <= 0 or (vy1 - vy0 == h and vx1 - vx0 == w and visible.all()):
        return out
    _pad_edges(out, visible, vy0, vx0, int(bleed_px))
    return out


#: 4-neighbour offsets (dy, dx) in the order the padding sums them: above, below, left, right.
_NEIGHBOURS = ((-1, 0), (1, 0), (0, -1), (0, 1))


def _pad_edges(out: np.ndarray, visible: np.ndarray, vy0: int, vx0: int, bleed_px: int) -> None:
    """Colour the ``bleed_px`` transparent rings around ``visible`` in place (see above).

    Works on flat indices into a (bh + 2, bw + 2) grid: the silhouette's bounding
    box grown by ``bleed_px`` (clipped to the image) plus a one-pixel frame that
    is never known, so neighbour look-ups need no bounds checks.
    """
    h, w = out.shape[:2]
    vh, vw = visible.shape
    y0, y1 = max(0, vy0 - bleed_px), min(h, vy0 + vh + bleed_px)
    x0, x1 = max(0, vx0 - bleed_px), min(w, vx0 + vw + bleed_px)
    gw = x1 - x0 + 2
    known = np.zeros((y1 - y0 + 2, gw), bool)
    oy, ox = vy0 - y0 + 1, vx0 - x0 + 1
    known[oy:oy + vh, ox:ox + vw] = visible
    flat_known = known.reshape(-1)
    offsets = [dy * gw + dx for dy, dx in _NEIGHBOURS]

    def lookup(idx: np.ndarray) -> np.ndarray:
        """float32 RGB of known grid pixels ``idx`` (visible ones from the image)."""
        res = np.empty((len(idx), 3), np.float32)
        pos = np.searchsorted(ring_idx, idx) if ring_idx is not None else None
        if pos is not None:
            hit = pos < len(ring_idx)
            hit[hit] = ring_idx[pos[hit]] == idx[hit]
        else:
            hit = np.zeros(len(idx), bool)
        if hit.any():
            res[hit] = ring_val[pos[hit]]
        miss = ~hit
        if miss.any():
            gy, gx = np.divmod(idx[miss], gw)
            res[miss] = out[gy - 1 + y0, gx - 1 + x0, :3]
        return res

    ring_idx: np.ndarray | None = None
    ring_val: np.ndarray | None = None
    band_idx, band_val = [], []
    grown = np.empty_like(known)
    for _ in range(bleed_px):
        grown[...] = known
        grown[1:] |= known[:-1]
        grown[:-1] |= known[1:]
        grown[:, 1:] |= known[:, :-1]
        grown[:, :-1] |= known[:, 1:]
        grown[0] = grown[-1] = False  # the frame outside the grid is never coloured
        grown[:, 0] = grown[:, -1] = False
        new = np.flatnonzero(grown & ~known)
        if len(new) == 0:
            break
        acc = np.zeros((len(new), 3), np.float32)
        cnt = np.zeros(len(new), np.float32)
        for off in offsets:
            nb = new + off
            k = flat_known[nb]
            if k.any():
                acc[k] += lookup(nb[k])
                cnt += k
        val = acc / cnt[:, None]
        flat_known[new] = True
        ring_idx, ring_val = new, val  # the next ring's known neighbours are visible or in this one
        band_idx.append(new)
        band_val.append(val)
    if not band_idx:
        return
    idx = np.concatenate(band_idx)
    gy, gx = np.divmod(idx, gw)
    out[gy - 1 + y0, gx - 1 + x0, :3] = np.rint(np.concatenate(band_val)).astype(np.uint8)


class AlphaClipRecorder(ClipRecorder):
    """Records RGBA frames with transparency: ProRes 4444 in MOV or VP9 in WebM.

    Same behaviour as :class:`ClipRecorder` (timestamps, audio placement, gap
    filling, crash-safe fragments, disk-full handling), with these differences:
    ``write_video`` takes (height, width, 4) uint8 RGBA; the container follows
    the path's suffix (".mov" -> ProRes 4444 + AAC, fragmented MOV; ".webm" ->
    VP9 ``yuva420p`` + Opus, Matroska clusters of at most ``fragment_s``); and
    each frame goes through :func:`straight_alpha_frame`. Writing the same
    read-only array object again (the repeats of :class:`~avatar_app.record.SyncedRecorder`)
    reuses the frame prepared for it.

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
        self._cached_src: np.ndarray | None = None  # see _make_frame
        self._cached_frame: av.VideoFrame | None = None
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
        """Straight-alpha encoder frame, already in the encoder's pixel format.

        A read-only array that owns its data (``SyncedRecorder`` holds its frames
        so) cannot change behind our back, so writing the same array object again
        (a repeat for the constant frame rate) reuses the prepared frame: no alpha
        preparation and no pixel-format conversion. Writable arrays are always
        prepared afresh (callers may reuse one buffer for new content).
        """
        if image is self._cached_src and self._cached_frame is not None:
            return self._cached_frame
        if self._buf is None or self._buf.shape != image.shape:
            self._buf = np.empty_like(image)
        straight_alpha_frame(image, self.premultiplied, self.bleed_px, out=self._buf)
        cc = self._video.codec_context
        # The conversion PyAV's encode() would otherwise do itself (same reformatter
        # call: size, format and threads of the codec context), done here so that a
        # cached frame skips it too.
        frame = av.VideoFrame.from_ndarray(self._buf, format="rgba").reformat(
            self.width, self.height, self.format.pix_fmt, threads=cc.thread_count)
        if not image.flags.writeable and image.flags.owndata:
            self._cached_src, self._cached_frame = image, frame
        else:
            self._cached_src = self._cached_frame = None
        return frame
