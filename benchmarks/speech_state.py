"""Speech engine: the per-frame window call against the conv-state (streaming) graph of the same weights.

The shipped speech2face.onnx is a causal dilated convolution network: the window path runs
it every video frame over the newest hop's receptive field (T = R = 65 frames) and uses one
output. The conv-state graph of the same weights (each block's causal Pad replaced by a
Concat with that block's last (k - 1) * d input frames, fed in and returned as state:
128 x (2 + 4 + 8 + 16 + 32 + 2) floats; avatar_app.inference.conv_state, what the animator
runs on ONNX Runtime CPU) computes only the new hops (4 at 25 fps). This script derives
that graph in memory from the shipped file, streams GRID speech through both at 25 fps on
ONNX Runtime CPU (one thread, the engine layer's settings) and writes the call costs and
the largest difference between their newest outputs; then the whole animator
(EngineSpeechAnimator.process: features, gate, engine) streaming and windowed, interleaved.

    python benchmarks/speech_state.py --out benchmarks/results/speech_state.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = next((p / "shared" for p in ROOT.parents if (p / "shared").is_dir()), ROOT.parent / "shared")
CLIPS = ("grid_s1_bbaf2n.wav", "grid_s2_swwp2s.wav")
HOPS_PER_FRAME = 4  # 25 fps video, 10 ms hops


def _session(model):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    src = model.SerializeToString() if not isinstance(model, (str, Path)) else str(model)
    return ort.InferenceSession(src, sess_options=so, providers=["CPUExecutionProvider"])


def _stats(ns: list[int]) -> dict:
    v = np.asarray(ns, np.float64) / 1e6
    return {"p50": round(float(np.percentile(v, 50)), 4), "p95": round(float(np.percentile(v, 95)), 4),
            "mean": round(float(v.mean()), 4)}


def _animators(testdata: Path, rounds: int) -> dict:
    """EngineSpeechAnimator.process per 25 fps frame, streaming and windowed, interleaved on the same windows."""
    from avatar_app.inference import EngineManager
    from avatar_app.speech.engine_animator import EngineSpeechAnimator, default_model_path
    from tests.helpers import load_mono16k

    x = np.concatenate([load_mono16k(testdata / "audio" / c) for c in CLIPS])
    anims = {name: EngineSpeechAnimator(default_model_path(), manager=EngineManager(isolate=False), streaming=on)
             for name, on in (("streaming", True), ("window", False))}
    n = int(anims["window"].context_s * 16000)
    cost = {k: {"wall": [], "cpu": []} for k in anims}
    diff = 0.0
    for _ in range(rounds):
        for a in anims.values():
            a.reset()
        for k in range(1, len(x) // 640):
            end = k * 640
            w = np.zeros(n, np.float32)
            seg = x[max(0, end - n):end]
            w[n - len(seg):] = seg
            outs = []
            for name, a in anims.items():
                c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                outs.append(a.process(w, end / 16000))
                t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                cost[name]["wall"].append(t1 - t0)
                cost[name]["cpu"].append(c1 - c0)
            diff = max(diff, float(np.abs(outs[0] - outs[1]).max()))
    for a in anims.values():
        a.close()
    doc = {k: {"wall": _stats(v["wall"]), "thread_cpu": _stats(v["cpu"])} for k, v in cost.items()}
    doc["streaming_over_window_p50_cpu"] = round(doc["streaming"]["thread_cpu"]["p50"]
                                                 / doc["window"]["thread_cpu"]["p50"], 3)
    doc["max_abs_diff_weights"] = diff
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testdata", type=Path, default=Path(os.environ.get("AVATAR_TESTDATA", SHARED / "testdata")))
    ap.add_argument("--rounds", type=int, default=3, help="passes over the audio")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "speech_state.json")
    args = ap.parse_args()

    from avatar_app.inference.conv_state import conv_state_graph
    from avatar_app.speech.engine_animator import default_model_path
    from avatar_app.speech.mel import SILENCE_VALUE, log_mel
    from tests.helpers import load_mono16k

    feats = log_mel(np.concatenate([load_mono16k(args.testdata / "audio" / c) for c in CLIPS]))
    r = 65
    window = _session(default_model_path())
    model, states = conv_state_graph(default_model_path())
    states = [(s.input, s.output, s.channels, s.frames) for s in states]
    stream = _session(model)
    padded = np.concatenate([np.full((r - 1, feats.shape[1]), SILENCE_VALUE, np.float32), feats])
    cost = {"window_T65": {"wall": [], "cpu": []}, f"state_T{HOPS_PER_FRAME}": {"wall": [], "cpu": []}}
    max_diff = 0.0
    load = os.getloadavg()
    for _ in range(args.rounds):
        # the state of a stream that starts in digital silence: R frames of it through zero state
        state = {s: np.zeros((1, ch, n), np.float32) for s, _, ch, n in states}
        out = stream.run(None, {"features": np.full((1, r, feats.shape[1]), SILENCE_VALUE, np.float32), **state})
        state = {s[0]: v for s, v in zip(states, out[1:])}
        for k in range(0, len(feats) - HOPS_PER_FRAME + 1, HOPS_PER_FRAME):
            last = k + HOPS_PER_FRAME - 1
            feeds = {"features": padded[None, last: last + r]}  # frames last - R + 1 .. last
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            ref = window.run(None, feeds)[0][0, -1]
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            cost["window_T65"]["wall"].append(t1 - t0)
            cost["window_T65"]["cpu"].append(c1 - c0)
            feeds = {"features": feats[None, k: k + HOPS_PER_FRAME], **state}
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            out = stream.run(None, feeds)
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            cost[f"state_T{HOPS_PER_FRAME}"]["wall"].append(t1 - t0)
            cost[f"state_T{HOPS_PER_FRAME}"]["cpu"].append(c1 - c0)
            state = {s[0]: v for s, v in zip(states, out[1:])}
            max_diff = max(max_diff, float(np.abs(out[0][0, -1] - ref).max()))
    animator = _animators(args.testdata, args.rounds)
    doc = {
        "what": __doc__.split("\n\n")[1].replace("\n", " "),
        "audio": list(CLIPS), "frames_per_round": len(cost["window_T65"]["wall"]) // args.rounds,
        "rounds": args.rounds, "hops_per_call": HOPS_PER_FRAME,
        "state_shapes": [[ch, n] for _, _, ch, n in states],
        "call_ms": {k: {"wall": _stats(v["wall"]), "thread_cpu": _stats(v["cpu"])} for k, v in cost.items()},
        "max_abs_diff_newest_output": max_diff,
        "animator_process_ms": animator,
        "load_average_at_start": [round(v, 2) for v in load],
        "load_average_at_end": [round(v, 2) for v in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(doc["call_ms"], indent=1), "\nmax |state - window| newest output:", max_diff)
    print("animator process():", json.dumps(animator, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
