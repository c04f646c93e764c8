"""MediaPipe's three custom TFLite operators, rebuilt from standard ONNX operators.

``face_landmark_with_attention.tflite`` (the model behind MediaPipe's 478-point
face mesh, ``refine_landmarks=True``) uses three custom operators that tf2onnx
leaves as unknown ``TFL_*`` nodes. Their semantics are MediaPipe's kernels in
``mediapipe/util/tflite/operations/`` (Apache-2.0), version 2 of each:

``Landmarks2TransformMatrix`` (landmarks ``[B, 468, 3]`` -> ``[B, 4, 4]``)
    rotation ``r = target - atan2(y_right - y_left, x_right - x_left)`` from two
    landmarks; the subset landmarks rotated by ``r``; their axis-aligned box gives
    the crop size ``(w, h)`` and centre ``c`` (rotated back by ``-r``); the matrix
    maps output grid coordinates ``(u, v)`` to landmark coordinates:
    ``T = Shift(c) . Rot(-r) . Scale(scale_x * w / out_w, scale_y * h / out_h) . Shift(-out_w / 2, -out_h / 2)``.
``TransformTensorBilinear`` (feature map ``[B, H, W, C]`` + matrix -> ``[B, out_h, out_w, C]``)
    bilinear sampling at ``T . (u + 0.5, v + 0.5) - 0.5`` (its "align corners
    correction"); a sample outside ``[0, W - 1] x [0, H - 1]`` is 0.
``TransformLandmarks`` (landmarks ``[B, N, 2]`` + matrix -> ``[B, N, 2]``)
    ``(x, y) -> T[0:2, (0, 1, 3)] . (x, y, 1)``.

The rotation needs no trigonometry: ``cos r`` and ``sin r`` follow from the
normalised vector between the two landmarks (``atan2`` is not an ONNX operator).
Every replacement works on a batch (one matrix per sample). GridSample
(``align_corners=1``, zero padding) does the bilinear sampling; a mask
reproduces the kernel's all-or-nothing bounds test.
"""
from __future__ import annotations

import itertools

import numpy as np

OPS = ("TFL_Landmarks2TransformMatrix", "TFL_TransformTensorBilinear", "TFL_TransformLandmarks")


class _Nodes:
    """Collects ONNX nodes and constants under a unique name prefix."""

    _ids = itertools.count()

    def __init__(self, graph, prefix: str):
        self.graph = graph
        self.prefix = f"{prefix}__mp{next(self._ids)}"
        self.nodes: list = []
        self._n = 0

    def name(self, what: str) -> str:
        self._n += 1
        return f"{self.prefix}_{what}_{self._n}"

    def const(self, value, what: str = "c") -> str:
        from onnx import numpy_helper

        arr = np.asarray(value)
        arr = arr.astype(np.int64 if arr.dtype.kind in "iu" else np.float32)
        name = self.name(what)
        self.graph.initializer.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        from onnx import helper

        out = out or self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(op_type), **attrs))
        return out

    def cols(self, x: str, start: int, stop: int, axis: int = -1) -> str:
        return self.op("Slice", [x, self.const([start]), self.const([stop]), self.const([axis])])


