"""ONNX Runtime runner: FP32 against independent numpy references, threads, providers, fallback."""
from __future__ import annotations

import numpy as np
import pytest
from inference_helpers import numpy_reference

from avatar_app.core.errors import BackendUnavailableError, ModelLoadError
from avatar_app.inference import ort as ort_mod
from avatar_app.inference.modelinfo import ModelInfo, load_feed_set
from avatar_app.inference.ort import OrtRunner, SessionFromOnnx, ThreadSettings


@pytest.mark.parametrize("name", ["conv", "matmul", "layernorm", "gru"])
def test_fp32_matches_numpy_reference(tiny_models, name):
    path = tiny_models[name]
    info = ModelInfo.from_onnx(path)
    x = load_feed_set(info.validation_path, info.inputs)["x"][:8]
    with OrtRunner.from_path(path) as r:
        for batch in (1, 8):  # dynamic batch
            y = r.infer({"x": x[:batch]})["y"]
            ref = numpy_reference(name, path, x[:batch])
            assert y.shape == ref.shape and y.dtype == np.float32
            np.testing.assert_allclose(y, ref, atol=1e-5, rtol=0)
            assert 0 <= y.min() and y.max() <= 1


def test_thread_settings_applied(tiny_models, monkeypatch):
    with OrtRunner.from_path(tiny_models["matmul"]) as r:
        so = r._session.get_session_options()
        assert so.intra_op_num_threads == 1 and so.inter_op_num_threads == 1
        assert so.execution_mode.name == "ORT_SEQUENTIAL"
        assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    monkeypatch.setenv("AVATAR_APP_ORT_THREADS", "2")
    monkeypatch.setenv("AVATAR_APP_ORT_SPIN", "1")
    assert ThreadSettings.from_env() == ThreadSettings(intra_op=2, inter_op=1, allow_spinning=True)


def test_missing_model_and_unknown_backend(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        OrtRunner.from_path(tmp_path / "nope.onnx").open()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(ModelLoadError, match="cannot load bad.onnx"):
        OrtRunner.from_path(bad).open()
    with pytest.raises(BackendUnavailableError, match="unknown ONNX Runtime backend"):
        SessionFromOnnx(bad, "ort_metal")


def test_provider_not_offered_is_reported(tiny_models):
    """On this CPU build CUDA is not offered: the loader says so and why."""
    with pytest.raises(BackendUnavailableError, match="CUDAExecutionProvider is not offered"):
        OrtRunner.from_path(tiny_models["conv"], "ort_cuda").open()


def test_faked_provider_that_does_not_load_is_detected(tiny_models, monkeypatch):
    """A machine that claims CUDA (faked) but whose session ends up on the CPU."""
    monkeypatch.setattr(ort_mod, "ort_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(BackendUnavailableError, match="requested .* but the session runs on CPUExecutionProvider"):
        OrtRunner.from_path(tiny_models["conv"], "ort_cuda").open()


def test_open_engine_falls_back_with_reason_when_provider_missing(tiny_models, manager, monkeypatch):
    monkeypatch.setattr(ort_mod, "ort_available_providers",
                        lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    result = manager.open_engine(tiny_models["matmul"], "ort_cuda", "fp16")
    try:
        assert (result.runner.backend, result.runner.precision.value) == ("ort_cpu", "fp32")
        first = result.attempts[0]
        assert (first.backend, first.precision, first.ok) == ("ort_cuda", "fp16", False)
        assert "session runs on CPUExecutionProvider" in first.reason
        assert result.attempts[-1].ok and result.fell_back
        assert "ort_cuda/fp16: skipped" in result.explain()
    finally:
        result.runner.close()


def test_open_engine_default_on_cpu_machine(tiny_models, manager):
    result = manager.open_engine(tiny_models["conv"])
    with result.runner as r:
        assert r.backend == "ort_cpu" and r.providers == ["CPUExecutionProvider"]
        reasons = {a.backend: a.reason for a in result.attempts if not a.ok}
        assert "ort_cuda" in reasons and "onnxruntime-gpu" in reasons["ort_cuda"]
