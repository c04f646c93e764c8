"""Test helpers (no fixtures, no tests): ffprobe durations, align files, sidecar reading, running the CLI,
speech signals, screenshot checks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import av
import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES


def ffprobe_streams(path: Path) -> dict[str, dict]:
    """{'video': {...}, 'audio': {...}} of the first stream of each kind, as ffprobe reports them."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries",
         "stream=codec_type,codec_name,duration,nb_frames,r_frame_rate,start_time",
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


def run_main(*args: str) -> subprocess.CompletedProcess:
    """``avatar-app ARGS`` run in this process (``avatar_app.cli.main``), reported as :func:`run_cli` does.

    For tests of what the CLI does with its arguments and inputs, where the subprocess itself is
    not what is tested: it saves the ~3.5 s interpreter start-up, imports and model loads of each
    ``python -m avatar_app``. Exit statuses, signals and the console script stay covered by tests
    that use :func:`run_cli` (tests/cli: test_bad_input, test_cli_outputs, test_cli_interrupt,
    test_cli_messages, test_cli_hardening).

    Returns:
        A ``CompletedProcess`` whose ``returncode`` is ``main``'s return value, argparse's
        ``SystemExit`` status (``--help``, usage errors), or 1 with the traceback printed on
        ``stderr`` for an uncaught exception (as the interpreter would). ``stdout`` / ``stderr``
        (str) hold what was written to file descriptors 1 / 2 (native libraries: FFmpeg, MediaPipe)
        followed by what Python code wrote to ``sys.stdout`` / ``sys.stderr``. Log records go to
        pytest's handlers, not to ``stderr``. ``sys.argv``, the environment and the root logger's
        handlers and level are restored afterwards.
    """
    import contextlib
    import io
    import logging
    import os
    import tempfile
    import traceback
    from unittest import mock

    from avatar_app import cli

    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    code: object = 1
    with tempfile.TemporaryFile() as fd_out, tempfile.TemporaryFile() as fd_err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(fd_out.fileno(), 1)
        os.dup2(fd_err.fileno(), 2)
        try:
            with mock.patch.object(sys, "argv", ["avatar-app", *args]), mock.patch.dict(os.environ), \
                    contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = cli.main(list(args))
                except SystemExit as exc:
                    code = exc.code
                    if not (code is None or isinstance(code, int)):
                        print(code, file=sys.stderr)  # sys.exit("message"): printed, status 1
                        code = 1
                except Exception:  # noqa: BLE001 (reported as the interpreter would: traceback, status 1)
                    traceback.print_exc()
                    code = 1
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            root.handlers[:] = handlers
            root.setLevel(level)
        fd_out.seek(0)
        fd_err.seek(0)
        native_out = fd_out.read().decode(errors="replace")
        native_err = fd_err.read().decode(errors="replace")
    return subprocess.CompletedProcess(["avatar-app", *args], 0 if code is None else int(code),
                                       native_out + out.getvalue(), native_err + err.getvalue())


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


# ----------------------------------------------------------------------------- audio
SR = 16000


def load_mono16k(path: Path) -> np.ndarray:
    """Decode any audio file with PyAV to (N,) float32 mono 16 kHz."""
    out = []
    with av.open(str(path)) as c:
        rs = av.AudioResampler(format="flt", layout="mono", rate=SR)
        for f in c.decode(audio=0):
            out += [g.to_ndarray().reshape(-1) for g in rs.resample(f)]
        out += [g.to_ndarray().reshape(-1) for g in rs.resample(None)]
    return np.concatenate(out).astype(np.float32)


def words_indicator(align_path: Path, times_s: np.ndarray) -> np.ndarray:
    """(T,) bool: inside a word (not 'sil') of a GRID .align file (units 1/25000 s)."""
    spans = []
    for line in align_path.read_text().split("\n"):
        if line.strip():
            a, b, w = line.split()
            if w != "sil":
                spans.append((int(a) / 25000, int(b) / 25000))
    return np.array([any(a <= t < b for a, b in spans) for t in times_s])


