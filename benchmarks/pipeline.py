"""Offline pipeline benchmark: fps end to end and per-stage p50/p95 on the test recordings.

Run by hand (never as a test):

    .venv/bin/python benchmarks/pipeline.py [--size 1280x720] [--msaa 0] [--out benchmarks/results/pipeline.json]

For each video in ../shared/testdata/video it renders the avatar clip exactly as
``avatar-app render`` does (tracking, solving, speech, rendering, H.264 + AAC
encoding) and records wall-clock fps and the stage percentiles. A 640x480 input
is also made from grid_s1_bbaf2n (scaled with ffmpeg into a temporary folder)
because the target is stated for 640x480 in, 1280x720 out.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _encoder_settings(cls) -> dict:
    """The ClipRecorder defaults the render uses (read from its signature, so they never go stale)."""
    import inspect

    keep = ("video_codec", "crf", "preset", "tune", "threads", "keyframe_interval_s", "fragment_s", "audio_codec",
            "audio_bitrate")
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k in keep}


def main() -> int:
    from avatar_app.pipeline import RenderOptions, render_file
    from avatar_app.record import recorder as rec_mod

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testdata", type=Path, default=ROOT.parent / "shared" / "testdata")
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--msaa", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "pipeline.json")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    videos = sorted((args.testdata / "video").glob("*.mp4")) + sorted((args.testdata / "video").glob("*.mpg"))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # 640x480 input, 12 s (the GRID clip looped 4 times), so start-up is amortised
        v640 = tmp / "grid_s1_bbaf2n_640x480_x4.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-stream_loop", "3",
                        "-i", str(args.testdata / "video" / "grid_s1_bbaf2n.mp4"),
                        "-vf", "scale=640:480", "-c:v", "libx264", "-crf", "18", "-c:a", "aac", str(v640)], check=True)
        for src in [v640, *videos]:
            opts = RenderOptions(size=(w, h), msaa=args.msaa)
            marks: list[float] = []
            t0 = time.perf_counter()
            rep = render_file(src, tmp / (src.stem + "_out.mp4"), opts,
                              progress=lambda d, n: marks.append(time.perf_counter()))
            wall = time.perf_counter() - t0
            steady = (len(marks) - 11) / (marks[-1] - marks[10]) if len(marks) > 20 else float("nan")
            results.append({
                "input": src.name,
                "frames": rep.frames_in,
                "wall_s": round(wall, 3),
                "fps_end_to_end": round(rep.frames_in / wall, 2),
                "fps_steady_state": round(steady, 2),
                "stages_ms_p50_p95": {k: [round(a, 2), round(b, 2)] for k, (a, b) in rep.stage_ms.items()},
            })
            print(f"{src.name}: {results[-1]['fps_end_to_end']} fps end to end (start-up included), "
                  f"{results[-1]['fps_steady_state']} steady  {results[-1]['stages_ms_p50_p95']}")
    doc = {
        "what": "avatar-app render, offline, every frame, encoding included; fps_end_to_end includes "
                "process start-up work (tracker and GL context creation), fps_steady_state excludes the "
                "first 10 frames",
        "load_average_at_start": os.getloadavg(),
        "output_size": [w, h],
        "msaa": args.msaa,
        "encoder": _encoder_settings(rec_mod.ClipRecorder),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
