"""face_recon engine benchmark: ONNX Runtime CPU vs PyTorch eager on the same weights, per precision.

    python benchmarks/face_recon.py [--out benchmarks/results/face_recon.json] [--iters 2000]

Measures, in one run on this machine:

- ONNX Runtime CPU through the engine layer's :class:`~avatar_app.inference.ort.OrtRunner`
  (1 intra-op thread), FP32 / FP16 / INT8 files (converted by the engine layer), batch 1 and 16;
- PyTorch FP32 eager (``torch.inference_mode``, 1 thread) on the weights read back from the
  same ONNX file (:func:`training.face_recon.model.net_from_onnx`), batch 1 and 16;
- the whole EngineReconstructor.reconstruct call (alignment + engine + pose) at batch 1.

Writes JSON (latency p50/p95 in ms, the ORT/PyTorch ratio, the load average); asserts nothing.
Numbers from a shared 2-core machine are noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from avatar_app.inference import Precision  # noqa: E402
from avatar_app.inference.modelinfo import ModelInfo, load_feed_set  # noqa: E402


def time_calls(fn, iters: int, warmup: int = 50, max_s: float = 20.0) -> dict:
    """Latency percentiles (ms) of ``fn()``."""
    for _ in range(warmup):
        fn()
    lat = []
    t_end = time.perf_counter() + max_s
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        fn()
        lat.append((time.perf_counter_ns() - t0) / 1e6)
        if time.perf_counter() > t_end and len(lat) >= 20:
            break
    a = np.array(lat)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "mean_ms": float(a.mean()), "calls": len(lat)}


def main(argv=None) -> int:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "face_recon.onnx")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "face_recon.json")
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args(argv)

    import torch

    from avatar_app.inference.ort import OrtRunner
    from avatar_app.inference.precision import FeedSetReader, convert
    from training.face_recon.model import net_from_onnx

    torch.set_num_threads(1)
    info = ModelInfo.from_onnx(args.model)
    val = load_feed_set(info.validation_path, info.inputs)
    feeds = {b: {k: np.ascontiguousarray(v[:b]) for k, v in val.items()} for b in (1, 16)}
    result = {"model": str(args.model.relative_to(ROOT)) if args.model.is_relative_to(ROOT) else str(args.model),
              "sha256": info.sha256, "machine": platform.machine(), "cpus": os.cpu_count(),
              "load_average_at_start": os.getloadavg(), "python": platform.python_version(),
              "torch": torch.__version__, "ort": {}, "torch_eager": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for prec in (Precision.FP32, Precision.FP16, Precision.INT8):
            path = args.model
            if prec is not Precision.FP32:
                path = Path(tmp) / f"face_recon-{prec.value}.onnx"
                reader = FeedSetReader([load_feed_set(info.calibration_path, info.inputs)])
                convert(args.model, path, prec, reader if prec is Precision.INT8 else None)
            with OrtRunner.from_path(path, "ort_cpu", prec) as runner:
                for b, f in feeds.items():
                    result["ort"][f"{prec.value}_b{b}"] = time_calls(lambda: runner.infer(f), args.iters)
    net = net_from_onnx(args.model)
    for b, f in feeds.items():
        t = {k: torch.from_numpy(v) for k, v in f.items()}

        def run_torch():
            with torch.inference_mode():
                net(t["landmarks"], t["neutral"])

        result["torch_eager"][f"fp32_b{b}"] = time_calls(run_torch, args.iters)
    result["ratio_torch_over_ort_fp32_b1"] = (result["torch_eager"]["fp32_b1"]["p50_ms"]
                                              / result["ort"]["fp32_b1"]["p50_ms"])
    # the whole per-frame call of the reconstructor (alignment + engine + pose)
    from avatar_app.avatar.face_model import load_face_model, synthetic_landmarks
    from avatar_app.core.types import Landmarks
    from avatar_app.inference import EngineCache, EngineManager
    from avatar_app.reconstruction.engine import EngineReconstructor

    with tempfile.TemporaryDirectory() as tmp:
        rec = EngineReconstructor(args.model, manager=EngineManager(cache=EngineCache(Path(tmp)), isolate=False),
                                  backend="ort_cpu", precision="fp32")
        pts = synthetic_landmarks(load_face_model().neutral, np.eye(3), np.array([0, 0, -0.6]), 554.0, (640, 480))
        lm = Landmarks(pts.astype(np.float32), (640, 480))
        rec.calibrate_neutral(lm)
        clock = iter(range(1, 10 ** 9))
        result["reconstruct_call_b1"] = time_calls(lambda: rec.reconstruct(lm, float(next(clock))), args.iters // 2)
        rec.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    sys.stdout.write(json.dumps({k: result[k] for k in ("ort", "torch_eager", "ratio_torch_over_ort_fp32_b1",
                                                           "reconstruct_call_b1")}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
