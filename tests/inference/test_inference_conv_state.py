"""Conv-state graphs derived in memory (avatar_app.inference.conv_state): surgery, check, refusals."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from avatar_app.core.errors import BackendUnavailableError, ModelLoadError
from avatar_app.inference import EngineManager, Precision
from avatar_app.inference.conv_state import conv_state_graph, derive_conv_state
from avatar_app.inference.ort import OrtRunner
from avatar_app.speech.engine_animator import default_model_path


def _tiny_tcn(path, left: int, right: int, dilation: int = 2, k: int = 3):
    """[B, T, 4] -> Transpose -> Pad(left, right on T) -> Conv(k, dilation) -> Transpose -> [B, T', 5]."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 4, k)).astype(np.float32)
    pads = np.array([0, 0, left, 0, 0, right], np.int64)
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("Pad", ["xt", "pads"], ["xp"], mode="constant"),
        helper.make_node("Conv", ["xp", "w"], ["yc"], dilations=[dilation], kernel_shape=[k]),
        helper.make_node("Transpose", ["yc"], ["y"], perm=[0, 2, 1]),
    ]
    graph = helper.make_graph(
        nodes, "tcn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "T", 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(pads, "pads")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_shipped_speech2face_surgery():
    src = onnx.load(str(default_model_path()))
    n_nodes = len(src.graph.node)
    model, states = conv_state_graph(src)
    assert len(src.graph.node) == n_nodes and any(n.op_type == "Pad" for n in src.graph.node)  # untouched
    assert [(s.channels, s.frames) for s in states] == [(128, 2), (128, 4), (128, 8), (128, 16), (128, 32), (128, 2)]
    ops = [n.op_type for n in model.graph.node]
    assert "Pad" not in ops and "ConstantOfShape" not in ops  # the pad-amount subgraphs are gone
    assert [i.name for i in model.graph.input] == ["features"] + [s.input for s in states]
    assert [o.name for o in model.graph.output] == ["blendshapes"] + [s.output for s in states]
    onnx.checker.check_model(model)


def test_causal_tiny_graph_streams_like_the_padded_one(tmp_path):
    path = _tiny_tcn(tmp_path / "tcn.onnx", left=4, right=0)
    with OrtRunner.from_path(path) as runner:
        engine = derive_conv_state(runner)
        assert engine.receptive_field == 5 and engine.max_abs_diff <= 1e-4  # unscaled outputs of ~10
        x = np.random.default_rng(0).standard_normal((1, 23, 4)).astype(np.float32)
        whole = runner.infer({"x": x})["y"]
        state, got = engine.zero_state(), []
        for a, b in ((0, 1), (1, 7), (7, 9), (9, 23)):  # uneven chunks, one of a single frame
            y, state = engine.step(x[:, a:b], state)
            got.append(y)
        np.testing.assert_allclose(np.concatenate(got, axis=1), whole, rtol=0, atol=1e-5)
        assert not np.any(engine.zero_state()[engine.states[0].input])  # the shared zeros stay zero


def test_non_causal_pad_fails_the_check(tmp_path):
    path = _tiny_tcn(tmp_path / "tcn_centered.onnx", left=2, right=2)
    with OrtRunner.from_path(path) as runner, pytest.raises(ModelLoadError, match="differs"):
        derive_conv_state(runner)


def test_graph_without_pad_and_other_backends_are_refused(tmp_path):
    path = _tiny_tcn(tmp_path / "tcn.onnx", left=4, right=0)
    m = onnx.load(str(path))
    pad = next(n for n in m.graph.node if n.op_type == "Pad")
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    conv.input[0] = pad.input[0]
    m.graph.node.remove(pad)
    with pytest.raises(ModelLoadError, match="no causal Pad"):
        conv_state_graph(m)
    with pytest.raises(ModelLoadError, match="cannot read"):
        conv_state_graph(tmp_path / "missing.onnx")

    class FakeTrt:
        backend = "tensorrt"
        precision = Precision.FP16

        def describe(self):
            return "speech2face.onnx on tensorrt (fp16)"

    with pytest.raises(BackendUnavailableError, match="ONNX Runtime CPU FP32 only"):
        derive_conv_state(FakeTrt())
    with OrtRunner.from_path(path, precision=Precision.FP16) as fp16, \
            pytest.raises(BackendUnavailableError, match="FP32 only"):
        derive_conv_state(fp16)


def test_speech2face_derivation_matches_the_reference():
    runner = EngineManager(isolate=False).open_reference(default_model_path())
    try:
        engine = derive_conv_state(runner)
        assert engine.receptive_field == 65 and engine.max_abs_diff <= 1e-5
        assert engine.describe().endswith(", conv-state")
    finally:
        runner.close()


def test_slot_swaps_the_conv_state_engine_with_its_engine():
    from avatar_app.inference import EngineSlot

    slot = EngineSlot(EngineManager(isolate=False), default_model_path())
    try:
        slot.open()
        assert slot.conv_state is None  # only on request
        old = slot.enable_conv_state()
        assert old is not None and slot.enable_conv_state() is old and old.source is slot.active
        x = np.full((1, 65, 64), -8.0, np.float32)
        y, state, runner = slot.step_with(old, x, old.zero_state())
        assert y.shape == (1, 65, 52) and runner is slot.active
        assert slot.request("ort_cpu", "fp32").result(timeout=120) is not None
        new = slot.conv_state
        assert new not in (None, old) and new.source is slot.active
        assert slot.step_with(old, x[:, :4], state) is None  # a state of the swapped-out engine is refused
        y2, _, _ = slot.step_with(new, x, new.zero_state())
        np.testing.assert_array_equal(y2, y)
    finally:
        slot.close()
    assert slot.conv_state is None
