"""N streams' inference on one device: face detection, face mesh, face_recon and speech2face, batched per step.

Each stream replays recorded frames (dev clips, with the ROIs MediaPipe's own
tracker used on them) and recorded face_recon / speech2face inputs (their
validation sets). One step serves one frame of every stream: the letterboxed
frame through the detector, the ROI crop through the mesh, face_recon and
speech2face (T = 68 log-mel frames, the engine's per-frame call at 30 fps),
all batched across the streams, outputs copied back to the host. Steps of more
than ``--max-batch`` streams run in several batches.

Backends:

- ``torch``: the ONNX files converted by onnx2torch, crops cut on the device
  (grid_sample from the frames kept in device memory, the ROI rules of
  avatar_app.tracking.roi), the whole step captured in a CUDA graph per batch
  size (``--device cuda``). FP16 runs the converted modules in half precision.
  Used on the H200: the onnxruntime-gpu CUDA 13 wheel (1.31.1, 255 MB; its CUDA
  provider is 52 MB even as zstd-compressed sm_90 cubins alone) does not fit the
  device tool's 64 MiB transfer limit.
- ``ort``: ONNX Runtime sessions (CPU here; the CUDA provider with io-binding
  where onnxruntime-gpu is installed), crops cut on the host by
  avatar_app.tracking.roi.

Usage::

    # once, here (needs MediaPipe): the recording the streams replay (never commit it)
    python benchmarks/gpu_streams.py record -o /tmp/streams.npz
    python benchmarks/gpu_streams.py run --recording /tmp/streams.npz --backend ort --device cpu \\
        --streams 1,2,4,8 -o benchmarks/results/gpu_streams_cpu.json
    python3 benchmarks/gpu_streams.py run --recording streams.npz --backend torch --device cuda \\
        --precision fp32,fp16 -o gpu_streams.json
    # the H200 runs of benchmarks/results/gpu_streams.json (h200_2026_12_02): many streams, and batch 1
    python3 benchmarks/gpu_streams.py run --recording streams.npz --precision fp16 --channels-last \\
        --detect-every 30 --streams 1,768,1024,1280 --max-batch 2048 -o a.json
    python3 benchmarks/gpu_streams.py run --recording streams.npz --precision fp16 --detect-every 30 \\
        --concurrent --channels-last --compile 1 --streams 1 --max-batch 1 --engine-times --engine-batches 1 -o g.json

JSON out: per backend/precision and stream count N: step time p50/p95/mean (ms),
per-frame time (mean step / N), frames/s, and ``streams_held_30fps`` (the largest N
whose step p95 is <= 33.3 ms, so every stream gets its frame within a frame time).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FRAME_BUDGET_MS = 1000.0 / 30.0
MODELS = ("face_detection", "face_landmark", "face_recon", "speech2face")
SPEECH_T = 68
"""speech2face frames per call: receptive field 65 + 4 new hops - 1 (speech/engine_animator.py)."""
CLIPS = ("video/grid_s1_bbaf2n.mp4", "video/expressive/lp_d3.mp4", "video/expressive/lp_d9.mp4",
         "video/openmpf_video_01.mp4")
CANVAS = 640
"""Frames are stored top-left on a CANVAS x CANVAS black canvas (one device array for all clips)."""


# -- recording ----------------------------------------------------------------------------------

def record(testdata: Path, out: Path, frames_per_clip: int = 12) -> None:
    """Frames of the dev clips with MediaPipe's ROIs for them (mesh ROI from the previous frame's
    landmarks, its landmarks for checking), written as one .npz."""
    import cv2

    from avatar_app.tracking import FaceTracker, RunningMode
    from avatar_app.tracking import roi as R
    from avatar_app.tracking.agreement import video_frames

    frames, sizes, rects, lms = [], [], [], []
    for clip in CLIPS:
        prev = None
        with FaceTracker(RunningMode.VIDEO) as tracker:
            for t, bgr in video_frames(testdata / clip, limit=frames_per_clip + 1):
                lm = tracker.process_video_frame(bgr, t)
                if prev is not None and lm is not None:
                    h, w = bgr.shape[:2]
                    canvas = np.zeros((CANVAS, CANVAS, 3), np.uint8)
                    canvas[:h, :w] = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                    frames.append(canvas)
                    sizes.append((w, h))
                    rects.append(R.landmark_rects(prev[None, :, :2])[0])
                    lms.append(lm.points)
                prev = None if lm is None else lm.pixels()
    np.savez_compressed(out, frames=np.stack(frames), sizes=np.array(sizes), rects=np.array(rects),
                        landmarks=np.stack(lms))
    print(f"wrote {out}: {len(frames)} frames")


# -- the workload -------------------------------------------------------------------------------

class Workload:
    """Replayed inputs: stream s shows frame ``(s * 7 + step) % F`` of the recording."""

    def __init__(self, recording: Path, models_dir: Path):
        from avatar_app.tracking import roi as R

        with np.load(recording) as z:
            self.frames = z["frames"]
            self.sizes = z["sizes"].astype(np.float64)
            self.rects = z["rects"]
            self.landmarks = z["landmarks"]
        self.n_frames = len(self.frames)
        self.letterbox = R.letterbox_matrices(self.sizes)                           # (F, 2, 3)
        self.crop = R.crop_matrices(self.rects, R.MESH_SIZE)                       # (F, 2, 3)
        with np.load(models_dir / "face_recon.val.npz") as z:
            self.recon = {k: z[k].astype(np.float32) for k in z.files}
        with np.load(models_dir / "speech2face.val.npz") as z:
            self.speech = z["features"][:, :SPEECH_T].astype(np.float32)

    def frame_ids(self, n: int, step: int) -> np.ndarray:
        return (np.arange(n) * 7 + step) % self.n_frames

    def sample_ids(self, n: int, step: int, pool: int) -> np.ndarray:
        return (np.arange(n) * 13 + step) % pool


# -- torch backend ------------------------------------------------------------------------------

def _onnx2torch():
    """onnx2torch's ``convert``; a stand-in torchvision when none loads (only its NMS and RoiAlign
    converters use it, which these models do not need: a CPU-only torch here lacks a matching one)."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - missing, or built for another torch
        import types

        tv = types.ModuleType("torchvision")
        tv.ops = types.ModuleType("torchvision.ops")
        tv.ops.roi_align = tv.ops.nms = None
        sys.modules.update({"torchvision": tv, "torchvision.ops": tv.ops})
    import torch
    from onnx2torch import convert
    from onnx2torch.node_converters.comparisons import OnnxCompare
    from onnx2torch.node_converters.registry import (
        _CONVERTER_REGISTRY,
        OperationDescription,
        add_converter,
    )
    from onnx2torch.utils.common import (
        OnnxToTorchModule,
        OperationConverterResult,
        onnx_mapping_from_node,
    )

    class GridSample(torch.nn.Module, OnnxToTorchModule):
        def __init__(self, mode: str, padding: str, align: bool):
            super().__init__()
            self.mode, self.padding, self.align = mode, padding, align

        def forward(self, x, grid):
            return torch.nn.functional.grid_sample(x, grid.to(x.dtype), mode=self.mode, padding_mode=self.padding,
                                                   align_corners=self.align)

    def compare(node, graph):
        return OperationConverterResult(torch_module=OnnxCompare(node.operation_type),
                                        onnx_mapping=onnx_mapping_from_node(node=node))

    def grid_sample(node, graph):
        a = node.attributes
        mode = {"linear": "bilinear", "cubic": "bicubic"}.get(a.get("mode", "bilinear"), a.get("mode", "bilinear"))
        module = GridSample(mode, a.get("padding_mode", "zeros"), bool(a.get("align_corners", 0)))
        return OperationConverterResult(torch_module=module, onnx_mapping=onnx_mapping_from_node(node=node))

    from onnx2torch.node_converters.activations import OnnxPReLU

    # its PReLU falls back to boolean-mask indexing for a [C, 1, 1]-broadcast slope, a host sync
    OnnxPReLU.forward = lambda self, x, slope: torch.where(x >= 0, x, x * slope)
    # ONNX versions the onnx2torch release lacks (opset 16 comparisons, GridSample)
    for op, version, fn in (("GreaterOrEqual", 16, compare), ("LessOrEqual", 16, compare),
                            ("GridSample", 16, grid_sample)):
        if OperationDescription(domain="", operation_type=op, version=version) not in _CONVERTER_REGISTRY:
            add_converter(operation_type=op, version=version)(fn)
    return convert


