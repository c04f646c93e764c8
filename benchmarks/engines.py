"""Engine benchmark: latency p50/p95 and throughput per backend x precision x batch.

Runs the tiny generated models (avatar_app.inference.tiny_models) and every
``models/*.onnx``, on every backend that can run here, at FP32/FP16/INT8 and
batch 1/4/16, plus PyTorch FP32 eager on the same weights (when torch is
importable; the ONNX graph is executed node by node with torch operators, or, for
face_recon, the FaceReconNet module it was exported from holds its weights), and
a sweep of ONNX Runtime CPU thread settings. INT8 rows record how many weighted
layers the mixed-precision file quantises and keeps float. Writes JSON; asserts nothing.

    python benchmarks/engines.py --out benchmarks/results/engines.json [--quick]

Numbers from a shared 2-core machine are noisy: the load average at the start
is recorded with them.
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

from avatar_app.inference import EngineCache, EngineManager, Precision, backend_statuses  # noqa: E402
from avatar_app.inference.modelinfo import ModelInfo  # noqa: E402
from avatar_app.inference.precision import int8_summary  # noqa: E402
from avatar_app.inference.ort import OrtRunner, SessionFromOnnx, ThreadSettings  # noqa: E402
from avatar_app.inference.tiny_models import write_all  # noqa: E402


# --------------------------------------------------------------------------- timing
def time_calls(fn, feeds, warmup: int, iters: int, max_s: float) -> dict:
    """Latency percentiles (ms) of ``fn(feeds)`` over ``iters`` calls (stops early after ``max_s``)."""
    for _ in range(warmup):
        fn(feeds)
    lat = []
    t_end = time.perf_counter() + max_s
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        fn(feeds)
        lat.append((time.perf_counter_ns() - t0) / 1e6)
        if time.perf_counter() > t_end and len(lat) >= 10:
            break
    arr = np.array(lat)
    batch = next(iter(feeds.values())).shape[0]
    return {"p50_ms": float(np.percentile(arr, 50)), "p95_ms": float(np.percentile(arr, 95)),
            "mean_ms": float(arr.mean()), "calls": len(lat),
            "throughput_samples_per_s": float(batch / (arr.mean() / 1e3))}


def feeds_for(info: ModelInfo, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs at the profile's opt shape with ``batch`` on axis 0."""
    return info.example_feeds(batch=batch, seed=seed)