def _landmarks_to_matrix(b: _Nodes, lm: str, out: str, attrs: dict) -> None:
    # Two landmarks give the rotation, [B, 1] each.
    left = b.op("Gather", [lm, b.const([int(attrs["left_rotation_idx"])])], axis=1)   # [B, 1, 3]
    right = b.op("Gather", [lm, b.const([int(attrs["right_rotation_idx"])])], axis=1)
    d = b.op("Squeeze", [b.op("Sub", [right, left]), b.const([1])])                   # [B, 3]
    dx, dy = b.cols(d, 0, 1), b.cols(d, 1, 2)
    norm = b.op("Sqrt", [b.op("Add", [b.op("Mul", [dx, dx]), b.op("Mul", [dy, dy])])])
    cos_t, sin_t = b.op("Div", [dx, norm]), b.op("Div", [dy, norm])                  # angle t of the eye line
    tg = float(attrs.get("target_rotation_radians", 0.0))
    # r = tg - t: cos r = cos tg cos t + sin tg sin t, sin r = sin tg cos t - cos tg sin t
    c = b.op("Add", [b.op("Mul", [cos_t, b.const(np.cos(tg))]), b.op("Mul", [sin_t, b.const(np.sin(tg))])])
    s = b.op("Sub", [b.op("Mul", [cos_t, b.const(np.sin(tg))]), b.op("Mul", [sin_t, b.const(np.cos(tg))])])
    subset = np.asarray(attrs["subset_idxs"], np.int64).ravel()
    pts = b.op("Gather", [lm, b.const(subset)], axis=1)                                # [B, K, 3]
    x = b.op("Squeeze", [b.cols(pts, 0, 1), b.const([2])])                             # [B, K]
    y = b.op("Squeeze", [b.cols(pts, 1, 2), b.const([2])])
    xr = b.op("Sub", [b.op("Mul", [c, x]), b.op("Mul", [s, y])])
    yr = b.op("Add", [b.op("Mul", [s, x]), b.op("Mul", [c, y])])
    reduce = {"keepdims": 1}
    x_max, x_min = b.op("ReduceMax", [xr], axes=[1], **reduce), b.op("ReduceMin", [xr], axes=[1], **reduce)
    y_max, y_min = b.op("ReduceMax", [yr], axes=[1], **reduce), b.op("ReduceMin", [yr], axes=[1], **reduce)
    half = b.const(0.5)
    mx = b.op("Mul", [b.op("Add", [x_max, x_min]), half])
    my = b.op("Mul", [b.op("Add", [y_max, y_min]), half])
    cx = b.op("Add", [b.op("Mul", [c, mx]), b.op("Mul", [s, my])])                    # Rot(-r) . middle
    cy = b.op("Sub", [b.op("Mul", [c, my]), b.op("Mul", [s, mx])])
    ow, oh = float(attrs["output_width"]), float(attrs["output_height"])
    sx = b.op("Mul", [b.op("Sub", [x_max, x_min]), b.const(float(attrs["scale_x"]) / ow)])
    sy = b.op("Mul", [b.op("Sub", [y_max, y_min]), b.const(float(attrs["scale_y"]) / oh)])
    a00, a01 = b.op("Mul", [c, sx]), b.op("Mul", [s, sy])
    a10, a11 = b.op("Neg", [b.op("Mul", [s, sx])]), b.op("Mul", [c, sy])
    hw, hh = b.const(-ow / 2), b.const(-oh / 2)
    a03 = b.op("Add", [cx, b.op("Add", [b.op("Mul", [a00, hw]), b.op("Mul", [a01, hh])])])
    a13 = b.op("Add", [cy, b.op("Add", [b.op("Mul", [a10, hw]), b.op("Mul", [a11, hh])])])
    zero = b.op("Mul", [a00, b.const(0.0)])
    one = b.op("Add", [zero, b.const(1.0)])
    flat = b.op("Concat", [a00, a01, zero, a03, a10, a11, zero, a13,
                           zero, zero, one, zero, zero, zero, zero, one], axis=1)        # [B, 16]
    b.op("Reshape", [flat, b.const([-1, 4, 4])], out=out)


def _affine_rows(b: _Nodes, m: str) -> str:
    """[B, 2, 3] rows (0, 1) and columns (0, 1, 3) of a [B, 4, 4] matrix."""
    rows = b.op("Slice", [m, b.const([0]), b.const([2]), b.const([1])])
    return b.op("Gather", [rows, b.const([0, 1, 3])], axis=2)


def _transform_tensor(b: _Nodes, feat: str, m: str, out: str, attrs: dict, in_hw: tuple[int, int]) -> None:
    oh, ow = int(attrs["output_height"]), int(attrs["output_width"])
    h, w = in_hw
    a_t = b.op("Transpose", [_affine_rows(b, m)], perm=[0, 2, 1])                     # [B, 3, 2]
    v, u = np.meshgrid(np.arange(oh, dtype=np.float32), np.arange(ow, dtype=np.float32), indexing="ij")
    base = np.stack([u.ravel() + 0.5, v.ravel() + 0.5, np.ones(oh * ow, np.float32)], axis=1)[None]
    tc = b.op("Sub", [b.op("MatMul", [b.const(base), a_t]), b.const(0.5)])           # [B, oh*ow, 2] pixels
    lim = np.array([w - 1, h - 1], np.float32)
    grid = b.op("Sub", [b.op("Mul", [tc, b.const(2.0 / lim)]), b.const(1.0)])
    grid = b.op("Reshape", [grid, b.const([-1, oh, ow, 2])])
    inside = b.op("And", [b.op("GreaterOrEqual", [tc, b.const(np.zeros(2, np.float32))]),
                          b.op("LessOrEqual", [tc, b.const(lim)])])
    inside = b.op("Where", [inside, b.const(1.0), b.const(0.0)])  # no Cast: FP16 conversion keeps it valid
    inside = b.op("ReduceMin", [inside], axes=[2], keepdims=0)                           # [B, oh*ow]
    mask = b.op("Reshape", [inside, b.const([-1, 1, oh, ow])])
    nchw = b.op("Transpose", [feat], perm=[0, 3, 1, 2])
    sampled = b.op("GridSample", [nchw, grid], mode="bilinear", padding_mode="zeros", align_corners=1)
    b.op("Transpose", [b.op("Mul", [sampled, mask])], out=out, perm=[0, 2, 3, 1])


