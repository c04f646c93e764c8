"""FP16 and QDQ INT8 conversion, verification against the FP32 reference, calibration sets."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from avatar_app.core.errors import EngineBuildError, InputError
from avatar_app.inference import CalibrationStore, Precision
from avatar_app.inference.base import DEFAULT_TOLERANCES, BaseRunner, TensorSpec
from avatar_app.inference.modelinfo import ModelInfo, load_feed_set
from avatar_app.inference.ort import OrtRunner
from avatar_app.inference.precision import FeedSetReader, convert_fp16, quantize_int8
from avatar_app.inference.verify import fp16_range_violations, verify


@pytest.mark.parametrize("name,precision", [
    ("conv", "fp16"), ("matmul", "fp16"), ("layernorm", "fp16"), ("gru", "fp16"),
    ("conv", "int8"), ("matmul", "int8"), ("layernorm", "int8")])
def test_reduced_precision_within_tolerance(tiny_models, manager, name, precision):
    entry = manager.build(tiny_models[name], "ort_cpu", precision)
    m = entry.manifest
    v = m.verification_result
    assert m.status == "ok", m.reason
    assert v.passed and v.samples == 24 and v.data_source == "file"
    assert 0 < v.max_abs_error <= DEFAULT_TOLERANCES[Precision(precision)]
    assert v.mean_abs_error <= v.max_abs_error and v.non_finite == 0
    # Independent re-check of the cached engine on the held-out validation set.
    info = ModelInfo.from_onnx(tiny_models[name])
    x = load_feed_set(info.validation_path, info.inputs)["x"]
    with OrtRunner.from_path(info.path) as ref, OrtRunner.from_path(entry.artifact_path) as eng:
        err = np.abs(eng.infer({"x": x})["y"] - ref.infer({"x": x})["y"]).max()
    assert err <= DEFAULT_TOLERANCES[Precision(precision)]


def test_fp16_file_keeps_float32_io(tiny_models, tmp_path):
    dst = convert_fp16(tiny_models["conv"], tmp_path / "conv16.onnx")
    m = onnx.load(str(dst))
    f32, f16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
    assert all(i.type.tensor_type.elem_type == f32 for i in m.graph.input)
    assert all(o.type.tensor_type.elem_type == f32 for o in m.graph.output)
    assert {i.data_type for i in m.graph.initializer} == {f16}


def test_int8_is_symmetric_per_channel_qdq(tiny_models, tmp_path):
    info = ModelInfo.from_onnx(tiny_models["conv"])
    reader = FeedSetReader([load_feed_set(info.calibration_path, info.inputs)])
    dst = quantize_int8(info.path, tmp_path / "conv8.onnx", reader, method="entropy")
    m = onnx.load(str(dst))
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("QuantizeLinear") >= 2 and "DequantizeLinear" in ops
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    zps = [v for k, v in inits.items() if "zero_point" in k]
    assert zps and all(z.dtype == np.int8 and not z.any() for z in zps)
    # Per-channel: the first conv's weight scale has one value per output channel.
    scales = [v for k, v in inits.items() if k.startswith("w1") and "scale" in k]
    assert scales and scales[0].shape == (8,)
    # Biases stay float (TensorRT rejects int32 behind DequantizeLinear).
    assert inits["b1"].dtype == np.float32


def test_fp16_overflow_rejected_by_verification(tiny_models, manager):
    entry = manager.build(tiny_models["fp16_overflow"], "ort_cpu", "fp16")
    m = entry.manifest
    assert m.status == "rejected"
    assert "float16 maximum 65504" in m.reason and "'big'" in m.reason
    assert not m.verification_result.passed
    result = manager.open_engine(tiny_models["fp16_overflow"], "ort_cpu", "fp16")
    with result.runner as r:
        assert (r.backend, r.precision) == ("ort_cpu", Precision.FP32)
        assert "float16 maximum" in result.attempts[0].reason and result.attempts[0].cached
    # The same model in FP32 is fine; its FP32 intermediates are the ones that are too big.
    info = ModelInfo.from_onnx(tiny_models["fp16_overflow"])
    v = fp16_range_violations(info.path, load_feed_set(info.validation_path, info.inputs))
    assert [n for n, _ in v] == ["big"] and v[0][1] > 65504
    assert fp16_range_violations(tiny_models["matmul"],
                                 load_feed_set(ModelInfo.from_onnx(tiny_models["matmul"]).validation_path,
                                               ModelInfo.from_onnx(tiny_models["matmul"]).inputs)) == []


def test_gru_has_no_int8(tiny_models, manager):
    with pytest.raises(EngineBuildError, match="does not support int8"):
        manager.build(tiny_models["gru"], "ort_cpu", "int8")
    result = manager.open_engine(tiny_models["gru"], "ort_cpu", "int8")
    with result.runner as r:
        assert r.precision is Precision.FP16  # INT8 dropped from the plan, FP16 next
        assert r.verification.passed


class _FakeRunner(BaseRunner):
    backend = "fake"

    def __init__(self, fn):
        super().__init__("fp16", "fake")
        self.fn = fn

    def _open_impl(self):
        self._input_specs = (TensorSpec("x", np.dtype(np.float32), (None, 2), ("B", None)),)
        self._output_specs = (TensorSpec("y", np.dtype(np.float32), (None, 2), ("B", None)),)

    def _infer_impl(self, feeds):
        return {"y": self.fn(feeds["x"])}

    def _close_impl(self):
        pass


def test_verify_detects_non_finite_and_error():
    data = {"x": np.linspace(0, 1, 20, dtype=np.float32).reshape(10, 2)}
    expected = [{"y": data["x"][i:i + 1]} for i in range(10)]
    with _FakeRunner(lambda x: x + 0.001) as good:
        v = verify(good, data, 1e-2, expected=expected)
        assert v.passed and v.max_abs_error == pytest.approx(0.001, rel=1e-3) and v.samples == 10
    with _FakeRunner(lambda x: np.where(x > 0.5, np.nan, x)) as nan:
        v = verify(nan, data, 1e-2, expected=expected)
        assert not v.passed and v.non_finite > 0 and "non-finite" in v.reason
        assert v.to_json()["max_abs_error"] == "inf"
        assert "overflow" in v.reason
    broken = [{"y": np.full_like(e["y"], np.nan)} for e in expected]  # the float32 reference itself is NaN
    with _FakeRunner(lambda x: np.full_like(x, np.nan)) as nan:
        v = verify(nan, data, 1e-2, expected=broken)
        assert not v.passed and "reference gives NaN/Inf there too" in v.reason and "overflow" not in v.reason
    with _FakeRunner(lambda x: x + 0.2) as off:
        v = verify(off, data, 1e-2, expected=expected)
        assert not v.passed and "exceeds the fp16 tolerance" in v.reason


def test_metadata_tolerance_only_stricter(tiny_models):
    info = ModelInfo.from_onnx(tiny_models["matmul"], card={"tolerances": {"fp16": 1e-3, "int8": 0.5}})
    assert info.tolerances[Precision.FP16] == 1e-3
    assert info.tolerances[Precision.INT8] == DEFAULT_TOLERANCES[Precision.INT8]
    assert info.profile() == {"x": ((1, 32), (1, 32), (16, 32))}


def test_stricter_card_tolerance_rejects(tiny_models, manager):
    """The card's INT8 tolerance reaches the quantiser: no layer meets 1e-4, so no INT8 file is made."""
    with pytest.raises(EngineBuildError, match="tolerance 0.0001"):
        manager.build(tiny_models["matmul"], "ort_cpu", "int8", card={"tolerances": {"int8": 1e-4}})


