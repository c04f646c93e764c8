"""Mixed-precision INT8: layer exclusion, sensitivity search, and the real models through the engine layer."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from avatar_app.core.errors import EngineBuildError, ModelLoadError
from avatar_app.inference import Precision
from avatar_app.inference.base import DEFAULT_TOLERANCES
from avatar_app.inference.modelinfo import ModelInfo, load_feed_set
from avatar_app.inference.ort import OrtRunner
from avatar_app.inference.precision import (
    META_INT8,
    int8_reduce_range,
    WEIGHTED_OP_TYPES,
    FeedSetReader,
    Int8Recipe,
    quantize_int8_mixed,
)
from avatar_app.inference.swap import EngineSlot
from avatar_app.resources import resource_path

TOL = DEFAULT_TOLERANCES[Precision.INT8]


def _write_outlier_model(folder, card: dict, hostile_gain: float = 50.0, seed: int = 0):
    """A two-layer model whose first layer cannot be quantised and whose second can.

    x (B, 16): channel 0 spans +-100, channels 1..15 are ~0.02. ``hostile``
    (MatMul) reads only the small channels, amplified by ``hostile_gain``;
    with 8-bit symmetric activations their step is ~100/127, so quantising its
    input erases them. ``benign`` (MatMul) sees a well-scaled tensor. Then
    Sigmoid -> y (B, 8). Writes model.onnx, .val.npz, .calib.npz, .card.json.
    """
    rng = np.random.default_rng(seed)
    w1 = np.zeros((16, 16), np.float32)
    w1[1:, :] = rng.standard_normal((15, 16)).astype(np.float32) * hostile_gain / 4
    w2 = (rng.standard_normal((16, 8)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="hostile"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["m"], name="benign"),
             helper.make_node("Sigmoid", ["m"], ["y"], name="sigmoid")]
    graph = helper.make_graph(nodes, "outlier",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 8])],
                              [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "outlier.onnx"
    onnx.save(model, str(path))

    def samples(n, s):
        r = np.random.default_rng(s)
        x = (r.standard_normal((n, 16)) * 0.02).astype(np.float32)
        x[:, 0] = r.uniform(-100, 100, n)
        return {"x": x}

    np.savez(folder / "outlier.val.npz", **samples(32, seed + 1))
    np.savez(folder / "outlier.calib.npz", **samples(64, seed + 2))
    (folder / "outlier.card.json").write_text(json.dumps({"dynamic_dims": {"B": [1, 1, 16]}, **card}))
    return path


def _float_nodes(int8_path) -> list[str]:
    meta = {p.key: p.value for p in onnx.load(str(int8_path)).metadata_props}
    return json.loads(meta[META_INT8])["float_nodes"]


def test_fully_quantised_outlier_model_fails_verification(tmp_path, manager):
    """Without exclusion or search the model really fails: the mechanism below has something to fix."""
    path = _write_outlier_model(tmp_path, {"int8_search": False})
    m = manager.build(path, "ort_cpu", "int8").manifest
    assert m.status == "rejected" and "exceeds the int8 tolerance" in m.reason
    assert m.verification_result.max_abs_error > 2 * TOL


def test_search_keeps_the_sensitive_layer_float_and_passes(tmp_path, manager):
    path = _write_outlier_model(tmp_path, {})
    entry = manager.build(path, "ort_cpu", "int8")
    m = entry.manifest
    assert m.status == "ok", m.reason
    assert m.verification_result.passed and m.verification_result.max_abs_error <= TOL
    assert _float_nodes(entry.artifact_path) == ["hostile"]
    ops = {n.name: n for n in onnx.load(str(entry.artifact_path)).graph.node}
    dq_out = {o for n in ops.values() if n.op_type == "DequantizeLinear" for o in n.output}
    assert not any(i in dq_out for i in ops["hostile"].input)  # float input and weight
    assert all(i in dq_out for i in ops["benign"].input)        # INT8 activation and weight


def test_card_exclusion_needs_no_search(tmp_path):
    path = _write_outlier_model(tmp_path, {"int8_exclude": ["host*"]})
    info = ModelInfo.from_onnx(path)
    reader = FeedSetReader([load_feed_set(info.calibration_path, info.inputs)])
    card = json.loads(path.with_name("outlier.card.json").read_text())
    # checked on ONNX Runtime CPU below, so quantised for it (7-bit weights on x86 without VNNI)
    cpu = int8_reduce_range("CPUExecutionProvider")
    r = quantize_int8_mixed(path, tmp_path / "o8.onnx", reader, TOL, Int8Recipe.from_card(card, reduce_range=cpu))
    assert r.quantizations == 1 and not r.searched and r.sensitivity == {}
    assert r.float_nodes == ("hostile",) and r.quantized_nodes == ("benign",)
    assert r.max_error <= r.target == pytest.approx(0.5 * TOL)
    # The same recipe with the exclusion dropped and no search is over the target.
    bare = quantize_int8_mixed(path, tmp_path / "o8b.onnx", reader, TOL, Int8Recipe(search=False))
    assert bare.float_nodes == () and bare.max_error > TOL
    with OrtRunner.from_path(path) as ref, OrtRunner.from_path(r.path, precision="int8") as eng:
        x = load_feed_set(info.validation_path, info.inputs)
        assert np.abs(eng.infer(x)["y"] - ref.infer(x)["y"]).max() <= TOL


def test_no_quantisable_layer_within_target_is_a_build_error(tmp_path, manager):
    path = _write_outlier_model(tmp_path, {"int8_exclude": ["benign"]})
    with pytest.raises(EngineBuildError, match="even the least sensitive layer"):
        manager.build(path, "ort_cpu", "int8")
    # The engine layer falls back to the next precision of the plan.
    result = manager.open_engine(path, "ort_cpu", "int8")
    with result.runner as r:
        assert r.precision is not Precision.INT8
        assert "least sensitive layer" in result.attempts[0].reason


def test_search_ranks_then_bisects_on_one_calibration(tmp_path):
    """The search costs 1 + N (sensitivity) + about log2 N (bisection) quantisations, not 2N + 1."""
    path = _write_outlier_model(tmp_path, {})
    info = ModelInfo.from_onnx(path)
    reader = FeedSetReader([load_feed_set(info.calibration_path, info.inputs)])
    r = quantize_int8_mixed(path, tmp_path / "o8.onnx", reader, TOL, Int8Recipe(sensitivity_samples=8))
    assert r.searched and set(r.sensitivity) == {"hostile", "benign"}
    assert r.sensitivity["hostile"] > r.target >= r.sensitivity["benign"]
    assert r.quantizations == 1 + 2 + 1  # full, two alone, one prefix ([benign]) in the bisection
    assert r.float_nodes == ("hostile",) and r.max_error <= r.target


def test_max_candidates_ranks_the_largest_layers_only(tmp_path):
    """``int8_max_candidates`` ranks the largest weights first: with 1, only ``hostile`` (16 x 16, over
    the target alone) is a candidate, so nothing can be quantised."""
    path = _write_outlier_model(tmp_path, {"int8_max_candidates": 1})
    info = ModelInfo.from_onnx(path)
    reader = FeedSetReader([load_feed_set(info.calibration_path, info.inputs)])
    recipe = Int8Recipe.from_card(info.card)
    assert recipe.max_candidates == 1
    with pytest.raises(EngineBuildError, match="least sensitive layer"):
        quantize_int8_mixed(path, tmp_path / "o8.onnx", reader, TOL, recipe)
    with pytest.raises(EngineBuildError, match="sensitivity_samples and max_candidates"):
        Int8Recipe(max_candidates=0)


@pytest.mark.parametrize("card,match", [({"int8_exclude": "head"}, "int8_exclude"),
                                        ({"int8_max_candidates": 0}, "int8_max_candidates"),
                                        ({"int8_max_candidates": 2.5}, "int8_max_candidates"),
                                        ({"int8_op_types": [1]}, "int8_op_types"),
                                        ({"int8_search": "yes"}, "int8_search"),
                                        ({"int8_margin": 0}, "int8_margin"),
                                        ({"int8_margin": 1.5}, "int8_margin"),
                                        ({"int8_margin": "0.25"}, "int8_margin")])
def test_malformed_card_keys(card, match):
    with pytest.raises(ModelLoadError, match=match):
        Int8Recipe.from_card(card)


def test_recipe_defaults_and_fingerprint():
    r = Int8Recipe.from_card({})
    assert r.op_types == WEIGHTED_OP_TYPES and r.search and r.exclude == () and r.margin == 0.5
    assert r.fingerprint() != Int8Recipe.from_card({"int8_exclude": ["a"]}).fingerprint()
    tight = Int8Recipe.from_card({"int8_margin": 0.25})
    assert tight.margin == 0.25 and tight.fingerprint() != r.fingerprint()
    with pytest.raises(EngineBuildError, match="calibration method"):
        Int8Recipe(method="kl")


def _switch_fp32_int8_fp32(manager, model):
    """Open FP32, swap to INT8 and back to FP32 the way the studio does; returns the INT8 runner's result."""
    slot = EngineSlot(manager, model)
    try:
        slot.open("ort_cpu", "fp32")
        info = manager.model_info(model)
        x = load_feed_set(info.validation_path, info.inputs)
        x = {k: v[:2] for k, v in x.items()}
        ref = slot.infer(x)
        res = slot.request("ort_cpu", "int8").result(timeout=300)
        assert slot.active.precision is Precision.INT8, res.explain()
        v = slot.active.verification
        got = slot.infer(x)
        assert all(np.abs(got[k] - ref[k]).max() <= TOL for k in ref)
        slot.request("ort_cpu", "fp32").result(timeout=300)
        assert slot.active.precision is Precision.FP32
        assert all(np.array_equal(slot.infer(x)[k], ref[k]) for k in ref)
        return v
    finally:
        slot.close()


def test_real_speech2face_int8_passes_and_switches(manager):
    model = resource_path("models/speech2face.onnx")
    assert Precision.INT8 in ModelInfo.from_onnx(model).precisions  # offered by the card
    v = _switch_fp32_int8_fp32(manager, model)
    assert v.passed and v.data_source == "file" and v.samples == 64
    assert 0 < v.max_abs_error <= TOL and v.per_output["blendshapes"]["max_abs"] <= TOL
    entry = manager.build(model, "ort_cpu", "int8")  # cached now
    floats = _float_nodes(entry.artifact_path)
    q = [n for n in onnx.load(str(entry.artifact_path)).graph.node if n.op_type == "QuantizeLinear"]
    assert q and 0 < len(floats) < 15  # mixed: some weighted layers INT8, some float


def test_real_face_recon_int8_passes_and_switches(manager):
    """General method: the same rule on the other shipped model (an MLP with a 6D-rotation output)."""
    model = resource_path("models/face_recon.onnx")
    assert Precision.INT8 in ModelInfo.from_onnx(model).precisions  # offered by the card
    v = _switch_fp32_int8_fp32(manager, model)
    assert v.passed and v.data_source == "file"
    assert all(o["max_abs"] <= TOL for o in v.per_output.values()), v.per_output