def _transform_landmarks(b: _Nodes, lm: str, m: str, out: str) -> None:
    a = _affine_rows(b, m)                                                             # [B, 2, 3]
    lin = b.op("Transpose", [b.cols(a, 0, 2)], perm=[0, 2, 1])                        # [B, 2, 2]
    shift = b.op("Transpose", [b.cols(a, 2, 3)], perm=[0, 2, 1])                      # [B, 1, 2]
    b.op("Add", [b.op("MatMul", [lm, lin]), shift], out=out)


def replace_custom_ops(model) -> int:
    """Replace every ``TFL_*`` MediaPipe node of a tf2onnx model in place; returns how many.

    Raises:
        RuntimeError: an unknown custom operator, or a feature map of unknown size.
    """
    import onnx
    from onnx import helper

    g = model.graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    out_nodes, count = [], 0
    for node in g.node:
        if not node.op_type.startswith("TFL_"):
            out_nodes.append(node)
            continue
        if node.op_type not in OPS:
            raise RuntimeError(f"unknown custom operator {node.op_type} ({node.name})")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        b = _Nodes(g, node.name)
        if node.op_type == "TFL_Landmarks2TransformMatrix":
            _landmarks_to_matrix(b, node.input[0], node.output[0], attrs)
        elif node.op_type == "TFL_TransformTensorBilinear":
            shape = shapes.get(node.input[0])
            if not shape or len(shape) != 4 or not all(shape[1:3]):
                raise RuntimeError(f"{node.name}: the feature map's size is unknown ({shape})")
            _transform_tensor(b, node.input[0], node.input[1], node.output[0], attrs, (shape[1], shape[2]))
        else:
            _transform_landmarks(b, node.input[0], node.input[1], node.output[0])
        out_nodes.extend(b.nodes)
        count += 1
    del g.node[:]
    g.node.extend(out_nodes)
    return count


def reference_matrix(lm: np.ndarray, attrs: dict) -> np.ndarray:
    """Numpy ``Landmarks2TransformMatrix`` v2 of one sample ((468, 3) -> (4, 4)), for tests of the graph."""
    left, right = lm[int(attrs["left_rotation_idx"])], lm[int(attrs["right_rotation_idx"])]
    r = float(attrs.get("target_rotation_radians", 0.0)) - np.arctan2(right[1] - left[1], right[0] - left[0])
    c, s = np.cos(r), np.sin(r)
    p = lm[np.asarray(attrs["subset_idxs"]).ravel(), :2]
    rot = p @ np.array([[c, s], [-s, c]])
    lo, hi = rot.min(0), rot.max(0)
    mid = (lo + hi) / 2
    centre = np.array([c * mid[0] + s * mid[1], -s * mid[0] + c * mid[1]])
    ow, oh = float(attrs["output_width"]), float(attrs["output_height"])
    sx, sy = attrs["scale_x"] * (hi[0] - lo[0]) / ow, attrs["scale_y"] * (hi[1] - lo[1]) / oh
    rs = np.array([[c * sx, s * sy], [-s * sx, c * sy]])
    t = np.eye(4)
    t[:2, :2] = rs
    t[:2, 3] = centre + rs @ np.array([-ow / 2, -oh / 2])
    return t


def refinement_indices(model) -> dict[str, list[int]]:
    """The landmark subsets of the model's three crops: ``lips`` (80), ``left_eye`` and ``right_eye`` (71 each).

    They are the ``subset_idxs`` of its ``Landmarks2TransformMatrix`` nodes, keyed by
    their rotation landmarks (61/291 mouth corners, 33/133 and 362/263 eye corners),
    and equal the ``indexes_mapping`` lists of MediaPipe's LandmarksRefinementCalculator
    for this model (face_landmark_front_cpu graph of the wheel; the iris depth averages
    the first 16 of each eye list, the eye contour).

    Raises:
        RuntimeError: the model lacks one of the three.
    """
    from onnx import helper

    keys = {(61, 291): "lips", (33, 133): "left_eye", (362, 263): "right_eye"}
    out = {}
    for node in model.graph.node:
        if node.op_type == "TFL_Landmarks2TransformMatrix":
            a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
            key = keys.get((int(a["left_rotation_idx"]), int(a["right_rotation_idx"])))
            if key:
                out[key] = [int(i) for i in a["subset_idxs"]]
    if sorted(out) != sorted(keys.values()):
        raise RuntimeError(f"expected lips and eye crops in the attention model, found {sorted(out)}")
    return out