def test_calibration_store_and_variant(tiny_models, manager, user_dirs):
    info = ModelInfo.from_onnx(tiny_models["matmul"])
    store = CalibrationStore(info.name)
    assert store.folder.is_relative_to(user_dirs / "data")
    key_before = manager.cache_key(info, "ort_cpu", Precision.INT8)
    samples = {"x": np.random.default_rng(5).standard_normal((30, 32)).astype(np.float32)}
    store.add(samples)
    assert store.count(info) == 30
    key_after = manager.cache_key(info, "ort_cpu", Precision.INT8)
    assert key_after.variant != key_before.variant  # new samples -> new INT8 engine
    assert manager.cache_key(info, "ort_cpu", Precision.FP16).variant == ""
    reader = FeedSetReader([load_feed_set(info.calibration_path, info.inputs)] + store.load(info))
    assert reader.num_samples == 48 + 30
    entry = manager.build(info.path, "ort_cpu", "int8")
    assert entry.manifest.status == "ok"
    with pytest.raises(InputError, match="same number of samples"):
        store.add({"x": samples["x"], "y": samples["x"][:3]})
    assert store.clear() == 1 and store.count(info) == 0


def test_fp16_keeps_a_graph_output_that_other_nodes_also_read(tmp_path):
    """An output consumed inside the graph (face_recon feeds its identity to the trunk) still converts.

    onnxconverter-common casts each output back to float32 under its own name; without a
    separate internal copy the consumer reads float32 where float16 is typed and ONNX Runtime
    refuses the file.
    """
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from avatar_app.inference.precision import convert_fp16

    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["ident"]),
             helper.make_node("Concat", ["ident", "ident"], ["both"], axis=1),
             helper.make_node("Relu", ["both"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("ident", TensorProto.FLOAT, [1, 4]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    dst = convert_fp16(src, tmp_path / "m16.onnx")
    x = np.array([[1.0, -2.0, 0.5]], np.float32)
    ref = ort.InferenceSession(str(src)).run(None, {"x": x})
    got = ort.InferenceSession(str(dst)).run(None, {"x": x})
    assert [o.name for o in onnx.load(str(dst)).graph.output] == ["ident", "y"]
    for a, b in zip(ref, got):
        assert b.dtype == np.float32 and np.allclose(a, b, atol=1e-2)


def test_a_model_with_nan_weights_is_called_broken_at_every_precision(tmp_path, manager):
    """NaN weights: one message naming the broken model, not "overflow" (FP16) or a NaN range (INT8)."""
    from onnx import numpy_helper

    from avatar_app.core.errors import ModelLoadError
    from avatar_app.resources import resource_path

    m = onnx.load(str(resource_path("models/face_recon.onnx")))
    init = next(i for i in m.graph.initializer if i.data_type == onnx.TensorProto.FLOAT and i.dims)
    arr = numpy_helper.to_array(init).copy()
    arr[...] = np.nan
    init.CopyFrom(numpy_helper.from_array(arr, init.name))
    bad = tmp_path / "face_nan.onnx"
    onnx.save(m, str(bad))
    for prec in ("fp32", "fp16", "int8"):
        with pytest.raises(ModelLoadError, match="NaN/Inf in float32.*broken") as exc:
            manager.build(bad, "ort_cpu", prec)
        assert "overflow" not in str(exc.value)


def test_an_empty_onnx_file_is_not_a_model(tmp_path):
    from avatar_app.core.errors import ModelLoadError

    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="holds no graph"):
        ModelInfo.from_onnx(empty)
