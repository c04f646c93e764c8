"""Test helpers: ffprobe durations, align files, sidecar reading, running the CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES


def ffprobe_streams(path: Path) -> dict[str, dict]:
    """{'video': {...}, 'audio': {...}} of the first stream of each kind, as ffprobe reports them."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name,duration,nb_frames,r_frame_rate,start_time",
         "-of", "json", str(path)],
        capture_output=True, text=True, check=True,
    ).stdout
    streams = {}
    for s in json.loads(out)["streams"]:
        streams.setdefault(s["codec_type"], s)
    return streams


def decoded_duration(path: Path, kind: str) -> float:
    """Duration of a stream measured by decoding it with ffprobe (last packet end - first start), seconds."""
    sel = "v:0" if kind == "video" else "a:0"
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", sel, "-show_entries", "packet=pts_time,duration_time",
         "-of", "csv=p=0", str(path)],
        capture_output=True, text=True, check=True,
    ).stdout
    rows = [r.split(",") for r in out.strip().splitlines() if r.strip()]
    pts = [(float(a), float(b)) for a, b, *_ in rows if a not in ("", "N/A") and b not in ("", "N/A")]
    if not pts:
        return 0.0
    return max(p + d for p, d in pts) - min(p for p, _ in pts)


def read_align(path: Path) -> list[tuple[float, float, str]]:
    """GRID .align: (start_s, end_s, word); units in the file are 1/25000 s."""
    rows = []
    for line in path.read_text().split("\n"):
        if line.strip():
            a, b, w = line.split()
            rows.append((int(a) / 25000.0, int(b) / 25000.0, w))
    return rows


def read_track(path: Path):
    """Sidecar JSON Lines -> SidecarTrack (t (N,), blendshapes/vision/audio (N, 52), face (N,))."""
    from avatar_app.record.sidecar import read_sidecar

    return read_sidecar(path)


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m avatar_app ARGS`` and return the completed process (text output)."""
    return subprocess.run([sys.executable, "-m", "avatar_app", *args], capture_output=True, text=True, timeout=timeout)


def name_index(name: str) -> int:
    return BLENDSHAPE_NAMES.index(name)


def alpha_decoder(stream):
    """A decoder for ``stream`` that keeps the alpha plane: libvpx for VP9 (FFmpeg's own vp9
    decoder drops alpha), else the stream's own codec context."""
    import av

    return av.CodecContext.create("libvpx-vp9", "r") if stream.codec_context.name == "vp9" \
        else stream.codec_context


def decode_rgba(path) -> list[np.ndarray]:
    """All video frames of ``path`` as (H, W, 4) uint8 RGBA, alpha kept (:func:`alpha_decoder`);
    stops at a cut-off last packet (a crashed recording)."""
    import av

    with av.open(str(path)) as c:
        st = c.streams.video[0]
        cc = alpha_decoder(st)
        out = []
        for pk in c.demux(st):
            try:
                out += [f.to_ndarray(format="rgba") for f in cc.decode(pk)]
            except av.InvalidDataError:
                break
        return out
