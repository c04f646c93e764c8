"""Transparent-background recording cost per frame: alpha preparation and the whole write path.

Usage::

    .venv/bin/python benchmarks/alpha.py [--frames 40] [--size 1280x720] [--bleed 2]
        [--out benchmarks/results/alpha.json]

Frames are transparent-background renders of the default head
(``HeadlessRenderer``, MSAA 0 as the CLI default, and MSAA 4 for soft edges),
rendered before timing. Timed, in wall milliseconds per frame (mean/median/p90):

- ``prepare``: ``straight_alpha_frame`` (``out=`` a reused buffer, as the recorder
  calls it), against ``reference``, the previous whole-bounding-box padding kept
  in ``tests/record/test_record_alpha_padding.py``; ``max_diff_levels`` is the largest
  difference between the two outputs over all frames.
- ``record_vp9`` / ``record_prores``: ``AlphaClipRecorder.write_video`` per frame
  (preparation, pixel-format conversion, encoding, muxing) to a temporary file;
  ``new`` is the package, ``reference`` the previous preparation (reference
  padding, RGBA frame converted by the encoder, no repeat cache).
- ``synced_vp9``: ``SyncedRecorder(AlphaClipRecorder)`` fed a 25 fps source into a
  30 fps file (every 6th slot a repeat), wall time per *output* frame including
  closing; ``new`` reuses the prepared frame for repeats.

The machine load is stored too: the development machine has 2 shared cores.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from avatar_app.avatar.default_head import build_default_head  # noqa: E402
from avatar_app.core.types import AvatarState  # noqa: E402
from avatar_app.record import AlphaClipRecorder, SyncedRecorder  # noqa: E402
from avatar_app.record.alpha import straight_alpha_frame  # noqa: E402
from avatar_app.record.formats import available_formats  # noqa: E402
from avatar_app.render.headless import HeadlessRenderer  # noqa: E402


def load_reference():
    """``reference_straight_alpha_frame`` from the test module (the pre-optimisation code)."""
    path = ROOT / "tests" / "test_record_alpha_padding.py"
    spec = importlib.util.spec_from_file_location("_alpha_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.reference_straight_alpha_frame


def render_frames(n: int, width: int, height: int, msaa: int) -> list[np.ndarray]:
    """n transparent renders with the head turning and the jaw moving (not timed)."""
    frames = []
    with HeadlessRenderer(width, height, avatar=build_default_head(), msaa=msaa,
                          background="transparent") as r:
        for i in range(n):
            t = i / 25.0
            w = np.zeros(52, np.float32)
            w[24] = 0.5 + 0.5 * math.sin(2 * math.pi * 0.8 * t)  # jawOpen
            yaw, pitch = 0.4 * math.sin(t), 0.2 * math.sin(1.3 * t)
            cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
            rot = (np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
                   @ np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])).astype(np.float32)
            frames.append(r.render(dataclasses.replace(AvatarState.neutral(), weights=w,
                                                       rotation=rot)).copy())
    return frames


def stats(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"mean_ms": round(float(a.mean()), 3), "median_ms": round(float(np.median(a)), 3),
            "p90_ms": round(float(np.percentile(a, 90)), 3), "n": len(ms)}


def time_prepare(frames, bleed: int, reference) -> dict:
    buf = np.empty_like(frames[0])
    new, old, diff = [], [], 0
    for f in frames[:3]:  # warm-up
        straight_alpha_frame(f, False, bleed, out=buf)
        reference(f, False, bleed)
    for f in frames:
        t0 = time.perf_counter()
        straight_alpha_frame(f, False, bleed, out=buf)
        new.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        ref = reference(f, False, bleed)
        old.append((time.perf_counter() - t0) * 1e3)
        diff = max(diff, int(np.abs(buf.astype(np.int16) - ref).max()))
    edge = [int(((f[..., 3] > 0) & (f[..., 3] < 255)).sum()) for f in frames]
    return {"new": stats(new), "reference": stats(old), "max_diff_levels": diff,
            "visible_fraction": round(float(np.mean([(f[..., 3] > 0).mean() for f in frames])), 4),
            "partial_alpha_px_mean": round(float(np.mean(edge)), 1)}


def reference_recorder(reference):
    """AlphaClipRecorder with the previous frame preparation: reference padding, no repeat cache."""
    import av

    class ReferenceRecorder(AlphaClipRecorder):
        def _make_frame(self, image):
            return av.VideoFrame.from_ndarray(reference(image, self.premultiplied, self.bleed_px),
                                              format="rgba")

    return ReferenceRecorder


def time_record(frames, suffix: str, codec: str, bleed: int, cls=AlphaClipRecorder) -> dict:
    h, w = frames[0].shape[:2]
    with tempfile.TemporaryDirectory() as d:
        rec = cls(Path(d) / f"b{suffix}", w, h, 25, video_codec=codec, bleed_px=bleed)
        ms = []
        for i, f in enumerate(frames):
            t0 = time.perf_counter()
            rec.write_video(f, i / 25)
            ms.append((time.perf_counter() - t0) * 1e3)
        rec.close()
    return stats(ms[2:])


def time_synced(frames, codec: str, suffix: str, bleed: int, cls=AlphaClipRecorder) -> dict:
    h, w = frames[0].shape[:2]
    with tempfile.TemporaryDirectory() as d:
        rec = SyncedRecorder(cls(Path(d) / f"s{suffix}", w, h, 30, video_codec=codec, bleed_px=bleed))
        t0 = time.perf_counter()
        for i, f in enumerate(frames):
            rec.write_video(f, i / 25)
        rec.close()
        total = (time.perf_counter() - t0) * 1e3
    return {"output_frames": rec.frames_written, "repeated": rec.frames_duplicated,
            "ms_per_output_frame": round(total / rec.frames_written, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--size", default="1280x720")
    p.add_argument("--bleed", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "alpha.json")
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    reference = load_reference()
    ref_cls = reference_recorder(reference)
    formats = {f.video_codec: f.suffix for f in available_formats(alpha=True)}
    result = {"size": [width, height], "bleed_px": args.bleed, "frames": args.frames,
              "machine": {"cpus": os.cpu_count(), "load_avg_start": os.getloadavg(),
                          "python": platform.python_version()}, "runs": {}}
    for msaa in (0, 4):
        frames = render_frames(args.frames, width, height, msaa)
        run = {"prepare": time_prepare(frames, args.bleed, reference)}
        for name, cls in (("new", AlphaClipRecorder), ("reference", ref_cls)):
            if "libvpx-vp9" in formats:
                run.setdefault("record_vp9", {})[name] = time_record(
                    frames, ".webm", "libvpx-vp9", args.bleed, cls)
                run.setdefault("synced_vp9", {})[name] = time_synced(
                    frames, "libvpx-vp9", ".webm", args.bleed, cls)
            if "prores_aw" in formats:
                run.setdefault("record_prores", {})[name] = time_record(
                    frames, ".mov", "prores_aw", args.bleed, cls)
        result["runs"][f"msaa{msaa}"] = run
    result["machine"]["load_avg_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