# --------------------------------------------------------------------------- torch eager
class TorchOnnx:
    """Executes an FP32 ONNX graph node by node with PyTorch operators (eager mode).

    Same weights as the ONNX file. Supports the operators of the shipped and tiny
    models; raises NotImplementedError naming any other.
    """

    def __init__(self, path: Path):
        import onnx
        import torch
        from onnx import numpy_helper

        self.torch = torch
        model = onnx.load(str(path))
        self.graph = model.graph
        self.consts = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in model.graph.initializer}
        self.outputs = [o.name for o in model.graph.output]
        self.nodes = []
        for n in model.graph.node:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            if n.op_type == "Constant":
                self.consts[n.output[0]] = torch.from_numpy(numpy_helper.to_array(attrs["value"]).copy())
                continue
            if not hasattr(self, "_op_" + n.op_type):
                raise NotImplementedError(f"torch eager runner has no {n.op_type}")
            self.nodes.append((n.op_type, list(n.input), list(n.output), attrs))

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self.torch
        with torch.inference_mode():
            env = dict(self.consts)
            env.update({k: torch.from_numpy(v) for k, v in feeds.items()})
            for op, ins, outs, attrs in self.nodes:
                res = getattr(self, "_op_" + op)(*[env[i] if i else None for i in ins], **attrs)
                res = res if isinstance(res, tuple) else (res,)
                for name, val in zip(outs, res):
                    if name:
                        env[name] = val
            return {o: env[o].numpy() for o in self.outputs}

    # operators (ONNX semantics) ------------------------------------------------
    def _op_Conv(self, x, w, b=None, pads=(0, 0, 0, 0), strides=(1, 1), dilations=(1, 1), group=1, **_):
        F = self.torch.nn.functional
        if pads[0] != pads[2] or pads[1] != pads[3]:
            x = F.pad(x, (pads[1], pads[3], pads[0], pads[2]))
            pads = (0, 0, 0, 0)
        return F.conv2d(x, w, b, stride=tuple(strides), padding=(pads[0], pads[1]),
                        dilation=tuple(dilations), groups=group)

    def _op_Relu(self, x):
        return self.torch.relu(x)

    def _op_Sigmoid(self, x):
        return self.torch.sigmoid(x)

    def _op_Tanh(self, x):
        return self.torch.tanh(x)

    def _op_MatMul(self, a, b):
        return self.torch.matmul(a, b)

    def _op_Gemm(self, a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):
        a = a.T if transA else a
        b = b.T if transB else b
        y = alpha * (a @ b)
        return y + beta * c if c is not None else y

    def _op_Add(self, a, b):
        return a + b

    def _op_Sub(self, a, b):
        return a - b

    def _op_Mul(self, a, b):
        return a * b

    def _op_Div(self, a, b):
        return a / b

    def _op_GlobalAveragePool(self, x):
        return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)

    def _op_Flatten(self, x, axis=1):
        return x.reshape(int(np.prod(x.shape[:axis])) if axis else 1, -1)

    def _op_Transpose(self, x, perm=None):
        return x.permute(*(perm if perm is not None else reversed(range(x.dim()))))

    def _op_Squeeze(self, x, axes=None):
        if axes is None:
            return x.squeeze()
        for a in sorted((int(v) for v in axes.tolist()), reverse=True):
            x = x.squeeze(a)
        return x

    def _op_Unsqueeze(self, x, axes):
        for a in sorted(int(v) for v in axes.tolist()):
            x = x.unsqueeze(a)
        return x

    def _op_Reshape(self, x, shape, allowzero=0):
        shape = [x.shape[i] if (s == 0 and not allowzero) else int(s) for i, s in enumerate(shape.tolist())]
        return x.reshape(shape)

    def _op_Concat(self, *xs, axis):
        return self.torch.cat(xs, dim=axis)

    def _op_Softmax(self, x, axis=-1):
        return self.torch.softmax(x, dim=axis)

    def _op_LayerNormalization(self, x, g, b=None, axis=-1, epsilon=1e-5, **_):
        axis = axis % x.dim()
        return self.torch.nn.functional.layer_norm(x, x.shape[axis:], g, b, epsilon)

    def _op_GRU(self, x, W, R, B=None, seq_lens=None, h0=None, hidden_size=None,
                linear_before_reset=0, **_):
        torch = self.torch
        hid = R.shape[-1]
        Wz, Wr, Wh = W[0].split(hid)
        Rz, Rr, Rh = R[0].split(hid)
        if B is None:
            B = torch.zeros(6 * hid)
        bWz, bWr, bWh, bRz, bRr, bRh = B.reshape(-1).split(hid)
        h = torch.zeros(x.shape[1], hid) if h0 is None else h0[0]
        ys = []
        for t in range(x.shape[0]):
            xt = x[t]
            z = torch.sigmoid(xt @ Wz.T + h @ Rz.T + bWz + bRz)
            r = torch.sigmoid(xt @ Wr.T + h @ Rr.T + bWr + bRr)
            if linear_before_reset:
                hh = torch.tanh(xt @ Wh.T + r * (h @ Rh.T + bRh) + bWh)
            else:
                hh = torch.tanh(xt @ Wh.T + (r * h) @ Rh.T + bRh + bWh)
            h = (1 - z) * hh + z * h
            ys.append(h)
        y = torch.stack(ys).unsqueeze(1)  # (T, 1, B, H)
        return y, h.unsqueeze(0)


