"""TensorRT builder (through TensorRT for RTX, which builds without a GPU) and runner."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from inference_helpers import HAS_TRT_RTX
from onnx import TensorProto, helper

from avatar_app.core.errors import EngineBuildError
from avatar_app.inference import Precision
from avatar_app.inference.backends import BackendStatus, TrtBackend
from avatar_app.inference.cache import MANIFEST_NAME
from avatar_app.inference.modelinfo import ModelInfo, load_feed_set, sha256_file

pytestmark = pytest.mark.skipif(not HAS_TRT_RTX, reason="tensorrt_rtx is not installed "
                                "(pip install tensorrt-rtx-cu13)")


def _gpu_for(backend: str) -> str:
    """'' when a GPU that can run ``backend`` engines is present, else the reason."""
    if not HAS_TRT_RTX:
        return "tensorrt_rtx is not installed"
    st = TrtBackend(backend).status()
    return "" if st.can_run else st.reason


#: Why TensorRT for RTX engines cannot run here ("" on a supported GPU), probed once.
GPU_REASON = _gpu_for("tensorrt_rtx")


@pytest.mark.parametrize("name,precision", [
    ("conv", "fp32"), ("conv", "fp16"), ("conv", "int8"),
    ("matmul", "fp32"), ("matmul", "fp16"), ("matmul", "int8"),
    ("layernorm", "fp32"), ("layernorm", "fp16"), ("layernorm", "int8"),
    ("gru", "fp32"), ("gru", "fp16")])
def test_rtx_builds_plans_with_manifests(tiny_models, manager, name, precision):
    entry = manager.build(tiny_models[name], "tensorrt_rtx", precision)
    m = entry.manifest
    raw = json.loads((entry.folder / MANIFEST_NAME).read_text())
    assert entry.artifact_path.name == "engine.plan" and entry.artifact_path.stat().st_size > 1000
    assert raw["artifact_sha256"] == sha256_file(entry.artifact_path)
    assert raw["key"]["backend"] == "tensorrt_rtx" and raw["key"]["backend_version"]
    assert raw["key"]["precision"] == precision and raw["build_time_s"] > 0
    info = ModelInfo.from_onnx(tiny_models[name])
    profile = json.loads(raw["key"]["profile"])
    assert profile == {k: [list(s) for s in v] for k, v in info.profile().items()}
    assert m.details["layers"] > 0 and m.details["trt_module"] == "tensorrt_rtx"
    assert m.details["profile"]["x"][2][0] == 16  # max batch from the ONNX metadata
    if GPU_REASON:
        assert m.status == "unverified" and GPU_REASON in m.reason
    else:  # pragma: no cover - GPU machines
        assert m.status == "ok" and m.verification_result.passed


def test_rtx_fp16_overflow_rejected_without_gpu(tiny_models, manager):
    m = manager.build(tiny_models["fp16_overflow"], "tensorrt_rtx", "fp16").manifest
    assert m.status == "rejected" and "float16 maximum" in m.reason


def _unparseable(tmp_path):
    """A model ONNX Runtime runs but TensorRT's parser rejects (Unique)."""
    g = helper.make_graph([helper.make_node("Unique", ["x"], ["u"], sorted=1),
                           helper.make_node("Sigmoid", ["u"], ["y"])], "uniq",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    helper.set_model_props(m, {"avatar_app.dynamic_dims": json.dumps({"B": [1, 4, 16]})})
    np.savez(tmp_path / "uniq.val.npz", x=np.random.default_rng(0).standard_normal(8).astype(np.float32))
    onnx.save(m, str(tmp_path / "uniq.onnx"))
    return tmp_path / "uniq.onnx"


def test_parser_errors_all_reported(tmp_path, manager):
    with pytest.raises(EngineBuildError, match=r"cannot parse uniq.onnx \(1 error\(s\)\):\n.*op Unique"):
        manager.build(_unparseable(tmp_path), "tensorrt_rtx", "fp32")
    assert manager.cache.entries() == []


def test_missing_dynamic_range_is_a_clear_error(tiny_models, manager, tmp_path):
    m = onnx.load(str(tiny_models["matmul"]))
    del m.metadata_props[:]
    onnx.save(m, str(tmp_path / "nometa.onnx"))
    with pytest.raises(EngineBuildError, match="dimension 0 \\(B\\) of input 'x' is dynamic"):
        manager.build(tmp_path / "nometa.onnx", "tensorrt_rtx", "fp32")
    card = {"dynamic_dims": {"B": [1, 2, 8]}}  # a model card can supply it
    entry = manager.build(tmp_path / "nometa.onnx", "tensorrt_rtx", "fp32", card=card)
    assert entry.manifest.details["profile"]["x"] == [[1, 32], [2, 32], [8, 32]]


@pytest.fixture
def fake_gpu(monkeypatch):
    """Pretend tensorrt_rtx can run engines here (as on a machine with a supported GPU)."""
    def status(self):
        return BackendStatus(self.name, True, "fake", True, True, "", ["GPU 0: fake"],
                             {p.value: None for p in Precision})
    monkeypatch.setattr(TrtBackend, "status", status)


def test_parser_failure_falls_back_with_reason(tmp_path, manager, fake_gpu):
    result = manager.open_engine(_unparseable(tmp_path), "tensorrt_rtx", "fp32")
    with result.runner as r:
        assert (r.backend, r.precision) == ("ort_cpu", Precision.FP32)
        out = r.infer({"x": np.array([3, 1, 3], np.float32)})["y"]
        assert out.shape == (2,)
    first = result.attempts[0]
    assert (first.backend, first.ok) == ("tensorrt_rtx", False) and "op Unique" in first.reason


def test_runtime_missing_falls_back_with_reason(tiny_models, manager, fake_gpu):
    """Status claims a GPU, but the runner finds none: the build's first load fails."""
    if not GPU_REASON:  # pragma: no cover - a real GPU would succeed
        pytest.skip("a supported GPU is present; nothing to fall back from")
    result = manager.open_engine(tiny_models["conv"], "tensorrt_rtx", "fp16")
    with result.runner as r:
        assert r.backend == "ort_cpu"
    assert "cannot run engines here" in result.attempts[0].reason


@pytest.mark.trt
@pytest.mark.skipif(bool(GPU_REASON), reason=f"no GPU that runs TensorRT for RTX engines: {GPU_REASON}")
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_trt_runner_on_gpu(tiny_models, manager, precision):  # pragma: no cover - GPU machines
    result = manager.open_engine(tiny_models["conv"], "tensorrt_rtx", precision)
    with result.runner as r:
        assert r.backend == "tensorrt_rtx" and r.precision.value == precision
        info = ModelInfo.from_onnx(tiny_models["conv"])
        x = load_feed_set(info.validation_path, info.inputs)["x"]
        y = r.infer({"x": x[:4]})["y"]
        assert y.shape == (4, 8) and np.isfinite(y).all()
        assert r.verification.passed