def pink_noise(n: int, rng: np.random.Generator, level_dbfs: float) -> np.ndarray:
    """(n,) float32 1/f noise with the given RMS level."""
    spec = np.fft.rfft(rng.standard_normal(n))
    k = np.arange(spec.size, dtype=np.float64)
    k[0] = 1.0
    y = np.fft.irfft(spec / np.sqrt(k), n)
    return (y / np.sqrt(np.mean(y**2)) * 10 ** (level_dbfs / 20)).astype(np.float32)


def keyboard_clicks(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) float32 typing: 6 ms bursts (noise + a 1.5-4 kHz resonance), -12..-3 dBFS peaks."""
    y = np.zeros(n, np.float32)
    pos, length = 0, int(0.006 * SR)
    env = np.exp(-np.arange(length) / (0.0015 * SR))
    while True:
        pos += int(rng.uniform(0.12, 0.3) * SR)
        if pos + length > n:
            return y
        f = rng.uniform(1500, 4000)
        burst = rng.standard_normal(length) * 10 ** (rng.uniform(-12, -3) / 20)
        burst += np.sin(2 * np.pi * f * np.arange(length) / SR) * 10 ** (rng.uniform(-12, -3) / 20)
        y[pos:pos + length] += (burst * env).astype(np.float32)


# ----------------------------------------------------------------------------- screenshots
#: The viewport's default background (cli.py, --background 00b140).
CHROMA_RGB = (0, 177, 64)


def avatar_visible(rgb: np.ndarray) -> tuple[bool, str]:
    """Whether a screenshot shows the viewport with something drawn on its chroma background.

    Criteria: chroma-green pixels cover >= 5 % of the screen (the viewport is
    there and rendering); inside their bounding box >= 10 % of the pixels are
    not background and span >= 20 colour bins (a shaded head, not a flat
    rectangle or only the overlay text).

    Args:
        rgb: (H, W, 3) uint8 screenshot.

    Returns:
        (verdict, the measured numbers as text).
    """
    diff = np.abs(rgb.astype(np.int16) - np.array(CHROMA_RGB, np.int16)).max(axis=2)
    green = diff <= 12
    frac = float(green.mean())
    if frac < 0.05:
        return False, f"chroma background covers {frac:.1%} of the screen"
    ys, xs = np.nonzero(green)
    box = (slice(ys.min(), ys.max() + 1), slice(xs.min(), xs.max() + 1))
    fg = ~green[box]
    fg_frac = float(fg.mean())
    colours = len(np.unique(rgb[box][fg] // 16, axis=0)) if fg.any() else 0
    text = f"background {frac:.1%} of screen; foreground {fg_frac:.1%} of viewport in {colours} colour bins"
    return fg_frac >= 0.10 and colours >= 20, text


#: Image size of :func:`project`, pixels (width, height).
PROJECT_SIZE = (640, 480)


def project(points_m: np.ndarray, rot=np.eye(3), trans=(0.0, 0.0, -0.5)):
    """Perspective projection of head-frame points (60-degree camera, 640x480) to Landmarks.

    Args:
        points_m: (N, 3) head-frame points, metres.
        rot: (3, 3) head rotation.
        trans: head translation in the camera frame, metres (the camera looks down -z).

    Returns:
        Landmarks with (N, 3) float32 normalised points.
    """
    from avatar_app.core.types import Landmarks
    from avatar_app.reconstruction.head_pose import focal_length_px

    w, h = PROJECT_SIZE
    cam = points_m @ np.asarray(rot).T + np.asarray(trans)
    depth = -cam[:, 2]
    f = focal_length_px(w, 60.0)
    d0 = -trans[2]
    pts = np.stack([(w / 2 + f * cam[:, 0] / depth) / w, (h / 2 - f * cam[:, 1] / depth) / h,
                    (depth - d0) * (f / d0) / w], axis=1).astype(np.float32)
    return Landmarks(points=pts, image_size=(w, h))