# --------------------------------------------------------------------------- main
def _torch_module(label: str, path: Path):
    """The project's own PyTorch module holding the ONNX file's weights, as a feeds -> outputs callable.

    For face_recon: ``training.face_recon.model.net_from_onnx`` (the FaceReconNet the file was
    exported from, eager FP32). None for other graphs the node-by-node runner cannot execute.
    """
    if Path(path).stem != "face_recon":
        return None
    try:
        import torch

        from training.face_recon.model import net_from_onnx
    except ImportError:
        return None
    net = net_from_onnx(path)

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.inference_mode():
            outs = net(torch.from_numpy(feeds["landmarks"]), torch.from_numpy(feeds["neutral"]))
        return {k: v.numpy() for k, v in zip(("blendshapes", "rotation_6d", "translation", "identity"), outs)}

    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "engines.json")
    ap.add_argument("--models", type=Path, default=ROOT / "models")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--max-s", type=float, default=2.0, help="time limit per measurement, seconds")
    ap.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    args = ap.parse_args(argv)
    iters, warmup, max_s = (30, 3, 0.5) if args.quick else (args.iters, 10, args.max_s)

    tmp = Path(tempfile.mkdtemp(prefix="engines_bench_"))
    models = {f"tiny/{k}": v for k, v in write_all(tmp / "tiny").items()}
    models.update({f"models/{p.stem}": p for p in sorted(args.models.glob("*.onnx"))})
    mgr = EngineManager(cache=EngineCache(tmp / "cache"), isolate=False)
    statuses = backend_statuses()
    runnable = [s.name for s in statuses if s.can_run]
    try:
        import torch

        torch.set_num_threads(1)
        torch_info = {"version": torch.__version__, "threads": 1}
    except ImportError:
        torch = None
        torch_info = None

    report = {
        "benchmark": "engines", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "loadavg_at_start": list(os.getloadavg()),
                    "ort_threads": vars(ThreadSettings.from_env()),
                    "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")},
        "backends": [{"name": s.name, "version": s.version, "can_build": s.can_build, "can_run": s.can_run,
                      "reason": s.reason, "devices": s.devices} for s in statuses],
        "torch": torch_info, "results": [], "thread_sweep": [],
    }
    for label, path in models.items():
        info = ModelInfo.from_onnx(path)
        torch_runner = None
        if torch is not None:
            try:
                torch_runner = TorchOnnx(path)
            except NotImplementedError as exc:
                # graphs the node-by-node runner lacks an operator for: the project's own module
                torch_runner = _torch_module(label, path)
                if torch_runner is None:
                    report["results"].append({"model": label, "backend": "torch_eager", "precision": "fp32",
                                              "status": "skipped", "reason": str(exc)})
        for backend in runnable:
            for prec in Precision:
                row = {"model": label, "backend": backend, "precision": prec.value}
                if prec not in info.precisions:
                    report["results"].append({**row, "status": "skipped", "reason": "model metadata excludes it"})
                    continue
                try:
                    if (backend, prec) == ("ort_cpu", Precision.FP32):
                        runner, verification = mgr.open_reference(path), None
                    else:
                        entry = mgr.build(path, backend, prec)
                        verification = entry.manifest.verification
                        if entry.manifest.status != "ok":
                            report["results"].append({**row, "status": entry.manifest.status,
                                                      "reason": entry.manifest.reason,
                                                      "verification": verification})
                            continue
                        runner = mgr.cache.lookup(mgr.cache_key(info, backend, prec), info.name)
                        from avatar_app.inference.backends import get_backend

                        if prec is Precision.INT8:
                            row["int8"] = int8_summary(runner.artifact_path)
                        runner = get_backend(backend).make_runner(runner.artifact_path, prec, info.name).open()
                except Exception as exc:  # noqa: BLE001 - a benchmark records failures and goes on
                    report["results"].append({**row, "status": "error", "reason": f"{type(exc).__name__}: {exc}"})
                    continue
                with runner:
                    for b in args.batches:
                        feeds = feeds_for(info, b)
                        stats = time_calls(runner.infer, feeds, warmup, iters, max_s)
                        report["results"].append({**row, "batch": b, "status": "ok", **stats,
                                                  "verification": verification})
                        print(f"{label:<22} {backend:<9} {prec.value:<5} b{b:<3} p50 {stats['p50_ms']:.3f} ms "
                              f"p95 {stats['p95_ms']:.3f} ms {stats['throughput_samples_per_s']:.0f}/s", flush=True)
        if torch_runner is not None:
            with OrtRunner.from_path(path) as ref:
                for b in args.batches:
                    feeds = feeds_for(info, b)
                    diff = max(float(np.abs(torch_runner(feeds)[k] - v).max()) for k, v in ref.infer(feeds).items())
                    stats = time_calls(torch_runner, feeds, warmup, iters, max_s)
                    report["results"].append({"model": label, "backend": "torch_eager", "precision": "fp32",
                                              "batch": b, "status": "ok", "max_abs_diff_vs_ort": diff, **stats})
                    print(f"{label:<22} torch     fp32  b{b:<3} p50 {stats['p50_ms']:.3f} ms "
                          f"p95 {stats['p95_ms']:.3f} ms (diff vs ORT {diff:.1e})", flush=True)
        # ONNX Runtime CPU thread settings at batch 1 (the live case).
        for intra in (1, 2):
            for spin in (False, True):
                ts = ThreadSettings(intra_op=intra, allow_spinning=spin)
                with OrtRunner(SessionFromOnnx(path, "ort_cpu", threads=ts)) as r:
                    stats = time_calls(r.infer, feeds_for(info, 1), warmup, iters, max_s)
                report["thread_sweep"].append({"model": label, "intra_op": intra, "allow_spinning": spin,
                                               "batch": 1, **stats})
    # Ratio floor: ONNX Runtime CPU FP32 vs PyTorch eager, same model and batch.
    ok = [r for r in report["results"] if r.get("status") == "ok"]
    ratios = []
    for r in ok:
        if r["backend"] == "ort_cpu" and r["precision"] == "fp32":
            t = next((x for x in ok if x["backend"] == "torch_eager" and x["model"] == r["model"]
                      and x["batch"] == r["batch"]), None)
            if t:
                ratios.append({"model": r["model"], "batch": r["batch"],
                               "torch_p50_over_ort_cpu_fp32_p50": t["p50_ms"] / r["p50_ms"]})
    report["speedup_vs_torch_eager"] = ratios
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
