"""Speech engine benchmark: streaming real-time factor and live audio-to-weights latency.

Streams test speech through EngineSpeechAnimator at video rate (one
``process`` call per frame, the window the live pipeline reads from the
microphone ring) on ONNX Runtime CPU, and the same weights in PyTorch FP32
eager (training/speech/model.py loaded from the ONNX initializers) through
the same feature code; also the loudness solver, the engine call at several
T (the stateless per-frame call vs the floor a stateful per-hop design would
pay), and the latency budget. Writes JSON; asserts nothing.

    python benchmarks/speech.py --out benchmarks/results/speech.json

Real-time factor = processing wall time / audio duration (``rtf``); on a
shared machine also the calling thread's CPU time / duration (``rtf_cpu``: ONNX
Runtime runs with one intra-op thread, on the calling thread, so this excludes
time taken by other processes) and the median call times frames / duration
(``rtf_p50``). Latency (live) =
microphone block (10 ms, capture.mic default) + wait for the next 10 ms hop
(0-10 ms) + the network's 20 ms look-ahead + one ``process`` call.
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

from avatar_app.inference import EngineManager  # noqa: E402
from avatar_app.speech.engine_animator import EngineSpeechAnimator, default_model_path  # noqa: E402
from avatar_app.speech.loudness import LoudnessSpeechAnimator  # noqa: E402

SR = 16000


def load_audio(testdata: Path) -> np.ndarray:
    from training.speech.evaluate_real import load_16k

    parts = [load_16k(testdata / "audio" / n) for n in ("jfk.wav", "grid_s1_bbaf2n.wav", "grid_s2_swwp2s.wav")]
    return np.concatenate(parts)


def stream(animator, x: np.ndarray, fps: float) -> dict:
    """Per-frame process() calls over ``x``: RTF and per-call latency percentiles."""
    animator.reset()
    ctx = int(round(animator.context_s * SR))
    n = int(len(x) / SR * fps)
    times = np.empty(n)
    cpu = np.empty(n)
    for i in range(n):
        t = (i + 1) / fps
        end = int(round(t * SR))
        w = x[max(0, end - ctx):end]
        c0, t0 = time.thread_time(), time.perf_counter()
        animator.process(w, t)
        times[i] = time.perf_counter() - t0
        cpu[i] = time.thread_time() - c0
    dur = len(x) / SR
    return {"fps": fps, "frames": n, "rtf": float(times.sum() / dur),
            "rtf_cpu": float(cpu.sum() / dur), "rtf_p50": float(np.median(times) * n / dur),
            "call_ms_p50": float(np.percentile(times, 50) * 1e3),
            "call_ms_p95": float(np.percentile(times, 95) * 1e3),
            "call_ms_p99": float(np.percentile(times, 99) * 1e3)}


class TorchSlot:
    """The ONNX weights in the PyTorch module, behind the slot's ``infer`` API."""

    def __init__(self, onnx_path: Path, threads: int = 1):
        import onnx
        import torch
        from onnx import numpy_helper

        from training.speech.model import Speech2Face

        init = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(onnx_path)).graph.initializer}
        ch = init["model.inp.weight"].shape[0]
        self.model = Speech2Face(ch=ch).eval()
        state = {k[len("model."):]: torch.from_numpy(v.copy()) for k, v in init.items()
                 if k.startswith("model.")}
        missing = [k for k in self.model.load_state_dict(state, strict=False).missing_keys
                   if not k.startswith("vis_head.")]  # the viseme head is training-only
        if missing:
            raise RuntimeError(f"weights missing from the ONNX initializers: {missing}")
        torch.set_num_threads(threads)
        self.torch = torch

    def infer(self, feeds):
        with self.torch.inference_mode():
            y = self.model(self.torch.from_numpy(feeds["features"]))
        return {"blendshapes": y.numpy()}


def call_cost(slot, t_values, reps: int = 200) -> dict:
    out = {}
    rng = np.random.default_rng(0)
    for t in t_values:
        f = rng.standard_normal((1, t, 64)).astype(np.float32) - 5
        for _ in range(10):
            slot.infer({"features": f})
        t0 = time.perf_counter()
        for _ in range(reps):
            slot.infer({"features": f})
        out[str(t)] = (time.perf_counter() - t0) / reps * 1e3
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/speech.json")
    ap.add_argument("--testdata", type=Path, default=ROOT.parent / "shared/testdata")
    ap.add_argument("--fps", type=float, nargs="+", default=[30.0, 60.0])
    a = ap.parse_args(argv)
    x = load_audio(a.testdata)
    res: dict = {"machine": platform.platform(), "cpus": os.cpu_count(),
                 "load_avg_start": os.getloadavg(), "audio_s": len(x) / SR, "streaming": {}}
    eng = EngineSpeechAnimator(default_model_path(), manager=EngineManager(isolate=False))
    res["engine"] = eng.describe()
    res["receptive_field_frames"] = eng.receptive_field
    runs = {"ort_cpu_fp32": eng, "loudness": LoudnessSpeechAnimator()}
    try:
        tslot = TorchSlot(default_model_path())
        teng = EngineSpeechAnimator(slot=eng.slot)
        teng.slot = tslot  # same features and gate; PyTorch eager underneath
        runs["torch_fp32_eager"] = teng
        res["call_ms_by_T"] = {"ort_cpu_fp32": call_cost(eng.slot, (10, 68, 300)),
                               "torch_fp32_eager": call_cost(tslot, (10, 68, 300))}
    except ImportError as exc:
        res["torch_fp32_eager"] = f"not run: {exc}"
        res["call_ms_by_T"] = {"ort_cpu_fp32": call_cost(eng.slot, (10, 68, 300))}
    for fps in a.fps:
        for name, anim in runs.items():
            res["streaming"][f"{name}@{fps:g}fps"] = stream(anim, x, fps)
    s30 = res["streaming"]["ort_cpu_fp32@30fps"]
    hop_wait_ms = (5.0, 10.0)  # mean, worst
    res["latency_ms"] = {
        "mic_block": 10.0, "hop_wait_mean": hop_wait_ms[0], "hop_wait_max": hop_wait_ms[1],
        "lookahead": eng.lookahead_s * 1e3, "process_p50": s30["call_ms_p50"], "process_p99": s30["call_ms_p99"],
        "total_mean": 10.0 + hop_wait_ms[0] + eng.lookahead_s * 1e3 + s30["call_ms_p50"],
        "total_worst": 10.0 + hop_wait_ms[1] + eng.lookahead_s * 1e3 + s30["call_ms_p99"]}
    res["load_avg_end"] = os.getloadavg()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
