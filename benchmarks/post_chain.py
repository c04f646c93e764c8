"""Post-tracking per-frame cost: fuse, tune and the processor's own bookkeeping, old against new, interleaved.

Run by hand (never as a test):

    python benchmarks/post_chain.py [--rounds 3] [--base ceffc40] [--out benchmarks/results/post_chain.json]

The clip is benchmarks/peers.py's (the three GRID clips three times over, 640x512, 27 s).
It is tracked, reconstructed and voiced once with the default stages (sequential order) and
each frame's fuse inputs are kept. Then two processors replay them, frame by frame in one
process, the order alternating every frame:

- ``old``: ``FrameProcessor`` as it was at ``--base`` (read with ``git show``) with the frozen
  chain of tests/frozen_post_chain.py (fusion, tuner and One Euro filters before tune21);
- ``new``: this checkout's ``FrameProcessor`` and ``PostChain``.

Their tracker, reconstructor and speech stand-ins hand back the recorded values (no work),
so a frame's cost is the processor's own (stage timers, speech job, state objects) plus fuse
and tune. Each part is timed in thread CPU time (``time.thread_time_ns``, less sensitive to
other processes than wall time); ``overhead`` is the frame minus fuse and tune. Every new
state is checked byte for byte against the old one.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
ARRAYS = ("weights", "rotation", "translation", "gaze", "vision_weights", "audio_weights")


def record_inputs(clip: Path):
    """Frames and each frame's (vision, audio, face_found, t) from the default stages."""
    from avatar_app.capture.video_file import VideoFileSource
    from avatar_app.pipeline import SPEECH_RATE, FrameProcessor, StageChoice, audio_window, build_stages

    built = build_stages(StageChoice(live=False, audio=True, tracker="mediapipe"))
    proc = FrameProcessor(built.tracker, built.reconstructor, built.speech, live=False, chain=built.chain,
                          speech_order="sequential")
    proc.speech_lookahead_s = float(getattr(built.speech, "offline_lookahead_s", 0.0) or 0.0)
    context_s = float(getattr(built.speech, "context_s", 0.1))
    rec = []
    fuse = built.chain.fuse

    def recording(vision, audio, face_found, t_s):
        rec.append((vision, np.array(audio), face_found, t_s))
        return fuse(vision, audio, face_found, t_s)

    built.chain.fuse = recording
    with VideoFileSource(clip) as src:
        audio = src.read_audio(SPEECH_RATE)
        frames = list(src.frames())
    for f in frames:
        proc.process(f, audio_window(audio.samples, SPEECH_RATE, f.media_time_s - float(audio.media_time_s)
                                     + proc.speech_lookahead_s, context_s))
    proc.close()
    return frames, rec


class Replay:
    """Tracker, reconstructor and speech stand-ins that hand back the recorded values."""

    runs_meanwhile = False

    def __init__(self, rec):
        self.rec, self.k = rec, 0

    def process_video_frame(self, image, ms):
        return object() if self.rec[self.k][2] else None

    def reconstruct(self, landmarks, t_s):
        return self.rec[self.k][0]

    def process(self, window, t_s):
        return self.rec[self.k][1]


class Timed:
    """fuse and tune of a chain, in thread CPU ns."""

    def __init__(self, fuse, tune):
        self._fuse, self._tune, self.fuse_ns, self.tune_ns = fuse, tune, 0, 0

    def fuse(self, *args):
        t0 = time.thread_time_ns()
        out = self._fuse(*args)
        self.fuse_ns = time.thread_time_ns() - t0
        return out

    def tune(self, state):
        t0 = time.thread_time_ns()
        out = self._tune(state)
        self.tune_ns = time.thread_time_ns() - t0
        return out


def old_processor_class(base: str):
    src = subprocess.check_output(["git", "-C", str(ROOT), "show", f"{base}:avatar_app/pipeline/processor.py"],
                                  text=True)
    mod = types.ModuleType("old_processor")
    exec(compile(src, f"{base}:processor.py", "exec"), mod.__dict__)
    return mod.FrameProcessor


def summary(ns: list[int]) -> dict:
    v = np.asarray(ns, np.float64) / 1e3
    return {"p50_us": round(float(np.percentile(v, 50)), 1), "p95_us": round(float(np.percentile(v, 95)), 1),
            "mean_us": round(float(v.mean()), 1), "n": int(v.size)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testdata", type=Path, default=Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared"
                                                                          / "testdata")))
    ap.add_argument("--rounds", type=int, default=3, help="replays of the recorded clip")
    ap.add_argument("--base", default="ceffc40", help="commit whose FrameProcessor is 'old'")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "post_chain.json")
    args = ap.parse_args()
    from frozen_post_chain import FrozenAvatarTuner, FrozenFusion
    from peers import make_clip

    from avatar_app.fusion.chain import PostChain
    from avatar_app.fusion.mouth import FusionSettings
    from avatar_app.pipeline import FrameProcessor

    with tempfile.TemporaryDirectory() as tmp:
        frames, rec = record_inputs(make_clip(args.testdata, Path(tmp) / "grid_concat_640x512.mp4"))
    print(f"{len(frames)} frames recorded, {sum(r[2] for r in rec)} with a face", flush=True)
    OldProcessor = old_processor_class(args.base)
    parts = {f"{who}_{p}": [] for who in ("old", "new") for p in ("frame", "fuse", "tune", "overhead")}
    window = np.zeros(1600, np.float32)
    load_start = os.getloadavg()
    for r in range(args.rounds):
        replay = Replay(rec)
        old_fu, old_tu = FrozenFusion(FusionSettings(smoothing=False)), FrozenAvatarTuner()
        new_chain = PostChain()
        timed = {"old": Timed(old_fu.fuse, old_tu), "new": Timed(new_chain.fuse, new_chain.tune)}
        procs = {"old": OldProcessor(replay, replay, replay, chain=timed["old"], speech_order="sequential"),
                 "new": FrameProcessor(replay, replay, replay, chain=timed["new"], speech_order="sequential")}
        for k, frame in enumerate(frames):
            replay.k = k
            out = {}
            for who in (("old", "new") if (k + r) % 2 else ("new", "old")):
                t0 = time.thread_time_ns()
                out[who] = procs[who].process(frame, window)
                total = time.thread_time_ns() - t0
                if k >= 10:
                    tm = timed[who]
                    for p, v in (("frame", total), ("fuse", tm.fuse_ns), ("tune", tm.tune_ns),
                                 ("overhead", total - tm.fuse_ns - tm.tune_ns)):
                        parts[f"{who}_{p}"].append(v)
            for a in ARRAYS:
                x, y = getattr(out["old"], a), getattr(out["new"], a)
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f"frame {k}: {a} differs"
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    res = {k: summary(v) for k, v in parts.items()}
    ratios = {p: round(res[f"new_{p}"]["p50_us"] / res[f"old_{p}"]["p50_us"], 3)
              for p in ("frame", "fuse", "tune", "overhead")}
    doc = {"what": __doc__.split("\n\n")[2].strip().replace("\n", " "), "base": args.base,
           "frames": len(frames), "rounds": args.rounds, "states_bit_identical": True,
           "load_average_at_start": [round(v, 2) for v in load_start],
           "load_average_at_end": [round(v, 2) for v in os.getloadavg()],
           "date": time.strftime("%Y-%m-%d %H:%M"), "thread_cpu": res, "new_over_old_p50": ratios}
    for k, v in res.items():
        print(f"{k:14s} p50 {v['p50_us']:7.1f}  p95 {v['p95_us']:7.1f}  mean {v['mean_us']:7.1f} us")
    print(json.dumps(ratios))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