#: onnx2torch modules whose extra inputs are shapes, pads, axes or indices read on the host.
_HOST_ARGS = ("OnnxPadDynamic", "OnnxReshape", "OnnxSlice", "OnnxSqueezeDynamicAxes", "OnnxUnsqueezeDynamicAxes",
              "OnnxConstantOfShape", "OnnxExpand", "OnnxTile", "OnnxReduceSumDynamicAxes")


def freeze_shapes(gm, example: list, device):
    """Fold what does not depend on the input values (at these input shapes) into constants, for CUDA graphs.

    onnx2torch reads shapes, pads and axes from tensors with ``.tolist()``; on a CUDA
    tensor that is a device-to-host copy, which a CUDA graph capture forbids. At a
    fixed batch size every such value is a constant: the graph is run once with
    ``example`` inputs, every node whose value follows from constants and
    input shapes alone (``Shape`` outputs included) is replaced by its value, and the
    integer constants that feed the modules of ``_HOST_ARGS`` stay in host memory
    while everything else moves to ``device``.
    """
    import copy

    import torch

    env, dynamic, modules = {}, set(), dict(gm.named_modules())
    meta_modules = dict(copy.deepcopy(gm).to("meta").named_modules())  # for values that depend on the inputs
    inputs = iter(example)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(inputs)
            dynamic.add(node)
        elif node.op == "get_attr":
            obj = gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            env[node] = obj
        elif node.op == "output":
            continue
        else:
            kind = type(modules[node.target]).__name__ if node.op == "call_module" else ""
            is_dynamic = kind != "OnnxShape" and any(a in dynamic for a in node.all_input_nodes)
            args = torch.fx.node.map_arg(node.args, lambda n: env[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
            if kind == "OnnxShape":  # a static shape: a real value even of a meta input
                m = modules[node.target]
                env[node] = torch.tensor(args[0].shape[m._start:m._end])
                continue
            if is_dynamic:  # on the meta device: shapes only, no arithmetic
                dynamic.add(node)
                host_args = kind in _HOST_ARGS  # their shape/axes arguments are read on the host
                args = tuple(a.to("meta") if isinstance(a, torch.Tensor) and not (host_args and i > 0) else a
                             for i, a in enumerate(args))
            owner = meta_modules if is_dynamic else modules
            fn = owner[node.target] if node.op == "call_module" else (
                getattr(args[0], node.target) if node.op == "call_method" else node.target)
            call_args = args[1:] if node.op == "call_method" else args
            with torch.inference_mode():
                env[node] = fn(*call_args, **kwargs)
    count = 0
    for node in list(gm.graph.nodes):
        if node.op in ("call_module", "call_method", "call_function") and node not in dynamic \
                and any(u in dynamic for u in node.users) and isinstance(env[node], torch.Tensor):
            name = f"_frozen_{count}"
            count += 1
            gm.register_buffer(name, env[node].detach().clone())
            with gm.graph.inserting_before(node):
                const = gm.graph.get_attr(name)
            node.replace_all_uses_with(const)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    modules, host = dict(gm.named_modules()), []
    for node in gm.graph.nodes:
        if node.op == "call_module" and type(modules[node.target]).__name__ in _HOST_ARGS:
            for a in node.args[1:]:
                if isinstance(a, torch.fx.Node) and a.op == "get_attr":
                    owner, _, attr = a.target.rpartition(".")
                    mod = gm.get_submodule(owner) if owner else gm
                    t = getattr(mod, attr)
                    if isinstance(t, torch.Tensor) and not t.is_floating_point():
                        host.append((mod, attr, t.detach().cpu().clone()))
    gm.to(device)
    for mod, attr, t in host:
        if attr in mod._buffers:
            mod._buffers[attr] = t
        else:
            setattr(mod, attr, t)
    return gm


def bake_host_args(gm, example: list):
    """Replace the :data:`_HOST_ARGS` modules of a frozen graph by modules that hold their shapes, pads,
    axes and slices as Python values (read once now, at the frozen batch size), so that ``make_fx``
    can trace the graph: onnx2torch reads them with ``.tolist()``, which a tracer refuses. Modifies and
    returns ``gm``; a module of another kind, or with an argument that is not a host constant, stays."""
    import torch
    from onnx2torch.node_converters.pad import _onnx_padding_to_torch, _torch_padding_to_mode_format
    from onnx2torch.node_converters.slice import _do_slice, _get_slices
    from torch.fx.passes.shape_prop import ShapeProp

    class Baked(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x, *unused):
            return self.fn(x)

    def const(gm, a):
        if a is None or not isinstance(a, torch.fx.Node):
            return a
        if a.op != "get_attr":
            raise ValueError("not a constant")
        obj = gm
        for part in a.target.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu" and obj.is_floating_point():
            return float(obj.reshape(-1)[0].item()) if obj.numel() == 1 else obj
        return obj

    with torch.no_grad():
        ShapeProp(gm).propagate(*example)
    modules = dict(gm.named_modules())
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        kind, m = type(modules[node.target]).__name__, modules[node.target]
        if kind not in _HOST_ARGS or kind == "OnnxConstantOfShape":
            continue
        try:
            vals = [const(gm, a) for a in node.args[1:]]
        except ValueError:
            continue
        meta_out, meta_in = node.meta.get("tensor_meta"), getattr(node.args[0], "meta", {}).get("tensor_meta")
        if not hasattr(meta_out, "shape") or not hasattr(meta_in, "shape"):
            continue
        out, inp = tuple(meta_out.shape), tuple(meta_in.shape)
        if kind in ("OnnxReshape", "OnnxSqueezeDynamicAxes", "OnnxUnsqueezeDynamicAxes"):
            fn = (lambda s: lambda x: torch.reshape(x, s))(out)
        elif kind == "OnnxExpand":
            fn = (lambda s: lambda x: x.expand(s))(out)
        elif kind == "OnnxTile":
            fn = (lambda r: lambda x: x.repeat(r))([o // i for o, i in zip(out, inp)])
        elif kind == "OnnxSlice":
            starts, ends, *rest = vals + [None] * (4 - len(vals))
            spec = _get_slices(starts.tolist(), ends.tolist(), rest[0], rest[1])
            fn = (lambda sp: lambda x: _do_slice(x, *sp))(spec)
        elif kind == "OnnxPadDynamic":
            pads = _torch_padding_to_mode_format(_onnx_padding_to_torch(vals[0].tolist()), m.mode)
            value = vals[1] if len(vals) > 1 and vals[1] is not None else 0.0
            fn = (lambda p, md, v: lambda x: torch.nn.functional.pad(x, mode=md, pad=p, value=v))(pads, m.mode, value)
        elif kind == "OnnxReduceSumDynamicAxes" and vals and vals[0] is not None and vals[0].numel():
            dims, keep = sorted(vals[0].tolist()), bool(m._keepdims)
            fn = (lambda d, k: lambda x: torch.sum(x, dim=d, keepdim=k))(dims, keep)
        else:
            continue
        owner, _, attr = node.target.rpartition(".")
        setattr(gm.get_submodule(owner) if owner else gm, attr, Baked(fn))
    gm.recompile()
    return gm


def convert_models(models_dir: Path) -> dict:
    """The four ONNX files as onnx2torch GraphModules (on the host, float32)."""
    import onnx

    convert = _onnx2torch()
    return {name: convert(onnx.load(str(models_dir / f"{name}.onnx"))).eval() for name in MODELS}


#: Example input shapes after the batch axis, per model.
INPUT_SHAPES = {"face_detection": [(3, 128, 128)], "face_landmark": [(3, 192, 192)],
                "face_recon": [(478, 3), (478, 3)], "speech2face": [(SPEECH_T, 64)]}


class TorchPipeline:
    """All four engines as torch modules, one step captured in a CUDA graph per batch size.

    Options (the H200 tries of issue 19; each is off by default, so the defaults measure what
    benchmarks/results/gpu_streams.json first recorded):

    - ``channels_last``: the convolutional engines (detector, mesh) and their inputs in
      NHWC memory order, where cuDNN's depthwise and half-precision kernels are fastest;
    - ``compile_batches``: batch sizes whose engines are traced into ATen graphs
      (``make_fx``, shapes and host-read constants baked in) and compiled by TorchInductor
      (pointwise chains fused into one kernel each), then captured in the step's CUDA graph
      like the rest; a failure falls back to the eager module and is recorded;
    - ``detect_every``: the detector runs on each stream every ``detect_every`` frames,
      staggered across streams, as the app's trackers re-detect a followed face once per
      ``redetect_s`` = 1 s (``avatar_app.tracking.face_mesh``), i.e. every 30 frames at 30 fps;
      1 runs it on every frame of every stream (the first recording's workload).
    """

    def __init__(self, work: Workload, models_dir: Path, device: str, precision: str, base: dict | None = None,
                 concurrent: bool = False, channels_last: bool = False, compile_batches: frozenset = frozenset(),
                 detect_every: int = 1, compile_mode: str = "default"):
        import torch

        self.torch, self.work, self.device = torch, work, torch.device(device)
        self.dtype = torch.float16 if precision == "fp16" else torch.float32
        self.base = base if base is not None else convert_models(models_dir)
        self._frozen: dict[tuple, object] = {}
        self.channels_last, self.compile_batches = channels_last, frozenset(compile_batches)
        self.compile_mode, self.detect_every = compile_mode, max(1, int(detect_every))
        self.compile_errors: dict[str, str] = {}
        self.compile_engines = set(MODELS)
        self.compile_s: dict[str, float] = {}

        def t(a):
            return torch.as_tensor(a, device=self.device)

        self.frames = t(work.frames).permute(0, 3, 1, 2).contiguous()               # (F, 3, C, C) uint8
        self.letterbox, self.crop = t(work.letterbox).float(), t(work.crop).float()
        self.recon = {k: t(v).to(self.dtype) for k, v in work.recon.items()}
        self.speech = t(work.speech).to(self.dtype)
        self._base_grid = {s: self._pixel_grid(s) for s in (128, 192)}
        self.graphs: dict[tuple[int, int], tuple] = {}
        self.graph_errors: dict[str, str] = {}
        self.concurrent = concurrent and self.device.type == "cuda"
        self.side_streams = [torch.cuda.Stream() for _ in MODELS] if self.concurrent else []

    def _nhwc(self, name: str) -> bool:
        return self.channels_last and name in ("face_detection", "face_landmark")

    def module(self, name: str, batch: int):
        """The model frozen for ``batch`` (once for all batches when its graph reads no input shape)."""
        import copy

        torch = self.torch
        gm = self.base[name]
        shape_free = not any(n.op == "call_module" and type(gm.get_submodule(n.target)).__name__ == "OnnxShape"
                             for n in gm.graph.nodes)
        compiled = batch in self.compile_batches and name in self.compile_engines
        key = (name, batch if compiled or not shape_free else 0, compiled)
        if key not in self._frozen:
            example = [torch.empty((batch, *s), device="meta") for s in INPUT_SHAPES[name]]
            m = freeze_shapes(copy.deepcopy(gm), example, self.device)
            m = m.half() if self.dtype == torch.float16 else m
            if self._nhwc(name):
                m = m.to(memory_format=torch.channels_last)
            self._frozen[key] = self._compile(m, name, batch) if compiled else m
        return self._frozen[key]

    def _compile(self, m, name: str, batch: int):
        """``m`` traced at ``batch`` into an ATen graph and compiled by Inductor; ``m`` itself on failure."""
        torch = self.torch
        t0 = time.perf_counter()
        try:
            from torch.fx.experimental.proxy_tensor import make_fx

            x = [torch.rand((batch, *s), device=self.device).to(self.dtype) for s in INPUT_SHAPES[name]]
            if self._nhwc(name):
                x = [a.contiguous(memory_format=torch.channels_last) for a in x]
            try:
                with torch.no_grad():  # outside inference mode (see warm), so the traced constants are plain tensors
                    traced = make_fx(bake_host_args(m, x))(*x)
                fn = torch.compile(traced, mode=self.compile_mode, dynamic=False, fullgraph=True)
                how = "make_fx+inductor"
            except Exception as exc:  # noqa: BLE001 - then Dynamo on the module itself (graph breaks allowed)
                self.compile_errors[f"{name}@{batch} make_fx"] = f"{type(exc).__name__}: {exc}"[:300]
                fn, how = torch.compile(m, mode=self.compile_mode, dynamic=False), "dynamo+inductor"
            with torch.inference_mode():  # compiled for the mode and the (inference) tensors the steps use
                xi = [a.clone(memory_format=torch.preserve_format) for a in x]
                fn(*xi)
                fn(*xi)
            self.compile_s[f"{name}@{batch} {how}"] = round(time.perf_counter() - t0, 1)
            return fn
        except Exception as exc:  # noqa: BLE001 - measured eagerly instead, and said so
            self.compile_errors[f"{name}@{batch}"] = f"{type(exc).__name__}: {exc}"[:300]
            return m

    def warm(self, batch: int) -> None:
        """Freeze (and compile, for :attr:`compile_batches`) the four engines at ``batch`` now, outside
        inference mode and outside any timing."""
        for name in MODELS:
            self.module(name, batch)
        if self.detect_every > 1:
            for d in self.detector_counts(batch):
                if d:
                    self.module("face_detection", d)

    def _pixel_grid(self, size: int):
        torch = self.torch
        u = torch.arange(size, device=self.device, dtype=torch.float32)
        v, uu = torch.meshgrid(u, u, indexing="ij")
        return torch.stack([uu, v, torch.ones_like(uu)], dim=-1).reshape(1, -1, 3)  # pixel-index coords

    def _grids(self, mats, size: int):
        """Sampling grids (B, size, size, 2) for grid_sample from crop-to-image matrices (B, 2, 3)."""
        src = self._base_grid[size] @ mats.transpose(1, 2)                         # (B, size*size, 2)
        return (src * (2.0 / (CANVAS - 1)) - 1.0).reshape(-1, size, size, 2)

    def _crop(self, fid, mats, size: int, padding: str, name: str):
        """The engine input: frames ``fid`` resampled through ``mats``, in the engine's dtype and layout."""
        torch = self.torch
        # CPU half grid_sample is wrong: crops are cut in float32 there; in the run dtype on CUDA
        cut = self.dtype if self.device.type == "cuda" else torch.float32
        out = torch.nn.functional.grid_sample(self.frames[fid].to(cut), self._grids(mats, size).to(cut),
                                              mode="bilinear", padding_mode=padding, align_corners=True)
        out = out.to(self.dtype)
        return out.contiguous(memory_format=torch.channels_last) if self._nhwc(name) else out

    def _step(self, fid, sid, spid, dfid):
        b, d = len(fid), len(dfid)
        mesh_in = self._crop(fid, self.crop[fid], 192, "border", "face_landmark")
        jobs = [lambda: self.module("face_landmark", b)(mesh_in),
                lambda: self.module("face_recon", b)(self.recon["landmarks"][sid], self.recon["neutral"][sid])[0],
                lambda: self.module("speech2face", b)(self.speech[spid])]
        if d:
            det_in = self._crop(dfid, self.letterbox[dfid], 128, "zeros", "face_detection")
            jobs.append(lambda: self.module("face_detection", d)(det_in)[1].amax(dim=1))
        if not self.concurrent:
            outs = [job() for job in jobs]
        else:  # the engines on CUDA streams of their own, joined before the copies (a graph captures the fork)
            torch = self.torch
            cur = torch.cuda.current_stream()
            outs = []
            for job, side in zip(jobs, self.side_streams):
                side.wait_stream(cur)
                with torch.cuda.stream(side):
                    outs.append(job())
            for side in self.side_streams[:len(jobs)]:
                cur.wait_stream(side)
        (landmarks, flag), recon, speech = outs[:3]
        return (landmarks, flag, recon, speech, *outs[3:])

    def engine_times(self, batch: int, replays: int = 20) -> dict[str, float]:
        """Each engine alone at ``batch``, captured in a CUDA graph: ms per call (CUDA events)."""
        torch = self.torch
        out = {}
        for name in MODELS:
            m = self.module(name, batch)
            with torch.inference_mode():
                x = [torch.rand((batch, *s), device=self.device).to(self.dtype) for s in INPUT_SHAPES[name]]
                if self._nhwc(name):
                    x = [a.contiguous(memory_format=torch.channels_last) for a in x]
                m(*x)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    m(*x)
                g.replay()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(replays):
                    g.replay()
                end.record()
                torch.cuda.synchronize()
            out[name] = round(start.elapsed_time(end) / replays, 4)
            del g
        return out

    def detector_counts(self, batch: int) -> list[int]:
        """How many of ``batch`` consecutive streams run the detector in one step (one or two values)."""
        k = self.detect_every
        return sorted({batch // k, -(-batch // k)}) if k > 1 else [batch]

    def prepare(self, batch: int, graph: bool) -> None:
        """Static index buffers and, with ``graph``, the CUDA graphs of one step of ``batch`` streams
        (one per detector count of :meth:`detector_counts`).

        A capture that fails leaves that batch size running eagerly (the reason is kept in
        :attr:`graph_errors` and the JSON).
        """
        torch = self.torch
        for d in self.detector_counts(batch):
            idx = [torch.zeros(n, dtype=torch.long, device=self.device) for n in (batch, batch, batch, d)]
            with torch.inference_mode():
                for _ in range(2):
                    outs = self._step(*idx)
                g = None
                if graph:
                    torch.cuda.synchronize()
                    try:
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            outs = self._step(*idx)
                    except Exception as exc:  # noqa: BLE001 - measured eagerly instead, and said so
                        g = None
                        self.graph_errors[f"{batch}/{d}"] = f"{type(exc).__name__}: {exc}"[:300]
                        torch.cuda.synchronize()
                        outs = self._step(*idx)
            host = [torch.empty(o.shape, dtype=o.dtype, pin_memory=self.device.type == "cuda") for o in outs]
            self.graphs[(batch, d)] = (g, idx, outs, host)

    def release(self, keep: set[int]) -> None:
        """Drop the graphs (and their memory) of batch sizes not in ``keep``."""
        for key in [k for k in self.graphs if k[0] not in keep]:
            del self.graphs[key]
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()

    def has_graphs(self, batch: int) -> bool:
        return any(k[0] == batch for k in self.graphs)

    def captured(self, batch: int) -> bool:
        return all(v[0] is not None for k, v in self.graphs.items() if k[0] == batch)

    def run_step(self, n: int, step: int, max_batch: int) -> np.ndarray:
        """One step for n streams (several batches above max_batch); returns the landmarks of stream 0."""
        torch = self.torch
        w = self.work
        fids, sids = w.frame_ids(n, step), w.sample_ids(n, step, len(w.recon["landmarks"]))
        spids = w.sample_ids(n, step, len(w.speech))
        first = None
        with torch.inference_mode():
            for lo in range(0, n, max_batch):
                b = min(max_batch, n - lo)
                streams = np.arange(lo, lo + b)
                det = fids[streams[(streams + step) % self.detect_every == 0]]
                g, idx, outs, host = self.graphs[(b, len(det))]
                for buf, ids in zip(idx, (fids[lo:lo + b], sids[lo:lo + b], spids[lo:lo + b], det)):
                    if len(ids):
                        buf.copy_(torch.as_tensor(ids), non_blocking=True)
                if g is not None:
                    g.replay()
                else:
                    outs = self._step(*idx)
                for h, o in zip(host, outs):
                    h.copy_(o, non_blocking=True)
                if first is None:
                    first = host[0]
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return first[0].float().numpy()

    def device_name(self) -> str:
        return self.torch.cuda.get_device_name(0) if self.device.type == "cuda" else platform.processor()


# -- ONNX Runtime backend -----------------------------------------------------------------------

class OrtPipeline:
    """The four ONNX files on ONNX Runtime; crops cut on the host."""

    def __init__(self, work: Workload, models_dir: Path, device: str, precision: str):
        import onnxruntime as ort

        from avatar_app.inference.precision import convert as convert_precision

        self.work = work
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
        self.sessions = {}
        tmp = Path("/tmp") / "gpu_streams_models"
        tmp.mkdir(exist_ok=True)
        for name in MODELS:
            path = models_dir / f"{name}.onnx"
            if precision == "fp16":
                from avatar_app.inference.base import Precision

                dst = tmp / f"{name}.fp16.onnx"
                if not dst.is_file():
                    convert_precision(path, dst, Precision.FP16, None)
                path = dst
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1 if device == "cpu" else 0  # the app's CPU setting (ThreadSettings)
            self.sessions[name] = ort.InferenceSession(str(path), so, providers=providers)
        self.graphs: dict[int, tuple] = {}
        self.graph_errors: dict[int, str] = {}

    def prepare(self, batch: int, graph: bool) -> None:
        self.graphs[batch] = (None,)

    def release(self, keep: set[int]) -> None:
        self.graphs = {b: v for b, v in self.graphs.items() if b in keep}

    def has_graphs(self, batch: int) -> bool:
        return batch in self.graphs

    def captured(self, batch: int) -> bool:
        return False

    def run_step(self, n: int, step: int, max_batch: int) -> np.ndarray:
        import cv2

        from avatar_app.tracking import roi as R

        w = self.work
        fids, sids = w.frame_ids(n, step), w.sample_ids(n, step, len(w.recon["landmarks"]))
        spids = w.sample_ids(n, step, len(w.speech))
        first = None
        for lo in range(0, n, max_batch):
            f = fids[lo:lo + max_batch]
            images = [w.frames[i] for i in f]
            det_in = R.crops_nchw(images, w.letterbox[f], R.DETECTOR_SIZE, border=cv2.BORDER_CONSTANT)
            mesh_in = R.crops_nchw(images, w.crop[f], R.MESH_SIZE)
            self.sessions["face_detection"].run(None, {"image": det_in})
            lm, _ = self.sessions["face_landmark"].run(None, {"image": mesh_in})
            s = sids[lo:lo + max_batch]
            self.sessions["face_recon"].run(None, {"landmarks": w.recon["landmarks"][s],
                                                   "neutral": w.recon["neutral"][s]})
            self.sessions["speech2face"].run(None, {"features": w.speech[spids[lo:lo + max_batch]]})
            first = lm if first is None else first
        return first[0]

    def device_name(self) -> str:
        return platform.processor() or platform.machine()


# -- measurement --------------------------------------------------------------------------------

def check_landmarks(pipe, work: Workload) -> float:
    """Mean distance (% of face width) between the pipeline's landmarks of stream 0 and MediaPipe's."""
    from avatar_app.tracking import roi as R

    errs = []
    for step in range(min(8, work.n_frames)):
        fid = int(work.frame_ids(1, step)[0])
        lm = pipe.run_step(1, step, 1)
        img = R.project(lm[None].astype(np.float32), work.rects[fid:fid + 1], work.sizes[fid:fid + 1])[0]
        ref = work.landmarks[fid]
        wh = work.sizes[fid]
        width = np.linalg.norm((ref[234, :2] - ref[454, :2]) * wh)
        errs.append(np.linalg.norm((img[:, :2] - ref[:, :2]) * wh, axis=1).mean() / width * 100)
    return float(np.mean(errs))


def measure(pipe, n: int, max_batch: int, seconds: float, min_steps: int = 10) -> dict:
    """Step times of n streams over about ``seconds`` (at least ``min_steps`` steps)."""
    times, step, t_end = [], 0, time.perf_counter() + seconds
    while step < min_steps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        pipe.run_step(n, step, max_batch)
        times.append((time.perf_counter() - t0) * 1e3)
        step += 1
        if step >= 2000:
            break
    t = np.array(times[2:] if len(times) > 4 else times)
    p50, p95, mean = float(np.percentile(t, 50)), float(np.percentile(t, 95)), float(t.mean())
    return {"streams": n, "steps": len(t), "step_ms_p50": round(p50, 4), "step_ms_p95": round(p95, 4),
            "step_ms_mean": round(mean, 4), "per_frame_ms": round(mean / n, 5),
            "frames_per_s": round(n * 1e3 / mean, 1), "holds_30fps": p95 <= FRAME_BUDGET_MS}


def stream_counts(max_streams: int, max_batch: int) -> list[int]:
    """1, 2, 4, ... max_batch, then multiples of max_batch up to max_streams."""
    out, n = [], 1
    while n <= min(max_batch, max_streams):
        out.append(n)
        n *= 2
    n = 2 * max_batch
    while n <= max_streams:
        out.append(n)
        n += max_batch
    return out


def _save(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")


def run(args) -> dict:
    started = time.perf_counter()
    work = Workload(args.recording, args.models)
    result = {"benchmark": "gpu_streams", "backend": args.backend, "device": args.device,
              "engines": list(MODELS), "speech_frames_per_call": SPEECH_T, "max_batch": args.max_batch,
              "frame_budget_ms": round(FRAME_BUDGET_MS, 2), "cuda_graphs": bool(args.graphs),
              "concurrent_engines": bool(getattr(args, "concurrent", False)),
              "channels_last": bool(args.channels_last), "compile_batches": sorted(args.compile_batches),
              "compile_mode": args.compile_mode, "detect_every": args.detect_every,
              "per_frame_ms_is": "mean step time / streams",
              "note": args.note, "runs": []}
    base = convert_models(args.models) if args.backend == "torch" else None
    counts = [int(x) for x in args.streams.split(",")] if args.streams else stream_counts(
        args.max_streams, args.max_batch)
    for precision in args.precision.split(","):
        t0 = time.perf_counter()
        if args.backend == "torch":
            pipe = TorchPipeline(work, args.models, args.device, precision, base, args.concurrent,
                                 args.channels_last, args.compile_batches, args.detect_every, args.compile_mode)
            pipe.compile_engines = set(args.compile_engines.split(","))
            for b in sorted(args.compile_batches | {1}):
                pipe.warm(b)
        else:
            pipe = OrtPipeline(work, args.models, args.device, precision)
        pipe.prepare(1, args.graphs)
        run_out = {"precision": precision, "device_name": pipe.device_name(),
                   "setup_s": round(time.perf_counter() - t0, 1),
                   "landmarks_vs_mediapipe_pct_face_width": round(check_landmarks(pipe, work), 4), "points": []}
        held = 0
        for n in counts:
            need = {min(n, args.max_batch)} | ({n % args.max_batch} - {0})
            pipe.release(need | {args.max_batch} if n > args.max_batch else need)
            t1 = time.perf_counter()
            for b in sorted(b for b in need if not pipe.has_graphs(b)):
                pipe.prepare(b, args.graphs)
            point = measure(pipe, n, args.max_batch, args.seconds)
            point["prepare_s"] = round(time.perf_counter() - t1, 2)
            point["cuda_graph"] = bool(args.graphs) and all(pipe.captured(b) for b in need)
            run_out["points"].append(point)
            print(json.dumps({"precision": precision, **point}), flush=True)
            _save(args.out, {**result, "runs": [*result["runs"], run_out]})  # a cut-off run keeps its points
            if args.budget_s and time.perf_counter() - started > args.budget_s:
                run_out["cut_off"] = f"stopped after {args.budget_s:.0f} s (--budget-s)"
                break
            if point["holds_30fps"]:
                held = max(held, n)
            elif held and n > held:
                break  # past the knee: more streams only take longer
        run_out["streams_held_30fps"] = held
        run_out["per_frame_ms_batch1"] = next((p["per_frame_ms"] for p in run_out["points"] if p["streams"] == 1), None)
        run_out["graph_errors"] = {str(k): v for k, v in pipe.graph_errors.items()}
        for key in ("compile_s", "compile_errors"):
            if getattr(pipe, key, None):
                run_out[key] = getattr(pipe, key)
        if args.engine_times and args.backend == "torch" and args.device == "cuda":
            pipe.release(set())
            run_out["engine_ms"] = {str(b): pipe.engine_times(b) for b in args.engine_batches}
            print(json.dumps({"precision": precision, "engine_ms": run_out["engine_ms"]}), flush=True)
        result["runs"].append(run_out)
        del pipe
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="make the recording the streams replay (needs MediaPipe)")
    rec.add_argument("--testdata", type=Path, default=ROOT.parent / "shared" / "testdata")
    rec.add_argument("-o", "--out", type=Path, required=True)
    r = sub.add_parser("run", help="run the streams")
    r.add_argument("--recording", type=Path, required=True)
    r.add_argument("--models", type=Path, default=ROOT / "models")
    r.add_argument("--backend", choices=("torch", "ort"), default="torch")
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--precision", default="fp32,fp16")
    r.add_argument("--streams", default="", help="comma-separated stream counts (default: 1, 2, 4 ... then steps)")
    r.add_argument("--max-streams", type=int, default=16384)
    r.add_argument("--max-batch", type=int, default=1024)
    r.add_argument("--seconds", type=float, default=1.0, help="measuring time per stream count")
    r.add_argument("--no-graphs", dest="graphs", action="store_false", help="no CUDA graphs")
    r.add_argument("--note", default="")
    r.add_argument("--concurrent", action="store_true", help="torch/cuda: the four engines on four CUDA streams")
    r.add_argument("--engine-times", action="store_true", help="torch/cuda: each engine alone at batch 1 and max")
    r.add_argument("--budget-s", type=float, default=0.0, help="stop a precision's sweep after this many seconds")
    r.add_argument("--channels-last", action="store_true", help="torch: detector and mesh in NHWC memory order")
    r.add_argument("--compile", dest="compile_batches", default="",
                   help="torch: comma-separated batch sizes whose engines are compiled by TorchInductor")
    r.add_argument("--compile-engines", default=",".join(MODELS), help="torch: the engines --compile applies to")
    r.add_argument("--compile-mode", default="default", help="torch.compile mode (default, max-autotune-no-cudagraphs)")
    r.add_argument("--detect-every", type=int, default=1,
                   help="frames between detector runs per stream (the trackers' 1 s re-detection: 30)")
    r.add_argument("--engine-batches", default="1,1024", help="batch sizes for --engine-times")
    r.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "record":
        record(args.testdata, args.out)
        return 0
    if args.device == "cpu":
        args.graphs = False
    args.compile_batches = frozenset(int(x) for x in args.compile_batches.split(",") if x)
    args.engine_batches = [int(x) for x in args.engine_batches.split(",") if x]
    result = run(args)
    _save(args.out, result)
    for r_ in result["runs"]:
        print(f"{r_['precision']}: {r_['per_frame_ms_batch1']} ms per frame at batch 1, "
              f"{r_['streams_held_30fps']} streams held at 30 fps (p95 <= 33.3 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
