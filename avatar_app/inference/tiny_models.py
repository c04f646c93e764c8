"""Tiny generated ONNX models for the engine layer's tests and benchmarks.

Each model ends in a Sigmoid (outputs in [0, 1], where the tolerances of
DEFAULT_TOLERANCES apply), declares its dynamic dimension ranges in ONNX
metadata, and is written with a validation set (``.val.npz``) and a default
calibration set (``.calib.npz``) beside it, as shipped models are.

Weights are seeded He-initialised normals (He et al., ICCV 2015) so that
pre-activations have unit scale.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: Names of the generated models.
TINY_MODELS = ("conv", "matmul", "layernorm", "gru", "fp16_overflow")

_OPSET = 17
_IR_VERSION = 9  # readable by onnxruntime >= 1.16


def _he(rng, shape, fan_in, gain=1.0):
    return (rng.standard_normal(shape) * gain * np.sqrt(2.0 / fan_in)).astype(np.float32)


def _make(name, nodes, inputs, outputs, inits, dynamic_dims, precisions=None):
    from onnx import helper, numpy_helper

    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)],
                              producer_name="avatar_app.tiny_models")
    model.ir_version = _IR_VERSION
    meta = {"avatar_app.dynamic_dims": json.dumps(dynamic_dims)}
    if precisions:
        meta["avatar_app.precisions"] = json.dumps(precisions)
    helper.set_model_props(model, meta)
    return model


def build_tiny_model(name: str, seed: int = 0):
    """The ONNX ModelProto of one tiny model.

    Models (B: batch 1..16, T: time 4..64):

    - ``conv``: x (B, 3, 16, 16) float32 -> Conv 3x3 (8) -> Relu -> Conv 3x3 (8) ->
      GlobalAveragePool -> Flatten -> Sigmoid -> y (B, 8).
    - ``matmul``: x (B, 32) -> MatMul+Add (64) -> Relu -> MatMul+Add (16) -> Sigmoid -> y (B, 16).
    - ``layernorm``: x (B, T, 32) -> LayerNormalization -> MatMul+Add (32) -> Sigmoid -> y (B, T, 32).
    - ``gru``: x (B, T, 8) -> GRU (hidden 16) -> Sigmoid -> y (B, T, 16); FP32/FP16 only.
    - ``fp16_overflow``: x (B, 64) in [0.5, 1] -> MatMul with weights 1000..2000
      (intermediates ~7e4 > 65504, the float16 maximum) -> LayerNormalization ->
      MatMul (8) -> Sigmoid -> y (B, 8). Fine in FP32; in FP16 the normalisation
      sees inf and outputs NaN (ONNX Runtime's CPU runs LayerNormalization in float16).

    Raises:
        KeyError: unknown name.
    """
    from onnx import TensorProto as T
    from onnx import helper as h

    rng = np.random.default_rng(seed)
    vi = h.make_tensor_value_info
    if name == "conv":
        inits = {"w1": _he(rng, (8, 3, 3, 3), 27), "b1": np.zeros(8, np.float32),
                 "w2": _he(rng, (8, 8, 3, 3), 72, 0.5), "b2": (rng.standard_normal(8) * 0.1).astype(np.float32)}
        nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
                 h.make_node("Relu", ["c1"], ["r1"]),
                 h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
                 h.make_node("GlobalAveragePool", ["c2"], ["p"]),
                 h.make_node("Flatten", ["p"], ["f"], axis=1),
                 h.make_node("Sigmoid", ["f"], ["y"])]
        return _make(name, nodes, [vi("x", T.FLOAT, ["B", 3, 16, 16])], [vi("y", T.FLOAT, ["B", 8])],
                     inits, {"B": [1, 1, 16]})
    if name == "matmul":
        inits = {"w1": _he(rng, (32, 64), 32), "b1": np.zeros(64, np.float32),
                 "w2": _he(rng, (64, 16), 64, 0.7), "b2": np.zeros(16, np.float32)}
        nodes = [h.make_node("MatMul", ["x", "w1"], ["m1"]), h.make_node("Add", ["m1", "b1"], ["a1"]),
                 h.make_node("Relu", ["a1"], ["r1"]),
                 h.make_node("MatMul", ["r1", "w2"], ["m2"]), h.make_node("Add", ["m2", "b2"], ["a2"]),
                 h.make_node("Sigmoid", ["a2"], ["y"])]
        return _make(name, nodes, [vi("x", T.FLOAT, ["B", 32])], [vi("y", T.FLOAT, ["B", 16])],
                     inits, {"B": [1, 1, 16]})
    if name == "layernorm":
        inits = {"g": (1 + 0.1 * rng.standard_normal(32)).astype(np.float32),
                 "beta": (0.1 * rng.standard_normal(32)).astype(np.float32),
                 "w": _he(rng, (32, 32), 32, 0.7), "b": np.zeros(32, np.float32)}
        nodes = [h.make_node("LayerNormalization", ["x", "g", "beta"], ["n"], axis=-1, epsilon=1e-5),
                 h.make_node("MatMul", ["n", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
                 h.make_node("Sigmoid", ["a"], ["y"])]
        return _make(name, nodes, [vi("x", T.FLOAT, ["B", "T", 32])], [vi("y", T.FLOAT, ["B", "T", 32])],
                     inits, {"B": [1, 1, 16], "T": [4, 16, 64]})
    if name == "gru":
        hid = 16
        inits = {"W": _he(rng, (1, 3 * hid, 8), 8, 0.5), "R": _he(rng, (1, 3 * hid, hid), hid, 0.5),
                 "Bgru": np.zeros((1, 6 * hid), np.float32), "axes1": np.array([1], np.int64)}
        nodes = [h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),       # (T, B, 8)
                 h.make_node("GRU", ["xt", "W", "R", "Bgru"], ["Y"], hidden_size=hid),  # (T, 1, B, H)
                 h.make_node("Squeeze", ["Y", "axes1"], ["Ys"]),                 # (T, B, H)
                 h.make_node("Transpose", ["Ys"], ["Yb"], perm=[1, 0, 2]),      # (B, T, H)
                 h.make_node("Sigmoid", ["Yb"], ["y"])]
        return _make(name, nodes, [vi("x", T.FLOAT, ["B", "T", 8])], [vi("y", T.FLOAT, ["B", "T", hid])],
                     inits, {"B": [1, 1, 16], "T": [4, 16, 64]}, precisions=["fp32", "fp16"])
    if name == "fp16_overflow":
        inits = {"w": (2000.0 * rng.uniform(0.5, 1.0, (64, 16))).astype(np.float32),
                 "g": np.ones(16, np.float32), "beta": np.zeros(16, np.float32),
                 "w2": _he(rng, (16, 8), 16, 0.7)}
        nodes = [h.make_node("MatMul", ["x", "w"], ["big"]),  # ~ 64 * 0.75 * 1500 = 72000 > 65504
                 h.make_node("LayerNormalization", ["big", "g", "beta"], ["n"], axis=-1, epsilon=1e-5),
                 h.make_node("MatMul", ["n", "w2"], ["m"]),
                 h.make_node("Sigmoid", ["m"], ["y"])]
        return _make(name, nodes, [vi("x", T.FLOAT, ["B", 64])], [vi("y", T.FLOAT, ["B", 8])],
                     inits, {"B": [1, 1, 16]})
    raise KeyError(f"unknown tiny model {name!r}; choose from {TINY_MODELS}")


def _example_inputs(name: str, n: int, rng) -> dict[str, np.ndarray]:
    if name == "conv":
        return {"x": rng.standard_normal((n, 3, 16, 16)).astype(np.float32)}
    if name == "matmul":
        return {"x": rng.standard_normal((n, 32)).astype(np.float32)}
    if name == "layernorm":
        return {"x": rng.standard_normal((n, 16, 32)).astype(np.float32)}
    if name == "gru":
        return {"x": rng.standard_normal((n, 16, 8)).astype(np.float32)}
    if name == "fp16_overflow":
        return {"x": rng.uniform(0.5, 1.0, (n, 64)).astype(np.float32)}
    raise KeyError(name)


def write_tiny_model(name: str, folder: Path, n_val: int = 24, n_calib: int = 48,
                     seed: int = 0) -> Path:
    """Write ``<name>.onnx`` with ``<name>.val.npz`` and ``<name>.calib.npz`` into ``folder``.

    The validation set is held out: drawn from a different seed than the calibration set.

    Returns:
        Path of the .onnx file.
    """
    import onnx

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    onnx.save(build_tiny_model(name, seed), str(path))
    np.savez(folder / f"{name}.val.npz", **_example_inputs(name, n_val, np.random.default_rng(seed + 100)))
    np.savez(folder / f"{name}.calib.npz", **_example_inputs(name, n_calib, np.random.default_rng(seed + 200)))
    return path


def write_all(folder: Path) -> dict[str, Path]:
    """Write every tiny model into ``folder``; returns name -> .onnx path."""
    return {n: write_tiny_model(n, folder) for n in TINY_MODELS}
