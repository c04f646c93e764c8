"""CPU time per frame of the face trackers, side by side in one run: MediaPipe's graphs vs the ONNX tracker.

Usage::

    python benchmarks/landmarks_cpu.py                       # writes benchmarks/results/landmarks_cpu.json
    python benchmarks/landmarks_cpu.py --clips grid_s1_bbaf2n.mp4 --rounds 3

For each clip the trackers run over the same decoded frames in VIDEO mode,
interleaved (MediaPipe, ONNX with 1 intra-op thread, ONNX with 2, then again
for every round), so a machine whose load changes affects all of them alike;
per tracker the round with the lowest median counts. Decoding is outside the
timing. ONNX Runtime runs on its CPU provider, FP32 (the engine layer's
reference on a machine without a GPU).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TESTDATA = Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared" / "testdata"))
CLIPS = ("grid_s1_bbaf2n.mp4", "expressive/lp_d3.mp4", "openmpf_video_01.mp4")


def _times(tracker, frames) -> np.ndarray:
    out = []
    for t, bgr in frames:
        t0 = time.perf_counter()
        tracker.process_video_frame(bgr, t)
        out.append((time.perf_counter() - t0) * 1e3)
    return np.array(out[3:])  # the first frames pay for warm-up


def _onnx(threads: int):
    from avatar_app.tracking import RunningMode
    from avatar_app.tracking.onnx_tracker import LandmarkEngines, OnnxFaceTracker

    os.environ["AVATAR_APP_ORT_THREADS"] = str(threads)
    try:
        engines = LandmarkEngines("ort_cpu", "fp32")
    finally:
        os.environ.pop("AVATAR_APP_ORT_THREADS", None)
    return engines, lambda: OnnxFaceTracker(RunningMode.VIDEO, engines=engines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clips", nargs="*", default=list(CLIPS))
    ap.add_argument("--frames", type=int, default=90, help="frames per clip (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--note", default="", help="e.g. how loaded the machine was")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "benchmarks" / "results" / "landmarks_cpu.json")
    args = ap.parse_args(argv)
    from avatar_app.tracking import FaceTracker, RunningMode
    from avatar_app.tracking.agreement import video_frames

    kinds = {"mediapipe": (None, lambda: FaceTracker(RunningMode.VIDEO))}
    for threads in (1, 2):
        kinds[f"onnx_{threads}_thread"] = _onnx(threads)
    result = {"benchmark": "landmarks_cpu", "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "note": args.note, "load_average": os.getloadavg(), "clips": {}}
    for clip in args.clips:
        frames = list(video_frames(TESTDATA / "video" / clip, limit=args.frames))
        best: dict[str, np.ndarray] = {}
        for _ in range(args.rounds):
            for name, (_, make) in kinds.items():
                with make() as tracker:
                    t = _times(tracker, frames)
                if name not in best or np.median(t) < np.median(best[name]):
                    best[name] = t
        row = {name: {"ms_p50": round(float(np.median(t)), 3), "ms_p95": round(float(np.percentile(t, 95)), 3)}
               for name, t in best.items()}
        base = row["mediapipe"]["ms_p50"]
        for stats in row.values():
            stats["vs_mediapipe"] = round(stats["ms_p50"] / base, 3)
        result["clips"][clip] = {"frames": len(frames), **row}
        print(clip, json.dumps(row), flush=True)
    for engines, _ in kinds.values():
        if engines is not None:
            engines.close()
    result["load_average_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
